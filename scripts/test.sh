#!/usr/bin/env bash
# Set up the project's virtualenv (.venv) with the test dependencies and run the whole
# test suite: unit tests, end-to-end runs on the embedded local cluster, and the SLURM
# tests, which bring up the project's own multi-node SLURM test cluster (needs root and
# Linux; elsewhere they are skipped with a reason), and, as root, Debian's Lmod for the
# envmodules: tests. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/venv.sh
ensure_venv '.[test]'
# A real module system for the envmodules: tests (tests/lmod.py): Debian's Lmod, as root.
if [ ! -f /usr/share/lmod/lmod/init/bash ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  apt-get install -y -qq --no-install-recommends lmod >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends lmod >/dev/null; } \
    || echo "warning: could not install Debian's lmod; the envmodules: tests will not run" >&2
fi
exec .venv/bin/python -m pytest "$@"
