"""`dockyard convert RECIPE`: a Hugging Face `TrainingArguments` JSON (`to_json_string`, or the `run_clm`
arguments file HfArgumentParser reads), a TRL config or an axolotl YAML as dockyard overrides, and one line
for each setting dockyard cannot honour.

The overrides state every training default of the HF Trainer the recipe leaves out (`RECIPE_DEFAULTS`), so
the port trains the same whatever experiment preset it is added to. A key that only changes where or how a
run is logged, saved or shared (`NEUTRAL`) has nothing to port; an unknown key is refused unless its value is
empty (null, false, 0, "", [] or {}), which is every recipe tool's "not in use".
"""

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from compiler.spec.errors import ConfigError

RECIPE_DEFAULTS: dict[str, object] = {
    "trainer.lr": 5e-5,
    "trainer.lr_schedule": "linear",
    "trainer.min_lr_ratio": 0.0,
    "trainer.warmup_steps": 0,
    "trainer.weight_decay": 0.0,
    "trainer.adam_beta1": 0.9,
    "trainer.adam_beta2": 0.999,
    "trainer.adam_epsilon": 1e-8,
    "trainer.grad_clip": 1.0,
}
"""transformers' `TrainingArguments` defaults of what dockyard's trainer does, as dockyard overrides."""

SCHEDULES = {
    "linear": "linear",
    "cosine": "cosine",
    "cosine_with_min_lr": "cosine_with_min_lr",
    "constant": "constant",
    "constant_with_warmup": "constant_with_warmup",
    "warmup_stable_decay": "wsd",
}
"""transformers' scheduler names (and axolotl's `lr_scheduler`) dockyard runs, point by point."""

OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adamw_hf", "adamw")
"""`optim` (axolotl: `optimizer`) values that are torch's AdamW, which dockyard's trainer runs."""

TRACKERS = ("tensorboard", "mlflow", "wandb")

NEUTRAL = frozenset(
    """output_dir overwrite_output_dir logging_dir logging_strategy logging_first_step log_on_each_node
    logging_nan_inf_filter include_num_input_tokens_seen log_level log_level_replica disable_tqdm run_name
    project trackio_space_id trackio_bucket_id trackio_static_space_id eval_delay per_device_eval_batch_size
    prediction_loss_only eval_on_start eval_do_concat_batches eval_use_gather_object eval_accumulation_steps
    include_for_metrics batch_eval_metrics save_only_model save_on_each_node save_total_limit
    enable_jit_checkpoint save_safetensors push_to_hub hub_token hub_private_repo hub_model_id hub_strategy
    hub_always_push hub_revision metric_for_best_model greater_is_better skip_memory_metrics do_train do_eval
    do_predict local_rank use_cpu dataloader_num_workers dataloader_pin_memory dataloader_persistent_workers
    dataloader_prefetch_factor dataloader_multiprocessing_context dataloader_in_order dataloader_drop_last
    ddp_find_unused_parameters ddp_bucket_cap_mb ddp_broadcast_buffers ddp_static_graph ddp_backend ddp_timeout
    accelerator_config debug tf32 use_cache torch_empty_cache_steps bf16_full_eval fp16_full_eval label_names
    length_column_name remove_unused_columns average_tokens_across_devices torch_compile_backend
    torch_compile_mode use_liger_kernel liger_kernel_config gradient_checkpointing_kwargs
    activation_checkpointing_kwargs train_sampling_strategy dataset_num_proc flash_attention sdp_attention
    xformers_attention strict wandb_entity wandb_name wandb_watch wandb_log_model dataset_prepared_path""".split()  # noqa: SIM905 (a list literal would take a line a name)
)
"""Keys of where and how a run is logged, saved, shared or scheduled on devices: not what it trains."""


@dataclass
class Conversion:
    overrides: dict[str, object] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    """`key: why`, one line each."""

    def set(self, key: str, value: object) -> None:
        self.overrides[key] = value

    def refuse(self, key: str, why: str) -> None:
        self.refused.append(f"{key}: {why}")

    def lines(self) -> list[str]:
        return [f"{key}={_shown(value)}" for key, value in self.overrides.items()]


