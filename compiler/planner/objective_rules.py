"""The rules of `trainer.objective`: sft (the default) and dpo, preference pairs against a frozen reference
model (`trainer.dpo`)."""

from compiler.core.capabilities import TargetCapabilities
from compiler.spec import InstanceType, Layout, schema
from compiler.spec.errors import ConfigError


def check_objective(
    config: schema.Config, instance: InstanceType, layout: Layout, targets: TargetCapabilities
) -> list[str]:
    trainer = config.trainer
    if trainer.objective is schema.Objective.sft:
        if trainer.dpo != schema.DpoConfig():
            raise ConfigError("trainer.dpo", "is only used with trainer.objective=dpo", "set trainer.objective=dpo")
        return []
    _check_dpo(trainer.dpo)
    if trainer.entry is schema.Entry.script:
        raise ConfigError(
            "trainer.objective",
            "dpo is the built-in trainer's; a user script trains as it is written",
            "use trainer=default, or leave trainer.objective=sft with trainer=script",
        )
    if layout.pp > 1:
        raise ConfigError("trainer.objective", "dpo is not supported with pipeline parallelism", "set parallelism.pp=1")
    # The loss is built (entrypoint.trainer.dpo_loss); preference data and the trainer's loop are not yet.
    raise ConfigError(
        "trainer.objective",
        "dpo is not built into the trainer yet (preference data and its training loop are missing)",
        "use trainer.objective=sft",
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
