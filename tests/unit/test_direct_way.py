from __future__ import annotations

import pytest

from snakemake_executor_plugin_dask_slurm.dispatch.direct_way import JobFacts, RuleFacts, blockers


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (RuleFacts(), ()),
        (JobFacts(), ()),
        (RuleFacts(not_shell=True), ("not a shell: rule",)),
        (RuleFacts(shadow=True), ("shadow:",)),
        (RuleFacts(conda=True), ("conda:",)),
        (RuleFacts(container=True), ("container:",)),
        (RuleFacts(software_env=True), ("a software environment Snakemake deploys",)),
        (RuleFacts(benchmark=True), ("benchmark:",)),
        (RuleFacts(cache=True), ("cache:",)),
        (RuleFacts(pipe_or_service=True), ("pipe()/service() output",)),
        (RuleFacts(debug_or_edit_notebook=True), ("--debug or --edit-notebook",)),
        (JobFacts(group=True), ("group job",)),
        (JobFacts(shell_exec_resource=True), ("resources.shell_exec",)),
        (JobFacts(tmpdir_placeholder=True), ("uses {resources.tmpdir}",)),
        (JobFacts(too_long=True), ("command longer than 65536 characters",)),
        (JobFacts(storage_files=True), ("storage-plugin files",)),
        (RuleFacts(shadow=True, benchmark=True), ("shadow:", "benchmark:")),
    ],
)
def test_blockers(facts: RuleFacts | JobFacts, expected: tuple[str, ...]) -> None:
    assert blockers(facts) == expected
