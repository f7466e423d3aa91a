"""Cross-field rules true on every target: each check raises a `ConfigError` naming the key to change, or
yields warnings.

The checks run in one pass from `compiler.planner.compile.compile_plan`, after the layout is resolved, in
the order of `CROSS_FIELD_CHECKS`. What depends on where the plan runs is asked of the target's
`Capabilities`, which the caller passes in (`targets`); a target's own limits are its `check`
(`compiler/targets/<kind>/rules.py`).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Iterator
from typing import TYPE_CHECKING

from compiler.core import catalog, grammar
from compiler.core.architectures import architecture
from compiler.core.capabilities import TargetCapabilities
from compiler.core.catalog import INSTANCE_TYPES, LOCAL_CPU
from compiler.planner import models
from compiler.planner.context_rules import check_context_parallel
from compiler.planner.data_rules import check_format, check_packing_mask
from compiler.planner.estimate import sequence_shards
from compiler.planner.eval_rules import check_eval
from compiler.planner.image_rules import check_image
from compiler.planner.objective_rules import check_objective
from compiler.planner.offload_rules import check_offload
from compiler.planner.quantized_base import check_quantized_base
from compiler.planner.sample_rules import check_samples
from compiler.planner.schedule_rules import check_schedule
from compiler.planner.target_rules import SECRET_NAME, check_target
from compiler.planner.tracker_rules import check_trackers
from compiler.planner.trainable_rules import check_trainable
from compiler.spec import InstanceType, schema
from compiler.spec.contract import PLAN_CHANNEL
from compiler.spec.errors import ConfigError, UnsupportedError
from compiler.spec.strategies import DEEPSPEED_ENGINE, facts

if TYPE_CHECKING:
    from compiler.spec import Layout

CHANNEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9.\-_]{0,63}")
"""SageMaker's channel names, less '.' and '..', which would escape /opt/ml/input/data."""
FILE_SYSTEM_ID = re.compile(r"fs-(?:[0-9a-f]{8}|[0-9a-f]{17})")
"""FSx and EFS ids: `fs-` and 8 hexadecimal digits (older file systems) or 17 (AWS's long resource ids)."""
ABSOLUTE_PATH = re.compile(r"/[\x21-\x7e]*")
"""An absolute path of printable ASCII characters: no spaces, newlines or other control characters."""
RELATIVE_PATH = re.compile(r"[A-Za-z0-9_.+@=,-][A-Za-z0-9_./+@=,-]*")
UINT16_VOCAB = 2**16


def check_hardware(config: schema.Config, instance: InstanceType, targets: TargetCapabilities) -> Iterator[str]:
    hardware = config.hardware
    if hardware.nodes < 1:
        raise ConfigError("hardware.nodes", f"must be at least 1 (got {hardware.nodes})")
    if hardware.nodes > grammar.INT32_MAX:
        raise ConfigError(
            "hardware.nodes", f"{hardware.nodes} is past what any target counts (2^31-1)", "use fewer nodes"
        )
    if hardware.price_per_hour is not None and hardware.price_per_hour < 0:
        raise ConfigError("hardware.price_per_hour", "cannot be negative", "remove it to use the catalog's price")
    if hardware.network_gbps is not None and hardware.network_gbps <= 0:
        raise ConfigError(
            "hardware.network_gbps",
            f"must be positive (got {hardware.network_gbps:g})",
            "remove it to use the catalog's",
        )
    if instance.has_gpus and 0 < hardware.processes_per_node < instance.gpus:
        yield (
            f"hardware.processes_per_node={hardware.processes_per_node} leaves "
            f"{instance.gpus - hardware.processes_per_node} of {instance.gpus} GPUs per node idle"
        )
    if instance.name == LOCAL_CPU.name and not targets.own.host_cpu:
        raise ConfigError(
            "hardware.instance_type",
            f"'cpu' is this machine's own CPUs, and target={config.target.kind.value} starts instances",
            "choose an instance type, such as ml.m5.xlarge for CPUs or ml.g5.xlarge for a GPU",
        )


def check_model(model: schema.ModelConfig) -> Iterator[str]:
    """`model.family` names a known family, and the family can build the shape."""
    return models.family(model).check(model)


