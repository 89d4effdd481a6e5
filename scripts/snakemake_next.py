"""Check the plugin's touches of Snakemake's code against the Snakemake installed in this
interpreter (e.g. a scratch venv with Snakemake's main branch or a release candidate), and
read a Snakefile's software deployment through the plugin's adapters.

Usage: python scripts/snakemake_next.py [SNAKEFILE [METHOD,...]]

Prints one line per touch (kind, name, whether it matches, what was found) and, with a
Snakefile, each rule's software and whether it goes cold for it (docs/architecture.md,
"Snakemake's internals: one room").
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    import snakemake
    import snakemake.api
    from snakemake.settings.types import DeploymentSettings, ResourceSettings

    from snakemake_executor_plugin_dask_slurm import snakemake_internals
    from snakemake_executor_plugin_dask_slurm.snakemake_internals import deployment

    print(f"Snakemake {snakemake.__version__} at {Path(snakemake.__file__).parent}")
    mismatched = 0
    for touch in snakemake_internals.TOUCHES:
        try:
            found = touch.found()
        except Exception as e:  # a touch that cannot even read the code: say what
            found = f"unreadable: {type(e).__name__}: {e}"
        ok = found == touch.fingerprint
        mismatched += not ok
        print(f"{touch.kind:5} {touch.name:34} {'matches' if ok else 'DIFFERS'}  {found}")
    if argv:
        methods = argv[1].split(",") if len(argv) > 1 else []
        if "deployment_methods" in DeploymentSettings.__init__.__code__.co_varnames:
            settings = DeploymentSettings(deployment_methods=frozenset(methods))
        else:
            from snakemake.settings.types import DeploymentMethod

            chosen = frozenset(DeploymentMethod.parse_choice(m) for m in methods)
            settings = DeploymentSettings(deployment_method=chosen)
        with snakemake.api.SnakemakeApi() as api:
            workflow = api.workflow(
                resource_settings=ResourceSettings(cores=1),
                deployment_settings=settings,
                snakefile=Path(argv[0]),
            )._workflow
            print("methods:", ", ".join(sorted(deployment.methods(workflow))) or "none")
            for rule in workflow.rules:
                software = deployment.rule_software(rule, workflow)
                print(
                    f"rule {rule.name}: {software}; cold: {deployment.cold_reason(rule, workflow)}"
                )
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
