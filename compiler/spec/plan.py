"""The Plan: the contract between the compiler and the runtime, as frozen dataclasses and canonical JSON.

Everything a build, a target and the entrypoint need is here, validated by `compiler.planner` and never
changed after. The JSON is canonical (sorted keys, no whitespace). The content hash covers what the run
does: the predictions (`estimate`) and the warnings' wording are left out, so re-tuning the planner does
not rename every plan or invalidate a checkpoint's metadata.

Reading a plan checks its `schema_version` first and then every field: a missing or unknown field is a
`PlanError` naming it, never a KeyError from deep inside the trainer. Standard library only.
"""

import dataclasses
import hashlib
import json
import types
import typing
from dataclasses import dataclass, fields, is_dataclass
from enum import Enum
from functools import cached_property
from typing import Any

from compiler.spec import schema
from compiler.spec.errors import ConfigError
from compiler.spec.records import Batch, DatasetTokens, Derived, Estimate, InstanceType, Layout

SCHEMA_VERSION = 7
"""2: the runtime's values resolved into `derived`; the hash leaves out `estimate` and `warnings`.
3: `model.family` and `trainer.metrics` name the model and the metrics sinks from the trainer's registries.
4: `trainer.metrics` is `trainer.trackers`, with `trainer.mlflow` and `trainer.wandb`; `model.path`, `init`,
   `lora`, `architecture` and `head_dim` (model=hf); `data.format` and the document fields; the image's
   Hugging Face, document and tracker pins.
6: `active_parameters` and `model.moe`, `model.mla`, `model.quantization` (mixtures of experts); the `ep`, `cp`
   and `cp_method` degrees (and the layout's); `trainer.loss_chunk` (the streamed loss), `trainer.eval_tasks`
   and the `eval` section; `data=hf` and `data.mixture`; `hardware.network_gbps`; `activation_checkpointing`'s
   `selective` is the op-level policy (the old mode is `attention`).
7: `job` (train, tokenize, evaluate) instead of `target.environment.DOCKYARD_JOB` and the eval section's
   presence; `data.overlong`, `chat_template`, `eos_token`, `columns`, `message_keys`, `roles`; `model.revision`;
   `model.lora.quantize_base` and `double_quant` with `image.bitsandbytes` (QLoRA);
   `parallelism.activation_checkpointing_every`; `trainer.early_stopping_patience`, `sample_prompts` and
   `sample_max_new_tokens`; `model.trainable_parameters` and `trainable_count`; `data.packing_strategy`;
   `eval.adapter`."""
PREDICTIONS = ("estimate", "warnings", "dataset")
"""Fields that describe the planner's view of the run, not the run: outside the content hash."""
ONLY_WHEN_SET = ("eval",)
"""Sections a plan holds only when they are set: a training plan's JSON and hash stay as they were."""


class PlanError(ConfigError):
    """A plan file that this version cannot read: the field and the schema version are named."""


@dataclass(frozen=True, kw_only=True)
class Plan:
    name: str
    model: schema.ModelConfig
    parallelism: schema.ParallelismConfig
    hardware: schema.HardwareConfig
    instance: InstanceType
    data: schema.DataConfig
    image: schema.ImageConfig
    target: schema.TargetConfig
    trainer: schema.TrainerConfig
    layout: Layout
    batch: Batch
    parameters: int
    """Trainable parameters of the whole model (a mixture of experts': all its experts)."""
    active_parameters: int
    """Parameters one token passes through: `parameters` less the routed experts it is not sent to."""
    derived: Derived
    estimate: Estimate | None
    """Predicted memory and speed per GPU; None on CPU instances."""
    warnings: tuple[str, ...]
    dataset: DatasetTokens | None = None
    """The training data's token count when the host knows it (`data.tokens`, or an earlier run's token cache
    of the same data, tokenizer and options): the summary's epochs and time per epoch."""
    chat_date: str | None = None
    """data.format=chat: the day the plan was compiled (ISO, UTC), which the chat template's `strftime_now`
    reads on every node and every attempt, so that a resumed run tokenizes as its first attempt did."""
    eval: schema.EvalConfig | None = None
    """The harness's options: `dockyard eval` (`job` evaluate: the job evaluates `model.path` with
    lm-evaluation-harness instead of training), or a training run's `trainer.eval_tasks`."""
    job: schema.Job = schema.Job.train
    """What the job does on its nodes: train, tokenize (`dockyard tokenize`) or evaluate (`dockyard eval`)."""
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        plain = _plain(self)
        return {key: value for key, value in plain.items() if not (key in ONLY_WHEN_SET and value is None)}

    def to_json(self, indent: int | None = None) -> str:
        return _canonical(self.to_dict(), indent)

    @cached_property
    def content_hash(self) -> str:
        """sha256 of the canonical JSON of what the run does (every field but the predictions)."""
        identity = {key: value for key, value in self.to_dict().items() if key not in PREDICTIONS}
        return hashlib.sha256(_canonical(identity).encode()).hexdigest()

    @property
    def price_per_hour(self) -> float:
        per_node = self.hardware.price_per_hour
        return (self.instance.price_per_hour if per_node is None else per_node) * self.layout.nodes

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Plan":
        if not isinstance(data, dict):
            raise PlanError("plan", "is not a JSON object", "recompile it with `dockyard plan`")
        if data.get("schema_version") != SCHEMA_VERSION:
            raise PlanError(
                "schema_version",
                f"plan schema version {data.get('schema_version')!r} is not {SCHEMA_VERSION}",
                "recompile the plan with this version of dockyard",
            )
        return _typed(cls, data, "")

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        try:
            data = json.loads(text)
        except ValueError as error:
            raise PlanError("plan", f"is not valid JSON ({error})", "recompile it with `dockyard plan`") from None
        return cls.from_dict(data)


