"""Software deployment (conda, containers, environment modules): what the plugin reads of a
rule, a job, a script and the run's settings, on Snakemake 9 and on Snakemake 10's shape.

Snakemake 9.27.1: ``DeploymentMethod`` members in ``deployment_settings.deployment_method``;
``rule.conda_env``, ``rule.container_img``, ``rule.env_modules`` (an ``EnvModules`` whose
``shellcmd`` wraps a command in its ``module purge && module load``); a script object's
``conda_env``, ``container_img``, ``env_modules``, ``bench_record``.

Snakemake 10 (PR #3339, "generic software deployment plugin support", checked against its
head 5d24c4d, docs/architecture.md): methods are strings in
``deployment_settings.deployment_methods`` ("conda", "container", "envmodules"); a rule has
``software_env_specs`` (``EnvSpecs``: a generic ``software_spec`` with a ``kind``, and the
``legacy_*`` specs of the old directives); a job ``software_env``, which decorates a shell
command; a script object the job's ``run_args`` with ``software_env`` and ``bench_record``.

Every read goes through one function here that knows both shapes; the plugin's words for
the methods are Snakemake 10's. On Snakemake 10 a rule with environment modules goes the
general way (Snakemake's own code loads them; the direct way would have to deploy the
job's software environment itself), and any other software environment as conda and
containers do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .guard import Touch, present

CONDA = "conda"
CONTAINER = "container"
MODULES = "envmodules"


@dataclass(frozen=True)
class Software:
    """What a rule deploys: conda, container (whether the rule declares one), the
    environment modules the run loads for it (an object whose ``shellcmd`` wraps a
    command, or None), and any other software environment (Snakemake 10's plugins)."""

    conda: bool = False
    container: bool = False
    modules: Any = None
    other: str | None = None


def methods(workflow: Any) -> frozenset[str]:
    """The run's software deployment methods (``--sdm``), in Snakemake 10's words."""
    settings = workflow.deployment_settings
    named = getattr(settings, "deployment_methods", None)
    if named is not None:  # Snakemake 10: strings
        return frozenset(str(m) for m in named)
    return frozenset(_NINE.get(getattr(m, "name", ""), str(m)) for m in settings.deployment_method)


#: Snakemake 9's ``DeploymentMethod`` members, by name.
_NINE = {"CONDA": CONDA, "APPTAINER": CONTAINER, "ENV_MODULES": MODULES}


def rule_software(rule: Any, workflow: Any) -> Software:
    """What ``rule`` deploys (see :class:`Software`); ``modules`` only when the run loads
    environment modules (``--sdm env-modules``), as the local executor does."""
    specs = getattr(rule, "software_env_specs", _NONE)
    if specs is _NONE:  # Snakemake 9
        loads = MODULES in methods(workflow) and bool(rule.env_modules)
        return Software(
            conda=rule.conda_env is not None,
            container=rule.container_img is not None,
            modules=rule.env_modules if loads else None,
        )
    if specs is None or specs.is_empty():
        return Software()
    kinds = _kinds(getattr(specs, "software_spec", None))
    conda = specs.legacy_conda_env is not None or CONDA in kinds
    container = specs.legacy_container_img is not None or CONTAINER in kinds
    modules = specs.legacy_env_modules is not None or MODULES in kinds
    rest = kinds - {CONDA, CONTAINER, MODULES}
    other = None
    if modules and MODULES in methods(workflow):
        other = "envmodules: (Snakemake 10's software deployment, on the general way)"
    elif rest:
        other = f"software environment {', '.join(sorted(rest))}"
    return Software(conda=conda, container=container, other=other)


_NONE: Any = object()


def _kinds(spec: Any) -> set[str]:
    """The kinds of a Snakemake 10 ``EnvSpecBase`` and of the specs it is within or falls
    back to."""
    found: set[str] = set()
    while spec is not None and not callable(spec):
        found.add(str(getattr(spec, "kind", "")))
        found |= _kinds(getattr(spec, "within", None))
        spec = getattr(spec, "fallback", None)
    return found


def cold_reason(rule: Any, workflow: Any) -> str | None:
    """Why ``rule`` must go the cold way for its software deployment, or None: conda and
    containers (and Snakemake 10's other environments) when the run deploys them."""
    run = methods(workflow)
    software = rule_software(rule, workflow)
    if CONDA in run and software.conda:
        return "conda: (software deployment is not verified on the warm path)"
    if CONTAINER in run and software.container:
        return "container: (software deployment is not verified on the warm path)"
    if software.other is not None and not software.other.startswith(MODULES):
        return f"{software.other} (software deployment is not verified on the warm path)"
    return None


def script_software(script: Any) -> tuple[bool, bool, bool]:
    """(conda, container, modules) of a script object as ``execute_script`` sees it."""
    run_args = getattr(script, "run_args", None)
    if run_args is not None:  # Snakemake 10: the job's software environment
        env = getattr(run_args, "software_env", None)
        kinds = _kinds(getattr(env, "spec", None)) if env is not None else set()
        other = bool(kinds - {CONDA, CONTAINER, MODULES})
        return CONDA in kinds or other, CONTAINER in kinds, MODULES in kinds
    return (
        script.conda_env is not None,
        script.container_img is not None,
        script.env_modules is not None,
    )


def script_bench_record(script: Any) -> Any:
    """The script's benchmark record (None: not benchmarked)."""
    run_args = getattr(script, "run_args", None)
    return getattr(run_args if run_args is not None else script, "bench_record", None)


def _shape() -> str:
    """Which of the two shapes the running Snakemake has, by what is there."""
    from snakemake.rules import Rule
    from snakemake.settings.types import DeploymentSettings

    fields = getattr(DeploymentSettings, "__dataclass_fields__", {})
    init = DeploymentSettings.__init__.__code__.co_varnames
    nine = present(
        [
            ("deployment_method", "deployment_method" in fields),
            ("Rule.conda_env", hasattr(Rule, "conda_env")),
            ("Rule.container_img", hasattr(Rule, "container_img")),
        ]
    )
    ten = present(
        [
            ("deployment_methods", "deployment_methods" in init),
            ("Rule.software_env_specs", hasattr(Rule, "software_env_specs")),
        ]
    )
    return "9" if nine.count(",") == 2 else "10" if ten.count(",") == 1 else f"? {nine};{ten}"


DEPLOYMENT = Touch(
    name="reading of software deployment",
    kind="read",
    what="the rules' conda, container and envmodules and the deployment settings",
    written_for="9.27.1 (and Snakemake 10's shape, PR #3339 at 5d24c4d)",
    without=(
        "the plugin cannot tell which rules deploy software: it would run conda, "
        "container or envmodules rules without their environment"
    ),
    found=_shape,
    fingerprint="9",
)
TOUCHES = (DEPLOYMENT,)
