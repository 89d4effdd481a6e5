"""Snakemake's own executor test base: its `simple` and `groups` workflows, run in-process
through Snakemake's API with this plugin on the embedded local cluster."""

from __future__ import annotations

from typing import Any

import pytest
import snakemake.common.tests

from snakemake_executor_plugin_dask_slurm import ExecutorSettings

pytestmark = pytest.mark.e2e


class TestWorkflows(snakemake.common.tests.TestWorkflowsLocalStorageBase):
    __test__ = True

    def get_executor(self) -> str:
        return "dask-slurm"

    def get_executor_settings(self) -> Any:
        return ExecutorSettings(cluster="local", cpus=2)


class TestWorkflowsGeneralWay(TestWorkflows):
    """The same workflows with every job through Snakemake's own job command."""

    def get_executor_settings(self) -> Any:
        return ExecutorSettings(cluster="local", cpus=2, no_direct_shell=True)
