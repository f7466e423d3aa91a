"""What `dockyard plan` tells a user: a short summary on the terminal and `report.md` beside plan.json."""

from compiler.planner.assumptions import ASSUMPTIONS
from compiler.planner.estimate import GIB, Memory
from compiler.planner.pipeline import bubble_fraction
from compiler.planner.schedule_rules import differences_from_trainer
from compiler.planner.tokenize_job import tokenize_lines
from compiler.spec import Layout, Plan
from compiler.spec.errors import printable
from compiler.spec.records import DatasetTokens
from compiler.spec.schema import (
    BaseQuantization,
    Compile,
    DataConfig,
    DataFormat,
    Entry,
    Job,
    LossOn,
    LrScaling,
    Objective,
    Overlong,
    PackingStrategy,
)
from compiler.spec.strategies import facts
from compiler.spec.tokenizer import tokenizer_location


def summary_lines(plan: Plan) -> list[str]:
    """The plan in a few lines for a terminal, each in the one printable form: a value from a file or an
    override (a path, a model type) cannot carry a control character that forges or erases a line."""
    return [printable(line) for line in _summary(plan)]


def _summary(plan: Plan) -> list[str]:
    layout, batch, instance = plan.layout, plan.batch, plan.instance
    devices = f"{instance.gpus} × {instance.gpu_model}" if instance.has_gpus else "CPU"
    shard = f", shard group {layout.shard_degree}" if facts(plan.parallelism.strategy).shard_groups else ""
    cost = f"   ${plan.price_per_hour:,.2f}/h" if plan.price_per_hour else ""
    par = plan.parallelism
    every = par.activation_checkpointing_every
    checkpointing = par.activation_checkpointing.value + (f" every {every} blocks" if every > 1 else "")
    lines = [
        f"plan      {plan.name}   sha256:{plan.content_hash[:12]}",
        f"world     {layout.world_size} processes = {layout.nodes} × {instance.name} "
        f"({devices}) × {layout.processes_per_node} per node{cost}",
        f"layout    dp={layout.dp} × tp={layout.tp} × pp={layout.pp}{_context(layout)}   {par.strategy.value}{shard}, "
        f"{par.mixed_precision.value}, checkpointing {checkpointing}",
    ]
    if plan.job is Job.tokenize:
        return lines + [f"data      {_data(plan)}", *tokenize_lines(plan)]
    if plan.trainer.entry is Entry.script:
        return lines + _script_lines(plan)
    lines += [
        f"model     {plan.model.name}   {_parameters(plan)}, seq_len {batch.seq_len}",
        f"batch     global {batch.global_batch} = micro {batch.micro_batch} × accum {batch.grad_accum} × "
        f"dp {layout.dp}{'' if layout.cp == 1 else f' / cp {layout.cp}'}   {batch.tokens_per_step:,} tokens/step",
    ]
    if plan.estimate:
        memory, speed = plan.estimate.memory, plan.estimate.throughput
        terms = ", ".join(f"{name} {size / GIB:.1f}" for name, size in memory.terms.items())
        lines += [
            f"memory    {memory.total / GIB:.1f} of {plan.estimate.gpu_memory / GIB:.1f} GiB per GPU (reserved "
            f"peak): {terms} "
            "(context, NCCL buffers and margin assumed)",
            f"speed     {speed.step_seconds:.2f} s/step, {speed.tokens_per_second:,.0f} tokens/s, MFU "
            f"{speed.mfu:.0%} (predicted at {speed.matmul_efficiency:.0%} matmul efficiency: {speed.efficiency_source})"
            f"{_cost_per_billion(plan)}",
            f"total     {_totals(plan)}",
        ]
    if plan.estimate and plan.estimate.host_memory:
        host = plan.estimate.host_memory
        terms = ", ".join(f"{what} {size / GIB:.1f}" for what, size in host.items())
        lines.append(
            f"host      {sum(host.values()) / GIB:.1f} of {instance.memory_gib:g} GiB per node offloaded: {terms}"
        )
    if layout.pp > 1:
        lines.append(_pipeline(plan))
    lines += [
        f"data      {_data(plan)}",
        f"image     {plan.image.name} ({plan.image.family.value.replace('_', '-')} on {plan.image.base})",
        f"target    {plan.target.kind.value}   {plan.trainer.steps} steps",
    ]
    if plan.trainer.lr_scaling is not LrScaling.none:
        lines.append(
            f"lr        {plan.derived.lr:.4g} ({plan.trainer.lr_scaling.value} from {plan.trainer.lr:.4g} at "
            f"{plan.trainer.base_batch} to {plan.batch.global_batch} sequences)"
        )
    lines.append(f"training  {_training(plan)}")
    lines += _carried_over(plan)
    if Compile(plan.trainer.compile) is not Compile.false:
        lines.append(f"compile   torch.compile {plan.trainer.compile}, mode {plan.trainer.compile_mode}")
    return lines + [f"warning   {w}" for w in plan.warnings]