def check_strategy(
    config: schema.Config, instance: InstanceType, layout: Layout, targets: TargetCapabilities
) -> Iterator[str]:
    par, strategy = config.parallelism, config.parallelism.strategy
    known = facts(strategy)
    if layout.tp > 1 and not known.tensor_parallel and known.engine == DEEPSPEED_ENGINE:
        raise UnsupportedError(
            "parallelism.tp",
            f"DeepSpeed {strategy.value} does not combine with tensor parallelism",
            "set parallelism.tp=1, or use parallelism=fsdp for FSDP + TP",
        )
    if layout.tp > 1 and not known.tensor_parallel and strategy is not schema.Strategy.smddp:  # smddp's checks below
        raise ConfigError(
            "parallelism.tp",
            f"{strategy.value} replicates whole models and does not combine with tensor parallelism",
            "use parallelism=fsdp for tp > 1",
        )
    if sequence_shards(layout) > 1 and config.model.seq_len % layout.tp:  # the estimate's sequence parallelism
        raise ConfigError(
            "model.seq_len",
            f"FSDP + TP splits each sequence over the {layout.tp} tensor-parallel ranks (sequence parallelism), "
            f"and {config.model.seq_len} tokens do not divide by {layout.tp}",
            f"set model.seq_len to a multiple of {layout.tp}",
        )
    if strategy is schema.Strategy.smddp:
        if not targets.own.smddp:
            raise ConfigError(
                "parallelism.strategy",
                f"smddp is SageMaker's library, and target={config.target.kind.value} does not provide it",
                "use target=sagemaker, or parallelism=ddp elsewhere",
            )
        if not instance.smddp:
            supported = ", ".join(name for name, t in INSTANCE_TYPES.items() if t.smddp)
            raise ConfigError(
                "hardware.instance_type",
                f"smddp does not support {instance.name}",
                f"use one of {supported}, or parallelism=ddp",
            )
        if layout.tp > 1:
            raise ConfigError("parallelism.tp", "smddp is data-parallel only", "set parallelism.tp=1")
    yield from check_offload(par, instance, layout)
    if par.pp_microbatches < 1 and par.pp_microbatches != -1:
        raise ConfigError(
            "parallelism.pp_microbatches", f"must be at least 1, or -1 for the default (got {par.pp_microbatches})"
        )
    if par.mixed_precision is schema.Precision.fp16 and not instance.has_gpus:
        raise ConfigError(
            "parallelism.mixed_precision", "fp16 with loss scaling needs a GPU", "use bf16 or fp32 on hardware=cpu"
        )
    if par.mixed_precision is schema.Precision.bf16 and instance.has_gpus and not instance.has_bf16:
        raise ConfigError(
            "parallelism.mixed_precision",
            f"the {instance.gpu_model} GPUs of {instance.name} have no bf16",
            "use mixed_precision=fp16 (or auto, which picks it there)",
        )
    if par.mixed_precision is schema.Precision.bf16 and not instance.has_gpus:
        yield "bf16 autocast on CPU is slow; parallelism.mixed_precision=fp32 is faster there"
    if layout.shard_degree == 1 and not known.replicated:
        yield f"{strategy.value} with a shard group of 1 shards nothing; ddp does the same with less overhead"


def check_data(
    config: schema.Config, instance: InstanceType, layout: Layout, targets: TargetCapabilities
) -> Iterator[str]:
    data, target = config.data, config.target.kind
    source = data.source
    if not CHANNEL_NAME.fullmatch(data.channel):
        raise ConfigError(
            "data.channel",
            f"{grammar.shown(data.channel)} is not a channel name",
            "use 1-64 letters, digits, '.', '-' or '_', starting with a letter or digit",
        )
    if data.channel == PLAN_CHANNEL:
        raise ConfigError("data.channel", f"'{PLAN_CHANNEL}' is the channel of the plan itself", "name it train")
    if source is schema.DataSource.s3:
        grammar.check_s3_uri("data.uri", data.uri)
    if source is schema.DataSource.local:
        if not data.path:
            raise ConfigError("data.path", "is missing", "set data.path to the host folder of token files")
        if not targets.own.host_folders:
            raise ConfigError(
                "data.source",
                f"a host folder cannot reach target={target.value}",
                "upload it to S3 and use data=s3 data.uri=s3://...",
            )
    if source in (schema.DataSource.fsx, schema.DataSource.efs):
        _check_file_system(config, targets)
    if source is not schema.DataSource.synthetic and data.format is schema.DataFormat.tokens:
        if data.token_dtype not in ("uint16", "uint32"):
            raise ConfigError("data.token_dtype", f"'{data.token_dtype}' is not a token type", "use uint16 or uint32")
        if data.token_dtype == "uint16" and config.model.vocab > UINT16_VOCAB:
            raise ConfigError(
                "data.token_dtype",
                f"uint16 cannot hold a vocabulary of {config.model.vocab}",
                "set data.token_dtype=uint32",
            )
    check_packing_mask(config, layout)
    yield from check_format(config, targets)


