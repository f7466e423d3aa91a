"""Step time, tokens per second and MFU a plan will reach, predicted before any GPU is paid for.

- FLOPs per token: 6 × the parameters used in matrix products (every layer and the output head, not the
  embedding lookups) + 12 × layers × hidden × seq_len for attention (the PaLM convention, causal masking
  not discounted); model FLOPs, so recomputation lowers MFU instead of raising it.
- Compute runs at a share of the GPU's dense peak fitted to published runs of that GPU family (`assumptions.
  MATMUL_EFFICIENCY`: growing with the GEMMs' size, the hidden width and the tokens of a micro batch; times
  `COMPILE_SPEEDUP` under trainer.compile), or an assumed one for a GPU without published runs; gradient
  reduction overlaps the backward, and only what it cannot hide adds to the step.
- Collectives across nodes are costed per node: a ring or tree over nodes moves about the collective's size
  through each node's NICs, which its GPUs share (`network_gbps` is the node's); inside a node each GPU moves its
  part over NVLink. The two run at once, so the slower one counts.
- Tensor parallelism (tp > 1): each rank's products are a tp-th as wide, so the fit's width term lowers the
  efficiency; the activations' collectives over NVLink are on the critical path, and recomputation runs some of
  the forward's again (`recomputed_collectives`).
- Context parallelism (cp > 1): each layer's all-to-alls over heads (q, k, v and the attention output in the
  forward, their gradients in the backward) move (cp − 1)/cp of those tensors over NVLink (or the network when
  a group spans nodes), on the critical path. Attention FLOPs per token grow with seq_len (quadratic per
  sequence), which dominates at 128K.
- Expert parallelism (ep > 1): the token dispatch's all-to-alls add to the step, unhidden.
- Pipelines (pp > 1): the step is the slowest rank's busy time over (1 − bubble); stage boundaries send each
  micro batch's activations forward and their gradients back.
"""

from compiler.planner.assumptions import (
    ASSUMED_MATMUL_EFFICIENCY,
    COMPILE_SPEEDUP,
    MATMUL_EFFICIENCY,
    RECOMPUTE_TIME,
    EfficiencyFit,
)
from compiler.planner.estimate import Share, held_parameters, pipeline_shares, vocab_shards
from compiler.planner.models import model_facts
from compiler.planner.pipeline import bubble_fraction
from compiler.spec import Batch, InstanceType, Layout, Throughput, schema
from compiler.spec.strategies import DEEPSPEED_ENGINE, facts

BACKWARD_SHARE = 2 / 3
"""Share of a step's compute spent in the backward pass, where gradient communication overlaps."""


def flops_per_token(model: schema.ModelConfig) -> float:
    return flops_per_token_of(model, 1, Share.whole(model))


def flops_per_token_of(model: schema.ModelConfig, tp: int, share: Share, vocab: int = 1) -> float:
    """Model FLOPs per token of one rank: its pipeline share, split over the tensor-parallel group (the output
    head over the `vocab` ranks loss parallelism splits it over)."""
    return model_facts(model).flops_per_token(share.layers, share.last, tp, vocab)


def throughput(
    model: schema.ModelConfig,
    par: schema.ParallelismConfig,
    instance: InstanceType,
    layout: Layout,
    batch: Batch,
    dpo: schema.DpoConfig | None = None,
    compiled: bool = False,
) -> Throughput:
    """Step time from the GPU's peak at an assumed efficiency, plus communication the backward cannot hide;
    under a pipeline, the slowest rank's time stretched by the bubble. With `dpo` and a reference model that
    runs beside the policy, its forward pass over the same rows (a third of a training step's FLOPs).
    `compiled`: trainer.compile is on."""
    sequences = batch.tokens_per_step // (batch.seq_len * layout.dp)  # a replica's rows: with DPO, twice its pairs
    efficiency, source = matmul_efficiency(model, instance, layout.tp, batch.micro_batch * model.seq_len, compiled)
    busy, compute, exposed = 0.0, 0.0, 0.0
    for share in pipeline_shares(model, par, layout):
        per_token = flops_per_token_of(model, layout.tp, share, vocab_shards(model, layout))
        model_flops = per_token * sequences * model.seq_len
        hardware_flops = model_flops * recompute_time(par)
        if dpo is not None and not dpo.precompute_reference:
            hardware_flops += model_flops / 3
        share_compute = hardware_flops / (instance.peak_tflops(par.mixed_precision.value) * 1e12 * efficiency)
        data_parallel = _data_parallel_seconds(model, par, instance, layout, share) * _reductions_per_step(par, batch)
        share_exposed = (
            max(0.0, data_parallel - BACKWARD_SHARE * share_compute)
            + _tensor_parallel_seconds(model, par, instance, layout, sequences, share)
            + expert_parallel_seconds(model, instance, layout, sequences, share)
        )
        share_exposed += _context_parallel_seconds(model, instance, layout, sequences, share)
        if share_compute + share_exposed > busy:
            busy, compute, exposed = share_compute + share_exposed, share_compute, share_exposed
    point_to_point = pipeline_seconds(model, par, instance, layout, batch)
    bubble = bubble_fraction(layout.pp, batch.grad_accum, par.pp_schedule)
    step = (busy + point_to_point) / (1 - bubble)
    tokens_per_second = batch.tokens_per_step / step
    mfu = (
        flops_per_token(model)
        * tokens_per_second
        / (layout.world_size * instance.peak_tflops(par.mixed_precision.value) * 1e12)
    )
    return Throughput(
        flops_per_token=flops_per_token(model),
        step_seconds=step,
        compute_seconds=compute,
        exposed_communication_seconds=exposed + point_to_point,
        tokens_per_second=tokens_per_second,
        mfu=mfu,
        bubble=bubble,
        point_to_point_seconds=point_to_point,
        matmul_efficiency=efficiency,
        efficiency_source=source,
    )