def read_recipe(path: Path) -> dict[str, Any]:
    """The recipe's mapping, from JSON or YAML (JSON is YAML, so one reader takes both)."""
    try:
        recipe = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise ConfigError("recipe", f"{path} cannot be read ({str(error).splitlines()[0]})") from error
    if not isinstance(recipe, dict):
        raise ConfigError("recipe", f"{path} holds no mapping of settings", "give a JSON or YAML file of key: value")
    return recipe


def convert(recipe: dict[str, Any]) -> Conversion:
    """The recipe as dockyard overrides, and what cannot be ported."""
    out = Conversion(overrides=dict(RECIPE_DEFAULTS))
    for key, value in recipe.items():
        handler = HANDLERS.get(key)
        if handler is not None:
            try:
                handler(out, value, recipe)
            except (TypeError, ValueError, ZeroDivisionError):
                out.refuse(key, f"{str(value)[:60]!r} is not a value dockyard can read for it")
        elif key in NEUTRAL or _empty(value):
            continue
        else:
            out.refuse(key, REFUSED.get(key, "has no dockyard equivalent"))
    return out


def _empty(value: object) -> bool:
    return value is None or value is False or value in (0, "", "no", "none") or value == [] or value == {}


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(str(v) for v in value) + "]"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _to(key: str, kind: Callable[[Any], object] = float) -> Callable[[Conversion, Any, dict], None]:
    """A key ported as it is (converted to `kind`)."""

    def port(out: Conversion, value: Any, recipe: dict) -> None:
        out.set(key, kind(value))

    return port


def _steps(out: Conversion, value: Any, recipe: dict) -> None:
    if int(value) > 0:  # the Trainer's -1: the epochs decide
        out.set("trainer.steps", int(value))
        out.overrides.pop("trainer.epochs", None)


def _epochs(out: Conversion, value: Any, recipe: dict) -> None:
    if int(recipe.get("max_steps") or -1) <= 0:  # max_steps > 0 overrides the epochs, in the Trainer too
        out.set("trainer.epochs", float(value))


def _schedule(out: Conversion, value: Any, recipe: dict) -> None:
    name = SCHEDULES.get(str(value))
    if name is None:
        return out.refuse("lr_scheduler_type", f"{value} is not a schedule dockyard runs ({', '.join(SCHEDULES)})")
    out.set("trainer.lr_schedule", name)
    kwargs = dict(recipe.get("lr_scheduler_kwargs") or {})
    if "min_lr" in kwargs and recipe.get("learning_rate"):
        kwargs["min_lr_rate"] = kwargs.pop("min_lr") / float(recipe["learning_rate"])
    floor = kwargs.pop("min_lr_rate", kwargs.pop("min_lr_ratio", None))
    if floor is not None:
        out.set("trainer.min_lr_ratio", float(floor))
    elif name == "cosine_with_min_lr" and recipe.get("cosine_min_lr_ratio") is None:
        out.refuse("lr_scheduler_kwargs", "cosine_with_min_lr needs min_lr_rate or min_lr")
    if "num_decay_steps" in kwargs:
        out.set("trainer.decay_steps", int(kwargs.pop("num_decay_steps")))
    shapes = {"warmup_type": "linear", "decay_type": "cosine", "num_cycles": 0.5}
    for kwarg, value_ in kwargs.items():
        if shapes.get(kwarg) != value_:
            out.refuse(f"lr_scheduler_kwargs.{kwarg}", f"{value_} is not dockyard's ({shapes.get(kwarg, 'none')})")


def _cosine_floor(out: Conversion, value: Any, recipe: dict) -> None:
    """axolotl's `cosine_min_lr_ratio`: a cosine down to that fraction of the peak."""
    if value is not None:
        out.set("trainer.lr_schedule", "cosine_with_min_lr")
        out.set("trainer.min_lr_ratio", float(value))


def _warmup(out: Conversion, value: Any, recipe: dict) -> None:
    """transformers 5's `warmup_steps` is a ratio of the steps below 1 (4.x had `warmup_ratio`)."""
    if 0 < float(value) < 1:
        out.set("trainer.warmup_ratio", float(value))
        out.set("trainer.warmup_steps", 0)
    else:
        out.set("trainer.warmup_steps", int(value))


