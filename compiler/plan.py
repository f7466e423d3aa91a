"""The Plan: everything a build, a target and the entrypoint need, validated, frozen and hashed.

`compile_plan` turns a typed `Config` into a Plan in one pass: it resolves the parallel layout and the
batch, runs every cross-field rule in `compiler.rules`, and fails with the first `ConfigError`.
The Plan's JSON is canonical (sorted keys, no whitespace), so its sha256 is stable across runs and key
order; that hash names the plan and, through it, the image and the job.
"""

import dataclasses
import hashlib
import json
import typing
from dataclasses import dataclass, fields, is_dataclass
from enum import Enum
from functools import cached_property
from typing import Any

from compiler import catalog, rules, schema
from compiler.errors import ConfigError, DegreeError, UnsupportedError
from compiler.estimate import parameter_count

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Layout:
    """How the world's ranks split into data, tensor and pipeline parallel groups."""

    nodes: int
    processes_per_node: int
    world_size: int
    dp: int
    tp: int
    pp: int
    shard_degree: int
    """Ranks that share one copy of the model state (1 for DDP; the shard group for FSDP and ZeRO)."""


@dataclass(frozen=True)
class Batch:
    micro_batch: int
    grad_accum: int
    global_batch: int
    """Sequences per optimizer step: micro_batch × grad_accum × dp."""
    seq_len: int
    tokens_per_step: int


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

    The plan holds the parallelism section with every -1 resolved, so two configs that mean the same
    layout (dp=-1 and dp=4 on four ranks) have the same plan and the same hash.
    """
    instance = catalog.instance_type(config.hardware.instance_type)
    warnings = list(rules.check_hardware(config, instance))
    warnings += rules.check_model(config.model)
    layout = resolve_layout(config, instance)
    batch = resolve_batch(config.parallelism, config.model.seq_len, layout)
    for check in rules.CROSS_FIELD_CHECKS:
        warnings += check(config, instance, layout)
    resolved = dataclasses.replace(
        config.parallelism,
        dp=layout.dp,
        tp=layout.tp,
        pp=layout.pp,
        grad_accum=batch.grad_accum,
        global_batch=batch.global_batch,
        shard_group_size=layout.shard_degree if config.parallelism.strategy is schema.Strategy.fsdp_hybrid else -1,
    )
    return Plan(
        name=config.name,
        model=config.model,
        parallelism=resolved,
        hardware=config.hardware,
        instance=instance,
        data=config.data,
        image=config.image,
        target=config.target,
        trainer=config.trainer,
        layout=layout,
        batch=batch,
        parameters=parameter_count(config.model),
        warnings=tuple(warnings),
    )


def resolve_layout(config: schema.Config, instance: catalog.InstanceType) -> Layout:
    """Resolve the one degree that may be -1 and check dp × tp × pp against the world size."""
    par, model = config.parallelism, config.model
    nodes = config.hardware.nodes
    per_node = rules.processes_per_node(config.hardware, instance)
    world = nodes * per_node
    degrees = {"dp": par.dp, "tp": par.tp, "pp": par.pp}
    for name, value in degrees.items():
        if value < 1 and value != -1:
            raise ConfigError(f"parallelism.{name}", f"must be at least 1, or -1 to infer it (got {value})")
    inferred = [name for name, value in degrees.items() if value == -1]
    if len(inferred) > 1:
        raise DegreeError(
            f"parallelism.{inferred[1]}",
            f"only one degree can be -1, got {', '.join(inferred)}",
            "give all but one of dp, tp, pp",
        )
    known = 1
    for value in degrees.values():
        known *= max(value, 1)
    formula = " × ".join(f"{n}={'?' if v == -1 else v}" for n, v in degrees.items())
    world_text = f"{nodes} nodes × {per_node} processes = {world}"
    if world % known or (not inferred and known != world):
        given = [name for name, value in degrees.items() if value > 1] or inferred or ["dp"]
        key = f"parallelism.{given[-1]}"
        raise DegreeError(
            key,
            f"{formula} cannot equal the world size ({world_text})",
            f"make dp × tp × pp = {world}, or set one degree to -1 to infer it",
        )
    if inferred:
        degrees[inferred[0]] = world // known
    dp, tp, pp = degrees["dp"], degrees["tp"], degrees["pp"]
    _check_tensor_parallel(tp, per_node, model)
    _check_pipeline_parallel(pp, model.layers)
    return Layout(
        nodes=nodes,
        processes_per_node=per_node,
        world_size=world,
        dp=dp,
        tp=tp,
        pp=pp,
        shard_degree=_shard_degree(par, dp, per_node // (tp * pp) or 1),
    )


def _check_tensor_parallel(tp: int, per_node: int, model: schema.ModelConfig) -> None:
    if tp > per_node or per_node % tp:
        raise DegreeError(
            "parallelism.tp",
            f"tp={tp} does not fit inside one node of {per_node} processes; "
            "tensor parallelism needs the NVLink of one node",
            f"use a tp that divides {per_node}",
        )
    for field_name in ("heads", "kv_heads"):
        heads = getattr(model, field_name)
        if heads % tp:
            raise DegreeError(
                "parallelism.tp",
                f"tp={tp} does not divide model.{field_name}={heads}",
                f"use a tp that divides {heads}",
            )


def _check_pipeline_parallel(pp: int, layers: int) -> None:
    if layers % pp:
        raise DegreeError(
            "parallelism.pp", f"pp={pp} does not divide model.layers={layers}", f"use a pp that divides {layers}"
        )
    if pp > 1:
        raise UnsupportedError(
            "parallelism.pp",
            "pipeline parallelism is not supported yet",
            "set parallelism.pp=1 and use tp or FSDP for the memory",
        )


def _shard_degree(par: schema.ParallelismConfig, dp: int, dp_per_node: int) -> int:
    if par.strategy is not schema.Strategy.fsdp_hybrid:
        if par.shard_group_size != -1:
            raise ConfigError(
                "parallelism.shard_group_size",
                "only applies to strategy fsdp_hybrid",
                "remove it, or use parallelism=fsdp-hybrid",
            )
        return 1 if par.strategy in (schema.Strategy.ddp, schema.Strategy.smddp) else dp
    group = min(dp_per_node, dp) if par.shard_group_size == -1 else par.shard_group_size
    if group < 1 or dp % group:
        raise DegreeError(
            "parallelism.shard_group_size",
            f"shard group of {group} does not divide dp={dp}",
            f"use a size that divides {dp}, or -1 for the ranks of one node",
        )
    return group


def resolve_batch(par: schema.ParallelismConfig, seq_len: int, layout: Layout) -> Batch:
    """global_batch = micro_batch × grad_accum × dp, inferring whichever of the last two is -1."""
    micro, accum, total, dp = par.micro_batch, par.grad_accum, par.global_batch, layout.dp
    if micro < 1:
        raise ConfigError("parallelism.micro_batch", f"must be at least 1 (got {micro})")
    for key, value in (("grad_accum", accum), ("global_batch", total)):
        if value < 1 and value != -1:
            raise ConfigError(f"parallelism.{key}", f"must be at least 1, or -1 to derive it (got {value})")
    per_pass = micro * dp
    if total == -1:
        accum = max(accum, 1)
        total = per_pass * accum
    elif accum == -1:
        if total % per_pass:
            raise DegreeError(
                "parallelism.global_batch",
                f"global_batch={total} is not a multiple of micro_batch × dp = {micro} × {dp}",
                f"use a multiple of {per_pass}",
            )
        accum = total // per_pass
    elif total != per_pass * accum:
        raise DegreeError(
            "parallelism.global_batch",
            f"global_batch={total} but micro_batch × grad_accum × dp = {micro} × {accum} × {dp} = {per_pass * accum}",
            "set parallelism.grad_accum=-1 to infer it",
        )
    return Batch(
        micro_batch=micro, grad_accum=accum, global_batch=total, seq_len=seq_len, tokens_per_step=total * seq_len
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
