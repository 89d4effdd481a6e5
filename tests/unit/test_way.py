"""The main side's way of a job (dispatch/way.py): one pure decision, as a table; and the
builder's prime request, which asks the same question."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from snakemake_executor_plugin_dask_slurm.dispatch import job_commands
from snakemake_executor_plugin_dask_slurm.dispatch.direct_way import NotDirect
from snakemake_executor_plugin_dask_slurm.dispatch.general_command import parsed
from snakemake_executor_plugin_dask_slurm.dispatch.group_runner import MODULE as GROUP_RUNNER
from snakemake_executor_plugin_dask_slurm.dispatch.job_commands import JobCommandBuilder
from snakemake_executor_plugin_dask_slurm.dispatch.way import (
    DIRECT,
    Cold,
    Direct,
    DirectDraft,
    Facts,
    Warm,
    decide,
    not_direct,
    way_name,
)
from snakemake_executor_plugin_dask_slurm.warm.command import parse_job_command
from snakemake_executor_plugin_dask_slurm.worker.wire import Why

SNAKEMAKE = parse_job_command("/py -m snakemake --cores 1")
GROUP = parse_job_command(f"/py -m {GROUP_RUNNER} --cores 1")
SHELLY = parsed("/py -m snakemake --cores 1 | tee x")
PIP = parse_job_command("/py -m pip install x")
TMPDIR = (NotDirect.TMPDIR_PLACEHOLDER,)
SHADOW = (NotDirect.SHADOW, NotDirect.BENCHMARK)


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        # the direct way: both settings' defaults, nothing in the rule or the job against it
        (Facts(True, True), DIRECT),
        (Facts(True, False), DIRECT),
        # not direct, then warm: why not direct is kept
        (Facts(True, True, rule=SHADOW, command=SNAKEMAKE), Warm(SNAKEMAKE, SHADOW)),
        (Facts(True, True, job=TMPDIR, command=SNAKEMAKE), Warm(SNAKEMAKE, TMPDIR)),
        (
            Facts(False, True, rule=SHADOW, command=SNAKEMAKE),
            Warm(SNAKEMAKE, (NotDirect.TURNED_OFF,)),
        ),
        (
            Facts(True, True, group=True, job=TMPDIR, command=GROUP),
            Warm(GROUP, (NotDirect.GROUP,)),
        ),
        (
            Facts(True, True, rule=(NotDirect.NOT_LITERAL,), command=SNAKEMAKE),
            Warm(SNAKEMAKE, (NotDirect.NOT_LITERAL,)),
        ),
        # not direct, then cold: the first reason in the order warm-off, deployment, command
        (Facts(True, False, rule=SHADOW, deployment="conda:", command=SHELLY), Cold(Why.WARM_OFF)),
        (Facts(False, False), Cold(Why.WARM_OFF)),
        (
            Facts(True, True, rule=SHADOW, deployment="conda:", command=SHELLY),
            Cold(Why.DEPLOYMENT, "conda:"),
        ),
        (
            Facts(True, True, rule=SHADOW, command=SHELLY),
            Cold(Why.NEEDS_SHELL, "'|' outside quotes"),
        ),
        (Facts(True, True, group=True, command=PIP), Cold(Why.NOT_SNAKEMAKE, "pip")),
    ],
)
def test_the_way_of_a_job(facts: Facts, expected: Direct | Warm | Cold) -> None:
    assert decide(facts) == expected


def test_the_direct_ways_reasons_come_first_from_the_settings_then_the_rule_then_the_job() -> None:
    assert not_direct(Facts(False, True, group=True, rule=SHADOW)) == (NotDirect.TURNED_OFF,)
    assert not_direct(Facts(True, True, group=True, rule=SHADOW)) == (NotDirect.GROUP,)
    assert not_direct(Facts(True, True, rule=SHADOW, job=TMPDIR)) == SHADOW + TMPDIR
    assert not_direct(Facts(True, True)) == ()


def test_a_job_that_cannot_go_the_direct_way_needs_its_command_read() -> None:
    with pytest.raises(ValueError, match="job command"):
        decide(Facts(True, True, rule=SHADOW))


def test_the_ways_names_are_the_usage_reports() -> None:
    assert [way_name(w) for w in (DIRECT, Warm(SNAKEMAKE, SHADOW), Cold(Why.WARM_OFF))] == [
        "direct",
        "warm",
        "cold",
    ]


# -- the prime request: the same decision as the build ---------------------------------


def job(rule: str, group: str | None = None, local: bool = False) -> Any:
    return SimpleNamespace(
        rule=SimpleNamespace(name=rule), name=rule, rules=[rule], group=group, is_local=local,
        is_group=lambda: False, priority=0, attempt=1, threads=1,
        logfile_suggestion=lambda root: f"{root}{rule}.log",
    )  # fmt: skip


def builder(
    monkeypatch: pytest.MonkeyPatch,
    rule_not: dict[str, tuple[NotDirect, ...]],
    job_not: dict[str, tuple[NotDirect, ...]],
    deployment: dict[str, str] | None = None,
    warm: bool = True,
) -> JobCommandBuilder:
    """A builder whose facts are read from the tables (rules not in ``job_not`` go the
    direct way when their rule allows it)."""
    monkeypatch.setattr(job_commands, "target_spec_survives", lambda job: None)
    made = JobCommandBuilder(
        workflow=None, workdir="/w", log_root="/w/logs/jobs/", base_env={"A": "1"},
        direct_shell=True, format_job_exec=lambda j: f"/py -m snakemake --target-jobs {j.name}",
        run_async=lambda c: None, warm=warm,
    )  # fmt: skip
    draft = DirectDraft(("bash", "-c", "true"), None, None)
    monkeypatch.setattr(made, "rule_not_direct", lambda j: rule_not.get(j.rule.name, ()))
    monkeypatch.setattr(made, "_direct_draft", lambda j: job_not.get(j.rule.name, draft))
    monkeypatch.setattr(made, "_deployment_of", lambda j: (deployment or {}).get(j.rule.name))
    return made


def primed(rule: str) -> dict[str, Any]:
    return {
        "python": "/py", "argv": ["--target-jobs", rule], "env": [["A", "1"]], "cwd": "/w",
        "log_dir": "/w/logs",
    }  # fmt: skip


def test_a_rule_whose_jobs_fail_the_job_level_check_is_primed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = builder(monkeypatch, {}, {"tmp": TMPDIR})
    assert made.prime_request([job("thin"), job("tmp")]) == primed("tmp")
    # as its build: warm (the request is what its first job's spec runs)
    spec, way = made._draft(job("tmp"), "k")
    assert way == "warm" and spec.warm is not None and spec.warm.argv == ("--target-jobs", "tmp")


def test_the_prime_request_skips_direct_local_and_cold_jobs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = builder(monkeypatch, {"c": SHADOW, "l": SHADOW, "s": SHADOW}, {}, {"c": "conda:"})
    jobs = [job("thin"), job("c"), job("l", local=True), job("s")]
    assert made.prime_request(jobs) == primed("s")
    assert made._draft(job("c"), "k")[1] == "cold"
    assert made.prime_request(jobs[:3]) is None


def test_a_job_of_a_group_to_be_formed_is_primed_by_its_own_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = builder(monkeypatch, {}, {})
    assert made.prime_request([job("thin"), job("member", group="g")]) == primed("member")


def test_a_group_job_goes_warm_as_a_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = builder(monkeypatch, {}, {})
    group = job("g")
    group.is_group = lambda: True
    spec, way = made._draft(group, "k")
    assert way == "warm" and spec.warm is not None and spec.warm.group
    assert spec.warm.argv == ("--target-jobs", "g") and spec.warm.log_dir == "/w/logs"


def test_no_prime_request_without_the_warm_path(monkeypatch: pytest.MonkeyPatch) -> None:
    made = builder(monkeypatch, {"s": SHADOW}, {}, warm=False)
    assert made.prime_request([job("s")]) is None
    spec, way = made._draft(job("s"), "k")
    assert way == "cold" and spec.cold == Cold(Why.WARM_OFF) and spec.warm is None


def test_the_detail_log_says_once_per_rule_why_not_direct_and_warm_or_cold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import logging

    from snakemake_executor_plugin_dask_slurm.report.detail import detail

    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    detail.addHandler(handler)
    level = detail.level
    detail.setLevel(logging.INFO)  # (setLevel: the logger caches whether it is enabled)
    try:
        made = builder(monkeypatch, {"s": SHADOW, "c": SHADOW}, {"t": TMPDIR}, {"c": "conda:"})
        # the prime request looks at the rules before the detail log is open: it tells
        # nothing, and the rules' jobs still do
        assert made.prime_request([job("c"), job("s")]) == primed("s")
        assert lines == []
        for name in ("thin", "s", "s", "t", "c", "c"):
            made._draft(job(name), "k")
    finally:
        detail.removeHandler(handler)
        detail.setLevel(level)
    assert lines == [
        "s: the general way (shadow:, benchmark:), warm",
        "t: the general way (uses {resources.tmpdir}), warm",
        "c: the general way (shadow:, benchmark:), cold: "
        "its rule uses conda, a container or another software deployment (conda:)",
    ]
