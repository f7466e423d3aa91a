"""The process-group backend: nccl on GPUs, gloo on CPU, smddp where the plan asks and it imports."""

import importlib.util
from dataclasses import dataclass

from compiler.spec import Plan
from compiler.spec.strategies import facts


class BackendError(RuntimeError):
    """The plan's backend cannot run on this node."""


@dataclass(frozen=True)
class Backend:
    name: str
    warnings: tuple[str, ...] = ()


def smddp_available() -> bool:
    """SageMaker's data-parallel library registers the 'smddp' backend when this module imports."""
    return importlib.util.find_spec("smdistributed") is not None and (
        importlib.util.find_spec("smdistributed.dataparallel") is not None
    )


def choose_backend(plan: Plan, gpus: int, smddp: bool) -> Backend:
    """`gpus` is what this node has; `smddp` whether SageMaker's library imports here."""
    if not plan.instance.has_gpus:
        return Backend("gloo")
    if gpus < plan.layout.processes_per_node:
        raise BackendError(
            f"the plan starts {plan.layout.processes_per_node} processes per node on {plan.instance.name}, "
            f"but this node has {gpus} GPUs"
        )
    if facts(plan.parallelism.strategy).backend != "smddp":
        return Backend("nccl")
    if smddp:
        return Backend("smddp")
    if plan.parallelism.smddp_fallback:
        return Backend("nccl", ("smddp does not import in this image; using nccl (parallelism.smddp_fallback=true)",))
    raise BackendError(
        "parallelism.strategy=smddp, but smdistributed.dataparallel does not import in this image; "
        "use a SageMaker DLC image (image=dlc), or set parallelism.smddp_fallback=true to run on nccl"
    )
