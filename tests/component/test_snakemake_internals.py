"""The plugin's touches of Snakemake's code (snakemake_internals/): every one is the code it
was written for on the installed Snakemake; the fixes do exactly what Snakemake's own
functions do, on real jobs, and are installed only on the Snakemake they were written for.

Real jobs: generated Snakefiles (pipes, services, files shared by several consumers,
a file listed twice, source files with no producer, jobs with no input) are parsed and
their DAG built by Snakemake's API, in this process, and every job's ``prepare()`` is run
with Snakemake's functions and with the fix. A file produced by several dependencies and
an unhashable path cannot come out of a real DAG; for those, minimal objects with exactly
the attributes Snakemake's function reads (``job.dag.dependencies[job]``,
``dep.pipe_or_service_output``) stand in.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import snakemake.api  # first: snakemake's modules import each other in this order
import snakemake.jobs
from snakemake.jobs import Job

from snakemake_executor_plugin_dask_slurm import snakemake_internals
from snakemake_executor_plugin_dask_slurm.snakemake_internals import greedy as greedy_selection
from snakemake_executor_plugin_dask_slurm.snakemake_internals import guard as fingerprint
from snakemake_executor_plugin_dask_slurm.snakemake_internals import jobs as prepare_inputs
from snakemake_executor_plugin_dask_slurm.snakemake_internals import rounds, scheduler

SEEDS = (1, 2, 3)


def generated_snakefile(seed: int) -> tuple[str, list[str]]:
    """A workflow of random shape, and the source files it needs on disk."""
    rng = random.Random(seed)
    rules, sources = [], [f"src/{k}.txt" for k in range(rng.randint(1, 4))]
    plain = []
    for i in range(rng.randint(2, 6)):
        outputs = [f"q{i}_{j}.txt" for j in range(rng.randint(1, 3))]
        plain += outputs
        rules.append((f"q{i}", [], [f'"{o}"' for o in outputs]))
    pipes = [f"p{i}.pipe" for i in range(rng.randint(0, 3))]
    services = [f"s{i}.sock" for i in range(rng.randint(0, 2))]
    rules += [(f"p{i}", [], [f'pipe("{p}")']) for i, p in enumerate(pipes)]
    rules += [(f"s{i}", [], [f'service("{s}")']) for i, s in enumerate(services)]
    consumers = []
    for m in range(rng.randint(3, 8)):
        inputs = rng.sample(plain, rng.randint(0, len(plain)))  # shared between consumers
        inputs += rng.sample(sources, rng.randint(0, len(sources)))
        inputs += rng.sample(services, rng.randint(0, len(services)))
        if inputs and rng.random() < 0.5:
            inputs.append(rng.choice(inputs))  # a file listed twice
        rng.shuffle(inputs)
        consumers.append((f"c{m}", inputs, [f'"c{m}.txt"']))
    for pipe in pipes:  # a pipe has exactly one consumer
        consumers[rng.randrange(len(consumers))][1].append(pipe)
    m = len(consumers)
    consumers.append((f"c{m}", rng.sample(sources, 1), [f'"c{m}.txt"']))  # inputs, no deps
    rules += [(n, [f'"{f}"' for f in i], o) for n, i, o in consumers]
    target = [f"c{m}.txt" for m in range(len(consumers))] + rng.sample(plain, len(plain) // 2)
    text = f"rule all:\n    input: {', '.join(map(repr, target))}\n"
    for name, inputs, outputs in rules:
        text += f"rule {name}:\n"
        if inputs:
            text += f"    input: {', '.join(inputs)}\n"
        text += f'    output: {", ".join(outputs)}\n    shell: "true"\n'
    return text, sources


@pytest.fixture
def dag_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Builds a Snakefile's DAG with Snakemake's API, in a fresh directory."""
    from snakemake.settings.types import (
        DAGSettings,
        ExecutionSettings,
        OutputSettings,
        ResourceSettings,
    )

    with snakemake.api.SnakemakeApi(OutputSettings(quiet={"all"})) as api:

        def build(text: str, sources: list[str], name: str) -> Any:
            workdir = tmp_path / name
            (workdir / "src").mkdir(parents=True)
            for source in sources:
                (workdir / source).write_text("x\n")
            (workdir / "Snakefile").write_text(text)
            monkeypatch.chdir(workdir)
            workflow_api = api.workflow(
                resource_settings=ResourceSettings(cores=1),
                snakefile=workdir / "Snakefile",
                workdir=workdir,
            )
            workflow_api.dag(DAGSettings())
            workflow = workflow_api._workflow
            workflow._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=True)
            workflow._build_dag()
            workflow.execution_settings = ExecutionSettings()  # as execute_workflow does
            return workflow.dag

        yield build


