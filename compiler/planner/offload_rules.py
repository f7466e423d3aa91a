"""The offload rules: model state (`parallelism.offload`) and saved activations (`parallelism.activation_offload`)
moved to the host, each refused where the strategy, the devices or the layout cannot honour it."""

from collections.abc import Iterator

from compiler.spec import InstanceType, Layout, schema
from compiler.spec.errors import ConfigError
from compiler.spec.strategies import STRATEGIES, facts


def check_offload(par: schema.ParallelismConfig, instance: InstanceType, layout: Layout) -> Iterator[str]:
    _check_checkpointing_every(par)
    known = facts(par.strategy)
    if par.offload is not schema.Offload.none:
        if not instance.has_gpus:
            raise ConfigError(
                "parallelism.offload",
                "offloading to the host needs GPUs to offload from",
                "set parallelism.offload=none on hardware=cpu",
            )
        if not known.offloads_optimizer:
            raise ConfigError(
                "parallelism.offload",
                f"{par.strategy.value} keeps full model state on every GPU",
                "use a sharded strategy (zero1-3, fsdp) to offload",
            )
        if par.offload is schema.Offload.parameters and not known.offloads_parameters:
            raise ConfigError(
                "parallelism.offload",
                f"{par.strategy.value} does not shard parameters",
                "use zero3 or fsdp to offload parameters, or offload=optimizer",
            )
    if par.activation_offload:
        yield from _check_activation_offload(par, instance, layout)
    elif par.activation_offload_horizon < 0:  # checked whether or not it is used, so no mistake waits
        raise ConfigError(
            "parallelism.activation_offload_horizon",
            f"{par.activation_offload_horizon} blocks is negative",
            "use 0 or more",
        )


def _check_checkpointing_every(par: schema.ParallelismConfig) -> None:
    """Every k-th block recomputed is a variant of full recomputation; the other modes are per op."""
    key, every = "parallelism.activation_checkpointing_every", par.activation_checkpointing_every
    if every < 1:
        raise ConfigError(key, f"is {every}", "give 1 (every block) or more")
    if every > 1 and par.activation_checkpointing is not schema.Checkpointing.full:
        raise ConfigError(
            key,
            f"picks the blocks activation_checkpointing=full recomputes, not {par.activation_checkpointing.value}",
            "set parallelism.activation_checkpointing=full, or activation_checkpointing_every=1",
        )
    if every > 1 and par.activation_offload:
        raise ConfigError(key, "offload moves every block's saved tensors alike", "set it to 1 with activation_offload")


def _check_activation_offload(par: schema.ParallelismConfig, instance: InstanceType, layout: Layout) -> Iterator[str]:
    """The built-in engines of the PyTorch strategies offload each decoder block's saved tensors; DeepSpeed
    runs its own engine, and the pipeline and tensor-parallel blocks are not wired for it."""
    key = "parallelism.activation_offload"
    if not facts(par.strategy).activation_offload:
        offloading = ", ".join(strategy.value for strategy, known in STRATEGIES.items() if known.activation_offload)
        raise ConfigError(
            key,
            f"runs with the PyTorch strategies ({offloading}), not {par.strategy.value}",
            "use parallelism.strategy=fsdp, or DeepSpeed's parallelism.offload",
        )
    for degree, name in ((layout.pp, "pp"), (layout.tp, "tp")):
        if degree > 1:
            raise ConfigError(key, f"is not supported with parallelism.{name} > 1", f"set parallelism.{name}=1")
    if par.activation_checkpointing is schema.Checkpointing.selective:
        raise ConfigError(
            key,
            "moves only each block's input under the op-level selective policy, whose kept tensors stay on the GPU",
            "use parallelism.activation_checkpointing=full, attention or none with activation_offload",
        )
    if par.activation_offload_horizon < 0:
        raise ConfigError(
            "parallelism.activation_offload_horizon",
            f"{par.activation_offload_horizon} blocks is negative",
            "use 0 (fetch each block as its backward starts) or more, 2 by default",
        )
    if not instance.has_gpus:
        yield "activation_offload on CPU copies activations within the same memory: it only costs time"
