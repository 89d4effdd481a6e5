#!/usr/bin/env bash
# Set up the project's virtualenv (.venv) with the test dependencies and run the whole
# test suite: unit tests, end-to-end runs on the embedded local cluster, and the SLURM
# tests, which bring up the project's own multi-node SLURM test cluster (needs root and
# Linux; elsewhere they are skipped with a reason). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
ensure_venv '.[test]'
exec .venv/bin/python -m pytest "$@"