def recompute_time(par: schema.ParallelismConfig) -> float:
    """A step's time over the same step without recomputation; full recomputation of every k-th block only
    repeats the forward of a k-th of the layers."""
    return 1 + (RECOMPUTE_TIME[par.activation_checkpointing] - 1) / par.activation_checkpointing_every


def matmul_efficiency(
    model: schema.ModelConfig, instance: InstanceType, tp: int, tokens_per_micro_batch: int, compiled: bool
) -> tuple[float, str]:
    """The share of the dense peak a step's FLOPs reach, and where that figure comes from: the fit of the GPU's
    family to its published runs, scaled by the GEMMs' size (narrow models and short micro batches keep the
    tensor cores less busy; tensor parallelism splits each product's width over `tp` ranks), or the assumed
    figure for a GPU no published run covers."""
    fit = _family_fit(instance.gpu_model)
    if fit is None:
        efficiency, source = ASSUMED_MATMUL_EFFICIENCY, "assumed, no published runs of this GPU"
    else:
        width = min(1.0, model.hidden / tp / fit.full_width) ** fit.width_exponent
        tokens = min(1.0, tokens_per_micro_batch / fit.full_tokens) ** fit.tokens_exponent
        efficiency, source = fit.peak_share * width * tokens, fit.source
    if compiled:
        efficiency, source = efficiency * COMPILE_SPEEDUP, f"{source}; × {COMPILE_SPEEDUP:g} for trainer.compile"
    return efficiency, source


def _family_fit(gpu_model: str) -> EfficiencyFit | None:
    return next((fit for prefix, fit in MATMUL_EFFICIENCY.items() if gpu_model.startswith(prefix)), None)


def pipeline_bytes(model: schema.ModelConfig, par: schema.ParallelismConfig, layout: Layout, batch: Batch) -> int:
    """Bytes one pipeline rank sends per step: each micro batch's activations to the next stage and their
    gradients back to the previous, once per stage it holds (the pipeline's ends send one way only)."""
    if layout.pp == 1:
        return 0
    element = 4 if par.mixed_precision is schema.Precision.fp32 else 2
    activation = batch.micro_batch * model.seq_len * model.hidden * element
    return 2 * activation * batch.grad_accum * layout.stages_per_rank


def pipeline_seconds(
    model: schema.ModelConfig, par: schema.ParallelismConfig, instance: InstanceType, layout: Layout, batch: Batch
) -> float:
    """The point-to-point activation traffic's time; with the pipeline outermost in the rank order, some
    stage boundary crosses the network as soon as there are two nodes."""
    per_node = layout.processes_per_node
    link = instance.network_gbps / per_node if layout.nodes > 1 else instance.gpu_link_gbps
    return pipeline_bytes(model, par, layout, batch) / (link / 8 * 1e9)


def _reductions_per_step(par: schema.ParallelismConfig, batch: Batch) -> int:
    """Sharded gradients are reduced (and ZeRO-3/FSDP parameters gathered) for every micro batch; DDP and
    ZeRO-1 accumulate locally and reduce once per optimizer step, and so does a pipeline stage (the schedule
    holds FSDP's reduction back until the last micro batch)."""
    return 1 if not facts(par.strategy).shards_gradients or par.pp > 1 else batch.grad_accum


