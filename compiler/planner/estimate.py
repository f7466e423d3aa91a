"""Memory a plan will need, predicted per GPU before any GPU is paid for (its speed: `speed`).

Pure functions of the model, the parallel layout, the micro batch and the instance type. What a model
has (parameters by part, FLOPs, activations per layer) its facts say (`compiler.planner.model_facts`,
computed once by its family). The
conventions are the built-in trainer's:

- Model states (bytes per parameter held by a GPU): DDP and smddp keep fp32 parameters under bf16
  autocast (4 + 4 gradient + 8 Adam moments = 16); FSDP shards the same 16 bytes over its shard group
  and gathers bf16 copies of one layer at a time; DeepSpeed ZeRO keeps bf16 parameters and gradients
  and 12 bytes of fp32 master weights and moments, partitioned by stage (ZeRO paper, Rajbhandari et al.
  2020, K = 12). LoRA's frozen base keeps its weights only; QLoRA's (`model.lora.quantize_base`) holds its
  blocks' linear layers at `quantized_base.weight_bytes` (nf4 ≈ 0.52, int8 1), dequantized one matmul at a
  time, so autocast keeps no bf16 copy of them.
- Tensor parallelism is the trainer's: Megatron-style column/row splits of the attention heads and the
  MLP's hidden units; what lies between the split projections divides by tp. On the FSDP+TP engine (no
  pipeline) with sequence and loss parallelism: the residual stream, the norms' inputs and each block's input
  are split by sequence (1/tp of the tokens), while the projections' inputs, gathered whole for the column
  splits, stay whole (torch keeps the gathered input for the weight's gradient); the output projection and
  the logits are split by vocabulary unless the head is the tied embedding. Pipeline stages keep the
  residual stream, the head and the logits whole on every rank of the group.
- Activations per layer after Korthikanti et al. 2022, for SDPA attention (no s² term) without dropout:
  per token, the two norm inputs (residual stream precision), the QKV input, q, k, v (GQA-sized; with
  RoPE also the fp32 copies of q and k the rotation keeps), the attention output, the MLP input and 2
  (GELU) or 4 (SwiGLU) tensors of ffn width. Full recomputation keeps each layer's input and one layer's
  activations at a time. Selective recomputation in Korthikanti's sense drops the s² attention matrices,
  which SDPA never stores: recomputing softmax(QKᵀ)V only saves its log-sum-exp, because q, k, v are the
  checkpoint's inputs and the output is the output projection's input (bench/planner_accuracy_cpu.md).
- Under autocast (DDP and smddp with bf16), the backward keeps the bf16 copy of every matrix it multiplied
  by: 2 more bytes per matmul parameter while a step runs.
- Logits: the loss takes them in fp32; its backward holds the saved log-probabilities, their gradient
  and the logits' gradient at once, 12 bytes per logit. The trainer's loss streams the vocabulary
  (`trainer.loss_chunk` tokens at a time, each chunk recomputed in the backward pass), so only one chunk's
  logits exist; pipelines' last stage, and `loss_chunk=0`, take the whole micro batch's.
- Context parallelism (cp > 1) splits each sequence over cp ranks: activations and logits are those of
  seq_len / cp tokens (the all-to-all over heads gathers q, k and v of the whole sequence for heads / cp
  heads, as many elements as the rank's own).
- Pipelines (pp > 1): each pipeline rank holds its stages' layers, the first also the embeddings, the last
  the final norm, the head (with tied embeddings, its own copy of the embedding) and the logits. It keeps
  the activations of the micro batches in flight: all of them under GPipe (every forward before any
  backward), pp under the 1F1B family (the first rank's warm-up, the worst).
"""

import dataclasses
from dataclasses import dataclass

from compiler.planner.assumptions import ALLOCATOR_MARGIN, CUDA_CONTEXT_BYTES, NCCL_BYTES_PER_GROUP
from compiler.planner.models import model_facts
from compiler.planner.quantized_base import quantized_parameters, weight_bytes
from compiler.spec import Batch, Layout, Memory, schema
from compiler.spec.strategies import DEEPSPEED_ENGINE, facts

GIB = 2**30
LOGIT_BYTES = 12


@dataclass(frozen=True)
class Share:
    """The part of the model one pipeline rank holds (all of it without a pipeline)."""

    layers: int
    first: bool
    """Holds the token and position embeddings."""
    last: bool
    """Holds the final norm, the output head and the logits."""
    in_flight: int
    """Micro batches whose activations it keeps at once."""

    @classmethod
    def whole(cls, model: schema.ModelConfig) -> "Share":
        return cls(model_facts(model).layers, first=True, last=True, in_flight=1)


