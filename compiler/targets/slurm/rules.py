"""What only Slurm checks: that the nodes can reach the image the chosen container runtime starts."""

from compiler.spec import Plan
from compiler.targets.channels import check_checkpoint_readable
from compiler.targets.host_user import invoking_user
from compiler.targets.slurm.translate import check_names, runtime, time_limit


def check(plan: Plan) -> list[str]:
    """What sbatch would refuse in the script's header, and warnings; the values that depend on the run
    (its folder) are refused by the translator."""
    check_names(plan)
    time_limit(plan.target.max_run_hours)
    check_checkpoint_readable(plan, invoking_user())
    kind = runtime(plan)
    if kind.value != "docker" and not plan.image.push:
        return [
            f"{kind.value} pulls the image on every node, and image.push is false: the nodes must reach it under "
            "its local name; set image.push=true image.registry=<registry> to push it where they pull from"
        ]
    return []
