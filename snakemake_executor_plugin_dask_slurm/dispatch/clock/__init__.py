"""The time limit on the run's side (the clock): when the run's and the worker jobs' workers
must be gone, and what that means for each job.

- :mod:`.policy` — per job: expected duration, whether it fits, what a landing stops (pure,
  table-tested).
- :mod:`.allocation` — the allocation's end at start-up (``AllocationClock``), the check of
  each job handed over, the landing thread (``LandingWatch``).
- :mod:`.placement` — where a job may go by time: the run's clock and the workers' runway,
  per job and again for a job handed over again.
- :mod:`.worker_jobs` — a worker job lands: its jobs moved or stopped.

The workers' side of the same feature is ``worker/clock.py`` (landing point, runway grid,
start check); the glossary in docs/architecture.md says which word means what.
"""
