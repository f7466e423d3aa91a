"""`compile_plan`: a typed `Config` in, a validated `Plan` (see `compiler.spec`) out.

One pass: it resolves the parallel layout and the batch, runs every rule true for all targets
(`compiler.planner.rules`), then the plan's target's own rules (`Target.check`), and fails with the first
`ConfigError`. The planner knows no target: the caller (`compiler.launch.plan`, the one way from a config to
a plan) resolves the target and passes in its capabilities and its rules. Values the runtime needs from
the planner (FLOPs per token, DeepSpeed's buckets) are resolved into `Plan.derived`, so the image does not
carry the planner.
"""

import dataclasses
import math
from collections.abc import Callable

from compiler.core import catalog, grammar
from compiler.core.capabilities import TargetCapabilities
from compiler.planner import estimate, fit, host_memory, rules, schedule_rules, speed
from compiler.planner.layout import resolve_batch, resolve_layout
from compiler.planner.models import model_facts
from compiler.planner.tracker_rules import resolve_trackers
from compiler.spec import Batch, Derived, Estimate, Layout, Plan, schema
from compiler.spec.errors import ConfigError
from compiler.spec.strategies import DEEPSPEED_ENGINE, facts


def scaled_lr(trainer: schema.TrainerConfig, global_batch: int) -> float:
    """The peak learning rate at `global_batch`: `trainer.lr` where it was tuned (`base_batch`), scaled
    linearly or by the square root of the batch ratio (the usual rules for SGD-like and Adam-like
    optimizers at large batch)."""
    if trainer.lr_scaling is schema.LrScaling.none:
        return trainer.lr
    if trainer.base_batch is None or trainer.base_batch < 1:
        raise ConfigError(
            "trainer.base_batch",
            f"is needed by trainer.lr_scaling={trainer.lr_scaling.value} (got {trainer.base_batch})",
            "set it to the global batch, in sequences, that trainer.lr was tuned at",
        )
    ratio = global_batch / trainer.base_batch
    lr = trainer.lr * (ratio if trainer.lr_scaling is schema.LrScaling.linear else math.sqrt(ratio))
    if not math.isfinite(lr):
        raise ConfigError(
            "trainer.lr",
            f"{trainer.lr:g} scaled ({trainer.lr_scaling.value}) to the global batch {global_batch} is not finite",
            "give a smaller trainer.lr",
        )
    return lr


def compile_plan(config: schema.Config, targets: TargetCapabilities, target_check: Callable[[Plan], list[str]]) -> Plan:
    """Validate `config` and derive everything the rest of dockyard needs from it; `targets` holds what the
    plan's target (and every other) offers, `target_check` is that target's own rules.

    The plan holds the parallelism section with every -1 and `auto` resolved, so two configs that mean
    the same layout (dp=-1 and dp=4 on four ranks) have the same plan and the same hash.
    """
    grammar.check_name(config.name)
    config = dataclasses.replace(config, trainer=resolve_trackers(rules.resolve_compile(config.trainer)))
    instance = catalog.instance_type(config.hardware.instance_type)
    if config.hardware.network_gbps is not None:
        instance = dataclasses.replace(instance, network_gbps=config.hardware.network_gbps)
    if targets.own.managed_prices:
        instance = dataclasses.replace(instance, price_per_hour=instance.managed_price_per_hour)
    warnings = list(rules.check_hardware(config, instance, targets))
    warnings += rules.check_model(config.model)
    layout = resolve_layout(config, instance)
    config = fit.resolve_micro_batch(config, instance, layout)
    if config.parallelism.mixed_precision is schema.Precision.auto:
        precision = schema.Precision.fp32
        if instance.has_gpus:  # V100 and T4 compute in fp16 with loss scaling
            precision = schema.Precision.bf16 if instance.has_bf16 else schema.Precision.fp16
        config = dataclasses.replace(
            config, parallelism=dataclasses.replace(config.parallelism, mixed_precision=precision)
        )
    batch = estimate.with_pairs(resolve_batch(config.parallelism, config.model.seq_len, layout), config.trainer)
    _check_batch_fits(batch, config.parallelism)
    for check in rules.CROSS_FIELD_CHECKS:
        warnings += check(config, instance, layout, targets)
    config = dataclasses.replace(config, parallelism=_resolved(config.parallelism, layout, batch))
    predicted, dpo = None, estimate.preference(config.trainer)
    if instance.has_gpus:
        stages = estimate.stage_memory(
            config.model, config.parallelism, layout, batch.micro_batch, dpo, config.trainer.loss_chunk
        )
        memory = max(stages, key=lambda m: m.total)
        warnings += fit.check_fits(config, instance, memory)
        host = host_memory.host_memory(
            config.model, config.parallelism, layout, batch.micro_batch, config.trainer.checkpoint_async
        )
        host = fit.host_memory_per_node(host, layout)
        warnings += fit.check_host_fits(config, instance, host)
        compiled = config.trainer.compile != schema.Compile.false.value
        predicted_speed = speed.throughput(config.model, config.parallelism, instance, layout, batch, dpo, compiled)
        predicted = Estimate(
            memory=memory,
            gpu_memory=fit.capacity(instance),
            throughput=predicted_speed,
            stage_memory=tuple(m.total for m in stages) if layout.pp > 1 else (),
            host_memory=host,
        )
    else:
        memory = estimate.memory(config.model, config.parallelism, layout, batch.micro_batch, dpo)
        warnings += fit.check_cpu_fits(config, instance, memory, layout)
    plan = Plan(
        name=config.name,
        model=config.model,
        parallelism=config.parallelism,
        hardware=config.hardware,
        instance=instance,
        data=config.data,
        image=config.image,
        target=config.target,
        trainer=schedule_rules.with_floor(config.trainer),
        eval=config.eval if config.eval.tasks or config.trainer.eval_tasks else None,
        job=config.job,
        layout=layout,
        batch=batch,
        parameters=estimate.parameter_count(config.model),
        active_parameters=model_facts(config.model).active_parameters,
        derived=Derived(
            flops_per_token=speed.flops_per_token(config.model),
            lr=scaled_lr(config.trainer, batch.global_batch),
            warmup_steps=schedule_rules.warmup_steps(config.trainer),
            checkpoint_bytes=host_memory.checkpoint_bytes(config.model),
            deepspeed_buckets=estimate.deepspeed_buckets(config.model)
            if facts(config.parallelism.strategy).engine == DEEPSPEED_ENGINE
            else {},
        ),
        estimate=predicted,
        warnings=(),
    )
    warnings += target_check(plan)
    return dataclasses.replace(plan, warnings=tuple(warnings))


def _check_batch_fits(batch: Batch, par: schema.ParallelismConfig) -> None:
    """The plan's counts are 64-bit integers for every reader of plan.json (a resolved global batch of
    2^62 nodes' micro batches is not); named as the key given (a derived global batch is the micro batch's)."""
    given = "parallelism.global_batch" if par.global_batch != -1 else "parallelism.micro_batch"
    for key, value in ((given, batch.global_batch), ("model.seq_len", batch.tokens_per_step)):
        if value > grammar.INT64_MAX:
            raise ConfigError(
                key, f"makes {value:.3g} per step, past the 64 bits a plan holds", "use fewer nodes or a smaller batch"
            )


def _resolved(par: schema.ParallelismConfig, layout: Layout, batch: Batch) -> schema.ParallelismConfig:
    hybrid = facts(par.strategy).shard_groups
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
