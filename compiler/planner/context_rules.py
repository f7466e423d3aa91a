"""The rules of context parallelism (`parallelism.cp`, `parallelism.cp_method`): each sequence is split over cp
ranks borrowed from the data-parallel ones, and attention sees the whole sequence through an all-to-all over heads
(Ulysses). What the runtime does is in `entrypoint/trainer/context_parallel.py` (and, for `model=hf`, through
transformers' attention interface, `entrypoint/trainer/models/pretrained_context.py`)."""

from compiler.core.capabilities import TargetCapabilities
from compiler.spec import InstanceType, Layout, schema
from compiler.spec.errors import ConfigError

PRETRAINED = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gpt2")
"""`model=hf` architectures whose attention runs split (each tested against the whole model): positions from
`position_ids` (rotary, or GPT-2's table) and transformers' SDPA attention, without sinks or latents."""

STRATEGIES = (schema.Strategy.ddp, schema.Strategy.fsdp, schema.Strategy.fsdp_hybrid)
"""The engines whose trainer splits sequences (torch's native DDP and FSDP2)."""


def check_context_parallel(
    config: schema.Config, instance: InstanceType, layout: Layout, targets: TargetCapabilities
) -> list[str]:
    par, model, cp = config.parallelism, config.model, layout.cp
    if cp == 1:
        return []
    if par.cp_method is schema.ContextParallelMethod.ring:
        if not instance.has_gpus:
            raise ConfigError(
                "parallelism.cp_method",
                "ring attention runs on CUDA's attention kernels only, and this hardware has no GPU",
                "use parallelism.cp_method=alltoall",
            )
        raise ConfigError("parallelism.cp_method", "ring attention is not built into the trainer yet", "use alltoall")
    if config.trainer.entry is schema.Entry.script:
        raise ConfigError("parallelism.cp", "splits sequences in the built-in trainer", "remove it with trainer=script")
    if par.strategy not in STRATEGIES:
        names = ", ".join(strategy.value for strategy in STRATEGIES)
        raise ConfigError(
            "parallelism.cp", f"cp={cp} runs with strategy {names}, not {par.strategy.value}", "change the strategy"
        )
    if model.family == "hf" and model.architecture not in PRETRAINED:
        raise ConfigError(
            "parallelism.cp",
            f"model=hf splits sequences for {', '.join(PRETRAINED)}, not {model.architecture}",
            "remove parallelism.cp, or use one of those architectures",
        )
    if layout.tp > 1 or layout.pp > 1:
        raise ConfigError("parallelism.cp", f"cp={cp} runs with tp=1 and pp=1", "use cp or tp/pp, not both")
    if model.seq_len % (2 * cp):
        raise ConfigError(
            "model.seq_len",
            f"{model.seq_len} does not split into 2 × cp = {2 * cp} equal chunks (two per rank, for causal balance)",
            f"use a multiple of {2 * cp}",
        )
    for key, heads in (("heads", model.heads), ("kv_heads", model.kv_heads)):
        if heads % cp:
            raise ConfigError(
                f"model.{key}",
                f"{heads} {key} do not divide over cp={cp} ranks (the all-to-all gives each rank heads / cp)",
                f"use a cp that divides {heads}",
            )
    if config.trainer.loss_chunk < 1:
        raise ConfigError(
            "trainer.loss_chunk", "0 (the whole logits) does not split over cp ranks", "leave it at its default"
        )
    return []
