"""The usage report's page in a real browser: headless Chromium, no network."""

from __future__ import annotations

import re
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
