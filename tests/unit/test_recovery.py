"""What becomes of one job of a dead worker (pure): run again, or fail, and the words."""

from __future__ import annotations

import pytest

from snakemake_executor_plugin_dask_slurm.dispatch.recovery import MAX_LOSSES, Gone, decide

LABEL = "rule thin (jobid 3, attempt 1)"
RECORD = {"exit": "was killed by signal 9 (SIGKILL)", "jobs_left_running": ["k"]}
RAN = Gone("its supervisor ended the 2 process(es) its jobs had left", RECORD)
WAITED = Gone("its supervisor ended the 0 process(es) its jobs had left", {"exit": "exited"})


@pytest.mark.parametrize(
    ("gone", "lost_on", "stop", "rerun", "running", "fragments"),
    [
        (RAN, [], None, True, True, ["was running on n2", "Running it again"]),
        (WAITED, [], None, True, False, ["was waiting, not started, on n2", "Running it again"]),
        # the run stops: not again
        (RAN, [], "SIGTERM", False, True, ["It is not run again: SIGTERM."]),
        # its workers died under it twice while it ran: the job takes them down
        (RAN, ["n1"], None, False, True, ["died under it on n1, n2", "more memory"]),
        # twice, but it was only waiting the second time: run again
        (WAITED, ["n1"], None, True, False, ["Running it again"]),
        # nobody could make sure its processes ended: never a second copy
        (None, [], None, False, False, ["could not make sure", "DASK_SLURM_JOB=k"]),
    ],
)
def test_decide(
    gone: Gone | None,
    lost_on: list[str],
    stop: str | None,
    rerun: bool,
    running: bool,
    fragments: list[str],
) -> None:
    lost = list(lost_on)
    verdict = decide(LABEL, "k", "n2", gone, lost, stop)
    assert (verdict.rerun, verdict.running) == (rerun, running)
    assert verdict.message.startswith(LABEL)
    for fragment in fragments:
        assert fragment in verdict.message
    assert lost == lost_on + (["n2"] if running else [])
    assert MAX_LOSSES == 2
