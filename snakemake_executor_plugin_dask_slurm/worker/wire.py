"""What crosses the wire between Snakemake's process and the workers (pure).

A :class:`TaskSpec` goes to a worker; a :class:`TaskOutcome` says how the job ended, and
comes back in the task's outcome event (:func:`.task.run_and_report`) when it did not
succeed; a :class:`Usage` (what the job used) comes back in it whenever the job ran.
What the dispatcher makes of the events is :mod:`..dispatch.outcomes`'.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

#: ``TaskSpec.tmpdir`` value meaning "the worker's own temporary directory", i.e.
#: Snakemake's default ``tmpdir=system_tmpdir`` evaluated where the job runs.
SYSTEM_TMPDIR = "system_tmpdir"


class Why(StrEnum):
    """Why a general-way job went the cold way (a fresh Snakemake): one named reason, decided
    in whichever process knows it (the wire carries the value). What it means to a user is
    :data:`WHY_TEXT`; the pid, path or message of one case goes in :attr:`Cold.detail`.
    The user guide's list of reasons is checked against this enum (tests/unit)."""

    # Decided in Snakemake's process (dispatch/way.py: decide).
    WARM_OFF = "warm-off"
    DEPLOYMENT = "deployment"
    NEEDS_SHELL = "needs-shell"
    NOT_SNAKEMAKE = "not-snakemake"

    # Decided on the worker (worker/warm_host.py, worker/warm_link.py, worker/task.py), which
    # also gives OTHER_PYTHON (a job for another interpreter) and SERVER_FAILED (a cold
    # answer without a reason); CANNOT_START comes from the warm process's start too.
    CANNOT_START = "cannot-start"
    DIED_TOO_OFTEN = "died-too-often"
    LOST_WHILE_RUNNING = "lost-while-running"
    WARM_GONE = "warm-gone"

    # Decided in the warm process, its primed servers and a group job's process (warm/).
    OTHER_CWD = "other-cwd"
    OTHER_PYTHON = "other-python"
    KEY_TOO_LONG = "key-too-long"
    ENV_SETS_MARKER = "env-sets-marker"
    SOURCES_CHANGED = "sources-changed"
    PARSE_EFFECTS = "parse-effects"
    EXIT_HANDLERS = "exit-handlers"
    PARSE_FAILED = "parse-failed"
    THREADS_LEFT = "threads-left"
    BLAS_UNSIZABLE = "blas-unsizable"
    NO_SOURCE_CACHE = "no-source-cache"
    INTERNALS_CHANGED = "internals-changed"
    NO_MARKER_SLOT = "no-marker-slot"
    IMPORT_THREADS = "import-threads"
    SERVER_FAILED = "server-failed"
    SCRIPT_NOT_FORKED = "script-not-forked"
    MEMBER_COMMAND = "member-command"
    ZYGOTE_UNREACHABLE = "zygote-unreachable"


