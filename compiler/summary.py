"""The few lines `dockyard plan` prints: the numbers a user checks before paying for GPUs."""

from compiler.plan import Plan
from compiler.schema import Strategy


def summary_lines(plan: Plan) -> list[str]:
    layout, batch, instance = plan.layout, plan.batch, plan.instance
    devices = f"{instance.gpus} × {instance.gpu_model}" if instance.has_gpus else "CPU"
    shard = f", shard group {layout.shard_degree}" if plan.parallelism.strategy is Strategy.fsdp_hybrid else ""
    cost = f"   ${plan.price_per_hour:,.2f}/h" if plan.price_per_hour else ""
    lines = [
        f"plan      {plan.name}   sha256:{plan.content_hash[:12]}",
        f"world     {layout.world_size} processes = {layout.nodes} × {instance.name} "
        f"({devices}) × {layout.processes_per_node} per node{cost}",
        f"layout    dp={layout.dp} × tp={layout.tp} × pp={layout.pp}   {plan.parallelism.strategy.value}{shard}, "
        f"{plan.parallelism.mixed_precision.value}, checkpointing {plan.parallelism.activation_checkpointing.value}",
        f"model     {plan.model.name}   {plan.parameters / 1e6:,.1f}M parameters, seq_len {batch.seq_len}",
        f"batch     global {batch.global_batch} = micro {batch.micro_batch} × accum {batch.grad_accum} × "
        f"dp {layout.dp}   {batch.tokens_per_step:,} tokens/step",
        f"data      {_data(plan)}",
        f"image     {plan.image.name} ({plan.image.family.value.replace('_', '-')} on {plan.image.base})",
        f"target    {plan.target.kind.value}   {plan.trainer.steps} steps",
    ]
    lines += [f"warning   {w}" for w in plan.warnings]
    return lines


def _data(plan: Plan) -> str:
    data = plan.data
    where = {
        "s3": data.uri,
        "local": data.path,
        "fsx": f"{data.file_system_id}:{data.path}",
        "efs": f"{data.file_system_id}:{data.path}",
    }.get(data.source.value)
    return f"{data.source.value} {where}" if where else data.source.value