def pipeline_shares(model: schema.ModelConfig, par: schema.ParallelismConfig, layout: Layout) -> list[Share]:
    """Every pipeline rank's share, in pp order. `par.grad_accum` is the pipeline's micro batches; while it is
    unresolved (-1, fitting a micro batch before the batch is known) the fewest a pipeline runs, pp."""
    if layout.pp == 1:
        return [Share.whole(model)]
    microbatches = par.grad_accum if par.grad_accum > 0 else layout.pp
    in_flight = microbatches if par.pp_schedule == "gpipe" else min(layout.pp, microbatches)
    last = layout.stages - 1
    return [
        Share(
            layers=sum(layout.layers_per_stage[stage] for stage in layout.stages_of(rank)),
            first=0 in layout.stages_of(rank),
            last=last in layout.stages_of(rank),
            in_flight=in_flight,
        )
        for rank in range(layout.pp)
    ]


def parameter_count(model: schema.ModelConfig, share: Share | None = None) -> int:
    """Trainable parameters of the model the built-in trainer builds from `model` (of one pipeline share)."""
    share = share or Share.whole(model)
    return model_facts(model).parameter_count(share.layers, share.first, share.last)


def layer_parameters(model: schema.ModelConfig) -> float:
    return model_facts(model).layer


def state_bytes_per_parameter(par: schema.ParallelismConfig, shard: int) -> tuple[float, float, float]:
    """(parameter, gradient, optimizer) bytes per parameter on one GPU, before tensor parallelism."""
    strategy, full = facts(par.strategy), par.mixed_precision is schema.Precision.fp32
    if strategy.engine == DEEPSPEED_ENGINE:
        weight = 4 if full else 2
        optimizer = (8 if full else 12) / shard
        gradient = weight / shard if strategy.shards_gradients else weight
        parameter = weight / shard if strategy.shards_parameters else weight
    else:
        parameter, gradient, optimizer = 4 / shard, 4 / shard, 8 / shard
    if par.offload is not schema.Offload.none:
        optimizer = 0
    if par.offload is schema.Offload.parameters:
        parameter = 0
    return parameter, gradient, optimizer


def sequence_shards(layout: Layout) -> int:
    """The parts each sequence's residual stream is split into between blocks: tp on the FSDP+TP engine
    (sequence parallelism), 1 without tensor parallelism or in a pipeline (its stages split no sequence)."""
    return layout.tp if layout.pp == 1 else 1


def vocab_shards(model: schema.ModelConfig, layout: Layout) -> int:
    """The ranks the output projection and its logits are split over (loss parallelism): the sequence-parallel
    ranks, unless the projection is the tied embedding, which stays whole."""
    return 1 if model.tied_embeddings else sequence_shards(layout)


def activation_bytes_per_token(
    model: schema.ModelConfig, par: schema.ParallelismConfig, tp: int, sequence: int = 1
) -> dict[str, float]:
    """Saved activations per token of one layer: {'layer': kept for backward, 'live': recomputed layer}.
    `sequence`: the parts the residual stream is split into (`sequence_shards`), which divide the norms' and
    the block's inputs. Full recomputation of every k-th block only (`activation_checkpointing_every`) keeps, on
    average over the layers, one block's input and k − 1 blocks' whole activations per k layers."""
    element = 4 if par.mixed_precision is schema.Precision.fp32 else 2
    residual = 4 if _autocast(par) else element
    elements = model_facts(model).activation_elements
    whole = elements["residual"] * residual / sequence + elements["whole"] * element
    split = elements["split_fp32"] * 4 + elements["split"] * element
    full_layer = whole + split / tp
    block_input = elements["input"] * residual / sequence
    recompute = par.activation_checkpointing
    if recompute is schema.Checkpointing.full:
        every = par.activation_checkpointing_every
        kept = (block_input + (every - 1) * full_layer) / every
    elif recompute is schema.Checkpointing.selective:
        kept = block_input + sum(
            size * (4 if fp32 else element) / (tp if split else 1) for size, split, fp32 in _kept_by_op_policy(model)
        )
        if sequence > 1:  # and each sublayer's reduce-scatter into the split residual stream
            kept += 2 * model.hidden * element / sequence
    elif recompute is schema.Checkpointing.attention:
        kept = full_layer - elements["recomputed_fp32"] * 4 / tp
    else:
        kept = full_layer
    recomputes_layer = recompute in (schema.Checkpointing.full, schema.Checkpointing.selective)
    return {"layer": kept, "live": full_layer if recomputes_layer else 0}


