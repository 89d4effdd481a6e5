"""Snakemake's jobs (snakemake/jobs.py): the preparation of a job with many inputs, made
linear.

Snakemake 9.27.1's ``Job.prepare()`` (snakemake/jobs.py) waits for the job's input files,
minus those that come through a pipe or a service::

    consider_local={f for f in self.input if self.is_pipe_or_service_input(f)}

and ``Job.is_pipe_or_service_input(path)`` walks the job's dependencies until it finds the
first one whose files contain ``path``. For the rule that collects N outputs of N jobs
(every task farm's ``rule all``) that is N walks over N dependencies: N²/2 steps, 540 s at
100,000 inputs, spent after the last job is done (docs/further.md, "Snakemake's quadratic
step at the end").

Here, for the duration of one job's ``prepare()``, ``is_pipe_or_service_input`` answers for
that job from one pass over its dependencies: each file mapped to the first dependency
(in Snakemake's order) whose files contain it, which is the dependency the walk would stop
at. The map is built at the first question, from the same ``dag.dependencies[job]`` the
walk reads, and dropped when ``prepare()`` returns; ``prepare()`` asks all its questions
in one set comprehension with no ``await`` in it, so nothing can change the dependencies
between the map and the answers. Every other caller, and every other job, gets Snakemake's
own function.

And the job's shell command formatted once per info record: ``Job.log_info`` (run for every
job at its submission, ``run_job_pre``) reads the ``Job.shellcmd`` property three times,
and each read formats the rule's command afresh (``format_wildcards``: a copy of the
workflow's globals, the job's namespace, ``str.format``): about 0.07 ms each, 0.2 ms of the
4 ms of Snakemake's own CPU a thin job costs (docs/benchmarks.md, issue 31). For the
duration of one job's ``log_info``, its ``shellcmd`` is formatted at the first read and the
same string answers the other two; ``log_info`` changes nothing the command is formatted
from between them (it builds two log records). Every other read, and every other job's,
formats as Snakemake does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

from .guard import Touch, digest, mark


def targets() -> list[Callable[..., Any]]:
    from snakemake.jobs import Job

    return [Job.prepare, Job.is_pipe_or_service_input]


_NOT_BUILT: Any = object()


class ProducerLookup:
    """``is_pipe_or_service_input`` of one job, from one pass over its dependencies."""

    __slots__ = ("_first", "job")

    def __init__(self, job: Any) -> None:
        self.job = job
        self._first: Any = _NOT_BUILT

    def __call__(self, path: Any) -> bool:
        first = self._first
        if first is _NOT_BUILT:
            first = self._first = first_producers(self.job.dag.dependencies[self.job])
        if first is None:  # no dependencies: the walk finds nothing, and never hashes path
            return False
        dep = first.get(path)
        return dep is not None and path in dep.pipe_or_service_output


def first_producers(dependencies: Mapping[Any, Any]) -> dict[Any, Any] | None:
    """Each file -> the first dependency (in ``dependencies``' order) whose files hold it;
    None if there are no dependencies."""
    if not dependencies:
        return None
    first: dict[Any, Any] = {}
    for dep, files in dependencies.items():
        for f in files:
            first.setdefault(f, dep)
    return first


_asking: ContextVar[ProducerLookup | None] = ContextVar("dask_slurm_prepare_lookup", default=None)


def replacements(prepare: Any, is_pipe_or_service_input: Any) -> tuple[Any, Any]:
    """Job.prepare and Job.is_pipe_or_service_input as installed, around Snakemake's own."""

    @functools.wraps(prepare)
    async def prepare_with_lookup(self: Any) -> Any:
        # A context variable: jobs prepared together (asyncio.gather, each in its own task)
        # each see their own lookup.
        token = _asking.set(ProducerLookup(self))
        try:
            return await prepare(self)
        finally:
            _asking.reset(token)

    @functools.wraps(is_pipe_or_service_input)
    def is_pipe_or_service_input_linear(self: Any, path: Any) -> Any:
        lookup = _asking.get()
        if lookup is None or lookup.job is not self:
            return is_pipe_or_service_input(self, path)
        return lookup(path)

    return (
        mark(prepare_with_lookup, prepare),
        mark(is_pipe_or_service_input_linear, is_pipe_or_service_input),
    )


def apply() -> None:
    from snakemake.jobs import Job

    Job.prepare, Job.is_pipe_or_service_input = replacements(
        Job.prepare, Job.is_pipe_or_service_input
    )


#: Replaces both functions whole: its fingerprint is their whole source (9.27.1's).
PREPARE_INPUTS = Touch(
    name="prepare_inputs",
    kind="fix",
    what="Job.prepare and Job.is_pipe_or_service_input (snakemake/jobs.py)",
    written_for="9.27.1",
    without=(
        "a job with N inputs, such as a farm's 'rule all', takes time in N² before it runs "
        "(about 9 minutes at 100,000 inputs)"
    ),
    found=lambda: digest(targets()),
    fingerprint="340e8ab412459d356eb375accd4a7f5e8b72eb24366731f7c85ad52aeacf17cb",
    apply=apply,
)


def shellcmd_targets() -> list[Callable[..., Any]]:
    from snakemake.jobs import Job

    return [Job.log_info, Job.shellcmd.fget]


class ShellcmdOnce:
    """``Job.shellcmd`` of one job, formatted at the first read."""

    __slots__ = ("_value", "job")

    def __init__(self, job: Any) -> None:
        self.job = job
        self._value: Any = _NOT_BUILT

    def get(self, shellcmd: Callable[[Any], Any]) -> Any:
        if self._value is _NOT_BUILT:  # an exception leaves it unbuilt: raised at each read
            self._value = shellcmd(self.job)
        return self._value


_logging: ContextVar[ShellcmdOnce | None] = ContextVar("dask_slurm_log_info", default=None)


def shellcmd_replacements(log_info: Any, shellcmd: Any) -> tuple[Any, Any]:
    """Job.log_info and Job.shellcmd's getter as installed, around Snakemake's own."""

    @functools.wraps(log_info)
    def log_info_formatting_once(self: Any, *args: Any, **kwargs: Any) -> Any:
        token = _logging.set(ShellcmdOnce(self))
        try:
            return log_info(self, *args, **kwargs)
        finally:
            _logging.reset(token)

    @functools.wraps(shellcmd)
    def shellcmd_once_while_logging(self: Any) -> Any:
        once = _logging.get()
        if once is None or once.job is not self:
            return shellcmd(self)
        return once.get(shellcmd)

    return (
        mark(log_info_formatting_once, log_info),
        mark(shellcmd_once_while_logging, shellcmd),
    )


def apply_shellcmd_once() -> None:
    from snakemake.jobs import Job

    log_info, shellcmd = shellcmd_replacements(Job.log_info, Job.shellcmd.fget)
    Job.log_info = log_info
    Job.shellcmd = property(shellcmd, doc=Job.shellcmd.__doc__)


#: Relies on both functions whole: log_info's reads and what lies between them, and the
#: property's getter.
SHELLCMD_ONCE = Touch(
    name="shellcmd_once",
    kind="fix",
    what="Job.log_info and Job.shellcmd (snakemake/jobs.py)",
    written_for="9.27.1",
    without="each job's shell command is formatted three times for its info record",
    found=lambda: digest(shellcmd_targets()),
    fingerprint="500cad935f1d283e75a5ec2960e0bc816f388ed468377f018fb4993f9de2adca",
    apply=apply_shellcmd_once,
)
TOUCHES = (PREPARE_INPUTS, SHELLCMD_ONCE)
