"""The usage report from hand-made rows: suggestions, per-rule figures, the allocation's
arithmetic, the files, and the profile read back by Snakemake's own loader."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from snakemake_executor_plugin_dask_slurm.report.usage import (
    Attempt,
    Ended,
    Handover,
    RunFacts,
    UsageCollector,
    WorkerSpan,
)
from snakemake_executor_plugin_dask_slurm.report.usage.aggregate import (
    allocation,
    percentile,
    rule_stats,
)
from snakemake_executor_plugin_dask_slurm.report.usage.collect import (
    classify,
    handover_from_job,
)
from snakemake_executor_plugin_dask_slurm.report.usage.over_time import integrate
from snakemake_executor_plugin_dask_slurm.report.usage.rows import Way
from snakemake_executor_plugin_dask_slurm.report.usage.suggest import (
    round_mem_mb,
    round_runtime,
    suggest_mem_mb,
    suggest_runtime,
    suggest_threads,
    threads_for,
)
from snakemake_executor_plugin_dask_slurm.report.usage.words import GROUP_WHY, offender_line
from snakemake_executor_plugin_dask_slurm.report.usage.write import (
    JOBS_COLUMNS,
    RULES_COLUMNS,
    jobs_tsv,
    profile_yaml,
    rules_tsv,
)
from snakemake_executor_plugin_dask_slurm.worker.wire import Usage
from tests.fakes import FakeGroupJob


def row(
    rule: str = "r",
    outcome: str = "done",
    threads: int = 1,
    wall: float | None = 1.0,
    cpu: float | None = 1.0,
    rss: float | None = 100.0,
    mem_mb: float | None = None,
    runtime: float | None = None,
    started: float | None = 0.0,
    worker: str = "w1",
    jobid: int = 1,
) -> Attempt:
    return Attempt(
        key=f"{rule}-{jobid}", rule=rule, jobid=jobid, attempt=1, rerun=0, way="direct",
        wildcards="", group=False, threads=threads, mem_mb=mem_mb, runtime_min=runtime,
        handed_over=0.0, outcome=outcome,  # type: ignore[arg-type]
        detail="", host="n1", worker=worker, started=None if wall is None else started,
        wall=wall, cpu=cpu, max_rss_mb=rss,
    )  # fmt: skip


# -- rounding and suggestions -------------------------------------------------------


@pytest.mark.parametrize(
    ("mb", "rounded"),
    [(1, 50), (49.9, 50), (240, 250), (250, 250), (999, 1000), (1000.1, 1500), (3600, 4000),
     (10_001, 11_000)],
)  # fmt: skip
def test_memory_rounds_up_to_steps(mb: float, rounded: int) -> None:
    assert round_mem_mb(mb) == rounded


@pytest.mark.parametrize(
    ("minutes", "rounded"), [(0.01, 1), (1.2, 2), (59.5, 60), (61, 65), (599, 600), (601, 630)]
)
def test_runtime_rounds_up_to_steps(minutes: float, rounded: int) -> None:
    assert round_runtime(minutes) == rounded


@pytest.mark.parametrize(
    ("cores", "threads"), [(0.1, 1), (1.0, 1), (1.05, 1), (1.3, 2), (1.9, 2), (2.04, 2), (2.2, 3)]
)
def test_threads_round_up_with_5_percent_tolerance(cores: float, threads: int) -> None:
    assert threads_for(cores) == threads


@pytest.mark.parametrize(
    ("asked", "efficiency", "p90", "suggested", "says"),
    [
        (8, 0.16, 1.3, 2, "8 asked, 1.30 cores used at p90 (16% CPU efficiency) -> 2"),
        (4, 0.9, 3.7, 4, "keep"),  # efficient enough
        (4, 0.85, 4.1, 4, "keep"),  # at the tolerance
        (2, 1.5, 3.0, 3, "MORE than asked"),  # ignores its threads
        (1, 0.1, 0.1, 1, "-> 1"),  # one thread is the least
        (4, None, None, None, "no succeeded job"),
    ],
)
def test_threads_suggestion(
    asked: int, efficiency: float | None, p90: float | None, suggested: int | None, says: str
) -> None:
    value, note = suggest_threads(asked, efficiency, p90)
    assert value == suggested and says in note


@pytest.mark.parametrize(
    ("asked", "peak", "suggested", "says"),
    [
        (16000, 1200, 1500, "16,000 asked, 1,200 MB peak -> 1500"),
        (None, 200, 250, "none asked"),
        (1000, 800, 1000, "keep"),  # 80 % used
        (1000, 1100, 1500, "MORE than asked"),
        (1000, None, None, "no attempt measured"),
    ],
)
def test_memory_suggestion(
    asked: float | None, peak: float | None, suggested: int | None, says: str
) -> None:
    value, note = suggest_mem_mb(asked, peak)
    assert value == suggested and says in note


@pytest.mark.parametrize(
    ("asked", "longest", "suggested", "says"),
    [
        (60, 160, 4, "60 min asked, longest job 2.7 min -> 4 min"),
        (None, 0.02, 1, "none asked, longest job 20 ms"),
        (10, 500, 10, "keep"),
        (10, 700, 14, "LONGER than asked"),
    ],
)
def test_runtime_suggestion(asked: float | None, longest: float, suggested: int, says: str) -> None:
    value, note = suggest_runtime(asked, longest)
    assert value == suggested and says in note


# -- per rule -------------------------------------------------------------------------


def test_a_rule_burning_two_cpus_with_four_threads_is_half_efficient_and_gets_two() -> None:
    rows = [row("burn", threads=4, wall=1.0, cpu=2.0, jobid=i) for i in range(3)]
    (s,) = rule_stats(rows)
    assert s.cpu_efficiency == pytest.approx(0.5) and s.cores_mean == pytest.approx(2.0)
    assert s.suggestion.threads == 2 and "threads" in s.suggestion.changed
    assert s.unused_s == pytest.approx(6.0)  # 3 jobs x (4 reserved - 2 used) x 1 s


def test_failed_lost_and_unstarted_attempts_count_but_only_done_ones_size_time_and_cores() -> None:
    rows = [
        row("r", jobid=1, wall=2.0, cpu=2.0, rss=100),
        row("r", "failed", jobid=2, wall=50.0, cpu=1.0, rss=900),  # e.g. ran out of memory
        row("r", "lost", jobid=3, wall=None, cpu=None, rss=None),
        row("r", "not-started", jobid=4, wall=None, cpu=None, rss=None),
        row("r", "stopped", jobid=5, wall=30.0, cpu=30.0, rss=50),
    ]
    (s,) = rule_stats(rows)
    assert (s.attempts, s.done, s.failed, s.lost, s.not_started, s.stopped) == (5, 1, 1, 1, 1, 1)
    assert s.wall_max == 2.0 and s.cores_mean == 1.0  # the succeeded job only
    assert s.rss_max_mb == 900  # a failed attempt's peak shows what it wanted
    assert s.suggestion.mem_mb == round_mem_mb(1.2 * 900)
    assert s.cpu_s == pytest.approx(33.0) and s.reserved_s == pytest.approx(82.0)


def test_a_rule_with_no_succeeded_job_gets_no_thread_or_runtime_suggestion() -> None:
    (s,) = rule_stats([row("r", "failed", wall=3.0, cpu=3.0, rss=300)])
    assert s.suggestion.threads is None and s.suggestion.runtime is None
    assert s.suggestion.mem_mb == 400 and s.cpu_efficiency is None


def test_jobs_without_requests_are_counted_and_still_get_a_suggestion() -> None:
    rows = [row("r", jobid=i, mem_mb=None, runtime=None, rss=200, wall=90) for i in range(4)]
    (s,) = rule_stats(rows)
    assert s.mem_mb is None and s.jobs_without_mem == 4 and s.runtime_min is None
    assert (s.suggestion.mem_mb, s.suggestion.runtime) == (250, 2)
    assert set(s.suggestion.changed) == {"mem_mb", "runtime"}


def test_rules_whose_jobs_vary_widely_are_flagged() -> None:
    walls = [1, 1, 1, 1, 30]
    rss = [100, 100, 100, 100, 500]
    rows = [
        row("v", jobid=i, wall=w, cpu=w, rss=m)
        for i, (w, m) in enumerate(zip(walls, rss, strict=True))
    ]
    rows += [row("steady", jobid=i + 10, wall=5, cpu=5) for i in range(5)]
    by_rule = {s.rule: s for s in rule_stats(rows)}
    assert by_rule["v"].varies == ("wall time", "memory")
    assert by_rule["steady"].varies == ()


def test_rules_whose_jobs_asked_differently_say_so() -> None:
    rows = [row("r", jobid=1, threads=2, mem_mb=1000), row("r", jobid=2, threads=4, mem_mb=2000)]
    (s,) = rule_stats(rows)
    assert s.asked_differently == ("threads", "mem_mb") and s.mem_mb == 2000


def test_rules_are_ordered_by_cpu_reserved_and_unused() -> None:
    rows = [row("small", threads=2, cpu=1.0), row("big", threads=8, wall=10, cpu=10, jobid=2)]
    assert [s.rule for s in rule_stats(rows)] == ["big", "small"]


def test_percentile_interpolates_like_numpy() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)
    assert percentile([5.0], 95) == 5.0


# -- the allocation -------------------------------------------------------------------


def test_allocation_granted_reserved_used_per_node_per_worker_job_and_the_tail() -> None:
    run = RunFacts(started=0.0, ended=100.0, mode="srun", allocation="5")
    workers = [
        WorkerSpan("n1", "n1", 4, joined=0.0, slurm_job="5"),
        WorkerSpan("j77-n2", "n2", 2, joined=10.0, left=20.0, slurm_job="77"),
    ]
    rows = [
        row("a", threads=2, wall=50.0, cpu=50.0, started=0.0, worker="n1", jobid=1),
        row("b", threads=2, wall=10.0, cpu=5.0, started=10.0, worker="j77-n2", jobid=2),
    ]
    alloc = allocation(rows, workers, run)
    o = alloc.overall
    assert (o.granted_s, o.reserved_s, o.used_s, o.cpus) == (420.0, 120.0, 55.0, 6.0)
    assert o.efficiency == pytest.approx(55 / 420) and o.occupancy == pytest.approx(120 / 420)
    assert [(u.label, u.granted_s, u.used_s) for u in alloc.by_node] == [
        ("n1", 400.0, 50.0),
        ("n2", 20.0, 5.0),
    ]
    assert [u.label for u in alloc.by_worker_job] == ["allocation 5", "worker job 77"]
    # The last job started at 10 s, the last ended at 50 s: 40 s waiting on it; granted
    # then: 4 x 40 + 2 x 10 = 180 CPU-s, reserved 2 x 40 + 2 x 10 = 100.
    assert (alloc.head_s, alloc.tail_s, alloc.tail_idle_s) == (0.0, 40.0, 80.0)


def test_a_worker_nobody_announced_is_sized_by_what_it_ran() -> None:
    collector = UsageCollector(clock=lambda: 0.0)
    for i, (start, threads) in enumerate([(0.0, 2), (1.0, 3), (5.0, 1)]):
        key = f"k{i}"
        collector.handed_over(Handover(key, "r", i, 1, "direct", threads, None, None, 0.0))
        usage = Usage("h", "w9", "", start, 3.0, 1.0, 1024)
        collector.ended(key, Ended(True, usage))
    (span,) = collector.workers()
    assert (span.name, span.cpus, span.joined, span.left, span.estimated) == (
        "w9",
        5,
        0.0,
        8.0,
        True,
    )


def test_integrate_averages_rates_over_bins_exactly() -> None:
    assert integrate([(0, 10, 1), (5, 15, 2)], 0, 5, 4) == [1.0, 3.0, 2.0, 0.0]
    assert integrate([(2.5, 7.5, 1.0)], 0, 5, 2) == [0.5, 0.5]
    assert integrate([(1e9 + 2.5, 1e9 + 7.5, 1.0)], 1e9, 5, 2) == [0.5, 0.5]  # epoch seconds
    assert integrate([(-5, 100, 1.0)], 0, 5, 2) == [1.0, 1.0]  # clipped to the range
    assert integrate([], 0, 1, 2) == [0.0, 0.0]


# -- how each attempt ended ---------------------------------------------------------


USAGE = Usage("n1", "w1", "5", 10.0, 2.0, 1.5, 2048)
OK = Ended(True, USAGE)
EXIT_3 = Ended(False, returncode=3)
NO_SHELL = Ended(False, returncode=-1, start_error="FileNotFoundError: x")
LOST = Ended(False, problem="its Dask worker w1 died", lost_on="w1")
TERM = Ended(False, USAGE, returncode=-15)
CANCELLED = Ended(False, problem="its Dask task was cancelled")
KILLED = Ended(False, USAGE, returncode=-9)
FAILED_WHILE_STOPPING = Ended(False, USAGE, returncode=2, stop="landing")


@pytest.mark.parametrize(
    ("finished", "stop", "lost", "outcome", "detail"),
    [
        (OK, None, None, "done", "exit 0"),
        (EXIT_3, None, None, "failed", "exited with code 3"),
        (NO_SHELL, None, None, "failed", "could not be started: FileNotFoundError: x"),
        (LOST, None, None, "lost", "its worker w1 died"),
        (TERM, "landing", None, "stopped", "landing"),  # ran, and the run stopped it
        (CANCELLED, "landing", None, "not-started", "landing"),  # never ran
        (KILLED, None, "its worker job ended", "lost", "its worker job ended"),  # run again
        (FAILED_WHILE_STOPPING, None, None, "failed", "exited with code 2"),  # by itself
        (None, None, None, "not-started", "no outcome came back"),
        (None, "Ctrl-C", None, "stopped", "Ctrl-C"),
    ],
)
def test_classify(
    finished: Ended | None, stop: str | None, lost: str | None, outcome: str, detail: str
) -> None:
    assert classify(finished, stop, lost) == (outcome, detail)


# -- the collector and its files ------------------------------------------------------


def fed_collector() -> tuple[UsageCollector, RunFacts]:
    """burn: 2 of 4 threads; hold: 200 MiB (209.7 MB) of 16,000 MB; flaky: a failure, a
    lost job run again, one not started."""
    c = UsageCollector(clock=lambda: 50.0)
    c.worker_joined("n1", "n1", 8, 32000, "5", at=0.0)

    def job(
        key: str, rule: str, threads: int, mem: float | None, usage: Usage | None, ok: bool = True
    ) -> None:
        c.handed_over(
            Handover(
                key, rule, int(key.split("-")[1]), 1, "direct", threads, mem, None, 1.0, f"i={key}"
            )
        )
        if usage is not None:
            c.ended(key, Ended(ok, usage, returncode=None if ok else 1))

    for i in range(3):
        job(f"burn-{i}", "burn", 4, None, Usage("n1", "n1", "5", 2.0 + i, 1.0, 2.0, 20 << 10))
    job("hold-9", "hold", 1, 16000, Usage("n1", "n1", "5", 2.0, 1.0, 0.9, 200 << 10))
    job("flaky-20", "flaky", 1, None, Usage("n1", "n1", "5", 3.0, 1.0, 1.0, 10 << 10), ok=False)
    job("flaky-21", "flaky", 1, None, None)
    c.ended("flaky-21", Ended(False, problem="died", lost_on="n1"))
    c.rerun("flaky-21", "flaky-21-r1")
    c.ended("flaky-21-r1", Ended(True, Usage("n1", "n1", "5", 6.0, 1.0, 1.0, 10 << 10)))
    job("flaky-22", "flaky", 1, None, None)
    c.stopping(["flaky-22"], "the run is landing")
    c.ended("flaky-22", Ended(False, problem="its Dask task was cancelled"))
    return c, RunFacts(0.0, 50.0, "srun", "5")


def test_jobs_tsv_has_one_row_per_attempt_including_failed_lost_and_rerun() -> None:
    c, _ = fed_collector()
    attempts = c.attempts()
    lines = jobs_tsv(attempts).splitlines()
    assert lines[0].split("\t") == list(JOBS_COLUMNS)
    cells = [dict(zip(JOBS_COLUMNS, line.split("\t"), strict=True)) for line in lines[1:]]
    flaky = sorted((r["key"], r["outcome"], r["rerun"]) for r in cells if r["rule"] == "flaky")
    assert flaky == [
        ("flaky-20", "failed", "0"),
        ("flaky-21", "lost", "0"),
        ("flaky-21-r1", "done", "1"),
        ("flaky-22", "not-started", "0"),
    ]
    hold = next(r for r in cells if r["rule"] == "hold")
    # The kernel's 200 MiB in MB, the unit of mem_mb beside it.
    assert (hold["max_rss_mb"], hold["mem_mb"], hold["wall_s"], hold["wait_s"]) == (
        "209.715", "16000", "1.000000", "1.000000",
    )  # fmt: skip
    assert len(cells) == 8


def test_rules_tsv_and_the_closing_lines(tmp_path: Path) -> None:
    c, run = fed_collector()
    stats = rule_stats(c.attempts())
    table = rules_tsv(stats).splitlines()
    assert table[0].split("\t") == list(RULES_COLUMNS) and len(table) == 4
    lines = c.write(tmp_path, run, page=False)
    assert "8 job attempt(s): 5 done, 1 failed, 1 lost, 1 not-started" in lines[0]
    burn = "usage: rule burn: asks 4 threads, uses 2.0 on average -> threads: 2; asks no mem_mb"
    assert any(line.startswith(burn) for line in lines), lines
    # 1.2 x 209.7 MB is 251.7 MB: 300 (read as MB, 200 MiB would have given 250, short of
    # the 1.2x headroom in Snakemake's unit).
    assert "usage: rule hold: asks mem_mb 16,000, peak 210 MB -> mem_mb: 300" in lines
    assert lines[-1].startswith(f"usage report: {tmp_path / 'rules.tsv'};")
    assert sorted(os.listdir(tmp_path)) == ["jobs.tsv", "rules.tsv", "suggested-profile.yaml"]


def test_the_suggested_profile_is_read_back_by_snakemakes_own_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from snakemake.cli import parse_args

    c, run = fed_collector()
    rows = c.attempts()
    # A rule whose jobs asked different memory: its mem_mb is left commented out.
    rows += [
        rows[0]._replace(key="x1", rule="sized", mem_mb=m, jobid=40 + i)
        for i, m in enumerate((100, 900))
    ]
    path = tmp_path / "suggested-profile.yaml"
    path.write_text(profile_yaml(rule_stats(rows), run, len(rows)))
    assert yaml.safe_load(path.read_text())["set-resources"]["sized"] == {"runtime": 1}
    monkeypatch.chdir(tmp_path)
    _, args = parse_args(["--profile", str(path)])
    threads = {rule: r.value for rule, r in args.set_threads.items()}
    assert threads == {"burn": 2, "flaky": 1, "hold": 1, "sized": 2}
    resources = {rule: {n: r.value for n, r in v.items()} for rule, v in args.set_resources.items()}
    assert resources == {
        "burn": {"mem_mb": 50, "runtime": 1},
        "flaky": {"mem_mb": 50, "runtime": 1},
        "hold": {"mem_mb": 300, "runtime": 1},
        "sized": {"runtime": 1},
    }
    assert "#     mem_mb:" not in path.read_text() and "    # mem_mb: 50" in path.read_text()


def test_each_run_writes_its_own_directory_and_latest_points_at_the_newest(tmp_path: Path) -> None:
    c, run = fed_collector()
    c.write_run(tmp_path, "aaaa1111", run, page=False)
    lines = c.write_run(tmp_path, "bbbb2222", replace(run, started=run.started + 60), page=False)
    runs = sorted(p.name for p in tmp_path.iterdir() if p.name != "latest")
    assert [name[-8:] for name in runs] == ["aaaa1111", "bbbb2222"]
    assert os.readlink(tmp_path / "latest") == runs[1]
    assert (tmp_path / "latest" / "jobs.tsv").is_file() and runs[1] in lines[-1]


def test_a_report_that_cannot_be_written_is_one_line_not_an_error(tmp_path: Path) -> None:
    c, run = fed_collector()
    blocked = tmp_path / "file"
    blocked.write_text("")
    (line,) = c.write_run(blocked, "t", run, page=False)
    assert line.startswith(f"the usage report could not be written to {blocked}/")


@pytest.mark.parametrize(
    ("asked", "peak", "at_most", "suggested", "says"),
    [
        (None, None, 68, 100, "none asked, peak at most 68 MB (below its worker's own"),
        (16000, None, 68, 100, "-> 100"),  # far below what it asks: ask less
        (50, None, 68, 50, "keep"),  # may well fit: no reason to ask more
        (None, 300, 68, 400, "300 MB peak"),  # an exact peak above the bound decides
    ],
)
def test_memory_suggestion_from_jobs_below_their_workers_peak(
    asked: float | None, peak: float | None, at_most: float, suggested: int, says: str
) -> None:
    value, note = suggest_mem_mb(asked, peak, at_most)
    assert value == suggested and says in note


def test_a_job_below_its_workers_peak_is_an_at_most_row() -> None:
    c = UsageCollector()
    for key, rss_kb in (("small", 3 << 10), ("big", 900 << 10)):
        c.handed_over(Handover(key, key, 1, 1, "direct", 1, None, None, 0.0))
        # the kernel reports max(the worker's peak, the job's): 70 MiB for the small one
        usage = Usage("n1", "w1", "", 1.0, 1.0, 0.5, max(rss_kb, 70 << 10), 70 << 10)
        c.ended(key, Ended(True, usage))
    rows = {a.key: a for a in c.attempts()}
    # In MB (10^6 bytes), Snakemake's mem_mb unit: 70 MiB is 73.4 MB, 900 MiB 943.7 MB.
    assert (rows["small"].max_rss_mb, rows["small"].rss_at_most_mb) == (None, 73.40032)
    assert (rows["big"].max_rss_mb, rows["big"].rss_at_most_mb) == (943.7184, None)
    small = next(s for s in rule_stats(rows.values()) if s.rule == "small")
    assert (small.rss_max_mb, small.rss_at_most_mb, small.peak_mb) == (None, 73.40032, 73.40032)


def test_a_group_job_is_told_as_one_with_its_members_rules_and_left_out_of_the_profile() -> None:
    """A group job is one task: its figures are the group's (CPU summed over its members,
    its largest process's peak), none one member rule's. The line at the end says what the
    group as a whole would need and which rules to change; the profile names it, why it
    is not there, and has no entry for it or, on its figures, for its members' rules."""
    job = FakeGroupJob("grp", rules=["b", "a", "b"], threads=8, resources={"mem_mb": 4000})
    c = UsageCollector()
    h = handover_from_job(job, "grp-1", "warm", 0.0)
    assert (h.rule, h.group, h.members) == ("group grp", True, ("a", "b"))
    c.handed_over(h)
    c.ended("grp-1", Ended(True, Usage("n1", "w1", "", 1.0, 100.0, 100.0, 300 << 10)))
    (s,) = rule_stats(c.attempts())
    assert s.members == ("a", "b")
    assert offender_line(s) == (
        "group job grp (rules a, b): asks 8 threads, uses 1.0 on average -> 1 for the whole "
        f"group; asks mem_mb 4,000, peak 315 MB -> 400 for the whole group; {GROUP_WHY}"
    )
    text = profile_yaml([s], RunFacts(0.0, 200.0, "local", ""), 1)
    assert "# Not here: group job grp (rules a, b). A group job is measured as one task" in text
    assert yaml.safe_load(text) == {"set-threads": None, "set-resources": None}


@pytest.mark.parametrize(
    ("built", "cold", "way"),
    [
        ("direct", False, "direct"),
        ("warm", False, "warm"),
        ("warm", True, "cold"),  # its worker ran it cold after all
        ("cold", True, "cold"),
        ("cold", None, "cold"),  # no outcome came back: as it was built
        ("warm", None, "warm"),
    ],
)
def test_an_attempts_way_is_as_it_was_built_or_cold_as_its_worker_says(
    built: Way, cold: bool | None, way: str
) -> None:
    collector = UsageCollector(clock=lambda: 10.0)
    collector.handed_over(Handover("k", "r", 1, 1, built, 1, None, None, 0.0))
    if cold is not None:
        collector.ended("k", Ended(True, cold=cold))
    (attempt,) = collector.attempts()
    assert attempt.way == way


def test_a_rules_ways_are_named_in_the_order_direct_warm_cold() -> None:
    rows = [row(jobid=i)._replace(way=w) for i, w in enumerate(["cold", "direct", "warm"])]
    (stats,) = rule_stats(rows)
    assert stats.ways == "direct+warm+cold"
