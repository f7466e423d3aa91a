"""Does the plan fit in GPU memory (a CPU node's own memory on hardware=cpu), and if not, which single
change makes it fit at the lowest cost?

A plan whose predicted peak exceeds the GPU's memory is a `ConfigError` that names the largest term and
up to three changes that would fit, cheapest first (changes that keep the instance count before more
nodes; among those, the fastest predicted step first), each with its predicted peak.
`parallelism.micro_batch=auto` picks the largest micro batch that fits.
"""

import dataclasses
from collections.abc import Iterator

from compiler.core.catalog import InstanceType
from compiler.planner import context_rules, estimate, speed
from compiler.planner.layout import Batch, Layout, resolve_batch, resolve_layout
from compiler.spec import schema
from compiler.spec.errors import ConfigError
from compiler.spec.strategies import facts

GIB = estimate.GIB
AUTO = "auto"
AUTO_MAX_MICRO_BATCH = 64

TERM_KEYS = {
    "parameters": "parallelism.strategy",
    "gradients": "parallelism.strategy",
    "optimizer": "parallelism.strategy",
    "activations": "parallelism.activation_checkpointing",
    "logits": "parallelism.micro_batch",
    "communication": "parallelism.strategy",
    "context": "hardware.instance_type",
    "margin": "hardware.instance_type",
    "reference": "trainer.dpo.precompute_reference",
}
"""The config key a user turns to shrink each memory term."""

STRONGER_STRATEGIES = {
    schema.Strategy.ddp: (schema.Strategy.zero1, schema.Strategy.zero2, schema.Strategy.zero3, schema.Strategy.fsdp),
    schema.Strategy.zero1: (schema.Strategy.zero2, schema.Strategy.zero3),
    schema.Strategy.zero2: (schema.Strategy.zero3,),
    schema.Strategy.fsdp_hybrid: (schema.Strategy.fsdp,),
}


def capacity(instance: InstanceType) -> int:
    return round(instance.gpu_memory_gib * GIB)


def peak(config: schema.Config, instance: InstanceType) -> tuple[estimate.Memory, Layout, Batch]:
    """Predicted memory of `config` as it stands (micro batch a number)."""
    layout = resolve_layout(config, instance)
    batch = estimate.with_pairs(resolve_batch(config.parallelism, config.model.seq_len, layout), config.trainer)
    par = dataclasses.replace(config.parallelism, grad_accum=batch.grad_accum)
    dpo = estimate.preference(config.trainer)
    chunk = config.trainer.loss_chunk
    return estimate.memory(config.model, par, layout, batch.micro_batch, dpo, chunk), layout, batch


def resolve_micro_batch(config: schema.Config, instance: InstanceType, layout: Layout) -> schema.Config:
    """`config` with a numeric micro batch: the given one, or with `auto` the largest that fits."""
    micro = config.parallelism.micro_batch
    if micro != AUTO:
        if isinstance(micro, bool) or not isinstance(micro, int):
            raise ConfigError("parallelism.micro_batch", f"'{micro}' is not a number", "use an integer ≥ 1, or auto")
        return config
    if not instance.has_gpus:
        raise ConfigError(
            "parallelism.micro_batch",
            "auto fits the micro batch to GPU memory, and cpu has none",
            "set a number on hardware=cpu",
        )
    total = config.parallelism.global_batch
    replicas = layout.data_replicas
    per_replica = total // replicas if total > 0 and total % replicas == 0 else AUTO_MAX_MICRO_BATCH
    candidates = [m for m in range(min(per_replica, AUTO_MAX_MICRO_BATCH), 0, -1) if per_replica % m == 0 or total < 1]
    for micro in candidates:
        trial = _with_parallelism(config, micro_batch=micro)
        dpo = estimate.preference(trial.trainer)
        needed = estimate.memory(trial.model, trial.parallelism, layout, micro, dpo, trial.trainer.loss_chunk)
        if needed.total <= capacity(instance):
            return trial
    return _with_parallelism(config, micro_batch=1)  # does not fit; check_fits names the fixes


