# Sourced by the scripts here: create .venv with Python >= 3.11 and install into it.
PYTHON=${PYTHON:-python3}

ensure_venv() {
  if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "error: $PYTHON is older than Python 3.11; set PYTHON=/path/to/python3.11" >&2
    exit 1
  fi
  if [ ! -x .venv/bin/python ]; then
    if ! "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null; then
      # Debian ships venv separately.
      if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
      else
        echo "error: Python's venv module is missing; install it (Debian: sudo apt-get install python3-venv)" >&2
        exit 1
      fi
    fi
    "$PYTHON" -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip
  fi
  .venv/bin/python -m pip install -q -e "$1"
  # An editable install leaves the package's bytecode to its first import, and with
  # PYTHONDONTWRITEBYTECODE=1 (set on some machines, the one these scripts were written
  # on among them) no import writes it: every process that imports the plugin (Snakemake's
  # own, each warm process, each cold job's Snakemake) would compile its ~110 modules
  # again, about 0.17 CPU-s each (a one-job run: 0.24 s). pip compiles a regular install.
  .venv/bin/python -m compileall -q snakemake_executor_plugin_dask_slurm >/dev/null
}
