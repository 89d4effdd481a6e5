"""What becomes of a task that ended: every branch of the routing, including the races the
end-to-end tests found (a job failing because SLURM's SIGTERM reached it before its worker
job was seen to end; a job killed by the allocation's end)."""

from __future__ import annotations

import pytest

from snakemake_executor_plugin_dask_slurm.dispatch.outcomes import Finished, WorkerRef
from snakemake_executor_plugin_dask_slurm.dispatch.routing import Route, RunState, route
from snakemake_executor_plugin_dask_slurm.worker.wire import TaskOutcome

ON = WorkerRef("n2", 42)
OK = Finished("k", True, seconds=1.0)
EXIT_1 = Finished("k", False, outcome=TaskOutcome(1, "n2", 0.0, 1.0, "boom"), on=ON)
TERMINATED = Finished("k", False, outcome=TaskOutcome(-15, "n2", 0.0, 1.0, ""), on=ON)
KILLED = Finished("k", False, outcome=TaskOutcome(-9, "n2", 0.0, 1.0, ""), on=ON)
SHELL_143 = Finished("k", False, outcome=TaskOutcome(143, "n2", 0.0, 1.0, "Terminated"), on=ON)
EXIT_2 = Finished("k", False, outcome=TaskOutcome(2, "n2", 0.0, 1.0, ""), on=ON)
CANCELLED = Finished("k", False, problem="its Dask task was cancelled")
LOST = Finished("k", False, problem="its Dask worker n2 died", lost_on=ON)
TOO_LATE = Finished("k", False, problem="not started: its worker lands in 20 s", too_late=True)

RUNNING = RunState()
STOPPING = RunState(stopping=True)
FATAL = RunState(fatal=True, stopping=True)
WORKER_JOB = RunState(on_worker_job=True)
WORKER_JOB_STOPPING = RunState(on_worker_job=True, stopping=True)
FORGOTTEN = RunState(registered=False)
AT_LIMIT = RunState(on_worker_job=True, stopped_at_limit=True)
AT_LIMIT_STOPPING = RunState(on_worker_job=True, stopped_at_limit=True, stopping=True)


@pytest.mark.parametrize(
    ("finished", "state", "expected"),
    [
        # cancelled and forgotten: nothing, whatever the outcome
        (OK, FORGOTTEN, Route.FORGOTTEN),
        (EXIT_1, FORGOTTEN, Route.FORGOTTEN),
        (LOST, FORGOTTEN, Route.FORGOTTEN),
        # a success is a success, even while the run stops or breaks
        (OK, RUNNING, Route.SUCCEEDED),
        (OK, STOPPING, Route.SUCCEEDED),
        (OK, FATAL, Route.SUCCEEDED),
        (OK, WORKER_JOB, Route.SUCCEEDED),
        # the cluster broke: the run's one message covers every failure
        (EXIT_1, FATAL, Route.COVERED),
        (LOST, FATAL, Route.COVERED),
        (CANCELLED, FATAL, Route.COVERED),
        (TERMINATED, FATAL, Route.COVERED),
        # its worker died: wait until its processes are gone, whatever else holds
        (LOST, RUNNING, Route.LOST),
        (LOST, STOPPING, Route.LOST),
        (LOST, WORKER_JOB, Route.LOST),
        # on a worker job's worker while the run goes on: was it killed with its job?
        (EXIT_1, WORKER_JOB, Route.ASK_WORKER_JOB),
        (TERMINATED, WORKER_JOB, Route.ASK_WORKER_JOB),
        (CANCELLED, WORKER_JOB, Route.ASK_WORKER_JOB),
        # ... but not once the run stops (the plugin itself stopped it)
        (TERMINATED, WORKER_JOB_STOPPING, Route.FAILED),
        (CANCELLED, WORKER_JOB_STOPPING, Route.CHECK_CLUSTER),
        # no outcome: a broken cluster first
        (CANCELLED, RUNNING, Route.CHECK_CLUSTER),
        (CANCELLED, STOPPING, Route.CHECK_CLUSTER),
        # a signal the plugin did not send: did SLURM end the allocation?
        (TERMINATED, RUNNING, Route.ASK_ALLOCATION),
        (KILLED, RUNNING, Route.ASK_ALLOCATION),
        (SHELL_143, RUNNING, Route.ASK_ALLOCATION),  # its shell: "Terminated", exit 143
        (SHELL_143, STOPPING, Route.FAILED),
        # ... the plugin's own stop sent it: an ordinary failure, told as stopped
        (TERMINATED, STOPPING, Route.FAILED),
        # it never started, for lack of time where it was: elsewhere, not a failure
        (TOO_LATE, RUNNING, Route.MOVE),
        (TOO_LATE, WORKER_JOB, Route.MOVE),
        (TOO_LATE, FATAL, Route.COVERED),
        (TOO_LATE, STOPPING, Route.CHECK_CLUSTER),  # the run lands: told quietly, not run
        (TOO_LATE, FORGOTTEN, Route.FORGOTTEN),
        # stopped by the plugin at its worker job's landing: run again, not a failure...
        (TERMINATED, AT_LIMIT, Route.RERUN),
        (KILLED, AT_LIMIT, Route.RERUN),
        (EXIT_1, AT_LIMIT, Route.RERUN),  # a job that reacts to SIGTERM with its own code
        (OK, AT_LIMIT, Route.SUCCEEDED),  # it finished as it was stopped
        (LOST, AT_LIMIT, Route.LOST),  # its worker died meanwhile: the lost way
        # ... unless the run stops: then it is the run's stop that it tells
        (TERMINATED, AT_LIMIT_STOPPING, Route.FAILED),
        # it failed
        (EXIT_1, RUNNING, Route.FAILED),
        (EXIT_2, RUNNING, Route.FAILED),
        (EXIT_1, STOPPING, Route.FAILED),
    ],
)
def test_route(finished: Finished, state: RunState, expected: Route) -> None:
    assert route(finished, state) is expected
