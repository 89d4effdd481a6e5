"""The usage report: after every run, how the farm's CPUs were used and what each rule
should ask for next time, from the exact figures each job's worker measured
(:class:`...worker.wire.Usage`), without ``sacct``.

- :mod:`.rows`: the typed facts (a job handed over, a worker's presence, one attempt's row);
- :mod:`.collect`: :class:`UsageCollector`, fed by the run as jobs are handed over and end;
- :mod:`.aggregate`, :mod:`.over_time` and :mod:`.suggest`: per rule, per node, per worker
  job, over time (pure, table-tested);
- :mod:`.write`: ``jobs.tsv``, ``rules.tsv``, ``suggested-profile.yaml`` and the lines
  printed at the end; :mod:`.page`: ``report.html``, a prebuilt page (BokehJS and
  its script inlined, Bokeh's Python never imported) showing :mod:`.page_data`'s columns;
  :mod:`.words`: the names and sentences the files and the page share.

It imports neither the cluster lifecycle (``clusters/``) nor dispatch (``dispatch/``) nor
the executor (``tests/component/test_layering.py``): the run hands it plain facts, through
:mod:`...dispatch.usage_listener` (the run's ``JobListener``).
"""

from .collect import UsageCollector, handover_from_job
from .rows import Attempt, Ended, Handover, RunFacts, WorkerSpan

__all__ = [
    "Attempt",
    "Ended",
    "Handover",
    "RunFacts",
    "UsageCollector",
    "WorkerSpan",
    "handover_from_job",
]
