"""The benchmark's workflows: write them into a directory, check what they produced.

Two kinds:

* ``thin``: N independent rules ``echo {i} > out/{i}.txt``, the case the plugin exists
  for: per-rule overhead dominates everything.
* ``farm``: a load-imbalanced task farm, ``count`` rules each sleeping a fixed,
  seeded-random 20-300 ms and writing its own start and end time. Its ideal makespan on
  ``slots`` parallel slots is at least ``max(sum / slots, longest)``; that lower bound is
  what the makespan is compared with.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

THIN_SNAKEFILE = """\
N = {n}


rule all:
    input:
        expand("out/{{i}}.txt", i=range(N)),


rule thin:
    output:
        "out/{{i}}.txt",
    shell:
        "echo {{wildcards.i}} > {{output}}"
"""

FARM_SNAKEFILE = """\
SECONDS = {durations!r}


rule all:
    input:
        expand("farm/{{i}}.txt", i=range(len(SECONDS))),


rule task:
    output:
        "farm/{{i}}.txt",
    params:
        seconds=lambda wildcards: SECONDS[int(wildcards.i)],
    shell:
        "date +%s.%N > {{output}}; sleep {{params.seconds}}; date +%s.%N >> {{output}}"
"""

FARM_MIN_SECONDS = 0.020
FARM_MAX_SECONDS = 0.300


@dataclass(frozen=True)
class Workload:
    """One workflow to run: ``kind`` is "thin" or "farm", ``rules`` its job count."""

    kind: str
    rules: int
    seed: int = 1

    @property
    def label(self) -> str:
        return f"{self.kind}-{self.rules}"

    def durations(self) -> list[float]:
        """The farm's sleep per task, in seconds (same every run for a given seed)."""
        rng = random.Random(self.seed)
        return [
            round(rng.uniform(FARM_MIN_SECONDS, FARM_MAX_SECONDS), 3) for _ in range(self.rules)
        ]

    def snakefile(self) -> str:
        if self.kind == "thin":
            return THIN_SNAKEFILE.format(n=self.rules)
        return FARM_SNAKEFILE.format(durations=self.durations())

    def outputs_written(self, directory: Path) -> int:
        """How many output files exist so far (cheap: one directory listing)."""
        try:
            return len(os.listdir(directory / ("out" if self.kind == "thin" else "farm")))
        except OSError:
            return 0

    def write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "Snakefile").write_text(self.snakefile())


def ideal_makespan(durations: list[float], slots: int) -> float:
    """Lower bound of any schedule's makespan of ``durations`` on ``slots`` slots."""
    return max(sum(durations) / max(1, slots), max(durations, default=0.0))


@dataclass(frozen=True)
class Produced:
    """What a run left behind: how many outputs are right, and the farm's task times."""

    expected: int
    correct: int
    task_spans: list[tuple[float, float]]  # farm only: (start, end) per task

    @property
    def complete(self) -> bool:
        return self.correct == self.expected


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def check_thin(directory: Path, n: int) -> Produced:
    out = directory / "out"
    correct = 0
    for i in range(n):
        if _read(out / f"{i}.txt") == f"{i}\n":
            correct += 1
    return Produced(n, correct, [])


def check_farm(directory: Path, n: int) -> Produced:
    spans = []
    for i in range(n):
        text = _read(directory / "farm" / f"{i}.txt")
        parts = text.split() if text else []
        if len(parts) == 2:
            spans.append((float(parts[0]), float(parts[1])))
    return Produced(n, len(spans), spans)


def check(workload: Workload, directory: Path) -> Produced:
    if workload.kind == "thin":
        return check_thin(directory, workload.rules)
    return check_farm(directory, workload.rules)
