"""The rules of `trainer.objective`: sft (the default) and dpo, preference pairs against a frozen reference
model (`trainer.dpo`)."""

from compiler.core.capabilities import TargetCapabilities
from compiler.spec import InstanceType, Layout, schema
from compiler.spec.errors import ConfigError
from compiler.spec.strategies import TORCH_ENGINE, facts


def check_objective(
    config: schema.Config, instance: InstanceType, layout: Layout, targets: TargetCapabilities
) -> list[str]:
    trainer, data = config.trainer, config.data
    preference = data.format is schema.DataFormat.preference
    _check_prompt_length(data, config.model.seq_len, preference)
    if trainer.objective is schema.Objective.sft:
        if trainer.dpo != schema.DpoConfig():
            raise ConfigError("trainer.dpo", "is only used with trainer.objective=dpo", "set trainer.objective=dpo")
        if preference:
            raise ConfigError(
                "data.format", "preference pairs train with trainer.objective=dpo", "set trainer.objective=dpo"
            )
        return []
    _check_dpo(trainer.dpo)
    if trainer.entry is schema.Entry.script:
        raise ConfigError(
            "trainer.objective",
            "dpo is the built-in trainer's; a user script trains as it is written",
            "use trainer=default, or leave trainer.objective=sft with trainer=script",
        )
    if not preference:
        raise ConfigError(
            "data.format",
            f"trainer.objective=dpo trains on preference pairs, not {data.format.value}",
            "set data.format=preference with rows of prompt, chosen and rejected",
        )
    if data.loss_on is not schema.LossOn.assistant:
        raise ConfigError(
            "data.loss_on", "a pair's log-probabilities cover its completions only", "remove data.loss_on=all"
        )
    if data.packing_mask:
        raise ConfigError("data.packing_mask", "preference pairs are never packed", "remove data.packing_mask")
    if layout.pp > 1:
        raise ConfigError("trainer.objective", "dpo is not supported with pipeline parallelism", "set parallelism.pp=1")
    _check_reference(config)
    return []


def _check_prompt_length(data: schema.DataConfig, seq_len: int, preference: bool) -> None:
    if data.max_prompt_length is None:
        return
    if not preference:
        raise ConfigError(
            "data.max_prompt_length", "cuts a preference pair's prompt", "set data.format=preference, or remove it"
        )
    if not 0 < data.max_prompt_length < seq_len:
        raise ConfigError(
            "data.max_prompt_length",
            f"must leave the completion room in model.seq_len={seq_len} (got {data.max_prompt_length})",
            f"give a length between 1 and {seq_len - 1}",
        )


def _check_reference(config: schema.Config) -> None:
    """What the trainer's reference model supports so far: the base model under LoRA (DDP, FSDP2, ZeRO), and a
    frozen copy: whole beside DDP's and ZeRO-1/2's replicas, sharded as FSDP2 shards the policy."""
    strategy = config.parallelism.strategy
    if not config.model.lora.rank and facts(strategy).engine != TORCH_ENGINE and facts(strategy).shards_parameters:
        raise ConfigError(
            "model.lora.rank",
            f"a frozen copy of the model as the reference is not built for {strategy.value}'s partitions yet",
            "set model.lora.rank (the reference is then the base model), or parallelism.strategy=fsdp",
        )


def _check_dpo(dpo: schema.DpoConfig) -> None:
    if not dpo.beta > 0:
        raise ConfigError("trainer.dpo.beta", f"must be positive (got {dpo.beta})", "use a value like 0.1")
    if not 0 <= dpo.label_smoothing < 0.5:
        raise ConfigError(
            "trainer.dpo.label_smoothing",
            f"must be in [0, 0.5) (got {dpo.label_smoothing})",
            "give the probability that a pair's preference is flipped, like 0.1",
        )
    if dpo.label_smoothing and dpo.loss is not schema.DpoLoss.robust:
        raise ConfigError(
            "trainer.dpo.label_smoothing",
            f"is the flip probability of loss=robust, unused by loss={dpo.loss.value}",
            "set trainer.dpo.loss=robust, or trainer.dpo.label_smoothing=0",
        )