def _warmup_ratio(out: Conversion, value: Any, recipe: dict) -> None:
    if value:
        out.set("trainer.warmup_ratio", float(value))
        out.set("trainer.warmup_steps", 0)


def _optimizer(out: Conversion, value: Any, recipe: dict) -> None:
    if value not in OPTIMIZERS:
        out.refuse("optim", f"{value} is not AdamW, the optimizer dockyard's trainer runs")


def _precision(name: str) -> Callable[[Conversion, Any, dict], None]:
    def port(out: Conversion, value: Any, recipe: dict) -> None:
        if value is True or value == "auto":
            out.set("parallelism.mixed_precision", name)

    return port


def _checkpointing(out: Conversion, value: Any, recipe: dict) -> None:
    if value:
        out.set("parallelism.activation_checkpointing", "full")


def _compile(out: Conversion, value: Any, recipe: dict) -> None:
    if value:
        out.set("trainer.compile", "model")


def _model(out: Conversion, value: Any, recipe: dict) -> None:
    out.set("model", "hf")
    out.set("model.path", str(value))


def _interval(key: str, strategy: str, off: str = "no") -> Callable[[Conversion, Any, dict], None]:
    """logging_steps, save_steps, eval_steps: ported when their strategy counts steps; a ratio (< 1) is not."""

    def port(out: Conversion, value: Any, recipe: dict) -> None:
        if recipe.get(strategy, "steps") in (off, None):
            return
        if recipe.get(strategy, "steps") != "steps" or not float(value) >= 1:
            return out.refuse(strategy, f"{recipe.get(strategy)} with {value}: dockyard counts in steps")
        out.set(key, int(value))

    return port


def _trackers(out: Conversion, value: Any, recipe: dict) -> None:
    names = [value] if isinstance(value, str) else list(value or [])
    if names in (["none"], ["all"]):
        names = [] if names == ["none"] else list(TRACKERS)
    unknown = [name for name in names if name not in TRACKERS]
    if unknown:
        out.refuse("report_to", f"{', '.join(unknown)}: dockyard's trackers are {', '.join(TRACKERS)}")
    out.set("trainer.trackers", ["jsonl", *(name for name in names if name in TRACKERS)])


def _lora(out: Conversion, value: Any, recipe: dict) -> None:
    """axolotl's `adapter: lora` with its `lora_r`, `lora_alpha`, `lora_dropout`, `lora_target_modules`."""
    if value != "lora":
        return out.refuse("adapter", f"{value} is not an adapter dockyard trains (lora)")
    out.set("model.lora.rank", int(recipe.get("lora_r") or 8))
    for key, target in (("lora_alpha", "model.lora.alpha"), ("lora_dropout", "model.lora.dropout")):
        if recipe.get(key) is not None:
            out.set(target, float(recipe[key]))
    if recipe.get("lora_target_modules"):
        out.set("model.lora.targets", list(recipe["lora_target_modules"]))


def _validation(out: Conversion, value: Any, recipe: dict) -> None:
    if value and not 0 < float(value) < 1:
        return out.refuse("val_set_size", f"{value} rows: dockyard holds out a fraction (data.validation)")
    if value:
        out.set("data.validation", float(value))


def _loss_on(out: Conversion, value: Any, recipe: dict) -> None:
    """TRL's `assistant_only_loss`: the loss on the assistant's replies, or on every token."""
    out.set("data.loss_on", "assistant" if value else "all")


def _loss_on_inputs(out: Conversion, value: Any, recipe: dict) -> None:
    """axolotl's `train_on_inputs`: the loss on the prompts too, or on the replies only."""
    out.set("data.loss_on", "all" if value else "assistant")


def _nothing(out: Conversion, value: Any, recipe: dict) -> None:
    """Read by another key's port (`lr_scheduler_kwargs` by the schedule's, `lora_r` by `adapter`'s)."""


