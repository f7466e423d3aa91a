"""The optimizer's and the learning-rate schedule's rules, the warm-up and epoch counts they resolve to, and
the training settings of a plan that differ from the Hugging Face Trainer's defaults (said in the summary, so a
recipe ported from the Trainer never trains differently without a word)."""

import dataclasses
import math
from collections.abc import Iterator

from compiler.core import grammar
from compiler.spec import schema
from compiler.spec.errors import ConfigError
from compiler.spec.schema import LrSchedule

TRAINER_DEFAULTS: dict[str, object] = {
    "lr_schedule": LrSchedule.linear,
    "weight_decay": 0.0,
    "adam_beta1": 0.9,
    "adam_beta2": 0.999,
    "adam_epsilon": 1e-8,
    "grad_clip": 1.0,
}
"""transformers' `TrainingArguments` defaults, by dockyard's key (lr_scheduler_type, weight_decay, adam_beta1,
adam_beta2, adam_epsilon, max_grad_norm): what `trainer=finetune` sets and the summary compares against."""

FLOOR_SCHEDULES = (LrSchedule.cosine_with_min_lr, LrSchedule.wsd, LrSchedule.cosine_to_min)
"""The schedules that end at lr × min_lr_ratio rather than 0 (or never decay)."""


def check_schedule(trainer: schema.TrainerConfig) -> Iterator[str]:
    """AdamW's coefficients, the warm-up (in steps or as a ratio), the decay of wsd, and the epochs."""
    for name in ("adam_beta1", "adam_beta2"):
        if not 0 <= getattr(trainer, name) < 1:
            raise ConfigError(f"trainer.{name}", f"must be in [0, 1) (got {getattr(trainer, name)})")
    if not 0 < trainer.adam_epsilon < math.inf:
        raise ConfigError("trainer.adam_epsilon", f"must be positive (got {trainer.adam_epsilon})", "use 1e-8")
    _check_floor(trainer)
    if trainer.warmup_steps < 0:
        raise ConfigError("trainer.warmup_steps", f"cannot be negative (got {trainer.warmup_steps})")
    if not 0 <= trainer.warmup_ratio < 1:
        raise ConfigError("trainer.warmup_ratio", f"must be in [0, 1) (got {trainer.warmup_ratio})")
    if trainer.warmup_ratio and trainer.warmup_steps:
        raise ConfigError(
            "trainer.warmup_ratio",
            f"is set with trainer.warmup_steps={trainer.warmup_steps}: two lengths for one warm-up",
            "set one of them to 0",
        )
    if trainer.epochs is not None and not 0 < trainer.epochs < math.inf:
        raise ConfigError(
            "trainer.epochs",
            f"must be a positive number (got {trainer.epochs})",
            "give the passes over the data, or null to use trainer.steps",
        )
    warmup = warmup_steps(trainer)
    if trainer.lr_schedule is LrSchedule.constant and warmup:
        raise ConfigError(
            "trainer.lr_schedule",
            "constant has no warm-up (transformers' constant schedule)",
            "use lr_schedule=constant_with_warmup, or no warm-up",
        )
    _check_decay(trainer, warmup)
    if warmup >= trainer.steps:
        yield f"the warm-up lasts the whole run ({warmup} of {trainer.steps} steps): the lr never reaches trainer.lr"


DEFAULT_FLOOR = 0.1
"""`trainer.min_lr_ratio` where the config leaves it unset."""


def _check_floor(trainer: schema.TrainerConfig) -> None:
    floor = trainer.min_lr_ratio
    if floor is None:
        return
    if not 0 <= floor <= 1:
        raise ConfigError("trainer.min_lr_ratio", "must be between 0 and 1")
    if floor and trainer.lr_schedule not in FLOOR_SCHEDULES:
        raise ConfigError(
            "trainer.min_lr_ratio",
            f"{floor:g} has no effect: lr_schedule={trainer.lr_schedule.value} has no floor",
            f"use lr_schedule={' or '.join(s.value for s in FLOOR_SCHEDULES)}, or drop trainer.min_lr_ratio",
        )


def with_floor(trainer: schema.TrainerConfig) -> schema.TrainerConfig:
    """`trainer` with `min_lr_ratio` as the plan records it (the default where unset), after the checks."""
    return trainer if trainer.min_lr_ratio is not None else dataclasses.replace(trainer, min_lr_ratio=DEFAULT_FLOOR)


def _check_decay(trainer: schema.TrainerConfig, warmup: int) -> None:
    if trainer.decay_steps < 0:
        raise ConfigError("trainer.decay_steps", f"cannot be negative (got {trainer.decay_steps})")
    if trainer.lr_schedule is not LrSchedule.wsd:
        if trainer.decay_steps:
            raise ConfigError("trainer.decay_steps", "is only used by lr_schedule=wsd", "set it to 0")
        return
    if trainer.decay_steps < 1:
        raise ConfigError("trainer.decay_steps", "is needed by lr_schedule=wsd", "give the steps of the final decay")
    if warmup + trainer.decay_steps > trainer.steps:
        raise ConfigError(
            "trainer.decay_steps",
            f"{trainer.decay_steps} with {warmup} warm-up steps is past the run's {trainer.steps} steps",
            "give fewer decay or warm-up steps",
        )


def warmup_steps(trainer: schema.TrainerConfig) -> int:
    """The warm-up's length in steps: `warmup_steps`, or `warmup_ratio` of the steps rounded up as the Trainer
    rounds it (`TrainingArguments.get_warmup_steps`)."""
    return math.ceil(trainer.steps * trainer.warmup_ratio) if trainer.warmup_ratio else trainer.warmup_steps


def steps_for_epochs(epochs: float, dataset_tokens: int | None, tokens_per_step: int) -> int:
    """The optimizer steps that make `epochs` passes over `dataset_tokens` tokens (rounded up, at least 1)."""
    if dataset_tokens is None:
        raise ConfigError(
            "trainer.epochs",
            "needs the training data's token count, and no data.tokens or earlier run's token cache gives it",
            "set data.tokens=N, or trainer.steps instead",
        )
    steps = max(1, math.ceil(epochs * dataset_tokens / tokens_per_step))
    if steps > grammar.INT64_MAX:
        raise ConfigError("trainer.epochs", f"{epochs:g} makes {steps:.3g} steps, past the 64 bits a plan holds")
    return steps


def differences_from_trainer(trainer: schema.TrainerConfig) -> list[str]:
    """`key value (Trainer's value)` for every setting that trains differently from the HF Trainer's default."""
    differences = [
        f"{key} {_shown(getattr(trainer, key))} ({_shown(default)})"
        for key, default in TRAINER_DEFAULTS.items()
        if getattr(trainer, key) != default
    ]
    if trainer.lr_schedule in FLOOR_SCHEDULES:
        differences.append(f"min_lr_ratio {trainer.min_lr_ratio:g} (0)")
    return differences


def _shown(value: object) -> str:
    if isinstance(value, LrSchedule):
        return value.value
    return f"{value:g}" if isinstance(value, float) else str(value)
