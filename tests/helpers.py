"""Compose and compile in-process, as the CLI does."""

from compiler.config.compose import compose_config
from compiler.launch.plan import checked_plan
from compiler.spec import Plan

S3_TOKENS = ("data=s3", "data.uri=s3://dockyard-example-data/tokens/")
"""Overrides that read the token file the `s3_tokens` fixture puts in moto's S3."""
PRESETS = ("smoke", "gpt2-124m-p4d", "llama3-8b-p5x4", "llama3-70b-p5x16")


def plan_for(*overrides: str) -> Plan:
    return checked_plan(compose_config(overrides))


def unconstrained_packages(freeze: str, plan: Plan) -> list[str]:
    """The packages `pip freeze` lists in `plan`'s image that neither the image's own pins (torch,
    dockyard's dependencies, the feature and evaluation layers, `image.python_packages`) nor
    images/constraints.txt (and an evaluation's eval-constraints.txt) fix:
    a rebuild could install another version of each."""
    import re

    from compiler.images.render import (
        CONSTRAINTS,
        EVAL_CONSTRAINTS,
        evaluation_dependencies,
        feature_layers,
        python_dependencies,
    )

    def name(requirement: str) -> str:
        return re.sub(r"[-_.]+", "-", re.split(r"[=<>!~ @\[]", requirement.strip(), maxsplit=1)[0]).lower()

    constrained = CONSTRAINTS.read_text().splitlines()
    if plan.eval is not None:
        constrained += EVAL_CONSTRAINTS.read_text().splitlines()
    pinned = {name(line) for line in constrained if line and not line.startswith("#")}
    pinned |= {"torch"} | {name(p) for p in python_dependencies(plan.image)}
    pinned |= {name(p) for layer in feature_layers(plan) for p in layer}
    pinned |= {name(p) for p in evaluation_dependencies(plan)}
    pinned |= {name(p) for p in plan.image.python_packages}
    return sorted(line for line in freeze.splitlines() if line.strip() and name(line) not in pinned)