def _data_parallel_seconds(
    model: schema.ModelConfig, par: schema.ParallelismConfig, instance: InstanceType, layout: Layout, share: Share
) -> float:
    """Gradient reduction (and FSDP/ZeRO-3 parameter gathers) per optimizer step: inside a node each GPU moves
    its part over NVLink; across nodes each node's NICs carry about the collective's size (a ring over nodes
    crosses each node once), shared by its GPUs. With shard groups inside a node (HSDP), only the replicas'
    all-reduce of each GPU's gradient shard crosses the network, every GPU of the node sending its own."""
    dp, shard = layout.dp, layout.shard_degree
    if dp == 1:
        return 0.0
    params = held_parameters(model, layout, share)
    strategy = facts(par.strategy)
    gradient_bytes = params * (2 if strategy.engine == DEEPSPEED_ENGINE or strategy.shards_parameters else 4)
    gathers = 2 * params * 2 if strategy.shards_parameters else 0  # parameters for forward and backward
    gpu_link = instance.gpu_link_gbps / 8 * 1e9
    node_network = instance.network_gbps / 8 * 1e9
    per_node = layout.processes_per_node
    if strategy.shard_groups and per_node % shard == 0:
        within = (gradient_bytes + gathers) * (shard - 1) / shard / gpu_link
        replicas = dp // shard
        across = 2 * gradient_bytes / shard * (replicas - 1) / replicas
        if layout.nodes == 1:
            return within + across / gpu_link
        return within + across * min(per_node, dp) / node_network
    reduction = 1 if strategy.shards_gradients else 2  # a reduce-scatter moves half an all-reduce's bytes
    traffic = reduction * gradient_bytes * (dp - 1) / dp + gathers * (shard - 1) / shard
    if layout.nodes == 1:
        return traffic / gpu_link
    groups = min(layout.tp, per_node)  # each tensor-parallel rank of a node reduces in its own group
    return max(traffic / gpu_link, traffic * groups / node_network)


def _tensor_parallel_seconds(
    model: schema.ModelConfig,
    par: schema.ParallelismConfig,
    instance: InstanceType,
    layout: Layout,
    sequences: int,
    share: Share,
) -> float:
    """Activation collectives over NVLink, each layer's sublayers (attention, MLP) in the forward and the
    backward: with sequence parallelism (the FSDP+TP engine) an all-gather of the input along the sequence and a
    reduce-scatter of the row-split output (their gradients' reduce-scatter and all-gather back); in a
    pipeline an all-reduce after each row-split projection and of the column-split inputs' gradients. Either
    way each sublayer moves the activation twice per pass (an all-reduce is a reduce-scatter and an
    all-gather), so the volume is the same. Recomputation runs some of the forward's collectives again
    (`recomputed_collectives`)."""
    if layout.tp == 1:
        return 0.0
    activation_bytes = sequences * model.seq_len * model.hidden * 2
    recomputed = recomputed_collectives(par.activation_checkpointing, layout) / par.activation_checkpointing_every
    traffic = (8 + recomputed) * share.layers * activation_bytes * (layout.tp - 1) / layout.tp
    return traffic / (instance.gpu_link_gbps / 8 * 1e9)


def recomputed_collectives(mode: schema.Checkpointing, layout: Layout) -> int:
    """A recomputed layer's tensor-parallel collectives run again in the backward, in activation-sized halves (a
    gather or a reduce-scatter is one, an all-reduce two; the forward has 4). Recomputation stops once it has
    what the backward reads, so the MLP's output collective (the block's output) never runs again. With
    sequence parallelism, full recomputation runs both sublayers' gathers and the attention's reduce-scatter
    again (3); the op-level policy keeps the reduce-scatters' outputs, as torchtitan's does, and gathers each
    sublayer's input again for the products it recomputes (2). In a pipeline either mode runs the attention
    output's all-reduce again, which the MLP's norm reads (2)."""
    if mode not in (schema.Checkpointing.selective, schema.Checkpointing.full):
        return 0
    return 3 if mode is schema.Checkpointing.full and layout.pp == 1 else 2


def _context_parallel_seconds(
    model: schema.ModelConfig, instance: InstanceType, layout: Layout, sequences: int, share: Share
) -> float:
    """The all-to-alls over heads of each layer: q, k, v and the output there, their gradients back, in bf16;
    each rank keeps 1/cp of what it holds and sends the rest. `sequences` counts a rank's tokens (seq_len / cp
    of each of cp × sequences)."""
    if layout.cp == 1:
        return 0.0
    head_dim = model.hidden // model.heads
    width = 2 * model.heads * head_dim + 2 * model.kv_heads * head_dim  # q and the output, k and v
    traffic = 2 * share.layers * sequences * model.seq_len * width * 2 * (layout.cp - 1) / layout.cp
    within_node = layout.processes_per_node % layout.cp == 0
    link = instance.gpu_link_gbps if within_node else instance.network_gbps / layout.processes_per_node
    return traffic / (link / 8 * 1e9)


def expert_parallel_seconds(
    model: schema.ModelConfig, instance: InstanceType, layout: Layout, sequences: int, share: Share
) -> float:
    """The token dispatch's all-to-alls under expert parallelism, not overlapped: each MoE block sends every
    token's hidden state to its experts_per_token experts and takes their outputs back, in the forward and
    again in the backward (four all-to-alls of tokens × experts_per_token × hidden in bf16), of which
    (ep − 1)/ep leaves the rank; over NVLink while the ep group fits in a node, else over the network."""
    if layout.ep == 1:
        return 0.0
    facts = model_facts(model)
    moe_layers = share.layers * facts.moe_layers / facts.layers
    traffic = 4 * moe_layers * sequences * model.seq_len * facts.dispatched_per_token * 2 * (layout.ep - 1) / layout.ep
    within_node = layout.ep <= layout.processes_per_node
    link = instance.gpu_link_gbps if within_node else instance.network_gbps / layout.processes_per_node
    return traffic / (link / 8 * 1e9)
