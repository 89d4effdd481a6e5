"""What the plugin reads of a rule's software deployment (snakemake_internals/deployment.py).

On Snakemake 9 (installed): real rules of a parsed Snakefile, with and without ``--sdm``.
On Snakemake 10's shape (PR #3339, not released, so not installable here): objects with
exactly the attributes that PR gives a workflow's settings and a rule (``deployment_methods``
strings; ``software_env_specs`` with ``legacy_*`` specs and a generic ``software_spec``
with a ``kind``, ``within`` and ``fallback``), as read from its head 5d24c4d; the same
reads were run against that branch installed in a scratch venv (docs/architecture.md).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import snakemake.api  # first: snakemake's modules import each other in this order
from snakemake.settings.types import DeploymentMethod, DeploymentSettings, ResourceSettings

from snakemake_executor_plugin_dask_slurm.snakemake_internals import deployment

SNAKEFILE = """
rule m:
    output: "m.txt"
    envmodules: "tool/1.0"
    shell: "echo m > {output}"
rule c:
    output: "c.txt"
    conda: "env.yaml"
    shell: "echo c > {output}"
rule k:
    output: "k.txt"
    container: "docker://debian"
    shell: "echo k > {output}"
rule p:
    output: "p.txt"
    shell: "echo p > {output}"
"""


def parsed(api: Any, tmp_path: Path, methods: set[DeploymentMethod]) -> Any:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "env.yaml").write_text("dependencies: []\n")
    workflow = api.workflow(
        resource_settings=ResourceSettings(cores=1),
        deployment_settings=DeploymentSettings(deployment_method=frozenset(methods)),
        snakefile=tmp_path / "Snakefile",
        workdir=tmp_path,
    )
    return workflow._workflow


@pytest.mark.parametrize("deploy", [False, True], ids=["no --sdm", "--sdm all three"])
def test_snakemake_9_rules(tmp_path: Path, deploy: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    all_three = {DeploymentMethod.CONDA, DeploymentMethod.APPTAINER, DeploymentMethod.ENV_MODULES}
    with snakemake.api.SnakemakeApi() as api:
        check_rules(parsed(api, tmp_path, all_three if deploy else set()), deploy)


def check_rules(workflow: Any, deploy: bool) -> None:
    rules = {name: workflow.get_rule(name) for name in "mckp"}
    assert deployment.methods(workflow) == (
        {"conda", "container", "envmodules"} if deploy else frozenset()
    )
    found = {name: deployment.rule_software(rule, workflow) for name, rule in rules.items()}
    assert found["c"].conda and not found["c"].container and found["c"].modules is None
    assert found["k"].container and not found["k"].conda
    assert found["p"] == deployment.Software()
    modules = found["m"].modules
    if deploy:  # Snakemake's own EnvModules, which wraps a command as shell() does
        assert modules is rules["m"].env_modules
        assert "module load tool/1.0" in modules.shellcmd("true")
    else:
        assert modules is None
    cold = {name: deployment.cold_reason(rule, workflow) for name, rule in rules.items()}
    if deploy:
        assert cold["c"] and cold["c"].startswith("conda:")
        assert cold["k"] and cold["k"].startswith("container:")
    else:
        assert cold["c"] is None and cold["k"] is None
    assert cold["m"] is None and cold["p"] is None


def spec(kind: str, within: Any = None, fallback: Any = None) -> SimpleNamespace:
    return SimpleNamespace(kind=kind, within=within, fallback=fallback)


def specs(**given: Any) -> SimpleNamespace:
    fields = {"software_spec": None, "legacy_conda_env": None, "legacy_container_img": None}
    fields["legacy_env_modules"] = None
    fields.update(given)
    empty = all(v is None for v in fields.values())
    return SimpleNamespace(**fields, is_empty=lambda: empty)


def ten(methods: set[str]) -> SimpleNamespace:
    return SimpleNamespace(deployment_settings=SimpleNamespace(deployment_methods=methods))


@pytest.mark.parametrize(
    ("rule_specs", "methods", "conda", "container", "other", "cold"),
    [
        (None, {"conda"}, False, False, None, None),
        (specs(), {"conda"}, False, False, None, None),
        (specs(legacy_conda_env="env.yaml"), {"conda"}, True, False, None, "conda:"),
        (specs(legacy_conda_env="env.yaml"), set(), True, False, None, None),
        (specs(legacy_container_img="docker://x"), {"container"}, False, True, None, "container:"),
        (
            specs(software_spec=spec("conda", within=spec("container"))),
            {"conda"},
            True,
            True,
            None,
            "conda:",
        ),
        (specs(legacy_env_modules=["tool/1.0"]), {"envmodules"}, False, False, "envmodules:", None),
        (specs(legacy_env_modules=["tool/1.0"]), set(), False, False, None, None),
        (
            specs(software_spec=spec("pixi")),
            set(),
            False,
            False,
            "software environment pixi",
            "software environment pixi",
        ),
    ],
)
def test_snakemake_10_shape(
    rule_specs: Any,
    methods: set[str],
    conda: bool,
    container: bool,
    other: str | None,
    cold: str | None,
) -> None:
    rule = SimpleNamespace(software_env_specs=rule_specs)
    found = deployment.rule_software(rule, ten(methods))
    assert (found.conda, found.container, found.modules) == (conda, container, None)
    assert (found.other or "").startswith(other or "") and (found.other is None) == (other is None)
    reason = deployment.cold_reason(rule, ten(methods))
    assert (reason is None) == (cold is None) and (reason or "").startswith(cold or "")
    assert deployment.methods(ten(methods)) == frozenset(methods)


def test_a_script_object_on_both_shapes() -> None:
    nine = SimpleNamespace(conda_env=None, container_img="x", env_modules=None, bench_record=1)
    assert deployment.script_software(nine) == (False, True, False)
    assert deployment.script_bench_record(nine) == 1
    env = SimpleNamespace(spec=spec("envmodules"))
    run_args = SimpleNamespace(software_env=env, bench_record=None)
    assert deployment.script_software(SimpleNamespace(run_args=run_args)) == (False, False, True)
    assert deployment.script_bench_record(SimpleNamespace(run_args=run_args)) is None
    bare = SimpleNamespace(run_args=SimpleNamespace(software_env=None, bench_record=None))
    assert deployment.script_software(bare) == (False, False, False)