def _training(plan: Plan) -> str:
    """The optimizer and schedule, then every setting that differs from the HF Trainer's default."""
    trainer = plan.trainer
    count = plan.derived.warmup_steps
    warmup = f"{count} warm-up step{'s' if count > 1 else ''}" if count else "no warm-up"
    if trainer.epochs is not None:
        warmup += f", {trainer.steps:,} steps from trainer.epochs={trainer.epochs:g}"
    differences = differences_from_trainer(trainer)
    if not differences:
        return f"AdamW, {trainer.lr_schedule.value}, {warmup}: the HF Trainer's defaults"
    return f"AdamW, {warmup}; unlike the HF Trainer's defaults (in brackets): {', '.join(differences)}"


def _carried_over(plan: Plan) -> list[str]:
    """The objective, the adapters or the parameters trained, so that a ported recipe's DPO, LoRA and
    `unfrozen_parameters` are seen to have carried over."""
    trainer, lora = plan.trainer, plan.model.lora
    if trainer.objective is Objective.dpo:
        dpo = trainer.dpo
        reference = "the base model under the adapters" if lora.rank else "a frozen copy of the model"
        objective = f"dpo, β {dpo.beta:g}, {dpo.loss.value} loss, against {reference}"
    else:
        objective = "sft, the next-token loss"
    lines = [f"objective {objective}"]
    if lora.rank:
        quantized = lora.quantize_base is not BaseQuantization.none
        lines.append(
            f"adapters  LoRA rank {lora.rank}, alpha {lora.alpha:g}, dropout {lora.dropout:g} on "
            f"{', '.join(lora.targets)}; the checkpoint's weights frozen"
            + (f", its blocks' linear layers held {lora.quantize_base.value} (QLoRA)" if quantized else "")
        )
    if plan.model.trainable_parameters:
        counted = f"{plan.model.trainable_count:,} parameters" if plan.model.trainable_count else "the parameters"
        lines.append(f"trains    {counted} matching {', '.join(plan.model.trainable_parameters)}; the rest frozen")
    return lines


def _script_lines(plan: Plan) -> list[str]:
    """A script's plan: what runs and where. Its model, batch and speed are the script's own, so the built-in
    model's estimates (parameters, memory, tokens/s, cost per token) would say nothing about it."""
    trainer = plan.trainer
    hyperparameters = " ".join(f"{key}={value}" for key, value in trainer.hyperparameters.items()) or "none"
    return [
        f"script    {trainer.script} from {trainer.source_dir}   hyperparameters {hyperparameters}",
        "estimate  none: the script's model and batch are its own (memory, speed and cost are not predicted)",
        f"image     {plan.image.name} ({plan.image.family.value.replace('_', '-')} on {plan.image.base})",
        f"target    {plan.target.kind.value}",
        *(f"warning   {w}" for w in plan.warnings),
    ]


