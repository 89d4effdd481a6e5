"""The component tier's one in-process Dask: a scheduler and workers in this process
(``processes=False``), each worker advertising ``cpus`` = its threads, as the plugin's do,
and its dashboard on loopback. ``in_process_dask(...)`` for a test that needs its own
shape; the ``client`` fixture for the common one (one worker, four threads), shared by a
module."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from distributed import Client, LocalCluster


@contextlib.contextmanager
def in_process_dask(
    n_workers: int = 1, threads: int = 4, **cluster_options: Any
) -> Iterator[tuple[LocalCluster, Client]]:
    with (
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=threads,
            processes=False,
            resources={"cpus": threads},
            dashboard_address="127.0.0.1:0",
            **cluster_options,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield cluster, client


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with in_process_dask() as (_, client):
        yield client
