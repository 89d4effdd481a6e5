"""Typed stand-ins for Snakemake's job objects, with only what the plugin reads of them
(``snakemake_interface_executor_plugins.jobs.JobExecutorInterface``): for pure tests of
messages and registries. Anything that runs a job uses real Snakemake instead."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeJob:
    """A single job of rule ``name``."""

    name: str = "thin"
    jobid: int = 1
    attempt: int = 1
    threads: int = 1
    resources: Mapping[str, Any] = field(default_factory=dict)

    def is_group(self) -> bool:
        return False

    @property
    def rules(self) -> list[str]:
        return [self.name]


@dataclass
class FakeGroupJob:
    """A group job: its name and the rules of its members."""

    name: str = "grp"
    jobid: str = "0e3c4ad2-group"
    attempt: int = 1
    rules: list[str] = field(default_factory=list)
    groupid: str = "grp"
    threads: int = 1
    resources: Mapping[str, Any] = field(default_factory=dict)

    def is_group(self) -> bool:
        return True
