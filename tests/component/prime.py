"""A job command for a worker's warm process to parse, written as the run writes it
(executor/run.py ``claim``): a one-rule workflow whose job goes the warm way."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def write_prime(tmp_path: Path) -> Path:
    """``tmp_path/Snakefile`` (rule ``one``, a ``run:`` block writing ``one.txt``) and
    ``tmp_path/prime.json``, the request naming its job command; the request's path."""
    (tmp_path / "Snakefile").write_text(
        'rule one:\n    output: "one.txt"\n    run:\n        pass\n'
    )
    request = {
        "python": sys.executable,
        "argv": [
            "--snakefile", str(tmp_path / "Snakefile"), "--target-jobs", "one:",
            "--allowed-rules", "one", "--cores", "1", "--nolock", "--mode", "remote",
            # as in every job command: without it the parse is refused (no shared source
            # cache), and the primed server ends at once
            "--runtime-source-cache-path", str(tmp_path / "source-cache"),
        ],
        "env": [], "cwd": str(tmp_path), "log_dir": str(tmp_path / "logs"),
    }  # fmt: skip
    path = tmp_path / "prime.json"
    path.write_text(json.dumps(request))
    return path
