"""The usage report's page without a browser: the data its script draws (slots, merged
bars, packed columns), the JSON block no text can end early, the inlined BokehJS, and a
missing bokeh package said in one line. The page itself: tests/component/test_usage_page.py."""

from __future__ import annotations

import base64
import gzip
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from snakemake_executor_plugin_dask_slurm.report.usage import Attempt, page, page_data
from snakemake_executor_plugin_dask_slurm.report.usage.aggregate import allocation, rule_stats
from tests.usage_feed import feed


def attempt(worker: str, started: float | None, wall: float | None) -> Attempt:
    return Attempt(
        "k", "r", 1, 1, 0, "direct", "", False, 1, None, None, 0.0, "done", "",
        worker=worker, started=started, wall=wall, cpu=wall,
    )  # fmt: skip


def unpacked(column: dict[str, str]) -> np.ndarray:
    dtype = "<f4" if column["dtype"] == "float32" else "<i4"
    return np.frombuffer(gzip.decompress(base64.b64decode(column["gzip"])), dtype=dtype)


def test_each_attempt_takes_the_lowest_slot_free_on_its_worker_when_it_starts() -> None:
    attempts = [
        attempt("b", 0.0, 5.0),
        attempt("a", 0.0, 10.0),
        attempt("a", 1.0, 2.0),  # beside the first: slot 1
        attempt("a", 4.0, 1.0),  # slot 1 is free again
        attempt("a", None, None),  # never started: no slot
    ]
    lanes, labels = page_data.lanes_of(attempts, {"a": 0, "b": 1})
    assert lanes == [2, 0, 1, 1, -1]
    assert labels == ["a #0", "a #1", "b #0"]


def test_packed_columns_keep_every_value_nan_included() -> None:
    floats = np.array([1.5, np.nan, -2.25], dtype=np.float32)
    assert np.array_equal(unpacked(page_data.packed(floats)), floats, equal_nan=True)
    ints = np.array([0, -1, 7], dtype=np.int32)
    assert unpacked(page_data.packed(ints)).tolist() == [0, -1, 7]


def data_of(jobs: int) -> dict[str, Any]:
    collector, run = feed(jobs)
    attempts = collector.attempts()
    workers = collector.workers(attempts)
    stats = rule_stats(attempts)
    return page_data.page_data(attempts, workers, run, stats, allocation(attempts, workers, run))


def test_above_the_threshold_runs_of_succeeded_jobs_are_drawn_as_one_bar(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = data_of(400)
    assert plain["bars"] is None
    monkeypatch.setattr(page_data, "MERGE_ABOVE", 100)
    data = data_of(400)
    bars = data["bars"]
    assert bars is not None
    jobs = {k: unpacked(v) for k, v in data["jobs"].items() if isinstance(v, dict)}
    merged = (jobs["outcome"] == 0) & (jobs["rerun"] == 0) & (jobs["lane"] >= 0)
    assert unpacked(bars["jobs"]).sum() == merged.sum() < 400  # each succeeded job once
    assert len(unpacked(bars["lane"])) < merged.sum()
    # the legend's rows are the bars' rows now, each showing its rule's colour
    items = data["legend"]["items"]
    assert all(unpacked(bars["rule"])[row] == rule for rule, row in items)
    # failed, lost, stopped and rerun attempts are still marked one by one
    assert data["marked"] == plain["marked"] and data["reruns"] == plain["reruns"]


def test_the_json_block_cannot_be_ended_by_the_runs_words() -> None:
    data = {"rules": ["</script><script>alert(1)</script>", "<!--", "naïve"]}
    block = page.json_block(data)
    assert "<" not in block
    assert json.loads(block) == data


def test_the_page_inlines_bokehjs_its_script_and_the_data(tmp_path: Path) -> None:
    text = page.render("a title & more", {"rules": ["r"]})
    assert "<title>a title &amp; more</title>" in text
    for name in page.BUNDLES:
        assert f"/* BEGIN {name} */" in text and f"/* END {name} */" in text, name
    assert all(path.read_text() in text for path in page.SCRIPTS)
    assert page.script() in text
    assert f'<script type="application/json" id="{page.DATA_ID}">{{"rules":["r"]}}</script>' in text
    # nothing loaded from anywhere: every script is inline
    assert not re.search(r"<script[^>]*\bsrc=", text)


def test_a_missing_bokeh_package_costs_the_page_only_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(page.importlib.util, "find_spec", lambda name: None)
    collector, run = feed(20)
    lines = collector.write(tmp_path, run)
    assert lines[-1].startswith("report.html could not be written (RuntimeError: the bokeh")
    assert "pip install bokeh" in lines[-1]
    assert (tmp_path / "jobs.tsv").exists() and not (tmp_path / "report.html").exists()


def test_figures_json_cannot_hold_are_null_and_the_page_is_written(tmp_path: Path) -> None:
    """A NaN or infinite figure (Bokeh's Python sent them as numbers) becomes JSON's null,
    NaN in the browser, instead of costing the page."""
    collector, run = feed(20)
    collector.worker_joined("odd", "h", float("nan"), None, "", at=run.started + 1)
    lines = collector.write(tmp_path, run)
    assert "could not" not in " ".join(lines), lines
    block = re.search(r'id="usage-data">(.*?)</script>', (tmp_path / "report.html").read_text())
    assert block is not None
    spans = json.loads(block[1])["spans"]
    assert spans["cpus"][spans["name"].index("odd")] is None
    assert page_data._finite([1.0, float("inf"), None, float("nan")]) == [1.0, None, None, None]


def test_the_way_column_names_direct_warm_and_cold() -> None:
    attempts = [
        attempt("a", 0.0, 1.0)._replace(way=way) for way in ("cold", "direct", "warm", "cold")
    ]
    jobs, _, _ = page_data.jobs_columns(attempts, [], ["r"], 0.0)
    assert jobs["way"].tolist() == [2, 0, 1, 2]
    data = data_of(20)
    assert data["ways"] == ["direct", "warm", "cold"]