def _check_file_system(config: schema.Config, targets: TargetCapabilities) -> None:
    data, target = config.data, config.target
    if data.file_system_id is None:
        raise ConfigError("data.file_system_id", "is missing", "set data.file_system_id=fs-...")
    if not FILE_SYSTEM_ID.fullmatch(data.file_system_id):
        raise ConfigError(
            "data.file_system_id",
            f"{grammar.shown(data.file_system_id)} is not a file system id",
            "use the id from the FSx or EFS console, like fs-0123456789abcdef0",
        )
    if not data.path or not ABSOLUTE_PATH.fullmatch(data.path) or ".." in data.path.split("/"):
        raise ConfigError(
            "data.path", f"{grammar.shown(data.path)} is not an absolute path inside the file system", "start it with /"
        )
    mounting = targets.kinds_with(data.source)
    if data.source not in targets.own.file_systems:
        raise ConfigError(
            "data.source",
            f"{data.source.value} file systems cannot be mounted on target={target.kind.value}",
            f"use target={' or target='.join(mounting)}, or copy the data to data=local",
        )
    if data.input_mode is not schema.InputMode.File:
        raise ConfigError(
            "data.input_mode", f"{data.source.value} channels support only File mode", "set data.input_mode=File"
        )


def check_recovery(config: schema.Config) -> Iterator[str]:
    """In-job restarts, the checkpoint clock and background checkpoints."""
    trainer = config.trainer
    for name in ("restarts", "checkpoint_minutes"):
        if getattr(trainer, name) < 0:
            raise ConfigError(f"trainer.{name}", "cannot be negative")
    if trainer.checkpoint_minutes and trainer.checkpoint_interval:
        raise ConfigError(
            "trainer.checkpoint_minutes",
            f"is set with trainer.checkpoint_interval={trainer.checkpoint_interval}: two clocks for one checkpoint",
            "set one of them to 0",
        )
    if trainer.checkpoint_async and facts(config.parallelism.strategy).engine == DEEPSPEED_ENGINE:
        raise ConfigError(
            "trainer.checkpoint_async",
            f"is not supported with DeepSpeed ZeRO ({config.parallelism.strategy.value}), which saves its own way",
            "set trainer.checkpoint_async=false or use parallelism=fsdp",
        )
    if trainer.restarts and not (trainer.checkpoint_interval or trainer.checkpoint_minutes):
        yield f"trainer.restarts={trainer.restarts} without checkpoints: every restart starts again from step 0"


def check_resilience(trainer: schema.TrainerConfig) -> None:
    """The health check's budget and bandwidth, and the straggler detector's window, factor and count."""
    for name in ("health_check_s", "health_bandwidth_gbps"):
        value = getattr(trainer, name)
        if value is not None and value <= 0:
            raise ConfigError(f"trainer.{name}", f"must be positive (got {value})")
    if trainer.straggler_every < 0:
        raise ConfigError("trainer.straggler_every", "cannot be negative", "use 0 to turn straggler detection off")
    if trainer.straggler_factor <= 1:
        raise ConfigError("trainer.straggler_factor", f"must be above 1 (got {trainer.straggler_factor})")
    if trainer.straggler_windows < 1:
        raise ConfigError("trainer.straggler_windows", "must be at least 1")


