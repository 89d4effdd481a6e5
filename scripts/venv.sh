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
}
