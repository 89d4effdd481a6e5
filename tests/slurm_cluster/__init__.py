"""The project's real multi-node, heterogeneous SLURM test cluster (see README.md)."""