def check_trainer(
    config: schema.Config, instance: InstanceType, layout: Layout, targets: TargetCapabilities
) -> Iterator[str]:
    trainer = config.trainer
    if trainer.steps < 1:
        raise ConfigError("trainer.steps", f"must be at least 1 (got {trainer.steps})")
    if trainer.lr <= 0:
        raise ConfigError("trainer.lr", f"must be positive (got {trainer.lr})")
    if trainer.base_batch is not None and trainer.base_batch < 1:  # whether or not lr_scaling reads it
        raise ConfigError("trainer.base_batch", f"must be at least 1 (got {trainer.base_batch})")
    yield from check_schedule(trainer)
    for name in ("checkpoint_interval", "weight_decay", "grad_clip", "loss_chunk"):
        if getattr(trainer, name) < 0:
            raise ConfigError(f"trainer.{name}", "cannot be negative")
    if trainer.log_interval < 1:
        raise ConfigError("trainer.log_interval", "must be at least 1")
    check_resilience(trainer)
    yield from check_trackers(trainer)
    if trainer.entry is schema.Entry.script:
        for name in ("source_dir", "script"):
            if not getattr(trainer, name):
                raise ConfigError(
                    f"trainer.{name}",
                    "is missing for trainer.entry=script",
                    "use trainer=script trainer.source_dir=PATH trainer.script=FILE",
                )
        _check_script_path(trainer.script)
        for name in trainer.hyperparameters:
            if SECRET_NAME.search(str(name)):
                raise ConfigError(
                    f"trainer.hyperparameters.{name}",
                    "looks like a secret, and hyperparameters are stored in the plan and shown in the job's console",
                    "pass secrets through the target's own mechanism (an IAM role, a secret store)",
                )
    else:
        for name in ("source_dir", "script", "hyperparameters"):
            if getattr(trainer, name):
                raise ConfigError(f"trainer.{name}", "is only used with a user script", "use trainer=script")
        if trainer.launcher is not schema.Launcher.torchrun:
            raise ConfigError("trainer.launcher", "is only used with a user script", "use trainer=script")
    if trainer.checkpoint_interval > trainer.steps:
        yield f"trainer.checkpoint_interval={trainer.checkpoint_interval} is past the last step: no checkpoint"
    yield from check_recovery(config)
    if trainer.compile_mode not in schema.COMPILE_MODES:
        raise ConfigError(
            "trainer.compile_mode",
            f"{grammar.shown(trainer.compile_mode)} is not a mode of torch.compile",
            f"use one of {', '.join(schema.COMPILE_MODES)}",
        )
    if schema.Compile(trainer.compile) is schema.Compile.false:
        if trainer.compile_mode != "default":
            raise ConfigError(
                "trainer.compile_mode", "is set while trainer.compile=false", "set trainer.compile=blocks"
            )
    elif layout.pp > 1:
        raise ConfigError(
            "trainer.compile", "is not supported with pipeline parallelism (pp > 1)", "set trainer.compile=false"
        )


def resolve_compile(trainer: schema.TrainerConfig) -> schema.TrainerConfig:
    """`trainer` with `compile` as a `Compile`'s value (false, "blocks" or "model"): the field is untyped so
    that YAML's `false` reaches it, and the plan keeps the plain value so that its JSON reads back the same."""
    value = trainer.compile
    if value is False or value == "false":
        return dataclasses.replace(trainer, compile=schema.Compile.false.value)
    if value is True or value == "true":  # the boolean this field was before `model` existed
        return dataclasses.replace(trainer, compile=schema.Compile.blocks.value)
    if value in ("blocks", "model"):
        return trainer
    raise ConfigError(
        "trainer.compile",
        f"{grammar.shown(str(value))} is not false, true (blocks), blocks or model",
        "use trainer.compile=blocks (each transformer block) or trainer.compile=model (the whole model)",
    )


def _check_script_path(script: str) -> None:
    """The script torchrun starts lies inside `source_dir`, the only folder the image holds."""
    parts = script.split("/")
    if not RELATIVE_PATH.fullmatch(script) or ".." in parts or "." in parts:
        raise ConfigError(
            "trainer.script",
            f"{grammar.shown(script)} is not a file inside trainer.source_dir",
            "give its path relative to trainer.source_dir, without '..'",
        )


GROUP_NAME = re.compile(r"[a-zA-Z0-9](-?[a-zA-Z0-9]){0,62}")
MAX_GROUP_NAME = 64
"""A group's name: also a SageMaker InstanceGroupName (1 to 64 characters) and safe in host names."""