#: What each reason means, as the end-of-run count and the user guide say it.
WHY_TEXT: dict[Why, str] = {
    Why.WARM_OFF: "the warm path is turned off (--dask-slurm-no-warm)",
    Why.DEPLOYMENT: "its rule uses conda, a container or another software deployment",
    Why.NEEDS_SHELL: "its job command needs a shell",
    Why.NOT_SNAKEMAKE: "its job command does not run Snakemake",
    Why.CANNOT_START: "the worker's warm process could not start",
    Why.DIED_TOO_OFTEN: "the worker's warm process died too often",
    Why.LOST_WHILE_RUNNING: "the warm process running it died; its processes were ended first",
    Why.WARM_GONE: "the worker's warm process had just ended when it came",
    Why.OTHER_CWD: "it runs in another working directory than the warm process",
    Why.OTHER_PYTHON: "it runs another Python interpreter than the warm process",
    Why.KEY_TOO_LONG: "its task key is too long for the warm path's marker",
    Why.ENV_SETS_MARKER: "its environment sets the warm path's own marker variable",
    Why.SOURCES_CHANGED: "the workflow's sources changed too often during the run",
    Why.PARSE_EFFECTS: "parsing the workflow has effects the cold way repeats for every job",
    Why.EXIT_HANDLERS: "parsing the workflow registers exit handlers",
    Why.PARSE_FAILED: "the warm process could not parse the workflow",
    Why.THREADS_LEFT: "parsing the workflow leaves threads running",
    Why.BLAS_UNSIZABLE: "its BLAS or OpenMP thread pools cannot be sized per job",
    Why.NO_SOURCE_CACHE: "its job command has no runtime source cache",
    Why.INTERNALS_CHANGED: "this Snakemake's internals differ from those the warm path knows",
    Why.NO_MARKER_SLOT: "the warm process has no slot for a job's marker in its environment",
    Why.IMPORT_THREADS: "importing Snakemake and its plugins leaves threads running",
    Why.SERVER_FAILED: "the warm process's server for its job command failed",
    # Only between a warm job's process and the zygote: the script alone starts afresh.
    Why.SCRIPT_NOT_FORKED: "its Python script needs an interpreter of its own",
    # Only in a group job's own process (warm/member.py): its run: or shadow: member spawned.
    Why.MEMBER_COMMAND: "its group member's spawn command is not one the warm path can run",
    Why.ZYGOTE_UNREACHABLE: "its group job's process could not reach the warm process",
}


@dataclass(frozen=True, slots=True)
class Cold:
    """A general-way job goes (or went) the cold way: the named reason, and what of this
    one case a user may need (a pid, a path, Snakemake's message; "" when nothing)."""

    why: Why
    detail: str = ""

    def __str__(self) -> str:
        text = WHY_TEXT[self.why]
        return f"{text} ({self.detail})" if self.detail else text

    def to_wire(self) -> list[str]:
        """Two strings, for JSON and msgpack messages (:meth:`from_wire` reads them)."""
        return [self.why.value, self.detail]

    @classmethod
    def from_wire(cls, value: Any) -> Cold | None:
        """The :class:`Cold` that :meth:`to_wire` sent, or None for anything else."""
        if not isinstance(value, list | tuple) or len(value) != 2:
            return None
        try:
            return cls(Why(value[0]), str(value[1]))
        except ValueError:
            return None


#: How a job ran: its command on the worker (direct), or Snakemake's job command in a
#: process forked from one that has the workflow parsed (warm) or in a fresh Snakemake
#: (cold). The usage report's way column; chosen by :func:`..dispatch.way.decide`.
Way = Literal["direct", "warm", "cold"]

WAYS: tuple[Way, ...] = ("direct", "warm", "cold")


