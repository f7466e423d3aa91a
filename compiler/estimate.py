"""Memory and throughput a plan will need, predicted per GPU before any GPU is paid for.

Pure functions of the model, the parallel layout, the micro batch and the instance type. The
conventions are the built-in trainer's:

- Model states (bytes per parameter held by a GPU): DDP and smddp keep fp32 parameters under bf16
  autocast (4 + 4 gradient + 8 Adam moments = 16); FSDP shards the same 16 bytes over its shard group
  and gathers bf16 copies of one layer at a time; DeepSpeed ZeRO keeps bf16 parameters and gradients
  and 12 bytes of fp32 master weights and moments, partitioned by stage (ZeRO paper, Rajbhandari et al.
  2020, K = 12). Tensor parallelism divides all of it by tp.
- Activations per layer after Korthikanti et al. 2022, for SDPA attention (no s² term) without dropout:
  per token, the two norm inputs (residual stream precision), the QKV input, q, k, v (GQA-sized), the
  attention output, the MLP input and 2 (GELU) or 4 (SwiGLU) tensors of ffn width. Tensor parallelism
  runs with sequence parallelism, so everything divides by tp. Selective recomputation drops q, k, v;
  full recomputation keeps each layer's input and one layer's activations at a time.
- FLOPs per token: 6 × the parameters used in matrix products (every layer and the output head, not the
  embedding lookups) + 12 × layers × hidden × seq_len for attention (the PaLM convention, causal masking
  not discounted); model FLOPs, so recomputation lowers MFU instead of raising it.
"""

from dataclasses import dataclass, fields

from compiler import schema
from compiler.catalog import InstanceType
from compiler.layout import Batch, Layout

GIB = 2**30
CUDA_CONTEXT_BYTES = 600 * 2**20
"""CUDA context, cuBLAS workspace and kernels: outside PyTorch's allocator, inside the GPU's memory."""
NCCL_BYTES_PER_GROUP = 200 * 2**20
ALLOCATOR_MARGIN = 0.08
"""Fragmentation of PyTorch's caching allocator, as a share of what tensors occupy."""
DDP_BUCKET_BYTES = 25 * 2**20
DEEPSPEED_BUCKET_ELEMENTS = 5e8
DEEPSPEED_PREFETCH_ELEMENTS = 5e7
ASSUMED_MATMUL_EFFICIENCY = 0.4
"""Share of the GPU's dense bf16 peak a step's FLOPs reach in eager PyTorch (torchtitan's Llama 3 8B on H100
reports MFU in the mid-30s to 40s %; llm.c reaches about 48% for GPT-2 1.5B)."""
BACKWARD_SHARE = 2 / 3
"""Share of a step's compute spent in the backward pass, where gradient communication overlaps."""