def check_groups(
    config: schema.Config, instance: InstanceType, layout: Layout, targets: TargetCapabilities
) -> Iterator[str]:
    """A heterogeneous cluster: named groups of known types on a target that runs them, each with its
    command, and the data channel reaching only groups that exist."""
    hardware, commands = config.hardware, config.trainer.group_commands
    if not hardware.groups:
        for key, value in (("trainer.group_commands", commands), ("data.groups", config.data.groups)):
            if value:
                raise ConfigError(key, "is set, but hardware.groups is empty", "add the groups to hardware.groups")
        return
    if not targets.own.instance_groups:
        raise UnsupportedError(
            "hardware.groups", f"target={config.target.kind.value} runs one group of instances", "use target=sagemaker"
        )
    names = [hardware.train_group, *hardware.groups]
    for name in names:
        if not GROUP_NAME.fullmatch(name) or len(name) > MAX_GROUP_NAME:
            raise ConfigError("hardware.groups", f"group name {name!r} is not 1-64 letters, digits and single dashes")
    if hardware.train_group in hardware.groups:
        raise ConfigError(f"hardware.groups.{hardware.train_group}", "is the training group's name (train_group)",
                          "give the other group another name")  # fmt: skip
    for name, group in hardware.groups.items():
        catalog.instance_type(group.instance_type, key=f"hardware.groups.{name}.instance_type")
        if not 1 <= group.count <= grammar.INT32_MAX:
            raise ConfigError(f"hardware.groups.{name}.count", f"must be from 1 to 2^31-1 (got {group.count})")
        if not commands.get(name, "").strip():
            raise ConfigError(f"trainer.group_commands.{name}", "is missing: the group has nothing to run",
                              f"set trainer.group_commands.{name}='python prepare.py ...'")  # fmt: skip
        _check_command(f"trainer.group_commands.{name}", commands[name])
    for name in [*commands.keys() - hardware.groups.keys(), *set(config.data.groups) - set(names)]:
        raise ConfigError("hardware.groups", f"has no group {name!r}", f"add it, or use one of {', '.join(names)}")
    yield from ()  # no warnings: every mistake here is an error


def _check_command(key: str, command: str) -> None:
    """A group's command is split into words on the node as a shell would: it must split here too."""
    if grammar.CONTROL.search(command):
        raise ConfigError(key, f"{grammar.shown(command)} holds control characters", "give the command on one line")
    try:
        shlex.split(command)
    except ValueError as error:
        raise ConfigError(
            key, f"{grammar.shown(command)} does not split into words: {error}", "balance its quotes"
        ) from None


def check_pretrained(
    config: schema.Config, instance: InstanceType, layout: Layout, targets: TargetCapabilities
) -> Iterator[str]:
    """What `model=hf` runs with: no pipeline stages or activation offload (transformers' models are not cut
    into stages here), full or no recomputation per decoder layer, tensor parallelism only where transformers
    has a plan for the architecture; LoRA only on a pretrained model."""
    model, par = config.model, config.parallelism
    if model.family != "hf":
        if model.lora.rank:
            raise ConfigError("model.lora.rank", "adapts a pretrained model", "use model=hf, or model.lora.rank=0")
        return
    if layout.pp > 1:
        raise UnsupportedError("parallelism.pp", "model=hf runs without pipeline parallelism", "set parallelism.pp=1")
    if par.activation_offload:
        raise UnsupportedError("parallelism.activation_offload", "is not available for model=hf", "set it to false")
    if par.activation_checkpointing in (schema.Checkpointing.selective, schema.Checkpointing.attention):
        raise UnsupportedError(
            "parallelism.activation_checkpointing",
            "model=hf recomputes whole decoder layers",
            "use activation_checkpointing=full or none",
        )
    if layout.tp > 1 and not architecture(model.architecture).tensor_parallel:
        raise UnsupportedError(
            "parallelism.tp",
            f"transformers has no tensor-parallel plan for {model.architecture}",
            "set parallelism.tp=1 (FSDP shards it)",
        )
    if model.lora.rank and model.init is schema.Init.random:
        yield "model.lora.rank: adapters on randomly initialised weights train a random model's low-rank update"


CROSS_FIELD_CHECKS = (
    check_strategy,
    check_data,
    check_target,
    check_image,
    check_trainer,
    check_objective,
    check_context_parallel,
    check_groups,
    check_pretrained,
    check_quantized_base,
    check_trainable,
    check_eval,
    check_samples,
)