def check_fits(config: schema.Config, instance: InstanceType, memory: estimate.Memory) -> Iterator[str]:
    """Raise a ConfigError with the cheapest fixes when `memory` exceeds the GPU; yields no warnings."""
    if memory.total <= capacity(instance):
        return
    largest = memory.largest_term()
    need = f"predicted reserved peak {memory.total / GIB:.1f} GiB per GPU exceeds the "
    need += f"{instance.gpu_memory_gib:.1f} GiB of {instance.gpu_model}"
    need += f" (largest: {largest} {memory.terms[largest] / GIB:.1f} GiB)"
    fixes = [f"{change} ({total / GIB:.1f} GiB)" for change, total in cheapest_fixes(config, instance)[:3]]
    fix = f"fits with: {', '.join(fixes)}" if fixes else "no single change fits: use a GPU with more memory"
    if not config.hardware.memory_check:
        yield f"{need}; {fix} (hardware.memory_check=false: not enforced)"
        return
    raise ConfigError(TERM_KEYS[largest], need, fix)


HOST_USABLE = 0.8
"""Share of a node's host memory that pinned offload buffers may take: the rest is the OS's, the data
loaders' and the page cache's (pinned pages cannot be swapped out)."""


def host_memory_per_node(per_process: dict[str, int], layout: Layout) -> dict[str, int]:
    return {what: size * layout.processes_per_node for what, size in per_process.items() if size}


def check_host_fits(config: schema.Config, instance: InstanceType, host: dict[str, int]) -> Iterator[str]:
    """Raise a ConfigError when what offload keeps in host memory, with a checkpoint's load, exceeds the
    node's usable share."""
    usable = instance.memory_gib * GIB * HOST_USABLE
    if not host or not instance.memory_gib or sum(host.values()) <= usable:
        return
    terms = ", ".join(f"{what} {size / GIB:.0f}" for what, size in host.items())
    need = (
        f"the run needs {sum(host.values()) / GIB:.0f} GiB of host memory per node ({terms}), more than the "
        f"{usable / GIB:.0f} GiB usable of {instance.name}'s {instance.memory_gib:g} GiB"
    )
    key, fix = "parallelism.offload", "lower parallelism.micro_batch, or set parallelism.offload=none"
    if host.get("activations"):
        key = "parallelism.activation_offload"
        fix = "lower parallelism.micro_batch, or set parallelism.activation_offload=false"
    elif not host.get("model states"):
        key, fix = "hardware.instance_type", "pick an instance type with more memory"
    if not config.hardware.memory_check:
        yield f"{need}; {fix} (hardware.memory_check=false: not enforced)"
        return
    raise ConfigError(key, need, fix)


def check_cpu_fits(
    config: schema.Config, instance: InstanceType, memory: estimate.Memory, layout: Layout
) -> Iterator[str]:
    """A CPU node holds every process's parameters, gradients, optimizer state and activations in its own
    memory: on `hardware=cpu` this machine's (the local target), else the instance type's. A CPU has no CUDA
    context to count."""
    each = memory.total - memory.terms.get("context", 0)
    total, processes = each * layout.processes_per_node, layout.processes_per_node
    usable = (instance.memory_gib * GIB or this_machines_memory()) * HOST_USABLE
    if total <= usable:
        return
    largest = memory.largest_term()
    host = "this machine" if instance.name == "cpu" else instance.name
    need = (
        f"predicted {total / GIB:,.1f} GiB for {processes} processes exceeds the {usable / GIB:,.1f} GiB usable "
        f"of {host}'s memory (largest per process: {largest} {memory.terms[largest] / GIB:,.1f} GiB)"
    )
    key, fix = "hardware.instance_type", "train a smaller model or micro batch, or on GPUs (hardware.instance_type)"
    if each <= usable:
        key, fix = "hardware.processes_per_node", f"start at most {int(usable // each)} processes per node"
    elif largest in ("activations", "logits"):
        key = TERM_KEYS[largest]
    if not config.hardware.memory_check:
        yield f"{need}; {fix} (hardware.memory_check=false: not enforced)"
        return
    raise ConfigError(key, need, fix)


