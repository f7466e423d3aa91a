"""What only Slurm checks: that the nodes can reach the image the chosen container runtime starts."""

from compiler.spec import Plan
from compiler.targets.channels import check_checkpoint_readable
from compiler.targets.slurm.translate import runtime


def check(plan: Plan) -> list[str]:
    """Warnings; the values that cannot go into a script are refused by the translator."""
    check_checkpoint_readable(plan)
    kind = runtime(plan)
    if kind.value != "docker" and not plan.image.push:
        return [
            f"{kind.value} pulls the image on every node, and image.push is false: the nodes must reach it under "
            "its local name; set image.push=true image.registry=<registry> to push it where they pull from"
        ]
    return []