def _kept_by_op_policy(model: schema.ModelConfig) -> list[tuple[int, bool, bool]]:
    """What the op-level selective policy keeps of a decoder layer per token, besides its input, as (elements,
    split over tensor-parallel ranks, fp32): the 1st, 3rd, ... matrix products in call order (q, k, v, o, then
    gate, up, down with SwiGLU or up, down with GELU), the attention output and its fp32 log-sum-exp per head."""
    h = model.hidden
    kv = model.kv_heads * (h // model.heads)
    products = [(h, True), (kv, True), (kv, True), (h, False)]  # the output projection's are partial sums
    mlp = [(model.ffn_hidden, True)] * (2 if model.activation is schema.Activation.swiglu else 1)
    products += [*mlp, (h, False)]
    kept = [(size, split, False) for size, split in products[::2]]
    return [*kept, (h, True, False), (model.heads, True, True)]


def _autocast(par: schema.ParallelismConfig) -> bool:
    """DDP and smddp keep fp32 weights and compute in bf16/fp16 under autocast; FSDP and DeepSpeed cast
    the weights themselves."""
    ddp = facts(par.strategy).replicated and par.pp == 1  # pipelines: FSDP2
    return ddp and par.mixed_precision is not schema.Precision.fp32


def memory(
    model: schema.ModelConfig,
    par: schema.ParallelismConfig,
    layout: Layout,
    micro_batch: int,
    dpo: schema.DpoConfig | None = None,
    loss_chunk: int = 0,
) -> Memory:
    """Peak bytes per GPU: of the pipeline rank that needs the most (every rank without a pipeline)."""
    return max(stage_memory(model, par, layout, micro_batch, dpo, loss_chunk), key=lambda m: m.total)


def preference(trainer: schema.TrainerConfig) -> schema.DpoConfig | None:
    """`trainer.dpo` where the run trains on preference pairs (`trainer.objective=dpo`), else None."""
    return trainer.dpo if trainer.objective is schema.Objective.dpo else None


def with_pairs(batch: Batch, trainer: schema.TrainerConfig) -> Batch:
    """`batch` with the tokens of a step as the model sees them: with trainer.objective=dpo each sequence of the
    global batch is a pair, a chosen and a rejected completion of `seq_len` tokens each."""
    if preference(trainer) is None:
        return batch
    return dataclasses.replace(batch, tokens_per_step=2 * batch.tokens_per_step)


def stage_memory(
    model: schema.ModelConfig,
    par: schema.ParallelismConfig,
    layout: Layout,
    micro_batch: int,
    dpo: schema.DpoConfig | None = None,
    loss_chunk: int = 0,
) -> list[Memory]:
    """Peak bytes per GPU of each pipeline rank, for micro batches of `micro_batch` sequences of
    `model.seq_len` tokens.

    The peak comes at one of two moments of the backward pass: the loss's backward, when every layer's
    saved activations and the fp32 logits, log-probabilities and their gradients are alive at once; or
    inside the layers, when the logits are gone but one layer is recomputed (full checkpointing) and its
    parameters and gradients are gathered and reduced (FSDP, ZeRO-3). The terms shown are those of the
    larger moment, so they sum to the peak. The peak is the caching allocator's reserved peak: FSDP's sharded
    gradients, allocated on the reduce-scatter stream, count in it at the loss's backward too (they cannot
    reuse the compute stream's freed blocks).

    With `dpo` (trainer.objective=dpo) a micro batch holds `micro_batch` pairs: twice the sequences (chosen
    and rejected) through the policy, and the reference model's weights beside it.
    `loss_chunk` (trainer.loss_chunk): the tokens whose logits exist at once in the streamed loss, 0 for all.
    """
    sequences = micro_batch * (2 if dpo else 1)
    shares = pipeline_shares(model, par, layout)
    chunk = loss_chunk if layout.pp == 1 else 0  # a pipeline's last stage takes the whole logits
    return [_share_memory(model, par, layout, sequences, share, dpo, chunk) for share in shares]


def keeps_reference(model: schema.ModelConfig, dpo: schema.DpoConfig) -> bool:
    """Whether a DPO run holds a reference model while it trains: not with LoRA (the base model with the
    adapters disabled is the reference) nor with `precompute_reference` (freed before the first step)."""
    return not dpo.precompute_reference and not model.lora.rank


def reference_bytes(
    model: schema.ModelConfig, par: schema.ParallelismConfig, layout: Layout, share: Share, dpo: schema.DpoConfig | None
) -> float:
    """The frozen reference model's weights on one GPU while training: sharded like the policy's (FSDP, ZeRO-3),
    in the compute precision, or in fp32 beside DDP's fp32 weights (a copy of them, run under autocast)."""
    if dpo is None or not keeps_reference(model, dpo):
        return 0.0
    element = 4 if par.mixed_precision is schema.Precision.fp32 or _autocast(par) else 2
    shard = layout.shard_degree if facts(par.strategy).shards_parameters else 1
    return held_parameters(model, layout, share) * element / shard


def _share_memory(
    model: schema.ModelConfig,
    par: schema.ParallelismConfig,
    layout: Layout,
    micro_batch: int,
    share: Share,
    dpo: schema.DpoConfig | None = None,
    loss_chunk: int = 0,
) -> Memory:
    tp, vocab = layout.tp, vocab_shards(model, layout)
    parameters = held_parameters(model, layout, share)
    trained = parameters * trainable_fraction(model)
    weight, gradient, optimizer = state_bytes_per_parameter(par, layout.shard_degree)
    adapters = trained if model.lora.rank else 0  # LoRA's own weights, beside the frozen ones
    quantized = quantized_parameters(model, share.layers)  # QLoRA's base, in its own bytes
    states = [
        weight * (parameters - quantized + adapters) + quantized * weight_bytes(model.lora),
        gradient * trained,
        optimizer * trained,
    ]
    if layout.ep > 1:  # the experts' states are sharded over the ranks ep leaves them
        experts = share.layers * model_facts(model).layer_experts / layout.ep
        expert_bytes = state_bytes_per_parameter(par, expert_shard_degree(par, layout))
        for index, (general, own) in enumerate(zip((weight, gradient, optimizer), expert_bytes, strict=True)):
            states[index] += (own - general) * experts * (1 if index == 0 else trainable_fraction(model))
    if _autocast(par):
        states[0] += 2 * (_matmul_parameters_per_gpu(model, tp, share) - quantized)  # dequantized per matmul
    tokens = micro_batch * model.seq_len // layout.cp
    activation = activation_bytes_per_token(model, par, tp, sequence_shards(layout))
    kept = tokens * (resident_layers(par, share) * activation["layer"] + model.hidden * 4) * share.in_flight
    logits = min(tokens, loss_chunk or tokens) * model.vocab / vocab * LOGIT_BYTES if share.last else 0
    held, per_layer = _communication_bytes(model, par, layout, share)
    in_layers = tokens * activation["live"] + per_layer
    if logits >= in_layers:
        # FSDP's sharded gradients appear in the layers' backward, after the loss's, but on the reduce-scatter
        # stream: the caching allocator does not hand them the blocks the logits freed on the compute stream,
        # so they count in the reserved peak all the same
        tensors = [*states, kept, logits, held]
    else:
        tensors = [*states, kept + tokens * activation["live"], 0, held + per_layer]
    groups = 1 + (tp > 1) + facts(par.strategy).shard_groups + (layout.pp > 1)
    context = CUDA_CONTEXT_BYTES + groups * NCCL_BYTES_PER_GROUP
    reference = reference_bytes(model, par, layout, share, dpo)
    parameters, gradients, optimizer, activations, logits, communication = (round(t) for t in tensors)
    return Memory(
        reference=round(reference),
        parameters=parameters,
        gradients=gradients,
        optimizer=optimizer,
        activations=activations,
        logits=logits,
        communication=communication,
        context=context,
        margin=round(ALLOCATOR_MARGIN * (sum(tensors) + reference)),
    )


def trainable_fraction(model: schema.ModelConfig) -> float:
    """The share of the parameters that get gradients and optimizer states: all, LoRA's adapters, or those
    `model.trainable_parameters` chose, as counted in the checkpoint (frozen weights keep only their weights)."""
    if model.lora.rank:
        return model_facts(model).lora / parameter_count(model)
    return min(1.0, model.trainable_count / parameter_count(model)) if model.trainable_count else 1.0


def resident_layers(par: schema.ParallelismConfig, share: Share) -> int:
    """Layers whose saved activations are on the GPU when the backward starts: all of them, or with
    activation offload the horizon's blocks already fetched back and the one whose backward runs."""
    if par.activation_offload:
        return min(share.layers, par.activation_offload_horizon + 1)
    return share.layers


def deepspeed_buckets(model: schema.ModelConfig) -> dict[str, int]:
    """DeepSpeed's bucket sizes (elements), set by the trainer: hidden² as Hugging Face's `auto` does.

    DeepSpeed's defaults allocate a 5·10⁸-element reduce bucket (1 GB in bf16) however small the model.
    """
    square = model.hidden * model.hidden
    return {
        "reduce_bucket_size": square,
        "stage3_prefetch_bucket_size": int(0.9 * square),
        "stage3_param_persistence_threshold": 10 * model.hidden,
    }


def _communication_bytes(
    model: schema.ModelConfig, par: schema.ParallelismConfig, layout: Layout, share: Share
) -> tuple[float, float]:
    """Buffers that exist only for communication: (held through the step, alive while a layer runs).

    DDP has none of its own: the gradients are views into its buckets. FSDP keeps the root module
    (embeddings, head, final norm) gathered from the forward to its backward and, per layer, gathers
    this layer and the next and reduce-scatters one layer's fp32 gradients. DeepSpeed keeps its reduce
    bucket; ZeRO-3 gathers the running layer and prefetches the next bucket. A pipeline stage (FSDP2, sharded
    or with shard groups of one) stays gathered from its first backward to the step's last, and accumulates
    its unsharded gradients until then: twice the stage's parameters.
    """
    strategy, element = facts(par.strategy), 4 if par.mixed_precision is schema.Precision.fp32 else 2
    layer = _held_layer(model, layout)
    if layout.pp > 1:
        stage = parameter_count(model, share) - share.layers * layer_parameters(model) + share.layers * layer
        return 2 * stage * element, 0
    if strategy.replicated:
        return 0, 0
    if strategy.engine == DEEPSPEED_ENGINE:
        buckets = deepspeed_buckets(model)
        gathered = (layer + buckets["stage3_prefetch_bucket_size"]) * element if strategy.shards_parameters else 0
        return buckets["reduce_bucket_size"] * element, gathered
    root = parameter_count(model, share) - share.layers * layer_parameters(model)
    root -= model_facts(model).parameters.head * (1 - 1 / vocab_shards(model, layout))
    return root * element, 2 * layer * element + layer * 4


def parameters_per_gpu(
    model: schema.ModelConfig, tp: int, share: Share | None = None, ep: int = 1, vocab: int = 1
) -> float:
    """Parameters a rank of a tensor-parallel group holds before data-parallel sharding; with expert
    parallelism (ep > 1) its share of the routed experts, which ep splits whole instead of tp; its share of
    the output head where loss parallelism splits it over `vocab` ranks (`vocab_shards`)."""
    share, facts = share or Share.whole(model), model_facts(model)
    split = facts.layer_tp_split
    head = facts.parameters.head * (1 - 1 / vocab) if share.last else 0
    if ep == 1:
        return parameter_count(model, share) - share.layers * split * (1 - 1 / tp) - head
    experts = facts.layer_experts
    blocks = share.layers * ((split - experts) * (1 - 1 / tp) + experts * (1 - 1 / ep))
    return parameter_count(model, share) - blocks - head


def held_parameters(model: schema.ModelConfig, layout: Layout, share: Share) -> float:
    """`parameters_per_gpu` of a rank of `layout`: its tensor-parallel, expert-parallel and loss-parallel splits."""
    return parameters_per_gpu(model, layout.tp, share, layout.ep, vocab_shards(model, layout))


def expert_shard_degree(par: schema.ParallelismConfig, layout: Layout) -> int:
    """The ranks that shard one expert's states under expert parallelism: FSDP's and ZeRO's shard group and
    the tensor-parallel ranks, less the ep ranks the experts are split over (torchtitan's dp_shard · tp =
    expert_fsdp · ep); replicated strategies shard nothing."""
    if layout.shard_degree == 1:
        return 1
    return max(1, layout.shard_degree * layout.tp // layout.ep)


def _held_layer(model: schema.ModelConfig, layout: Layout) -> float:
    """Parameters of one block a rank gathers: split over tp, the routed experts over ep."""
    facts = model_facts(model)
    if layout.ep == 1:
        return facts.layer / layout.tp
    return (facts.layer - facts.layer_experts) / layout.tp + facts.layer_experts / layout.ep


def _matmul_parameters_per_gpu(model: schema.ModelConfig, tp: int, share: Share) -> float:
    return model_facts(model).matmul_parameters(share.layers, share.last, tp)
