"""The usage report's page in a real browser: headless Chromium, no network."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from tests.browser import find_or_install_chromium, run_chromium
from tests.usage_feed import feed


@pytest.mark.timeout(900)  # the first run on a machine may install Chromium
def test_the_page_renders_offline_without_a_javascript_error(tmp_path: Path) -> None:
    chromium = find_or_install_chromium()
    collector, run = feed(400)
    collector.write(tmp_path / "report", run)
    page = tmp_path / "report" / "report.html"
    # Standalone: no element of the page loads anything (Bokeh's JavaScript and CSS are
    # inlined; what those scripts hold is code, not the page's elements).
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
    with Image.open(shot) as image:
        colors = image.convert("RGB").getcolors(maxcolors=1 << 20) or []
    # A blank (or error) page has a handful of colours; the report's plots have hundreds.
    assert len(colors) > 100, f"{len(colors)} colours: the page looks blank"


RUN = """
import sys
from pathlib import Path
from snakemake_executor_plugin_dask_slurm.dispatch.usage_listener import usage_listener
said = []
listener = usage_listener(Path({root!r}), "t0k3n", "local", lambda: None, said.append, {{}})
assert listener is not None and listener._preparing is not None
listener._preparing.join(60)
assert "bokeh.plotting" in sys.modules, "Bokeh was not imported while the run ran"
listener.run_ending("snakemake")
listener.run_ended("snakemake")
print(said[-1])
"""


@pytest.mark.timeout(120)
def test_bokeh_is_imported_while_the_jobs_run_and_the_page_written_at_the_end(
    tmp_path: Path,
) -> None:
    """The run's usage listener imports Bokeh on a thread from its start (page.warm_up),
    and the end of the run still writes the page before it says where it is."""
    code = RUN.format(root=str(tmp_path / "reports"))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=100, check=True
    )
    assert "report.html" in done.stdout, done.stdout
    pages = list((tmp_path / "reports").glob("*-t0k3n/report.html"))
    assert len(pages) == 1 and pages[0].stat().st_size > 100_000, pages


@pytest.mark.timeout(120)
def test_the_page_leaves_bokehs_validation_setting_as_it_was(tmp_path: Path) -> None:
    """The page is rendered with Bokeh's integrity checks off (page._without_validation);
    Bokeh's setting is back to what it was (unset: Bokeh's default, on) afterwards."""
    from bokeh.settings import settings

    collector, run = feed(20)
    collector.write(tmp_path / "report", run)
    assert (tmp_path / "report" / "report.html").stat().st_size > 100_000
    assert settings.perform_document_validation() is True
