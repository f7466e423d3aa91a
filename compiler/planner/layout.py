"""The parallel layout and the batch: dp × tp × pp over the world, micro × accumulation × dp sequences.

Every degree may be -1 (inferred from the others); the product must equal nodes × processes per node,
and the messages show the formula with the numbers filled in.
"""

from compiler.planner.models import family
from compiler.planner.pipeline import default_microbatches, split_layers
from compiler.spec import Batch, InstanceType, Layout, schema
from compiler.spec.errors import ConfigError, DegreeError, UnknownNameError, UnsupportedError
from compiler.spec.ranks import PIPELINE_SCHEDULES
from compiler.spec.strategies import DEEPSPEED_ENGINE, facts


def resolve_layout(config: schema.Config, instance: InstanceType) -> Layout:
    """Resolve the one degree that may be -1 and check dp × tp × pp against the world size."""
    par, model = config.parallelism, config.model
    nodes = config.hardware.nodes
    per_node = processes_per_node(config.hardware, instance)
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
    ep, cp = _borrowed_degree("ep", par.ep, "dp × tp", dp * tp), _borrowed_degree("cp", par.cp, "dp", dp)
    _check_expert_parallel(ep, model)
    stages_per_rank, layers_per_stage = _pipeline_stages(par, pp, model)
    return Layout(
        nodes=nodes,
        processes_per_node=per_node,
        world_size=world,
        dp=dp,
        tp=tp,
        pp=pp,
        shard_degree=_shard_degree(par, dp, per_node // (tp * pp) or 1),
        stages_per_rank=stages_per_rank,
        layers_per_stage=layers_per_stage,
        ep=ep,
        cp=cp,
    )


def _borrowed_degree(name: str, degree: int, lender: str, ranks: int) -> int:
    """A degree whose ranks are borrowed from others (ep from dp × tp, cp from dp): it must divide them."""
    if degree < 1:
        raise ConfigError(f"parallelism.{name}", f"must be at least 1 (got {degree})")
    if ranks % degree:
        raise DegreeError(
            f"parallelism.{name}",
            f"{name}={degree} does not divide the {lender} ranks it borrows ({lender} = {ranks})",
            f"set parallelism.{name} to a divisor of {ranks}",
        )
    return degree


def _check_expert_parallel(ep: int, model: schema.ModelConfig) -> None:
    """ep splits the routed experts whole over its ranks: the model must have experts, as many on each."""
    if ep <= 1:  # below 1: refused as a degree
        return
    experts = model.moe.experts
    if not experts:
        raise DegreeError(
            "parallelism.ep", f"ep={ep} on {model.name}, which has no experts", "set parallelism.ep=1 for a dense model"
        )
    if experts % ep:
        divisors = [d for d in range(2, experts + 1) if experts % d == 0][:6]
        raise DegreeError(
            "parallelism.ep",
            f"ep={ep} does not divide the model's {experts} experts",
            f"use an ep that divides {experts}, like {', '.join(map(str, divisors))}",
        )


def processes_per_node(hardware: schema.HardwareConfig, instance: InstanceType) -> int:
    """Processes each node starts: one per GPU unless the config says fewer; one on a CPU instance type."""
    wanted = hardware.processes_per_node
    if wanted == -1:
        if not instance.has_gpus and instance.vcpus == 0:  # this machine's own CPUs: no size to go by
            raise ConfigError(
                "hardware.processes_per_node",
                "has no default on hardware=cpu (this machine's CPUs)",
                "set hardware.processes_per_node to the processes each node should start",
            )
        return max(instance.gpus, 1)
    if wanted < 1:
        raise ConfigError("hardware.processes_per_node", f"must be at least 1, or -1 for one per GPU (got {wanted})")
    if instance.has_gpus and wanted > instance.gpus:
        raise ConfigError(
            "hardware.processes_per_node",
            f"{instance.name} has {instance.gpus} GPUs, not {wanted}",
            f"set it to at most {instance.gpus}, or -1 for one per GPU",
        )
    return wanted


def _check_tensor_parallel(tp: int, per_node: int, model: schema.ModelConfig) -> None:
    if tp > per_node or per_node % tp:
        raise DegreeError(
            "parallelism.tp",
            f"tp={tp} does not fit inside one node of {per_node} processes; "
            "tensor parallelism needs the NVLink of one node",
            f"use a tp that divides {per_node}",
        )
    for field_name in family(model).tp_divides(model):
        heads = getattr(model, field_name)
        if heads % tp:
            raise DegreeError(
                "parallelism.tp",
                f"tp={tp} does not divide model.{field_name}={heads}",
                f"use a tp that divides {heads}",
            )


def _pipeline_stages(par: schema.ParallelismConfig, pp: int, model: schema.ModelConfig) -> tuple[int, tuple[int, ...]]:
    """(stages per rank, layers per stage) of a pipeline; (1, ()) without one."""
    if par.pp_schedule not in PIPELINE_SCHEDULES:
        raise UnknownNameError("parallelism.pp_schedule", "pipeline schedule", par.pp_schedule, PIPELINE_SCHEDULES)
    if pp == 1:
        if par.pp_layers_per_stage:
            raise ConfigError("parallelism.pp_layers_per_stage", "applies only to pp > 1", "remove it")
        return 1, ()
    strategy = facts(par.strategy)
    if strategy.engine == DEEPSPEED_ENGINE:
        raise UnsupportedError(
            "parallelism.pp",
            f"DeepSpeed {par.strategy.value} does not combine with the trainer's pipeline",
            "use parallelism=fsdp for pp > 1 (FSDP2 shards each stage over dp)",
        )
    if not strategy.pipeline:
        raise UnsupportedError(
            "parallelism.strategy",
            f"smddp with pp={pp}: the trainer's pipeline replicates stages with FSDP2 over NCCL",
            "use parallelism=ddp (replicated stages) or parallelism=fsdp (sharded stages)",
        )
    stages_per_rank = PIPELINE_SCHEDULES[par.pp_schedule]
    stages, layers = pp * stages_per_rank, family(model).pipeline_layers(model)
    if not par.pp_layers_per_stage:
        if layers < stages:
            raise DegreeError(
                "parallelism.pp",
                f"{par.pp_schedule} with pp={pp} runs {stages} stages, more than model.layers={layers}",
                f"use a pp of at most {layers // stages_per_rank}",
            )
        return stages_per_rank, split_layers(layers, stages)
    counts = tuple(par.pp_layers_per_stage)
    if len(counts) != stages or min(counts) < 1 or sum(counts) != layers:
        raise DegreeError(
            "parallelism.pp_layers_per_stage",
            f"{list(counts)} must be {stages} positive counts ({par.pp_schedule}: pp={pp} × {stages_per_rank} "
            f"per rank) that add up to model.layers={layers}",
            f"give {stages} counts summing to {layers}, or [] for an even split",
        )
    return stages_per_rank, counts


def _pipeline_microbatches(par: schema.ParallelismConfig, layout: Layout) -> int:
    """grad_accum and pp_microbatches name the same number under a pipeline: either, or -1 for the default."""
    given = {"grad_accum": par.grad_accum, "pp_microbatches": par.pp_microbatches}
    for key, value in given.items():
        if value < 1 and value != -1:
            raise ConfigError(f"parallelism.{key}", f"must be at least 1, or -1 to derive it (got {value})")
    if -1 not in given.values() and par.grad_accum != par.pp_microbatches:
        raise ConfigError(
            "parallelism.pp_microbatches",
            f"{par.pp_microbatches} but grad_accum={par.grad_accum}: with pp > 1 both are the pipeline's micro batches",
            "set only one of them",
        )
    chosen = max(given.values())
    if chosen == -1 and par.global_batch == -1:
        return default_microbatches(layout.pp, par.pp_schedule)
    return chosen


def _shard_degree(par: schema.ParallelismConfig, dp: int, dp_per_node: int) -> int:
    if not facts(par.strategy).shard_groups:
        if par.shard_group_size != -1:
            raise ConfigError(
                "parallelism.shard_group_size",
                "only applies to strategy fsdp_hybrid",
                "remove it, or use parallelism=fsdp-hybrid",
            )
        return 1 if facts(par.strategy).replicated else dp
    group = min(dp_per_node, dp) if par.shard_group_size == -1 else par.shard_group_size
    if group < 1 or dp % group:
        raise DegreeError(
            "parallelism.shard_group_size",
            f"shard group of {group} does not divide dp={dp}",
            f"use a size that divides {dp}, or -1 for the ranks of one node",
        )
    return group


def resolve_batch(par: schema.ParallelismConfig, seq_len: int, layout: Layout) -> Batch:
    """global_batch = micro_batch × grad_accum × dp / cp, inferring whichever of the last two is -1 (the cp
    ranks of a context-parallel group share their sequences: dp / cp replicas read distinct ones).

    With pp > 1 the accumulated micro batches are the pipeline's: `pp_microbatches` names them (or the
    default that keeps the bubble under 20%), at least pp and a multiple of it."""
    micro, total = par.micro_batch, par.global_batch
    dp, replicas = ("dp", layout.dp) if layout.cp == 1 else ("dp / cp", layout.data_replicas)
    accum = _pipeline_microbatches(par, layout) if layout.pp > 1 else par.grad_accum
    if micro < 1:
        raise ConfigError("parallelism.micro_batch", f"must be at least 1 (got {micro})")
    for key, value in (("grad_accum", accum), ("global_batch", total)):
        if value < 1 and value != -1:
            raise ConfigError(f"parallelism.{key}", f"must be at least 1, or -1 to derive it (got {value})")
    per_pass = micro * replicas
    if total == -1:
        accum = max(accum, 1)
        total = per_pass * accum
    elif accum == -1:
        if total % per_pass:
            raise DegreeError(
                "parallelism.global_batch",
                f"global_batch={total} is not a multiple of micro_batch × {dp} = {micro} × {replicas}",
                f"use a multiple of {per_pass}",
            )
        accum = total // per_pass
    elif total != per_pass * accum:
        raise DegreeError(
            "parallelism.global_batch",
            f"global_batch={total} but micro_batch × grad_accum × {dp} = {micro} × {accum} × {replicas} = "
            f"{per_pass * accum}",
            "set parallelism.grad_accum=-1 to infer it",
        )
    if layout.pp > 1 and (accum < layout.pp or accum % layout.pp):
        raise DegreeError(
            "parallelism.pp_microbatches",
            f"{accum} micro batches per step for pp={layout.pp}: a pipeline needs a multiple of pp, at least pp",
            f"set parallelism.pp_microbatches to a multiple of {layout.pp} (grad_accum=-1), or a global_batch of "
            f"such a multiple × micro_batch × {dp} ({per_pass})",
        )
    return Batch(
        micro_batch=micro, grad_accum=accum, global_batch=total, seq_len=seq_len, tokens_per_step=total * seq_len
    )