def report_markdown(plan: Plan) -> str:
    """The planner's numbers in full, for review next to plan.json."""
    lines = [f"# {plan.name}", "", "```", *summary_lines(plan), "```", ""]
    if plan.estimate and plan.trainer.entry is not Entry.script:
        memory, speed = plan.estimate.memory, plan.estimate.throughput
        lines += [
            "## Memory per GPU (predicted reserved peak: what the caching allocator holds, max_memory_reserved)",
            "",
            "| term | GiB | share |",
            "|---|---:|---:|",
        ]
        lines += [f"| {name} | {size / GIB:.2f} | {size / memory.total:.0%} |" for name, size in memory.terms.items()]
        lines += [
            f"| **total** | **{memory.total / GIB:.2f}** | of {plan.estimate.gpu_memory / GIB:.1f} GiB |",
            "",
            f"The terms are those at the moment of the peak: {_peak_moment(memory)}.",
            "",
            "## Speed (predicted)",
            "",
            f"- FLOPs per token: {speed.flops_per_token:.3e} (6 × matmul parameters + attention)",
            f"- step: {speed.step_seconds:.3f} s = compute {speed.compute_seconds:.3f} s + exposed communication "
            f"{speed.exposed_communication_seconds:.3f} s",
            f"- {speed.tokens_per_second:,.0f} tokens/s, MFU {speed.mfu:.1%}",
            f"- cost: ${plan.price_per_hour:,.2f}/h{_cost_per_billion(plan)}",
            f"- the whole run: {_totals(plan)}",
            "",
            "## Assumptions (not measured)",
            "",
            "| constant | value | source |",
            "|---|---|---|",
            *(f"| {a.name} | {a.value} | {a.source} |" for a in ASSUMPTIONS),
        ]
    return "\n".join(lines) + "\n"


def _pipeline(plan: Plan) -> str:
    """The schedule, the stages' layers, the bubble and, on GPUs, each pipeline rank's predicted peak."""
    layout, par = plan.layout, plan.parallelism
    microbatches = plan.batch.grad_accum
    bubble = bubble_fraction(layout.pp, microbatches, par.pp_schedule)
    layers = "/".join(str(count) for count in layout.layers_per_stage)
    line = f"pipeline  {par.pp_schedule}, {layout.stages} stages of {layers} layers, {microbatches} micro batches, "
    line += f"bubble {bubble:.1%}"
    if plan.estimate:
        peaks = " | ".join(f"{total / GIB:.1f}" for total in plan.estimate.stage_memory)
        line += f", {plan.estimate.throughput.point_to_point_seconds:.2f} s/step point-to-point; GiB per stage {peaks}"
    return line


def predicted_seconds(plan: Plan) -> float | None:
    """The whole run's predicted training time: its steps × the predicted step time (GPU plans of the built-in
    trainer; a script's steps are its own)."""
    if not plan.estimate or plan.trainer.entry is Entry.script:
        return None
    return plan.trainer.steps * plan.estimate.throughput.step_seconds


def _totals(plan: Plan) -> str:
    """The whole run's predicted wall time and cost (the plan's price covers all its nodes)."""
    seconds = predicted_seconds(plan) or 0.0
    text = f"{plan.trainer.steps:,} steps × {seconds / plan.trainer.steps:.2f} s = {_duration(seconds)} predicted"
    if plan.price_per_hour:
        text += f", ${plan.price_per_hour * seconds / 3600:,.2f} at ${plan.price_per_hour:,.2f}/h"
    return text


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:,.1f} h"


def _cost_per_billion(plan: Plan) -> str:
    if not (plan.estimate and plan.price_per_hour):
        return ""
    hours = 1e9 / plan.estimate.throughput.tokens_per_second / 3600
    return f", ${plan.price_per_hour * hours:,.2f} per 1B tokens"


