#!/usr/bin/env bash
# Install the plugin into .venv and run example_workflow/ (a small parameter sweep) on
# the embedded local Dask cluster. Extra arguments go to snakemake.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
ensure_venv '.'
cd example_workflow
# profiles/default/config.yaml there sets --executor dask-slurm and the fast settings.
exec ../.venv/bin/snakemake "$@"
