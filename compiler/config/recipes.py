"""`dockyard convert RECIPE`: a Hugging Face `TrainingArguments` JSON (`to_json_string` of transformers 4.x or
5, or the `run_clm` arguments file HfArgumentParser reads), a TRL or alignment-handbook config (SFT, DPO) or an
axolotl YAML as dockyard overrides, and one line for each setting dockyard cannot honour.

Every key is ported, ignored as neutral (`recipe_keys.NEUTRAL`: logging, saving, evaluation cadence, hub
pushing, kernels and loaders; listed once at the end), or refused in one line naming the recipe's own key.
The overrides also state the defaults of the recipe's tool where the recipe is silent (`source_tool`), so
the port trains as the tool would whatever experiment preset it is added to. A blank value (null or "") is
every recipe tool's "unused"; an unknown key is refused unless its value is empty (false, 0, [] or {} too).
"""

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from compiler.config.recipe_data import held_out, port_data
from compiler.config.recipe_keys import (
    ADAMW,
    ADAMW_8BIT,
    DATA_KEYS,
    DATA_WHY,
    NEUTRAL,
    REFUSED,
    Conversion,
    Handler,
    source_tool,
)
from compiler.config.recipe_model import (
    adapter,
    chat_template,
    dpo_loss,
    eot_tokens,
    label_smoothing,
    load_in_4bit,
    load_in_8bit,
    rl,
    special_tokens,
    unfrozen_parameters,
    use_peft,
)
from compiler.spec.errors import ConfigError

SCHEDULES = {
    "linear": "linear",
    "cosine": "cosine",
    "cosine_with_min_lr": "cosine_with_min_lr",
    "constant": "constant",
    "constant_with_warmup": "constant_with_warmup",
    "warmup_stable_decay": "wsd",
}
"""transformers' scheduler names (and axolotl's `lr_scheduler`) dockyard runs, point by point."""

TRACKERS = ("tensorboard", "mlflow", "wandb")


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
    tool, defaults = source_tool(recipe)
    out = Conversion(overrides=dict(defaults))
    out.notes.append(f"{tool} recipe: its defaults are stated where it leaves a setting out")
    files = [key for key in ("train_file", "validation_file") if recipe.get(key)]
    if files:
        out.refuse(", ".join(files), DATA_WHY)
    port_data(out, recipe)
    for key, value in recipe.items():
        handler = HANDLERS.get(key)
        if value is None or value == "":
            continue
        if handler is not None:
            try:
                handler(out, key, value, recipe)
            except (TypeError, ValueError, ZeroDivisionError, AttributeError):
                out.refuse(key, f"{str(value)[:60]!r} is not a value dockyard can read for it")
        elif _empty(value) or key in DATA_KEYS:
            continue
        elif key in NEUTRAL:
            out.ignored.append(key)
        else:
            out.refuse(key, REFUSED.get(key, "has no dockyard equivalent"))
    return out


def _empty(value: object) -> bool:
    return value is False or value in (0, "no", "none") or value == [] or value == {}


def _to(target: str, kind: Callable[[Any], object] = float) -> Handler:
    """A key ported as it is (converted to `kind`)."""

    def port(out: Conversion, key: str, value: Any, recipe: dict) -> None:
        out.set(target, kind(value))

    return port


def _flag(target: str, when_true: object, when_false: object) -> Handler:
    """A boolean key ported as one of two values (`assistant_only_loss` as data.loss_on)."""

    def port(out: Conversion, key: str, value: Any, recipe: dict) -> None:
        if not isinstance(value, bool):
            raise ValueError(value)
        out.set(target, when_true if value else when_false)

    return port