def consider_local_of(job: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """What ``job.prepare()`` passes to ``wait_for_files`` as ``consider_local``."""
    seen: list[Any] = []

    async def wait_for_files(files: Any, **kwargs: Any) -> None:
        seen.append(kwargs["consider_local"])

    monkeypatch.setattr(snakemake.jobs, "wait_for_files", wait_for_files)
    asyncio.run(job.prepare())
    assert len(seen) == 1
    return seen[0]


def original_functions() -> tuple[Any, Any]:
    return fingerprint.original(Job.prepare), fingerprint.original(Job.is_pipe_or_service_input)


def prepared_alike(job: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``consider_local`` of ``job.prepare()`` with Snakemake's functions, checked equal
    to that with the fix."""
    prepare, lookup = original_functions()
    monkeypatch.setattr(Job, "prepare", prepare)
    monkeypatch.setattr(Job, "is_pipe_or_service_input", lookup)
    expected = consider_local_of(job, monkeypatch)
    fixed = prepare_inputs.replacements(prepare, lookup)
    monkeypatch.setattr(Job, "prepare", fixed[0])
    monkeypatch.setattr(Job, "is_pipe_or_service_input", fixed[1])
    assert consider_local_of(job, monkeypatch) == expected, job
    return expected


def test_real_jobs_get_the_same_answers_and_prepare_alike(
    dag_of: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    kinds = dict.fromkeys(("pipe", "service", "shared", "twice", "no deps", "no input"), 0)
    for seed in SEEDS:
        dag = dag_of(*generated_snakefile(seed), f"seed{seed}")
        _, lookup = original_functions()
        jobs = list(dag.jobs)
        files = {f for job in jobs for f in (*job.input, *job.output)} | {"elsewhere.txt"}
        for job in jobs:
            fast = prepare_inputs.ProducerLookup(job)
            for path in sorted(files):
                assert fast(path) == lookup(job, path), (seed, job, path)
            local = prepared_alike(job, monkeypatch)
            kinds["pipe"] += any(f.endswith(".pipe") for f in local)
            kinds["service"] += any(f.endswith(".sock") for f in local)
            kinds["twice"] += len(set(job.input)) < len(job.input)
            kinds["no deps"] += bool(job.input) and not dag.dependencies[job]
            kinds["no input"] += not job.input
        kinds["shared"] += sum(
            1 for f in files if f.endswith(".txt") and sum(f in j.input for j in jobs) > 1
        )
    assert all(kinds.values()), kinds  # the generated jobs hold every case


def test_a_farm_target_with_many_inputs(dag_of: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task farm's shape: ``rule all`` collecting 300 outputs of one wildcard rule."""
    text = (
        'rule all:\n    input: expand("out/{i}.txt", i=range(300)), "p.txt"\n'
        'rule thin:\n    output: "out/{i}.txt"\n    shell: "true"\n'
        'rule p:\n    input: "s.sock"\n    output: "p.txt"\n    shell: "true"\n'
        'rule s:\n    output: service("s.sock")\n    shell: "true"\n'
    )
    dag = dag_of(text, [], "farm")
    for job in dag.jobs:
        expected = prepared_alike(job, monkeypatch)
        assert expected == ({"s.sock"} if job.rule.name == "p" else set())


class FakeDag:
    def __init__(self, dependencies: dict[Any, dict[Any, set[Any]]]) -> None:
        self.dependencies = dependencies


class FakeJob:
    """What Snakemake's function reads of a job: ``job.dag.dependencies[job]``."""

    def __init__(self, dependencies: dict[Any, set[Any]]) -> None:
        self.dag = FakeDag({self: dependencies})


class FakeDep:
    """What it reads of a dependency: ``dep.pipe_or_service_output``."""

    def __init__(self, pipes: set[str]) -> None:
        self.pipe_or_service_output = pipes


def fake_job(dependencies: dict[Any, set[Any]]) -> Any:
    return FakeJob(dependencies)


def fake_dep(pipes: set[str]) -> Any:
    return FakeDep(pipes)


def test_a_file_of_several_dependencies_is_the_first_ones() -> None:
    """Snakemake's walk stops at the first dependency holding the file: so does the map."""
    rng = random.Random(7)
    _, lookup = original_functions()
    for _ in range(300):
        names = [f"f{i}" for i in range(rng.randint(0, 6))]
        deps = {
            fake_dep(set(rng.sample(names, rng.randint(0, len(names))))): set(
                rng.sample(names, rng.randint(0, len(names)))
            )
            for _ in range(rng.randint(0, 4))
        }
        job = fake_job(deps)
        fast = prepare_inputs.ProducerLookup(job)
        for name in [*names, "other"]:
            assert fast(name) == lookup(job, name), (deps, name)


def test_an_unhashable_path_fails_as_in_snakemake() -> None:
    _, lookup = original_functions()
    assert lookup(fake_job({}), ["x"]) is False
    assert prepare_inputs.ProducerLookup(fake_job({}))(["x"]) is False
    with pytest.raises(TypeError):
        lookup(fake_job({fake_dep(set()): set()}), ["x"])
    with pytest.raises(TypeError):
        prepare_inputs.ProducerLookup(fake_job({fake_dep(set()): set()}))(["x"])


def test_outside_prepare_and_for_other_jobs_snakemakes_function_answers() -> None:
    calls: list[Any] = []

    def lookup(job: Any, path: Any) -> bool:
        calls.append((job, path))
        return True

    async def prepare(job: Any) -> Any:
        other = fake_job({})
        return job.ask(job, "a"), job.ask(other, "b")

    job = fake_job({fake_dep({"a"}): {"a"}})
    wrapped_prepare, job.ask = prepare_inputs.replacements(prepare, lookup)
    assert job.ask(job, "a") is True and calls == [(job, "a")]  # outside prepare
    assert asyncio.run(wrapped_prepare(job)) == (True, True)
    assert len(calls) == 2 and calls[1][1] == "b"  # the other job's question: Snakemake's


class Records(logging.Handler):
    """Every record Snakemake's logger emits, with its message and extras as plain data."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen: list[tuple[str, dict[str, str]]] = []

    def emit(self, record: logging.LogRecord) -> None:
        extras = {k: repr(v) for k, v in vars(record).items() if k not in PLAIN_RECORD}
        self.seen.append((record.getMessage(), extras))


PLAIN_RECORD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def logged_alike(jobs: list[Any], monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each job's ``log_info`` records with Snakemake's functions and with the fix, checked
    equal; how often each formatted its command (Snakemake's, the fix's)."""
    from snakemake.logging import logger

    log_info = fingerprint.original(Job.log_info)
    shellcmd = fingerprint.original(Job.shellcmd.fget)
    formats: list[int] = []
    real_format = Job.format_wildcards

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        formats[-1] += 1
        return real_format(self, *args, **kwargs)

    monkeypatch.setattr(Job, "format_wildcards", counting)
    fixed = prepare_inputs.shellcmd_replacements(log_info, shellcmd)
    for job in jobs:
        records = []
        for info, getter in ((log_info, shellcmd), fixed):
            monkeypatch.setattr(Job, "log_info", info)
            monkeypatch.setattr(Job, "shellcmd", property(getter))
            handler = Records()
            logger.addHandler(handler)
            formats.append(0)
            try:
                job.log_info()
            finally:
                logger.removeHandler(handler)
            records.append(handler.seen)
        assert records[0] == records[1] and records[0], job
    return formats


def test_a_jobs_info_record_is_the_same_with_its_command_formatted_once(
    dag_of: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (
        'G = "global"\n'
        'rule all:\n    input: expand("out/{i}.txt", i=range(3)), "plain.txt"\n'
        'rule thin:\n    output: "out/{i}.txt"\n    params: p=lambda w: int(w.i) * 2\n'
        "    threads: 1\n    resources: mem_mb=10\n"
        '    shell: "echo {wildcards.i} {params.p} {threads} {resources.mem_mb} {G} > {output}"\n'
        'rule plain:\n    output: "plain.txt"\n    run:\n        pass\n'
    )
    dag = dag_of(text, [], "info")
    dag.update_priority()  # as the DAG's postprocess before the run
    jobs = sorted(dag.needrun_jobs(), key=str)
    formats = logged_alike(jobs, monkeypatch)
    by_job = dict(zip(map(str, jobs), zip(formats[::2], formats[1::2], strict=True), strict=True))
    assert by_job == {str(j): (3, 1) if j.rule.name == "thin" else (0, 0) for j in jobs}


def test_a_command_that_cannot_be_formatted_fails_the_record_alike() -> None:
    def shellcmd(job: Any) -> Any:
        raise ValueError(f"no command for {job.name}")

    def log_info(job: Any) -> tuple[Any, Any]:
        return job.cmd, job.cmd

    wrapped_info, getter = prepare_inputs.shellcmd_replacements(log_info, shellcmd)

    class Failing:
        name = "j"
        cmd = property(getter)

    with pytest.raises(ValueError, match="no command for j"):
        wrapped_info(Failing())


def test_outside_log_info_and_for_other_jobs_the_command_is_formatted_afresh() -> None:
    formatted: list[Any] = []

    class Probe:
        def __init__(self, name: str) -> None:
            self.name = name

    def shellcmd(job: Any) -> str:
        formatted.append(job.name)
        return f"cmd {job.name} {len(formatted)}"

    def log_info(job: Any) -> tuple[Any, ...]:
        return job.cmd, other.cmd, job.cmd, other.cmd

    wrapped_info, getter = prepare_inputs.shellcmd_replacements(log_info, shellcmd)
    Probe.cmd = property(getter)  # type: ignore[attr-defined]
    job, other = Probe("a"), Probe("b")
    assert (job.cmd, job.cmd) == ("cmd a 1", "cmd a 2")  # outside log_info: every read
    assert wrapped_info(job) == ("cmd a 3", "cmd b 4", "cmd a 3", "cmd b 5")
    assert formatted == ["a", "a", "a", "b", "b"]


def test_remaining_jobs_are_the_same_jobs_made_at_first_read() -> None:
    made: list[int] = []

    def make() -> list[str]:
        made.append(1)
        return ["a", "b", "c"]

    jobs = scheduler.RemainingJobs(make)
    assert made == []  # nothing made until read
    assert list(jobs) == ["a", "b", "c"] and made == [1]
    assert len(jobs) == 3 and jobs[1] == "b" and jobs[:2] == ["a", "b"] and "c" in jobs
    assert bool(jobs) and jobs == ["a", "b", "c"] and made == [1]  # made once
    assert not scheduler.RemainingJobs(list)


def test_the_remaining_jobs_property_reads_snakemakes() -> None:
    class Scheduler:
        @property
        def remaining_jobs(self) -> list[str]:
            """doc"""
            return [self.name]

        def __init__(self, name: str) -> None:
            self.name = name

    replaced = scheduler.remaining_jobs_replacement(Scheduler.__dict__["remaining_jobs"])
    assert replaced.__doc__ == "doc"
    assert list(replaced.__get__(Scheduler("x"))) == ["x"]
    assert fingerprint.original(replaced.fget) is Scheduler.__dict__["remaining_jobs"].fget


@pytest.mark.parametrize("touch", snakemake_internals.TOUCHES, ids=lambda touch: touch.name)
def test_the_installed_snakemake_is_the_one_each_touch_was_written_for(touch: Any) -> None:
    """Fails on a Snakemake release that changes code a fix replaces, a hook or a read
    relies on. Then: if that release fixed the problem, delete the fix; otherwise check the
    touch against the new code (and its tests here), and record the new fingerprint."""
    import snakemake

    found = touch.found()
    assert found == touch.fingerprint, (
        f"Snakemake {snakemake.__version__}: {touch.what} changed since "
        f"{touch.written_for} (fingerprint {found}); the plugin's {touch.kind} "
        f"'{touch.name}' is not installed on it. Re-check it, or remove it if Snakemake "
        "fixed the cause."
    )


def test_the_registry_holds_every_area_and_the_fixes_are_the_ones_installed() -> None:
    areas = {t.found.__module__.rsplit(".", 1)[-1] for t in snakemake_internals.TOUCHES}
    assert areas >= {
        "scheduler",
        "rounds",
        "greedy",
        "jobs",
        "shell",
        "script",
        "cli",
        "local_executor",
    }
    names = [t.name for t in snakemake_internals.FIXES]
    assert names == [
        "prepare_inputs",
        "shellcmd_once",
        "remaining_jobs",
        "first_round",
        "scheduling rounds",
        "greedy_selection",
    ]
    assert len({t.name for t in snakemake_internals.TOUCHES}) == len(snakemake_internals.TOUCHES)


def test_a_changed_snakemake_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snakemake_internals, "_installed", {})
    monkeypatch.setattr(prepare_inputs.PREPARE_INPUTS, "fingerprint", "0" * 64)
    applied: list[str] = []
    monkeypatch.setattr(prepare_inputs.PREPARE_INPUTS, "apply", lambda: applied.append("prepare"))
    monkeypatch.setattr(scheduler.REMAINING_JOBS, "apply", lambda: applied.append("remaining"))
    monkeypatch.setattr(scheduler.FIRST_ROUND, "apply", lambda: applied.append("first"))
    greedy = greedy_selection.GREEDY_SELECTION
    monkeypatch.setattr(greedy, "apply", lambda: applied.append("greedy"))
    monkeypatch.setattr(rounds.ROUNDS, "apply", lambda: applied.append("rounds"))
    once = prepare_inputs.SHELLCMD_ONCE
    monkeypatch.setattr(once, "apply", lambda: applied.append("shellcmd"))
    lines: list[str] = []
    installed = snakemake_internals.install(lines.append)
    assert installed == {
        "prepare_inputs": False,
        "shellcmd_once": True,
        "remaining_jobs": True,
        "first_round": True,
        "scheduling rounds": True,
        "greedy_selection": True,
    }
    assert applied == ["shellcmd", "remaining", "first", "rounds", "greedy"]
    assert lines == [
        "Snakemake's Job.prepare and Job.is_pipe_or_service_input (snakemake/jobs.py) is "
        "not the code the plugin's fix was written for (Snakemake 9.27.1); Snakemake is "
        "left as it is: a job with N inputs, such as a farm's 'rule all', takes time in N² "
        "before it runs (about 9 minutes at 100,000 inputs)"
    ]
    assert snakemake_internals.install(lines.append) == installed  # once per process
    assert applied == ["shellcmd", "remaining", "first", "rounds", "greedy"]
    assert len(lines) == 2  # each log


def test_fingerprints_read_through_the_fixes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once installed, a fix's fingerprint is still Snakemake's own code's."""
    fix = prepare_inputs.PREPARE_INPUTS
    before = fix.found()
    prepare, lookup = original_functions()
    replaced = prepare_inputs.replacements(prepare, lookup)
    monkeypatch.setattr(Job, "prepare", replaced[0])
    monkeypatch.setattr(Job, "is_pipe_or_service_input", replaced[1])
    assert fix.found() == before


class FakeScheduler:
    def __init__(self, workflow: Any) -> None:
        self.workflow = workflow
        self.rounds: list[str] = []

    def schedule(self) -> str:
        self.rounds.append("first round")
        return "done"


class FakeWorkflow:
    pass


class Plugin:
    def __init__(self) -> None:
        self.called: list[Any] = []

    def tune(self, scheduler: Any) -> None:
        self.called.append(scheduler)
        scheduler.rounds.append("tuned")


def test_the_first_round_hook_calls_the_registered_plugin_first_and_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scheduler, "_waiting", [])
    monkeypatch.setattr(scheduler, "_installed", False)
    workflow, other = FakeWorkflow(), FakeWorkflow()
    plugin = Plugin()
    assert not scheduler.before_first_round(workflow, plugin.tune)  # not installed: no
    monkeypatch.setattr(scheduler, "_installed", True)
    assert scheduler.before_first_round(workflow, plugin.tune)
    schedule = scheduler.first_round_replacement(FakeScheduler.schedule)
    mine, theirs = FakeScheduler(workflow), FakeScheduler(other)
    assert schedule(theirs) == "done" and theirs.rounds == ["first round"]  # not its plugin
    assert schedule(mine) == "done" and mine.rounds == ["tuned", "first round"]
    assert schedule(mine) == "done" and plugin.called == [mine]  # once
    assert fingerprint.original(schedule) is FakeScheduler.schedule


def test_a_workflow_that_never_schedules_is_not_kept_alive(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import gc
    import weakref

    monkeypatch.setattr(scheduler, "_waiting", [])
    monkeypatch.setattr(scheduler, "_installed", True)
    workflow, plugin = FakeWorkflow(), Plugin()
    scheduler.before_first_round(workflow, plugin.tune)
    gone = weakref.ref(plugin)
    del plugin
    gc.collect()
    assert gone() is None  # the entry holds the executor weakly
    assert scheduler._take(workflow) == [] and scheduler._waiting == []


def test_snakemakes_ilp_selector_reads_the_remaining_jobs_alike(
    dag_of: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one selector that reads the remaining jobs, Snakemake's ILP, chooses the same
    jobs from the sequence made when first read as from the list (temp files make it read
    them: the remaining consumers of each temp file)."""
    import logging

    from snakemake.scheduling.milp import Scheduler, SchedulerSettings

    text = (
        'rule all:\n    input: expand("c{i}.txt", i=range(6))\n'
        'rule c:\n    input: "t{i}.txt", "t0.txt"\n    output: "c{i}.txt"\n'
        '    shell: "true"\n'
        'rule t:\n    output: temp("t{i}.txt")\n    shell: "true"\n'
    )
    dag = dag_of(text, [], "ilp")
    dag.update_priority()  # as DAG.postprocess() does before a run is scheduled
    jobs = list(dag.jobs)
    ready = [job for job in jobs if job.rule.name == "c"]  # each reads temp files
    sizes = {f: 10**9 * (1 + int(f[1])) for job in jobs for f in job.input if f.startswith("t")}
    resources = {"_cores": 3, "_nodes": 3, "_job_count": 3}
    made: list[int] = []

    def make() -> list[Any]:
        made.append(1)
        return jobs

    ilp = Scheduler(dag, SchedulerSettings(), logging.getLogger("test"))
    from_list = ilp.select_jobs(ready, jobs, resources, sizes)
    lazily = ilp.select_jobs(ready, scheduler.RemainingJobs(make), resources, sizes)
    assert made == [1]  # read, and made once
    assert from_list is not None and len(from_list) == 3
    assert lazily == from_list


def test_a_fingerprint_covers_what_its_fix_relies_on_only() -> None:
    """An edit of schedule() that its fixes do not depend on (Snakemake's main branch
    added two `for job in self.failed: job.log_error()` loops after 9.27.1) leaves both
    installed; a new use of what a fix relies on switches it off."""
    sources = [fingerprint.source_of(f) for f in scheduler.remaining_jobs_targets()]
    schedule = sources[2]
    pad = " " * 20
    anchor = f"{pad}if errors:\n"
    assert anchor in schedule
    logged = schedule.replace(anchor, f"{pad}for job in self.failed:\n{anchor}", 1)
    used = schedule.replace(anchor, f"{pad}n = len(self.remaining_jobs)\n{anchor}", 1)
    tuned = schedule.replace(anchor, f"{pad}self.subsample = None\n{anchor}", 1)

    def remaining(schedule_source: str) -> str:
        texts = scheduler.remaining_jobs_relied_on(
            sources[0], sources[1], schedule_source, sources[3]
        )
        return fingerprint.digest_texts(texts)

    def first(schedule_source: str) -> str:
        return fingerprint.digest_texts(scheduler.first_round_relied_on(schedule_source))

    assert remaining(schedule) == remaining(logged) == scheduler.REMAINING_JOBS.fingerprint
    assert remaining(used) != scheduler.REMAINING_JOBS.fingerprint
    assert first(schedule) == first(logged) == scheduler.FIRST_ROUND.fingerprint
    assert first(tuned) != scheduler.FIRST_ROUND.fingerprint
    # the selectors' block must be there whole
    selector = sources[1].replace("with self._lock:", "if True:")
    assert (
        fingerprint.digest_texts(
            scheduler.remaining_jobs_relied_on(sources[0], selector, schedule, sources[3])
        )
        != scheduler.REMAINING_JOBS.fingerprint
    )


class FakeFile(str):
    """What the greedy selector reads of an input file: ``is_flagged("temp")``."""

    temp = False

    def is_flagged(self, flag: str) -> bool:
        return flag == "temp" and self.temp


class FakeSelectable:
    """What it reads of a job: ``scheduler_resources``, ``priority``, ``input``."""

    def __init__(self, resources: dict[str, Any], priority: Any, inputs: list[FakeFile]):
        self.scheduler_resources = resources
        self.priority = priority
        self.input = inputs


def greedy_pair(greediness: float = 1.0, omit: bool = False) -> tuple[Any, Any, Any]:
    """A real greedy Scheduler, Snakemake's select_jobs and the fix's."""
    import logging

    from snakemake.scheduling.greedy import Scheduler, SchedulerSettings

    settings = SchedulerSettings(greediness=greediness, omit_prioritize_by_temp_and_input=omit)
    scheduler = Scheduler(None, settings, logging.getLogger("test"))
    original = fingerprint.original(Scheduler.select_jobs)
    return scheduler, original, greedy_selection.replacement(original)


def outcome(select: Any, *args: Any) -> Any:
    try:
        return [id(job) for job in select(*args)]
    except Exception as e:  # Snakemake's own raises on some inputs: so must the fix
        return type(e)


def random_case(rng: random.Random, odd: bool) -> tuple[Any, ...]:
    """Selectable jobs (a set, as Snakemake passes them), capacities, input sizes; rewards
    drawn from few values, so that ties are common. ``odd``: inputs the fast way declines
    (floats, negatives, booleans, a job asking for nothing)."""
    names = ["_cores", "_nodes", "_job_count", "mem_mb", "gpu"][: rng.randint(1, 5)]
    capacity = {n: rng.choice([0, 1, 2, 3, 5, 8, 2**63 - 1]) for n in names}
    files = [FakeFile(f"f{i}") for i in range(6)]
    for f in files:
        f.temp = rng.random() < 0.3
    sizes = {f: rng.choice([None, 0, 10, 10**9]) for f in files}
    jobs = set()
    for _ in range(rng.randint(0, 30)):
        resources = {n: rng.choice([0, 1, 1, 2, 3]) for n in names if rng.random() < 0.9}
        if not any(resources.values()):
            resources[names[0]] = 1
        priority = rng.choice([0, 0, 1, 5, 2**63 - 1, 1.5])
        jobs.add(FakeSelectable(resources, priority, rng.sample(files, rng.randint(0, 3))))
    if odd:
        victim = next(iter(jobs), None)
        kind = rng.choice(["float", "negative", "bool", "nothing", "capacity", "nan"])
        if kind == "capacity":
            capacity[names[0]] = rng.choice([-1, 2.5, True])
        elif victim is not None:
            name = rng.choice(names)
            values = {"float": 0.5, "negative": -1, "bool": True, "nan": 0}
            if kind == "nothing":
                victim.scheduler_resources = {}
            elif kind == "nan":
                victim.priority = float("nan")
            else:
                victim.scheduler_resources[name] = values[kind]
    return jobs, capacity, sizes


def test_the_greedy_selection_chooses_as_snakemakes(monkeypatch: pytest.MonkeyPatch) -> None:
    """On 3,000 generated rounds (ties, temp and input sizes, full and empty capacities,
    jobs that do not fit, and inputs the fix leaves to Snakemake), the same jobs in the same
    order, or the same error, as Snakemake's own greedy selector."""
    fast: list[int] = []
    one_pass = greedy_selection.select_in_reward_order

    def counted(*args: Any) -> list[bool]:
        fast.append(1)
        return one_pass(*args)

    monkeypatch.setattr(greedy_selection, "select_in_reward_order", counted)
    rng = random.Random(31)
    pairs = [greedy_pair(), greedy_pair(0.5), greedy_pair(omit=True)]
    selected = errors = 0
    for case in range(3000):
        scheduler, original, fixed = pairs[0] if case % 7 else pairs[1 + case % 2]
        # not with greediness < 1: Snakemake's own loops forever on a negative capacity
        odd = case % 5 == 0 and scheduler.settings.greediness == 1
        jobs, capacity, sizes = random_case(rng, odd)
        args = (scheduler, jobs, [], capacity, sizes)
        expected = outcome(original, *args)
        assert outcome(fixed, *args) == expected, (case, capacity)
        selected += isinstance(expected, list) and 0 < len(expected) < len(jobs)
        errors += not isinstance(expected, list)
    assert len(fast) > 1500 and selected > 500 and errors > 0  # every kind was there


def test_the_greedy_selection_of_real_jobs(dag_of: Any) -> None:
    """Real jobs of a DAG (priorities, temp files, several threads) under a scheduler's
    resources, budgets from none to all: Snakemake's choice."""
    text = (
        'rule all:\n    input: expand("c{i}.txt", i=range(12))\n'
        'rule c:\n    input: "t{i}.txt"\n    output: "c{i}.txt"\n'
        "    threads: lambda wildcards: 1 + int(wildcards.i) % 3\n"
        "    priority: 2\n"
        '    shell: "true"\n'
        'rule t:\n    output: temp("t{i}.txt")\n    shell: "true"\n'
    )
    dag = dag_of(text, [], "greedy")
    dag.update_priority()
    jobs = {job for job in dag.jobs if job.rule.name in ("c", "t")}
    sizes = {f: 10**6 * (1 + len(f)) for job in jobs for f in job.input}
    scheduler, original, fixed = greedy_pair()
    chose = set()
    for cores in range(0, 30, 3):
        for count in (0, 1, 4, 100):
            resources = {"_cores": cores, "_nodes": 2**63 - 1, "_job_count": count}
            expected = original(scheduler, jobs, [], resources, sizes)
            assert fixed(scheduler, jobs, [], resources, sizes) == expected
            chose.add(len(expected))
    assert len(chose) > 5


# -- the room's narrow functions: the direct way's reads, the warm parse, the public API --


def test_the_direct_way_reads_a_shell_rule_and_formats_its_command(dag_of: Any) -> None:
    """Real rules: a literal ``shell:`` is read as a literal call of Snakemake's shell() and
    its job's command formatted as shell() would (the rule module's globals, the job's
    plain file lists); an f-string is an expression; a ``run:`` rule has no command."""
    from snakemake_executor_plugin_dask_slurm.dispatch import direct_command
    from snakemake_executor_plugin_dask_slurm.snakemake_internals import shell as internal

    text = (
        'G = "global"\nN = 2\n'
        'rule all:\n    input: "out/1.txt", "f.txt", "r.txt"\n'
        'rule thin:\n    input: "src/0.txt"\n    output: "out/{i}.txt"\n'
        '    shell: "echo {wildcards.i} {G} {input:q} {threads} > {output}"\n'
        'rule f:\n    output: "f.txt"\n    shell: f"echo {N} > {{output}}"\n'
        'rule r:\n    output: "r.txt"\n    run:\n        pass\n'
    )
    dag = dag_of(text, ["src/0.txt"], "direct")
    jobs = {job.rule.name: job for job in dag.jobs}
    assert internal.shell_rule_readable()
    code = internal.rule_code(jobs["thin"].rule)
    assert code is not None and code.calls_snakemake_shell
    assert code.arguments >= {"input", "output", "wildcards", "threads"}
    assert ("LOAD_GLOBAL", "shell") in code.instructions
    assert direct_command.literal_shell_rule(jobs["thin"].rule) is None
    assert internal.shell_command(jobs["thin"]) == "echo 1 global src/0.txt 1 > out/1.txt"
    assert direct_command.literal_shell_rule(jobs["f"].rule) == "shell: is an expression"
    assert direct_command.literal_shell_rule(jobs["r"].rule) == "no rule function"


def test_on_a_snakemake_the_reading_was_not_written_for_no_rule_goes_direct(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from snakemake_executor_plugin_dask_slurm.dispatch import direct_command

    monkeypatch.setattr(direct_command, "shell_rule_readable", lambda: False)
    assert direct_command.literal_shell_rule(object()) == (
        "this Snakemake's shell: rules are not the ones the direct way reads"
    )


def test_the_shell_rule_guard_checks_the_rule_function_and_what_run_wrapper_passes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SHELL_RULE fails where the direct way's formatting would read what is not there:
    ``Rule.run_func``, or an argument run_wrapper no longer passes (RUN_WRAPPER_LOCALS)."""
    from snakemake.rules import Rule

    from snakemake_executor_plugin_dask_slurm.snakemake_internals import shell

    assert shell.SHELL_RULE.matches()
    monkeypatch.setattr(shell, "RUN_WRAPPER_LOCALS", shell.RUN_WRAPPER_LOCALS | {"gone"})
    assert not shell.SHELL_RULE.matches()
    monkeypatch.undo()

    def init(self: object, *args: object) -> None:
        self.renamed = None  # type: ignore[attr-defined]

    monkeypatch.setattr(Rule, "__init__", init)
    assert not shell.SHELL_RULE.matches()


class FakeWorkflowApi:
    """What the warm parse reads and writes of a ``WorkflowApi``."""

    def __init__(self) -> None:
        self._workflow_store: Any = None
        self.storage_settings = "per-job storage"
        self.snakemake_api = type("Api", (), {"logger_manager": "lm", "output_settings": "os"})


def test_a_job_process_adopts_the_primed_workflow_with_its_own_per_run_parts() -> None:
    from snakemake_executor_plugin_dask_slurm.snakemake_internals import cli

    api, workflow = FakeWorkflowApi(), type("Workflow", (), {})()
    assert not cli.stored(api)
    assert cli.workflow_missing(workflow) == list(cli.WORKFLOW_ATTRIBUTES)
    cli.adopt(api, workflow)
    assert cli.stored(api) and api._workflow_store is workflow
    assert cli.workflow_missing(workflow) == []
    assert (workflow.logger_manager, workflow.output_settings) == ("lm", "os")
    assert workflow.storage_settings == "per-job storage"
    workflow._async_runners = {"r": type("Runner", (), {"close": lambda self: None})()}
    cli.quiesce(workflow)  # what a fork must not copy is ended
    assert workflow._async_runners == {}
    assert not Path(workflow._snakemake_tmp_dir.name).exists()
    cli.forget(api)
    assert not cli.stored(api)


def test_the_warm_parse_hooks_are_snakemakes_functions_replaced_and_read_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import snakemake.cli
    from snakemake.api import WorkflowApi

    from snakemake_executor_plugin_dask_slurm.snakemake_internals import cli

    parser_fn, prop = cli.originals()
    assert parser_fn is snakemake.cli.get_argument_parser
    assert prop is vars(WorkflowApi)["_workflow"]
    monkeypatch.setattr(snakemake.cli, "get_argument_parser", parser_fn)
    monkeypatch.setattr(WorkflowApi, "_workflow", prop)

    def parser(profiles: Any = None) -> str:
        return "parser"

    def workflow(api: Any) -> str:
        return "workflow"

    cli.hook_parse(parser, workflow)
    assert snakemake.cli.get_argument_parser() == "parser"
    assert vars(WorkflowApi)["_workflow"].fget is workflow
    nargs = cli.option_nargs(parser_fn(), ("--target-jobs", "--attempt", "--no-such-flag"))
    assert nargs == {"--target-jobs": "+", "--attempt": None}
    assert cli.main_path().endswith("snakemake/__main__.py")


def test_the_public_api_through_the_room() -> None:
    import snakemake
    from snakemake.exceptions import SpawnedJobError
    from snakemake.logging import logger

    from snakemake_executor_plugin_dask_slurm.snakemake_internals import cli, local_executor
    from snakemake_executor_plugin_dask_slurm.snakemake_internals import script as scripts
    from snakemake_executor_plugin_dask_slurm.snakemake_internals import shell as shells

    assert isinstance(local_executor.spawned_job_error(), SpawnedJobError)
    assert scripts.pip_deployments_path() == snakemake.PIP_DEPLOYMENTS_PATH
    assert Path(cli.package_dir(), "__init__.py").samefile(snakemake.__file__)
    assert cli.version() == snakemake.__version__
    (spec,) = cli.parse_target_jobs(["r:i=1"])
    assert (spec.rulename, dict(spec.wildcards_dict)) == ("r", {"i": "1"})
    handler, level = Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        shells.log_info("an info line")
        local_executor.log_debug("a debug line")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert [message for message, _ in handler.seen] == ["an info line", "a debug line"]


def test_each_case_the_warm_path_cannot_run_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """``NotWarmable.why`` for each refusal of warm/snakemake_side.py; its detail (what
    the zygote and the primed server send, after the reason's text) says what of the case
    the reason does not: the names missing, Snakemake's version; never the reason again."""
    from snakemake_executor_plugin_dask_slurm.warm import snakemake_side
    from snakemake_executor_plugin_dask_slurm.warm.snakemake_side import NotWarmable
    from snakemake_executor_plugin_dask_slurm.worker.wire import Cold, Why

    internal = snakemake_side.internal_cli
    monkeypatch.setattr(snakemake_side, "_state", snakemake_side._State())  # none left behind

    def refusal(call: Any, *args: Any) -> NotWarmable:
        with pytest.raises(NotWarmable) as caught:
            call(*args)
        return caught.value

    version = internal.version()
    monkeypatch.setattr(internal, "missing", lambda: ["cli.main"])
    e = refusal(snakemake_side.check_internals)
    assert e.why is Why.INTERNALS_CHANGED and e.detail == f"Snakemake {version}, missing: cli.main"
    assert (
        str(Cold(e.why, e.detail))
        == str(e)
        == (
            "this Snakemake's internals differ from those the warm path knows "
            f"(Snakemake {version}, missing: cli.main)"
        )
    )
    monkeypatch.setattr(internal, "missing", lambda: [])
    monkeypatch.setattr(internal, "originals", lambda: ((lambda *a: None), None))
    monkeypatch.setattr(internal, "option_nargs", lambda parser, flags: {})
    monkeypatch.setattr(internal, "preload", lambda: None)
    e = refusal(snakemake_side.load)
    assert e.why is Why.INTERNALS_CHANGED
    assert e.detail.startswith(f"Snakemake {version}, its command line has no --target-jobs")
    monkeypatch.setattr(snakemake_side._state, "original_parser", lambda *a: None)
    for ending, sentence in (
        (SystemExit(1), "Snakemake exited with 1 before it was parsed"),
        (None, "Snakemake returned without parsing it"),
    ):

        def run_main(argv: Any, ending: Any = ending) -> None:
            if ending is not None:
                raise ending

        monkeypatch.setattr(internal, "run_main", run_main)
        e = refusal(snakemake_side.prime, ["--snakefile", "S"])
        assert e.why is Why.PARSE_FAILED and e.detail == sentence
    workflow = type("Workflow", (), {})()
    e = refusal(snakemake_side._check_parsed, workflow)
    assert e.why is Why.INTERNALS_CHANGED and "_async_lock" in e.detail
    assert e.detail.startswith(f"Snakemake {version}, its parsed workflow has no ")
    for name in internal.WORKFLOW_ATTRIBUTES:
        setattr(workflow, name, None)
    workflow.sourcecache = type("Cache", (), {"runtime_cache": object()})()
    e = refusal(snakemake_side._check_parsed, workflow)
    assert e.why is Why.NO_SOURCE_CACHE and "--runtime-source-cache-path" in e.detail
    workflow.sourcecache.runtime_cache = None
    snakemake_side._check_parsed(workflow)


def test_the_shell_rule_reading_matches_whatever_snakemake_imported_before() -> None:
    """Read first in a process that imported only ``snakemake.shell`` (``snakemake.workflow``
    imported alone is an import cycle): it matches, and is not cached as a mismatch."""
    import subprocess
    import sys

    probe = (
        "import snakemake.shell;"
        "from snakemake_executor_plugin_dask_slurm.snakemake_internals import shell;"
        "print(shell.shell_rule_readable())"
    )
    argv = [sys.executable, "-c", probe]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "True", done.stdout + done.stderr