def this_machines_memory() -> int:
    """The physical memory of the machine the plan is made on, in bytes."""
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def cheapest_fixes(config: schema.Config, instance: InstanceType) -> list[tuple[str, int]]:
    """Single changes that bring the peak under the GPU's memory, as (override, predicted peak bytes)."""
    fitting = []
    for change, candidate in _candidates(config):
        try:
            memory, layout, batch = peak(candidate, instance)
        except ConfigError:
            continue  # the change breaks another rule (a batch that no longer divides, say)
        if memory.total <= capacity(instance):
            dpo = estimate.preference(candidate.trainer)
            step = speed.throughput(candidate.model, candidate.parallelism, instance, layout, batch, dpo).step_seconds
            fitting.append((candidate.hardware.nodes, step, change, memory.total))
    return [(change, total) for _, _, change, total in sorted(fitting)]


def _candidates(config: schema.Config) -> Iterator[tuple[str, schema.Config]]:
    par = config.parallelism
    for strategy in STRONGER_STRATEGIES.get(par.strategy, ()):
        if par.tp == 1 or facts(strategy).tensor_parallel:
            yield (
                f"parallelism.strategy={strategy.value}",
                _with_parallelism(config, strategy=strategy, shard_group_size=-1),
            )
    levels = list(schema.Checkpointing)
    for level in levels[levels.index(par.activation_checkpointing) + 1 :]:
        yield (
            f"parallelism.activation_checkpointing={level.value}",
            _with_parallelism(config, activation_checkpointing=level),
        )
    if not (par.activation_offload or not facts(par.strategy).activation_offload or par.pp > 1 or par.tp > 1):
        yield "parallelism.activation_offload=true", _with_parallelism(config, activation_offload=True)
    yield from _context_parallel_candidates(config)
    dpo = estimate.preference(config.trainer)
    if dpo is not None and estimate.keeps_reference(config.model, dpo):
        precomputed = dataclasses.replace(dpo, precompute_reference=True)
        yield (
            "trainer.dpo.precompute_reference=true",
            dataclasses.replace(config, trainer=dataclasses.replace(config.trainer, dpo=precomputed)),
        )
    micro = par.micro_batch // 2
    while micro >= 1:
        yield f"parallelism.micro_batch={micro}", _with_parallelism(config, micro_batch=micro, grad_accum=-1)
        micro //= 2
    if facts(par.strategy).offloads_optimizer and par.offload is schema.Offload.none:
        yield "parallelism.offload=optimizer", _with_parallelism(config, offload=schema.Offload.optimizer)
    experts = config.model.moe.experts
    for ep in (2, 4, 8):  # the experts' weights and states split over more ranks
        if experts and ep > par.ep and experts % ep == 0:
            yield f"parallelism.ep={ep}", _with_parallelism(config, ep=ep)
    for pp in (2, 4, 8):
        if pp > par.pp:
            yield (
                f"parallelism.pp={pp} parallelism.dp=-1",
                _with_parallelism(config, pp=pp, dp=-1, grad_accum=-1, pp_microbatches=-1, pp_layers_per_stage=[]),
            )
    for factor in (2, 4):
        nodes = config.hardware.nodes * factor
        hardware = dataclasses.replace(config.hardware, nodes=nodes)
        yield (
            f"hardware.nodes={nodes}",
            dataclasses.replace(_with_parallelism(config, dp=-1, grad_accum=-1), hardware=hardware),
        )


def _with_parallelism(config: schema.Config, **changes) -> schema.Config:
    return dataclasses.replace(config, parallelism=dataclasses.replace(config.parallelism, **changes))


def _context_parallel_candidates(config: schema.Config) -> Iterator[tuple[str, schema.Config]]:
    """Higher cp degrees the context-parallel rules allow (`context_rules`), each splitting the sequence further;
    one that does not divide the data-parallel ranks or the batch fails in `peak` and is skipped."""
    par, model = config.parallelism, config.model
    splits = model.family == "decoder" or (model.family == "hf" and model.architecture in context_rules.PRETRAINED)
    if par.strategy not in context_rules.STRATEGIES or par.tp > 1 or par.pp > 1 or not splits:
        return
    cp = par.cp * 2
    while cp <= model.heads and model.seq_len % (2 * cp) == 0:
        if model.heads % cp == 0 and model.kv_heads % cp == 0:
            yield f"parallelism.cp={cp}", _with_parallelism(config, cp=cp, grad_accum=-1)  # fewer replicas
        cp *= 2