def _steps(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    if int(value) > 0:  # the Trainer's -1: the epochs decide
        out.set("trainer.steps", int(value))
        out.overrides.pop("trainer.epochs", None)


def _epochs(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    if int(recipe.get("max_steps") or -1) <= 0:  # max_steps > 0 overrides the epochs, in the Trainer too
        out.set("trainer.epochs", float(value))


def _schedule(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    name = SCHEDULES.get(str(value))
    if name is None:
        return out.refuse(key, f"{value} is not a schedule dockyard runs ({', '.join(SCHEDULES)})")
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


def _cosine_floor(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """axolotl's `cosine_min_lr_ratio`: a cosine down to that fraction of the peak."""
    out.set("trainer.lr_schedule", "cosine_with_min_lr")
    out.set("trainer.min_lr_ratio", float(value))


def _warmup(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """transformers 5's `warmup_steps` is a ratio of the steps below 1 (4.x had `warmup_ratio`)."""
    if 0 < float(value) < 1:
        out.set("trainer.warmup_ratio", float(value))
        out.set("trainer.warmup_steps", 0)
    else:
        out.set("trainer.warmup_steps", int(value))


def _warmup_ratio(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    if float(value):
        out.set("trainer.warmup_ratio", float(value))
        out.set("trainer.warmup_steps", 0)


def _optimizer(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    if value in ADAMW_8BIT:
        out.notes.append(
            f"{key}: {value} keeps AdamW's two moments in 8 bits; dockyard's AdamW keeps them in fp32, 8 bytes a "
            "trained parameter instead of 2 (the plan's memory estimate counts them)"
        )
    elif value not in ADAMW:
        out.refuse(key, f"{value} is not AdamW, the optimizer dockyard's trainer runs")


def _precision(name: str) -> Handler:
    def port(out: Conversion, key: str, value: Any, recipe: dict) -> None:
        if value is True or value == "auto":
            out.set("parallelism.mixed_precision", name)

    return port


def _checkpointing(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    if value:
        out.set("parallelism.activation_checkpointing", "full")


def _compile(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    if value:
        out.set("trainer.compile", "model")


def _model(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    out.set("model", "hf")
    out.set("model.path", str(value))


def _revision(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    if str(value) != "main":  # the Hub's default branch, which every load reads anyway
        out.set("model.revision", str(value))


def _interval(target: str, strategy: str, off: str = "no") -> Handler:
    """logging_steps, save_steps, eval_steps: ported when their strategy counts steps; a ratio (< 1) is not."""

    def port(out: Conversion, key: str, value: Any, recipe: dict) -> None:
        chosen = recipe.get(
            strategy, recipe.get("evaluation_strategy", "steps") if strategy == "eval_strategy" else "steps"
        )
        if chosen in (off, None):
            return
        if chosen != "steps" or not float(value) >= 1:
            return out.refuse(strategy, f"{chosen} with {value}: dockyard counts in steps")
        out.set(target, int(value))

    return port


def _trackers(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    names = [value] if isinstance(value, str) else list(value or [])
    if names in (["none"], ["all"]):
        names = [] if names == ["none"] else list(TRACKERS)
    unknown = [name for name in names if name not in TRACKERS]
    if unknown:
        out.refuse(key, f"{', '.join(unknown)}: dockyard's trackers are {', '.join(TRACKERS)}")
    out.set("trainer.trackers", ["jsonl", *(name for name in names if name in TRACKERS)])


def _validation(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """axolotl's `val_set_size`: a fraction of the rows, or (1 and more) a number of rows; 0 holds out none."""
    if float(value):
        out.set("data.validation", held_out(value))


def _packing(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """TRL's `packing` with its `packing_strategy`: bfd (TRL's default: whole documents per window, which TRL's
    padding-free forward keeps from attending to each other) or wrapped (the stream cut at window edges, attending
    across documents)."""
    if not isinstance(value, bool):
        raise ValueError(value)
    out.set("data.packing", value)
    if not value:
        return
    strategy = recipe.get("packing_strategy") or "bfd"
    if strategy not in ("bfd", "wrapped"):
        return out.refuse("packing_strategy", f"{strategy}: dockyard packs bfd (whole documents) or wrapped")
    out.set("data.packing_strategy", strategy)
    if strategy == "bfd":
        out.set("data.packing_mask", True)


def _sample_packing(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """axolotl's `sample_packing`: whole samples packed into windows (its multipack sampler's first-fit
    decreasing; dockyard's best fit keeps them as whole, filling windows a little differently), which do not
    attend to each other."""
    _packing(out, key, value, {})  # bfd and masked, TRL's default strategy


def _dataset_kwargs(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """TRL's `dataset_kwargs` that say what dockyard does anyway: no special tokens added to a rendered
    conversation (its template holds them), no separator token between unpacked samples."""
    kept = {name: flag for name, flag in dict(value).items() if flag is not False}
    if kept or (recipe.get("packing") and "append_concat_token" in value):
        out.refuse(key, f"{value}: dockyard tokenizes and separates documents as it does for every recipe")


def _data_seed(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    if value != recipe.get("seed"):
        out.refuse(key, "dockyard's data order follows trainer.seed; give data_seed the seed's value or remove it")


def _fsdp_config(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """Saved with FSDP off too (transformers 4.x writes its defaults): then it changes nothing."""
    if recipe.get("fsdp"):
        out.refuse(key, "choose parallelism=fsdp (or fsdp-hybrid) instead")


def _past_index(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    if int(value) != -1:  # the Trainer's default: no model memory (Transformer-XL's mems) carried over
        out.refuse(key, "dockyard's models carry no memory between batches")


def _nothing(out: Conversion, key: str, value: Any, recipe: dict) -> None:
    """Read by another key's port (`lr_scheduler_kwargs` by the schedule's, `lora_r` by `adapter`'s, the
    `bnb_4bit_*` keys by `load_in_4bit`'s)."""


HANDLERS: dict[str, Handler] = {
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
    "data_seed": _data_seed,
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
    "model_revision": _revision,
    "block_size": _to("model.seq_len", int),
    "max_seq_length": _to("model.seq_len", int),
    "max_length": _to("model.seq_len", int),
    "sequence_len": _to("model.seq_len", int),
    "max_prompt_length": _to("data.max_prompt_length", int),
    "max_prompt_len": _to("data.max_prompt_length", int),
    "packing": _packing,
    "packing_strategy": _nothing,
    "sample_packing": _sample_packing,
    "dataset_text_field": _to("data.field", str),
    "assistant_only_loss": _flag("data.loss_on", "assistant", "all"),
    "train_on_inputs": _flag("data.loss_on", "all", "assistant"),
    "logging_steps": _interval("trainer.log_interval", "logging_strategy"),
    "save_steps": _interval("trainer.checkpoint_interval", "save_strategy"),
    "eval_steps": _interval("trainer.eval_interval", "eval_strategy"),
    "report_to": _trackers,
    "adapter": adapter,
    "use_peft": use_peft,
    "lora_r": _nothing,
    "lora_alpha": _nothing,
    "lora_dropout": _nothing,
    "lora_target_modules": _nothing,
    "lora_target_linear": _nothing,
    "load_in_4bit": load_in_4bit,
    "load_in_8bit": load_in_8bit,
    "bnb_4bit_quant_type": _nothing,
    "bnb_4bit_use_double_quant": _nothing,
    "use_bnb_nested_quant": _nothing,
    "bnb_4bit_compute_dtype": _nothing,
    "bnb_4bit_quant_storage": _nothing,
    "bnb_config_kwargs": _nothing,
    "val_set_size": _validation,
    "early_stopping_patience": _to("trainer.early_stopping_patience", int),
    "save_strategy": _nothing,
    "eval_strategy": _nothing,
    "rl": rl,
    "beta": _to("trainer.dpo.beta"),
    "rl_beta": _to("trainer.dpo.beta"),
    "dpo_beta": _to("trainer.dpo.beta"),
    "loss_type": dpo_loss,
    "label_smoothing": label_smoothing,
    "precompute_ref_log_probs": _flag("trainer.dpo.precompute_reference", True, False),
    "special_tokens": special_tokens,
    "chat_template": chat_template,
    "chat_template_jinja": chat_template,
    "eot_tokens": eot_tokens,
    "dataset_kwargs": _dataset_kwargs,
    "fsdp_config": _fsdp_config,
    "past_index": _past_index,
    "unfrozen_parameters": unfrozen_parameters,
}
"""Every recipe key dockyard reads, by its name in TrainingArguments, TRL, the alignment-handbook or axolotl."""


def print_conversion(path: Path) -> int:
    """`dockyard convert`: the overrides on stdout, one a line; on stderr what is read how, what cannot be
    ported (one line each) and the neutral keys left out (one line); exit status 2 when anything was refused."""
    conversion = convert(read_recipe(path))
    print("\n".join(conversion.lines()))
    for line in conversion.notes:
        print(f"dockyard: note: {line}", file=sys.stderr)
    for line in conversion.refused:
        print(f"dockyard: cannot honour {line}", file=sys.stderr)
    if conversion.ignored:
        print(f"dockyard: ignored (what it trains is unchanged): {', '.join(conversion.ignored)}", file=sys.stderr)
    return 2 if conversion.refused else 0