def model_from_dict(data: dict[str, Any]) -> schema.ModelConfig:
    """The plan's `model` section, as `Plan.to_dict` writes it, as its type (what a weights format is given)."""
    model: schema.ModelConfig = _typed(schema.ModelConfig, data, "model.")
    return model


def _canonical(value: Any, indent: int | None = None) -> str:
    separators = (",", ": ") if indent else (",", ":")
    return json.dumps(value, sort_keys=True, indent=indent, separators=separators, allow_nan=False)


def _plain(value: Any) -> Any:
    """Dataclasses, enums and tuples as JSON values (enums by value)."""
    if is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _typed(cls: type, data: Any, path: str) -> Any:
    """The inverse of `_plain` for the Plan's own types; `path` is the dotted key of `data` in the plan."""
    if not isinstance(data, dict):
        raise PlanError(path.rstrip("."), f"is {type(data).__name__}, not an object (plan schema {SCHEMA_VERSION})")
    if cls is schema.TargetConfig:
        kind = data.get("kind")
        target = TARGETS_BY_KIND.get(kind) if isinstance(kind, str) else None
        if target is None:
            raise PlanError(f"{path}kind", f"unknown target kind {kind!r} (plan schema {SCHEMA_VERSION})")
        cls = target
    known = {f.name for f in fields(cls)}
    for name in data.keys() - known:
        raise PlanError(f"{path}{name}", f"is not a field of plan schema {SCHEMA_VERSION}")
    hints = typing.get_type_hints(cls)
    values = {}
    for f in fields(cls):
        key = f"{path}{f.name}"
        if f.name not in data:
            if _has_default(f):
                continue
            raise PlanError(key, f"is missing (plan schema {SCHEMA_VERSION})", "recompile the plan")
        values[f.name] = _value(hints[f.name], data[f.name], key)
    return cls(**values)


def _has_default(f: dataclasses.Field) -> bool:
    """A field the plan may leave out: it has a default, and the default is not the schema's `MISSING`."""
    if f.default_factory is not dataclasses.MISSING:
        return True
    return f.default is not dataclasses.MISSING and not (isinstance(f.default, str) and f.default == schema.MISSING)


def _value(hint: Any, raw: Any, key: str) -> Any:
    if isinstance(hint, types.UnionType) and raw is not None:  # X | None
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    try:
        if isinstance(hint, type) and is_dataclass(hint):
            return _typed(hint, raw, key + ".")
        if isinstance(hint, type) and issubclass(hint, Enum):
            return hint(raw)
    except ValueError as error:
        raise PlanError(key, f"{error} (plan schema {SCHEMA_VERSION})") from None
    if typing.get_origin(hint) is tuple:
        return tuple(raw)
    if typing.get_origin(hint) is dict and is_dataclass(typing.get_args(hint)[1]) and isinstance(raw, dict):
        return {name: _typed(typing.get_args(hint)[1], item, f"{key}.{name}.") for name, item in raw.items()}
    return raw


TARGETS_BY_KIND = {cls.kind.value: cls for cls in schema.TargetConfig.__subclasses__()}
