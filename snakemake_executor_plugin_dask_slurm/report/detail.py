"""The run's detail log, ``<run dir>/logs/plugin.log``: what the plugin decided about each
job where one line on the console speaks for many (a lost worker's jobs, each running or
waiting, run again or failed; how a silent worker was ended)."""

from __future__ import annotations

import logging
from pathlib import Path

#: Where the run writes its details: ``detail.info(...)``.
detail = logging.getLogger("snakemake_executor_plugin_dask_slurm.detail")
detail.propagate = False  # only into the run's file, never onto the console
NAME = "plugin.log"


def open_detail_log(run_dir: Path) -> logging.Handler:
    """Send the detail log to ``run_dir/logs/plugin.log`` (appended); the handler, to
    close at the end."""
    path = run_dir / "logs" / NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    detail.addHandler(handler)
    detail.setLevel(logging.INFO)
    return handler


def close_detail_log(handler: logging.Handler) -> None:
    detail.removeHandler(handler)
    handler.close()