def _data(plan: Plan) -> str:
    data = plan.data
    where = {
        "s3": data.uri,
        "local": data.path,
        "fsx": f"{data.file_system_id}:{data.path}",
        "efs": f"{data.file_system_id}:{data.path}",
        "hf": _datasets(data),
    }.get(data.source.value)
    line = f"{data.source.value} {where}" if where else data.source.value
    if data.format is not DataFormat.tokens:
        rows = " rows" if isinstance(data.validation, int) and not isinstance(data.validation, bool) else ""
        held_out = f", validation {data.validation}{rows}" if data.validation is not None else ""
        line += f"   {data.format.value}, tokenizer {tokenizer_location(data, plan.model)}{held_out}, {_windows(data)}"
    if plan.dataset:
        line += f"   {_epochs(plan, plan.dataset)}"
    return line


def _datasets(data: DataConfig) -> str:
    """data=hf: each dataset (its config and split), with the share of its rows a mixture keeps."""
    entries = data.mixture or [{"name": data.name, "config": data.config, "split": data.split}]
    shown = []
    for entry in entries:
        subset = f"/{entry['config']}" if entry.get("config") else ""
        weight = f" x{entry['weight']:g}" if entry.get("weight", 1) != 1 else ""
        shown.append(f"{entry.get('name')}{subset}[{entry.get('split') or data.split}]{weight}")
    return " + ".join(shown)


def _windows(data: DataConfig) -> str:
    """How documents become training windows, and which tokens the loss counts."""
    longer = f"longer ones {'dropped' if data.overlong is Overlong.drop else 'truncated'}"
    if data.format is DataFormat.preference:
        cut = "" if data.max_prompt_length is None else f", prompts cut to their last {data.max_prompt_length} tokens"
        return f"each completion a window of its own ({longer}){cut}, the loss on the completions"
    windows = f"one document a window ({longer})"
    if data.packing:
        bfd = data.packing_strategy is PackingStrategy.bfd
        packed = f"packed whole (best-fit decreasing, {longer})" if bfd else "packed"
        windows = f"{packed}, documents masked from each other" if data.packing_mask else packed
    if data.format is DataFormat.chat:
        return f"{windows}, the loss on {'the replies' if data.loss_on is LossOn.assistant else 'every token'}"
    return windows


def _epochs(plan: Plan, dataset: DatasetTokens) -> str:
    """How many epochs the steps cover, how long one takes at the predicted speed, and where the count is from."""
    where = "data.tokens" if dataset.source == "data.tokens" else f"measured by the token cache {dataset.source}"
    speed = plan.estimate.throughput.tokens_per_second if plan.estimate else None
    per_epoch = f", {_duration(dataset.tokens / speed)} per epoch" if speed else ""
    return f"{epochs(plan, dataset.tokens):.2f} epochs of {dataset.tokens:,} tokens{per_epoch} ({where})"


def epochs(plan: Plan, dataset_tokens: int) -> float:
    """How many passes over a dataset of `dataset_tokens` tokens the run's steps make."""
    return plan.trainer.steps * plan.batch.tokens_per_step / dataset_tokens


def _peak_moment(memory: Memory) -> str:
    if memory.logits:
        return "the loss's backward, with every layer's activations and the fp32 logits alive"
    return "inside a layer's backward, while it is recomputed and its parameters gathered"


def _context(layout: Layout) -> str:
    """cp > 1: the context-parallel degree and how attention sees the whole sequence."""
    return "" if layout.cp == 1 else f", cp={layout.cp} (all-to-all over heads)"


def _parameters(plan: Plan) -> str:
    """The model's parameters; a mixture of experts' also those one token uses, and its experts."""
    total = f"{plan.parameters / 1e6:,.1f}M parameters"
    moe = plan.model.moe
    if not moe.experts:
        return total
    return (
        f"{total} ({plan.active_parameters / 1e6:,.1f}M active: {moe.experts_per_token} of {moe.experts} experts "
        f"per token, ep={plan.layout.ep})"
    )