@dataclass(frozen=True)
class Memory:
    """Predicted peak bytes per GPU, by term."""

    parameters: int
    gradients: int
    optimizer: int
    activations: int
    logits: int
    communication: int
    context: int
    margin: int

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self))

    @property
    def terms(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def largest_term(self) -> str:
        return max(self.terms, key=self.terms.get)


@dataclass(frozen=True)
class Throughput:
    flops_per_token: float
    step_seconds: float
    compute_seconds: float
    exposed_communication_seconds: float
    tokens_per_second: float
    mfu: float


@dataclass(frozen=True)
class Estimate:
    """What the plan will need per GPU and how fast it should run; stored in the plan."""

    memory: Memory
    gpu_memory: int
    throughput: Throughput


def parameter_count(model: schema.ModelConfig) -> int:
    """Trainable parameters of the decoder the built-in trainer builds from `model`."""
    embeddings = model.vocab * model.hidden
    positions = model.context * model.hidden if model.position is schema.Position.learned else 0
    head = 0 if model.tied_embeddings else model.vocab * model.hidden
    return embeddings + positions + model.layers * layer_parameters(model) + _norm_parameters(model) + head


def layer_parameters(model: schema.ModelConfig) -> int:
    kv_width = model.kv_heads * (model.hidden // model.heads)
    attention = 2 * model.hidden * model.hidden + 2 * model.hidden * kv_width
    mlp = (_mlp_inputs(model) + 1) * model.hidden * model.ffn_hidden
    if model.bias:
        attention += 2 * model.hidden + 2 * kv_width
        mlp += _mlp_inputs(model) * model.ffn_hidden + model.hidden
    return attention + mlp + 2 * _norm_parameters(model)


def _norm_parameters(model: schema.ModelConfig) -> int:
    return model.hidden * (2 if model.norm is schema.Norm.layernorm and model.bias else 1)


def _mlp_inputs(model: schema.ModelConfig) -> int:
    return 2 if model.activation is schema.Activation.swiglu else 1


def state_bytes_per_parameter(par: schema.ParallelismConfig, shard: int) -> tuple[float, float, float]:
    """(parameter, gradient, optimizer) bytes per parameter on one GPU, before tensor parallelism."""
    strategy, full = par.strategy, par.mixed_precision is schema.Precision.fp32
    if strategy.is_deepspeed:
        weight = 4 if full else 2
        optimizer = (8 if full else 12) / shard
        gradient = weight / shard if strategy in (schema.Strategy.zero2, schema.Strategy.zero3) else weight
        parameter = weight / shard if strategy is schema.Strategy.zero3 else weight
    else:
        parameter, gradient, optimizer = 4 / shard, 4 / shard, 8 / shard
    if par.offload is not schema.Offload.none:
        optimizer = 0
    if par.offload is schema.Offload.parameters:
        parameter = 0
    return parameter, gradient, optimizer


def activation_bytes_per_token(model: schema.ModelConfig, par: schema.ParallelismConfig, tp: int) -> dict[str, float]:
    """Saved activations per token of one layer: {'layer': kept for backward, 'live': recomputed layer}."""
    element = 4 if par.mixed_precision is schema.Precision.fp32 else 2
    autocast = par.strategy in (schema.Strategy.ddp, schema.Strategy.smddp) and element == 2
    residual = 4 if autocast else element
    h, f = model.hidden, model.ffn_hidden
    kv = model.kv_heads * (h // model.heads)
    qkv_saved = h + 2 * kv
    attention_core = 4 * model.heads / h  # fp32 log-sum-exp per head, per hidden unit
    full_layer = 2 * h * residual + (h + qkv_saved + h + h + 2 * _mlp_inputs(model) * f + attention_core) * element
    recompute = par.activation_checkpointing
    if recompute is schema.Checkpointing.full:
        kept = h * residual
    elif recompute is schema.Checkpointing.selective:
        kept = full_layer - qkv_saved * element
    else:
        kept = full_layer
    return {"layer": kept / tp, "live": full_layer / tp if recompute is schema.Checkpointing.full else 0}


def memory(model: schema.ModelConfig, par: schema.ParallelismConfig, layout: Layout, micro_batch: int) -> Memory:
    """Peak bytes per GPU for one micro batch of `micro_batch` sequences of `model.seq_len` tokens."""
    tp = layout.tp
    params_per_gpu = parameter_count(model) / tp
    per_param = state_bytes_per_parameter(par, layout.shard_degree)
    tokens = micro_batch * model.seq_len
    activation = activation_bytes_per_token(model, par, tp)
    activations = tokens * (model.layers * activation["layer"] + activation["live"] + model.hidden * 4)
    logit_element = 4 if par.mixed_precision is schema.Precision.fp32 else 2
    logits = tokens * model.vocab / tp * (logit_element + 4 + 4)  # output, fp32 upcast, its gradient
    communication = _communication_bytes(model, par, layout, params_per_gpu)
    states = [share * params_per_gpu for share in per_param]
    tensors = [*states, activations, logits, communication]
    groups = 1 + (tp > 1) + (par.strategy is schema.Strategy.fsdp_hybrid)
    context = CUDA_CONTEXT_BYTES + groups * NCCL_BYTES_PER_GROUP
    return Memory(*(round(t) for t in tensors), context, round(ALLOCATOR_MARGIN * sum(tensors)))


def _communication_bytes(
    model: schema.ModelConfig, par: schema.ParallelismConfig, layout: Layout, params_per_gpu: float
) -> float:
    """Buffers that exist only for communication: DDP buckets, FSDP's gathered layers, DeepSpeed buckets."""
    if layout.world_size == 1:
        return 0
    strategy = par.strategy
    if strategy in (schema.Strategy.ddp, schema.Strategy.smddp):
        return 2 * DDP_BUCKET_BYTES
    if strategy.is_deepspeed:
        buckets = min(DEEPSPEED_BUCKET_ELEMENTS, params_per_gpu) * 2
        prefetch = 2 * min(DEEPSPEED_PREFETCH_ELEMENTS, params_per_gpu) * 2 if strategy.shards_parameters else 0
        return buckets + prefetch
    layer = layer_parameters(model) / layout.tp
    # this layer and the next, gathered; one layer's unsharded fp32 gradients for the reduce-scatter
    gathered = 2 * layer * (4 if par.mixed_precision is schema.Precision.fp32 else 2)
    return gathered + layer * 4


def flops_per_token(model: schema.ModelConfig) -> float:
    matmul_parameters = model.layers * layer_parameters(model) + model.vocab * model.hidden
    return 6 * matmul_parameters + 12 * model.layers * model.hidden * model.seq_len


def throughput(
    model: schema.ModelConfig, par: schema.ParallelismConfig, instance: InstanceType, layout: Layout, batch: Batch
) -> Throughput:
    """Step time from the GPU's peak at an assumed efficiency, plus communication the backward cannot hide."""
    sequences = batch.micro_batch * batch.grad_accum
    model_flops = flops_per_token(model) * sequences * model.seq_len / layout.tp
    hardware_flops = model_flops * RECOMPUTE_FLOPS[par.activation_checkpointing]
    compute = hardware_flops / (instance.peak_bf16_tflops * 1e12 * ASSUMED_MATMUL_EFFICIENCY)
    data_parallel = _data_parallel_seconds(model, par, instance, layout) * _reductions_per_step(par, batch)
    exposed = max(0.0, data_parallel - BACKWARD_SHARE * compute) + _tensor_parallel_seconds(
        model, instance, layout, sequences
    )
    step = (compute + exposed) * (1 + (layout.pp - 1) / batch.grad_accum)  # the pipeline bubble
    tokens_per_second = batch.tokens_per_step / step
    mfu = flops_per_token(model) * tokens_per_second / (layout.world_size * instance.peak_bf16_tflops * 1e12)
    return Throughput(flops_per_token(model), step, compute, exposed, tokens_per_second, mfu)


def _reductions_per_step(par: schema.ParallelismConfig, batch: Batch) -> int:
    """Sharded gradients are reduced (and ZeRO-3/FSDP parameters gathered) for every micro batch; DDP and
    ZeRO-1 accumulate locally and reduce once per optimizer step."""
    once = (schema.Strategy.ddp, schema.Strategy.smddp, schema.Strategy.zero1)
    return 1 if par.strategy in once else batch.grad_accum


RECOMPUTE_FLOPS = {
    schema.Checkpointing.none: 1.0,
    schema.Checkpointing.selective: 1.03,
    schema.Checkpointing.full: 4 / 3,
}
"""Hardware FLOPs over model FLOPs: full recomputation repeats the forward pass (2 of 6 units per parameter)."""


def _data_parallel_seconds(
    model: schema.ModelConfig, par: schema.ParallelismConfig, instance: InstanceType, layout: Layout
) -> float:
    """Gradient reduction (and FSDP/ZeRO-3 parameter gathers) per optimizer step over the slowest link."""
    dp, shard = layout.dp, layout.shard_degree
    if dp == 1:
        return 0.0
    params = parameter_count(model) / layout.tp
    gradient_bytes = params * (2 if par.strategy.is_deepspeed or par.strategy.shards_parameters else 4)
    gathers = 2 * params * 2 if par.strategy.shards_parameters else 0  # parameters for forward and backward
    gpu_link = instance.gpu_link_gbps / 8 * 1e9
    network = instance.network_gbps / layout.processes_per_node / 8 * 1e9
    if par.strategy is schema.Strategy.fsdp_hybrid and layout.processes_per_node % shard == 0:
        within = (gradient_bytes + gathers) * (shard - 1) / shard / gpu_link
        replicas = dp // shard
        across = 2 * gradient_bytes / shard * (replicas - 1) / replicas
        return within + across / (network if layout.nodes > 1 else gpu_link)
    traffic = 2 * gradient_bytes * (dp - 1) / dp + gathers * (shard - 1) / shard
    return traffic / (network if layout.nodes > 1 else gpu_link)


def _tensor_parallel_seconds(
    model: schema.ModelConfig, instance: InstanceType, layout: Layout, sequences: int
) -> float:
    """Sequence-parallel all-gathers and reduce-scatters: 4 per layer forward, 4 backward, over NVLink."""
    if layout.tp == 1:
        return 0.0
    activation_bytes = sequences * model.seq_len * model.hidden * 2
    traffic = 8 * model.layers * activation_bytes * (layout.tp - 1) / layout.tp
    return traffic / (instance.gpu_link_gbps / 8 * 1e9)
