"""``report.html``: one standalone page, offline, built in the browser.

What it shows: the run's figures and the worst offenders; a timeline of every worker slot
(which rule ran when; failures, lost, stopped and rerun attempts marked); CPUs granted,
reserved and used over time; the workers joining and leaving; per rule, threads asked
against cores used and memory asked against peak RSS; every rule and every attempt in
sortable tables.

The page is prebuilt: BokehJS (the installed ``bokeh`` package's own JavaScript, read as
files, never imported) and the page's script (``plots.js`` and ``page.js``, which build
the plots and tables with BokehJS's API) are inlined as they are, beside the run's data
as a JSON block (:func:`.page_data.page_data`). So writing it costs milliseconds and no
Bokeh in Snakemake's process (docs/architecture.md, "The report at the end of a run").
"""

from __future__ import annotations

import html
import importlib.util
import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .aggregate import AllocationUse, RuleStats
from .page_data import page_data
from .rows import Attempt, RunFacts, WorkerSpan

#: BokehJS's bundles, in the order they load: the three Bokeh's ``file_html`` inlined for
#: this page (the models, the widgets, the tables), and BokehJS's API (``Bokeh.Plotting``).
BUNDLES = ("bokeh.min.js", "bokeh-widgets.min.js", "bokeh-tables.min.js", "bokeh-api.min.js")
#: The page's own JavaScript, files shipped beside this module: the plots, then the data,
#: the tables and the page (which builds it all); one script, in one function.
SCRIPTS = (Path(__file__).with_name("plots.js"), Path(__file__).with_name("page.js"))
#: The element the page's JSON block is in (``page.js`` reads it).
DATA_ID = "usage-data"
#: Set on <html> by the page itself: data-report-ready once BokehJS rendered, and
#: data-report-error with the message of any JavaScript error (the browser test reads them).
MARKERS = """<script>
(function () {
  var root = document.documentElement;
  function note(text) { root.setAttribute("data-report-error", String(text)); }
  window.addEventListener("error", function (e) { note(e.message || e); });
  window.addEventListener("unhandledrejection", function (e) { note(e.reason); });
  var error = console.error;
  console.error = function () {
    note(Array.prototype.map.call(arguments, String).join(" "));
    return error.apply(console, arguments);
  };
})();
</script>"""
#: What Bokeh's own page template styles.
STYLE = """    <style>
      html, body {
        box-sizing: border-box;
        display: flow-root;
        height: 100%;
        margin: 0;
        padding: 0;
      }
    </style>"""


def page_html(
    attempts: Sequence[Attempt],
    workers: Sequence[WorkerSpan],
    run: RunFacts,
    stats: Sequence[RuleStats],
    alloc: AllocationUse,
) -> str:
    title = (
        f"dask-slurm usage report, {time.strftime('%Y-%m-%d %H:%M', time.localtime(run.started))}"
    )
    return render(title, page_data(attempts, workers, run, stats, alloc))


def render(title: str, data: dict[str, Any]) -> str:
    """The page: BokehJS and the page's script inlined, ``data`` in a JSON block."""
    scripts = "".join(f"<script>\n{code}\n</script>\n" for code in bokehjs())
    return (
        '<!DOCTYPE html>\n<html lang="en">\n  <head>\n    <meta charset="utf-8">\n'
        f"    <title>{html.escape(title)}</title>\n{MARKERS}{STYLE}\n{scripts}"
        '<script>\nBokeh.set_log_level("info");\n</script>\n  </head>\n  <body>\n'
        '    <div id="usage-report" style="display: contents;"></div>\n'
        f'    <script type="application/json" id="{DATA_ID}">{json_block(data)}</script>\n'
        f"    <script>\n{script()}    </script>\n"
        "  </body>\n</html>\n"
    )


def script() -> str:
    """The page's script: :data:`SCRIPTS` in one function, so that their names are the
    page's own."""
    parts = "\n".join(path.read_text(encoding="utf-8") for path in SCRIPTS)
    return f'(function () {{\n"use strict";\n{parts}}})();\n'


def json_block(data: dict[str, Any]) -> str:
    """``data`` as JSON that no text in it can end early: every ``<`` escaped, so no
    ``</script>`` or ``<!--`` in a rule's name or a wildcard closes the block."""
    text = json.dumps(data, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c")


def bokehjs_dir() -> Path:
    """Where the installed ``bokeh`` package keeps BokehJS, found without importing it
    (its import alone costs 0.6 CPU-s)."""
    spec = importlib.util.find_spec("bokeh")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "the bokeh package is not installed in this environment; the plugin requires "
            "it (pip install bokeh): its JavaScript is what report.html runs"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "server" / "static" / "js"


def bokehjs() -> list[str]:
    """Each bundle of :data:`BUNDLES`, as Bokeh's ``file_html`` inlines it (between its
    BEGIN and END comments)."""
    where = bokehjs_dir()
    return [
        f"/* BEGIN {name} */\n{(where / name).read_text(encoding='utf-8')}\n/* END {name} */"
        for name in BUNDLES
    ]
