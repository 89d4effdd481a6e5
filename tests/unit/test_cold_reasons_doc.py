"""The user guide's list of reasons a job went the cold way is the code's: every
:class:`Why` member, with its :data:`WHY_TEXT`, and nothing else (docs/further.md)."""

from __future__ import annotations

import re
from pathlib import Path

from snakemake_executor_plugin_dask_slurm.worker.wire import WHY_TEXT, Why

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "further.md"
BEGIN, END = "<!-- cold reasons: begin -->", "<!-- cold reasons: end -->"
ITEM = re.compile(r"- `([^`]+)`: (.+)")


def guide_reasons(text: str) -> dict[str, str]:
    """The guide's list, by the reason's name: each line between the markers is an item."""
    listed = text.split(BEGIN, 1)[1].split(END, 1)[0].strip().splitlines()
    items = [ITEM.fullmatch(line) for line in listed]
    assert all(items), [line for line, m in zip(listed, items, strict=True) if m is None]
    found = {m.group(1): m.group(2) for m in items if m is not None}
    assert len(found) == len(items), "a reason listed twice"
    return found


def test_the_guide_lists_every_cold_reason_and_nothing_else() -> None:
    assert guide_reasons(GUIDE.read_text(encoding="utf-8")) == {
        why.value: WHY_TEXT[why] for why in Why
    }


def test_every_reason_has_its_sentence() -> None:
    assert set(WHY_TEXT) == set(Why)


def test_the_list_is_read_line_by_line() -> None:
    text = f"x\n{BEGIN}\n- `a`: one\n- `b`: two (x)\n{END}\n- `c`: not listed\n"
    assert guide_reasons(text) == {"a": "one", "b": "two (x)"}
