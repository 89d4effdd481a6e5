"""The usage report's page in a real browser (headless Chromium, no network), and the
report written without Bokeh's Python in the writing process."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from snakemake_executor_plugin_dask_slurm.report.usage.page import DATA_ID
from snakemake_executor_plugin_dask_slurm.report.usage.page_data import BINS
from tests.browser import find_or_install_chromium, run_chromium
from tests.usage_feed import feed

ROOT = Path(__file__).resolve().parents[2]
#: The page's plots, in order, by the start of their titles.
PLOTS = (
    "Every worker slot",
    "CPUs over time",
    "Workers joining and leaving",
    "Per rule: threads asked",
    "Per rule: mem_mb asked",
)


def page_data(page: Path) -> dict[str, Any]:
    """The run's data as the page holds it (its JSON block)."""
    block = rf'<script type="application/json" id="{DATA_ID}">(.*?)</script>'
    found = re.search(block, page.read_text(), re.S)
    assert found is not None, "no data block"
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def check_rendered(rendered: dict[str, Any], data: dict[str, Any]) -> None:
    """What the page rendered (its views, read back by ``window.usageReport.rendered``)
    against what its data says: every plot there, with its title, a size and its glyphs'
    rows; both tables with every row."""
    attempts, rules = len(data["jobs"]["jobid"]), len(data["rules"])
    plots = rendered["plots"]
    assert [p["title"][: len(t)] for p, t in zip(plots, PLOTS, strict=False)] == list(PLOTS)
    assert len(plots) == len(PLOTS), [p["title"] for p in plots]
    for plot in plots:
        assert plot["width"] > 500 and plot["height"] > 100, plot
        assert all(g["rows"] > 0 and g["drawn"] > 0 for g in plot["glyphs"]), plot
    timeline, over_time, workers, threads, memory = (p["glyphs"] for p in plots)
    marked = [len(rows) for rows in data["marked"].values()]
    marked += [len(data["reruns"])] if data["reruns"] else []
    assert timeline == [
        {"glyph": "HBar", "rows": attempts, "drawn": attempts},  # every attempt, one by one
        *({"glyph": "HBar", "rows": attempts, "drawn": n} for n in marked),
    ]
    # the rules' colours beside the timeline, the marks' inside it
    assert plots[0]["legends"] == [len(data["legend"]["items"]), len(marked)]
    assert [(g["glyph"], g["rows"]) for g in over_time] == [("VArea", BINS), *[("Line", BINS)] * 2]
    spans = len(data["spans"]["name"])
    assert [(g["glyph"], g["rows"]) for g in workers] == [
        ("HBar", spans),
        *[("Scatter", spans)] * 2,
    ]
    assert [g["rows"] for g in threads] == [rules] * 3
    assert [g["rows"] for g in memory] == [rules] * 4
    tables = rendered["tables"]
    assert [(t["rows"], t["shown"], t["columns"]) for t in tables] == [
        (rules, rules, 17),
        (attempts, attempts, 18),
    ]
    assert all(t["height"] > 100 for t in tables), tables


@pytest.mark.timeout(900)  # the first run on a machine may install Chromium
def test_the_page_renders_offline_every_plot_and_table_without_a_javascript_error(
    tmp_path: Path,
) -> None:
    chromium = find_or_install_chromium()
    collector, run = feed(400)
    collector.write(tmp_path / "report", run)
    page = tmp_path / "report" / "report.html"
    data = page_data(page)
    assert len(data["jobs"]["jobid"]) == len(collector.attempts()) == 401
    assert data["marked"] and data["reruns"], "the feed has failed, lost, stopped and rerun"
    # Standalone: no element of the page loads anything (BokehJS and the page's script
    # are inlined; what those scripts hold is code, not the page's elements).
    markup = re.sub(r"(?s)(<script\b[^>]*>).*?</script>", r"\1</script>", page.read_text())
    assert not re.search(r"<\w+\b[^>]*\b(src|href)=[\"']?(https?:)?//", markup), "a resource"
    shot = tmp_path / "page.png"
    # One run: the DOM once the page's scripts ran (virtual time), and its screenshot.
    dom = run_chromium(
        chromium,
        tmp_path / "chromium-profile",
        [
            "--virtual-time-budget=15000",
            "--window-size=1300,1400",
            f"--screenshot={shot}",
            "--dump-dom",
            page.as_uri(),
        ],
    )
    root = re.search(r"<html[^>]*>", dom)
    assert root is not None, dom[:500]
    assert "data-report-error" not in root.group(0), root.group(0)
    assert 'data-report-ready="1"' in root.group(0), root.group(0)
    rendered = re.search(r'data-report-rendered="([^"]*)"', root.group(0))
    assert rendered is not None, root.group(0)
    check_rendered(json.loads(html.unescape(rendered.group(1))), data)
    with Image.open(shot) as image:
        colors = image.convert("RGB").getcolors(maxcolors=1 << 20) or []
    # A blank (or error) page has a handful of colours; the report's plots have hundreds.
    assert len(colors) > 100, f"{len(colors)} colours: the page looks blank"


RUN = """
import sys
from pathlib import Path
from snakemake_executor_plugin_dask_slurm.dispatch.usage_listener import ReportPlace, UsageListener
from tests.usage_feed import feed
collector, run = feed(1000)
said = []
place = ReportPlace(Path({root!r}), "t0k3n", "srun", run.started, said.append)
listener = UsageListener(collector, report=place)
listener.run_ending("snakemake")
listener.run_ended("snakemake")
assert "bokeh" not in sys.modules, sorted(m for m in sys.modules if m.startswith("bokeh"))
print(said[-1])
"""


@pytest.mark.timeout(120)
def test_the_report_of_a_run_is_written_without_importing_bokeh(tmp_path: Path) -> None:
    """The end of a run writes the report of 1,000 attempts (the run's usage listener, on
    its thread) and says where it is, and Bokeh's Python was never imported: the page
    inlines BokehJS from the installed package's files."""
    code = RUN.format(root=str(tmp_path / "reports"))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=100, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "report.html" in done.stdout, done.stdout
    (page,) = (tmp_path / "reports").glob("*-t0k3n/report.html")
    text = page.read_text()
    for bundle in ("bokeh.min.js", "bokeh-widgets.min.js", "bokeh-tables.min.js", "bokeh-api"):
        assert f"/* BEGIN {bundle}" in text, bundle
    assert len(page_data(page)["jobs"]["jobid"]) == 1001  # and the rerun