HANDLERS: dict[str, Callable[[Conversion, Any, dict], None]] = {
    "learning_rate": _to("trainer.lr"),
    "max_steps": _steps,
    "num_train_epochs": _epochs,
    "num_epochs": _epochs,
    "lr_scheduler_type": _schedule,
    "lr_scheduler": _schedule,
    "lr_scheduler_kwargs": _nothing,
    "cosine_min_lr_ratio": _cosine_floor,
    "warmup_steps": _warmup,
    "warmup_ratio": _warmup_ratio,
    "weight_decay": _to("trainer.weight_decay"),
    "adam_beta1": _to("trainer.adam_beta1"),
    "adam_beta2": _to("trainer.adam_beta2"),
    "adam_epsilon": _to("trainer.adam_epsilon"),
    "max_grad_norm": _to("trainer.grad_clip"),
    "optim": _optimizer,
    "optimizer": _optimizer,
    "seed": _to("trainer.seed", int),
    "per_device_train_batch_size": _to("parallelism.micro_batch", int),
    "micro_batch_size": _to("parallelism.micro_batch", int),
    "gradient_accumulation_steps": _to("parallelism.grad_accum", int),
    "bf16": _precision("bf16"),
    "fp16": _precision("fp16"),
    "gradient_checkpointing": _checkpointing,
    "activation_checkpointing": _checkpointing,
    "torch_compile": _compile,
    "model_name_or_path": _model,
    "base_model": _model,
    "block_size": _to("model.seq_len", int),
    "max_seq_length": _to("model.seq_len", int),
    "max_length": _to("model.seq_len", int),
    "sequence_len": _to("model.seq_len", int),
    "packing": _to("data.packing", bool),
    "sample_packing": _to("data.packing", bool),
    "dataset_text_field": _to("data.field", str),
    "assistant_only_loss": _loss_on,
    "train_on_inputs": _loss_on_inputs,
    "logging_steps": _interval("trainer.log_interval", "logging_strategy"),
    "save_steps": _interval("trainer.checkpoint_interval", "save_strategy"),
    "eval_steps": _interval("trainer.eval_interval", "eval_strategy"),
    "report_to": _trackers,
    "adapter": _lora,
    "lora_r": _nothing,
    "lora_alpha": _nothing,
    "lora_dropout": _nothing,
    "lora_target_modules": _nothing,
    "val_set_size": _validation,
    "save_strategy": _nothing,
    "eval_strategy": _nothing,
}
"""Every recipe key dockyard reads, by its name in TrainingArguments, TRL or axolotl."""

REFUSED: dict[str, str] = {
    "label_smoothing_factor": "dockyard's loss has no label smoothing",
    "neftune_noise_alpha": "dockyard adds no noise to the embeddings",
    "optim_args": "dockyard's AdamW takes adam_beta1, adam_beta2 and adam_epsilon only",
    "optim_target_modules": "dockyard's AdamW trains every parameter",
    "auto_find_batch_size": "dockyard fits the batch when planning (parallelism.micro_batch=auto)",
    "full_determinism": "dockyard seeds its runs (trainer.seed) but does not force deterministic kernels",
    "data_seed": "dockyard's data order follows trainer.seed",
    "fsdp": "choose parallelism=fsdp (or fsdp-hybrid) instead",
    "fsdp_config": "choose parallelism=fsdp (or fsdp-hybrid) instead",
    "deepspeed": "choose parallelism=zero1, zero2 or zero3 instead",
    "parallelism_config": "set parallelism.tp / parallelism.pp instead",
    "resume_from_checkpoint": "resume with dockyard launch --resume RUN",
    "load_best_model_at_end": "dockyard keeps the final model",
    "ignore_data_skip": "a resumed dockyard run always continues its data where it stopped",
    "restore_callback_states_from_checkpoint": "dockyard's trainer has no callbacks",
    "datasets": "name the data with data=local data.path=... (or s3) and data.format=text or chat",
    "dataset_name": "name the data with data=local data.path=... (or s3) and data.format=text or chat",
    "train_file": "name the data with data=local data.path=... (or s3) and data.format=text or chat",
}
"""Keys that change what is trained in a way dockyard does not, unless left empty: why, and what to do."""


def print_conversion(path: Path) -> int:
    """`dockyard convert`: the overrides on stdout, one a line; what cannot be ported on stderr, one line each;
    exit status 2 when anything was refused."""
    conversion = convert(read_recipe(path))
    print("\n".join(conversion.lines()))
    for line in conversion.refused:
        print(f"dockyard: cannot honour {line}", file=sys.stderr)
    return 2 if conversion.refused else 0
