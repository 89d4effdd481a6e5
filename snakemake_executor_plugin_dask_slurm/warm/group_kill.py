"""Snakemake's ``shell.kill`` made to remember its kills, for a group job's own Snakemake.

A group's own Snakemake (``--mode remote``, on a worker) runs the jobs of a pipe or
service group at once (``snakemake/executors/local.py``, ``run_group_job``). When one
fails, it kills the others with ``shell.kill(jobid)``, which only reaches jobs whose shell
has already started. A pipe's consumer that starts a moment later (after a producer that
failed at once, e.g. with a shell syntax error) opens the pipe, whose writer will never
come, and blocks for ever; Snakemake then waits for it at shutdown, the group's task never
ends, and the workflow hangs (issue 16). Here a kill is remembered: a job whose shell
starts after its kill is killed as it starts.

Snakemake 9.27: ``shell._processes`` (job id -> the running shell's ``Popen``) and
``shell._lock`` are its internals; it registers a shell and kills one under that lock.
Used by the cold way (:mod:`..dispatch.group_runner`) and the warm way (:mod:`.child`).
"""

from __future__ import annotations

from typing import Any


class Processes(dict[Any, Any]):
    """``shell._processes``: a shell registered for a job killed before is killed at once."""

    def __init__(self) -> None:
        super().__init__()
        self.killed: set[Any] = set()

    def __setitem__(self, jobid: Any, proc: Any) -> None:
        super().__setitem__(jobid, proc)
        if jobid in self.killed:
            proc.kill()

    def kill(self, jobid: Any) -> None:
        """Kill the job's shell, now or when it starts (call with ``shell._lock`` held)."""
        self.killed.add(jobid)
        proc = self.pop(jobid, None)
        if proc is not None:
            proc.kill()


def install(shell: Any) -> bool:
    """Make ``shell.kill`` remember its kills. False, and nothing changed, if Snakemake's
    internals are not the ones this was written for: the job then runs as before."""
    if not isinstance(getattr(shell, "_processes", None), dict) or not hasattr(shell, "_lock"):
        return False
    processes = Processes()
    processes.update(shell._processes)
    shell._processes = processes

    def kill(cls: Any, jobid: Any) -> None:
        with cls._lock:
            processes.kill(jobid)

    shell.kill = classmethod(kill)
    return True
