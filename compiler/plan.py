"""The Plan: everything a build, a target and the entrypoint need, validated, frozen and hashed.

`compile_plan` turns a typed `Config` into a Plan in one pass: it resolves the parallel layout and the
batch, runs every cross-field rule in `compiler.rules`, and fails with the first `ConfigError`.
The Plan's JSON is canonical (sorted keys, no whitespace), so its sha256 is stable across runs and key
order; that hash names the plan and, through it, the image and the job.
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

from compiler import catalog, estimate, fit, rules, schema
from compiler.errors import ConfigError
from compiler.estimate import Estimate
from compiler.layout import Batch, Layout, resolve_batch, resolve_layout

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Plan:
    name: str
    model: schema.ModelConfig
    parallelism: schema.ParallelismConfig
    hardware: schema.HardwareConfig
    instance: catalog.InstanceType
    data: schema.DataConfig
    image: schema.ImageConfig
    target: schema.TargetConfig
    trainer: schema.TrainerConfig
    layout: Layout
    batch: Batch
    parameters: int
    estimate: Estimate | None
    """Predicted memory and speed per GPU; None on CPU instances."""
    warnings: tuple[str, ...]
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)

    def to_json(self, indent: int | None = None) -> str:
        separators = (",", ": ") if indent else (",", ":")
        return json.dumps(self.to_dict(), sort_keys=True, indent=indent, separators=separators)

    @cached_property
    def content_hash(self) -> str:
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    @property
    def price_per_hour(self) -> float:
        per_node = self.hardware.price_per_hour
        return (self.instance.price_per_hour if per_node is None else per_node) * self.layout.nodes

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Plan":
        if data.get("schema_version") != SCHEMA_VERSION:
            raise ConfigError(
                "schema_version",
                f"plan schema version {data.get('schema_version')!r} is not {SCHEMA_VERSION}",
                "recompile the plan with this version of dockyard",
            )
        return _typed(cls, data)

    @classmethod
    def from_json(cls, text: str) -> "Plan":
        return cls.from_dict(json.loads(text))


def compile_plan(config: schema.Config) -> Plan:
    """Validate `config` and derive everything the rest of dockyard needs from it.

    The plan holds the parallelism section with every -1 and `auto` resolved, so two configs that mean
    the same layout (dp=-1 and dp=4 on four ranks) have the same plan and the same hash.
    """
    instance = catalog.instance_type(config.hardware.instance_type)
    warnings = list(rules.check_hardware(config, instance))
    warnings += rules.check_model(config.model)
    layout = resolve_layout(config, instance)
    config = fit.resolve_micro_batch(config, instance, layout)
    if config.parallelism.mixed_precision is schema.Precision.auto:
        precision = schema.Precision.bf16 if instance.has_gpus else schema.Precision.fp32
        config = dataclasses.replace(
            config, parallelism=dataclasses.replace(config.parallelism, mixed_precision=precision)
        )
    batch = resolve_batch(config.parallelism, config.model.seq_len, layout)
    for check in rules.CROSS_FIELD_CHECKS:
        warnings += check(config, instance, layout)
    config = dataclasses.replace(config, parallelism=_resolved(config.parallelism, layout, batch))
    predicted = None
    if instance.has_gpus:
        stages = estimate.stage_memory(config.model, config.parallelism, layout, batch.micro_batch)
        memory = max(stages, key=lambda m: m.total)
        warnings += fit.check_fits(config, instance, memory)
        speed = estimate.throughput(config.model, config.parallelism, instance, layout, batch)
        predicted = Estimate(
            memory=memory,
            gpu_memory=fit.capacity(instance),
            throughput=speed,
            stage_memory=tuple(m.total for m in stages) if layout.pp > 1 else (),
        )
    return Plan(
        name=config.name,
        model=config.model,
        parallelism=config.parallelism,
        hardware=config.hardware,
        instance=instance,
        data=config.data,
        image=config.image,
        target=config.target,
        trainer=config.trainer,
        layout=layout,
        batch=batch,
        parameters=estimate.parameter_count(config.model),
        estimate=predicted,
        warnings=tuple(warnings),
    )


def _resolved(par: schema.ParallelismConfig, layout: Layout, batch: Batch) -> schema.ParallelismConfig:
    hybrid = par.strategy is schema.Strategy.fsdp_hybrid
    return dataclasses.replace(
        par,
        dp=layout.dp,
        tp=layout.tp,
        pp=layout.pp,
        pp_microbatches=batch.grad_accum if layout.pp > 1 else -1,
        pp_layers_per_stage=list(layout.layers_per_stage),
        micro_batch=batch.micro_batch,
        grad_accum=batch.grad_accum,
        global_batch=batch.global_batch,
        shard_group_size=layout.shard_degree if hybrid else -1,
    )


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


def _typed(cls: type, data: dict[str, Any]) -> Any:
    """The inverse of `_plain` for the Plan's own types."""
    if cls is schema.TargetConfig:
        cls = TARGETS_BY_KIND[data["kind"]]
    hints = typing.get_type_hints(cls)
    values = {}
    for f in fields(cls):
        hint, raw = hints[f.name], data[f.name]
        if isinstance(hint, types.UnionType) and raw is not None:  # X | None
            hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
        if is_dataclass(hint):
            values[f.name] = _typed(hint, raw)
        elif isinstance(hint, type) and issubclass(hint, Enum):
            values[f.name] = hint(raw)
        elif typing.get_origin(hint) is tuple:
            values[f.name] = tuple(raw)
        else:
            values[f.name] = raw
    return cls(**values)


TARGETS_BY_KIND = {
    cls.kind.value: cls
    for cls in (schema.LocalTarget, schema.SageMakerTarget, schema.KubernetesTarget, schema.SlurmTarget)
}