@dataclass(frozen=True, slots=True)
class WarmSpec:
    """How the warm path runs a general-way job: Snakemake's job command, split."""

    #: The interpreter of the job command (``<python> -m snakemake ...``).
    python: str
    #: The arguments after ``-m snakemake``.
    argv: tuple[str, ...]
    #: What the command's ``export NAME=value &&`` adds to the task's environment.
    exports: tuple[tuple[str, str], ...]
    #: A group job: its Snakemake's ``shell.kill`` remembers kills (see group_runner).
    group: bool
    #: Where the warm process of each worker writes its own log.
    log_dir: str


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One job, as the worker runs it."""

    key: str
    argv: tuple[str, ...]
    cwd: str
    env: tuple[tuple[str, str], ...]
    log_path: str
    #: Where TMPDIR and friends point, as Snakemake's ``shell()`` does with the job's
    #: ``resources.tmpdir``: a path, SYSTEM_TMPDIR, or None to leave them alone.
    tmpdir: str | None
    #: Snakemake's priority of the job (``priority:``, ``--prioritize``): Dask runs the
    #: higher first among the tasks a worker holds.
    priority: float = 0
    #: A general-way job: how the warm path runs it (None: it cannot, see ``cold``).
    warm: WarmSpec | None = None
    #: A general-way job that goes the cold way (``argv``): why.
    cold: Cold | None = None
    #: Seconds it must have before its worker's landing point to start there (its expected
    #: duration and the runtime margin; None: unknown, it may start until the landing
    #: point): see :func:`.clock.too_late`.
    needs: float | None = None
    #: Jobs with the same tag (their rule's name), request and priority may share one Dask
    #: task (:mod:`..dispatch.batching`); None: it goes alone (a group's, a cold one's).
    batch: str | None = None


@dataclass(frozen=True, slots=True)
class TaskOutcome:
    """How a job ended."""

    returncode: int  # negative: killed by that signal
    host: str
    started: float
    finished: float
    tail: str  # the end of the job's log when it failed, else ""
    start_error: str | None = None  # the command could not be started at all
    cold: Cold | None = None  # a general-way job that ran the cold way: why


@dataclass(frozen=True, slots=True)
class Usage:
    """What one job used, from the kernel when its process was reaped (``os.wait4``):
    exact, and nothing is sampled while the job runs.

    Counted: the job's own process and every descendant its parent waited for (a shell's
    commands and pipelines, a script's subprocesses, the general way's Snakemake and what
    it runs). Not counted: processes that outlive their parent (``cmd &`` left running,
    ``nohup``, daemons): they are re-parented to the worker, which reaps them.
    """

    host: str
    #: The Dask worker's name.
    worker: str
    #: The SLURM job the worker runs in (the allocation, or its worker job); "" outside.
    slurm_job: str
    #: The worker's clock (epoch seconds) just before the job's process was started.
    started: float
    #: Seconds from just before the start to the reaping (monotonic clock).
    wall: float
    #: User + system CPU seconds of those processes.
    cpu: float
    #: The largest peak resident set size of any one of those processes (not their sum:
    #: getrusage(2)'s ``ru_maxrss``), KiB.
    max_rss_kb: int
    #: The worker's own peak RSS when the job started, KiB. The job's first process is
    #: forked from the worker and the kernel counts the worker's peak as that process's
    #: (``exec`` keeps it), so a ``max_rss_kb`` at or below this only says that the job's
    #: peak was at most this much; above it, ``max_rss_kb`` is the job's own peak.
    rss_floor_kb: int = 0

    @property
    def rss_exact(self) -> bool:
        """Whether ``max_rss_kb`` is the job's own peak (see ``rss_floor_kb``)."""
        return self.max_rss_kb > self.rss_floor_kb

    def to_wire(self) -> tuple[str, str, str, float, float, float, int, int]:
        """A plain tuple for the job's outcome event (msgpack turns it into a list)."""
        return (
            self.host,
            self.worker,
            self.slurm_job,
            self.started,
            self.wall,
            self.cpu,
            self.max_rss_kb,
            self.rss_floor_kb,
        )

    @classmethod
    def from_wire(cls, value: Any) -> Usage | None:
        """The :class:`Usage` that :meth:`to_wire` sent, or None for anything else."""
        if not isinstance(value, list | tuple) or len(value) != 8:
            return None
        # As sent by run_and_report (msgpack keeps str, float and int apart): not
        # converted again, as this runs on the client's event thread for every job.
        return cls(*value)


class TooLate(Exception):
    """Raised on the worker instead of starting a job that could no longer finish before
    the worker's landing point (it waited there too long): the job never started, and the
    plugin hands it over again (:func:`.task.run_and_report` says so in its event)."""


class JobFailed(Exception):
    """Raised on the worker when a job did not succeed; :func:`.task.run_and_report`
    turns it into the task's outcome event."""

    def __init__(self, outcome: TaskOutcome, usage: Usage | None = None):
        super().__init__(outcome, usage)
        self.outcome = outcome
        #: What the job used, if it ran at all.
        self.usage = usage

    def __str__(self) -> str:
        return f"job exited with code {self.outcome.returncode} on {self.outcome.host}"
