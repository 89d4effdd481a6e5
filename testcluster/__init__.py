"""The project's SLURM test cluster: a real multi-node, heterogeneous SLURM (Debian's
slurmctld/slurmd) in network namespaces on one machine. A tool (``python
testcluster/cluster.py start|stop|status|env``, as root); the pytest fixtures in
tests/slurm_cluster/fixtures.py are its face in the test suite. See README.md here."""
