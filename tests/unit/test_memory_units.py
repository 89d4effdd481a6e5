"""The memory a local cluster's workers advertise is in mem_mb's unit, MB (10^6 bytes)."""

from __future__ import annotations

import distributed.system
import pytest

from snakemake_executor_plugin_dask_slurm.clusters.choose import local_mem_mb


def test_a_local_grant_from_slurm_is_mib_converted_to_mb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_MEM_PER_CPU", raising=False)
    monkeypatch.setenv("SLURM_MEM_PER_NODE", "1000")
    assert local_mem_mb(4) == (1048, "SLURM_MEM_PER_NODE=1000 MiB")


def test_without_a_grant_the_memory_this_process_may_use_is_in_mb(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SLURM_MEM_PER_NODE", raising=False)
    monkeypatch.delenv("SLURM_MEM_PER_CPU", raising=False)
    monkeypatch.setattr(distributed.system, "MEMORY_LIMIT", 8 * 2**30)  # 8 GiB
    assert local_mem_mb(4) == (8589, "memory this process may use (cgroup/machine)")
