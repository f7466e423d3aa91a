"""The `parallelism/` group: strategy, degrees, batch, memory savers."""

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Strategy(Enum):
    ddp = "ddp"
    fsdp = "fsdp"
    """PyTorch FSDP, parameters, gradients and optimizer state sharded over all data-parallel ranks."""
    fsdp_hybrid = "fsdp_hybrid"
    """FSDP sharded within groups of `shard_group_size` ranks and replicated across groups."""
    zero1 = "zero1"
    zero2 = "zero2"
    zero3 = "zero3"
    smddp = "smddp"
    """SageMaker's distributed data-parallel library (AllReduce over EFA), SageMaker only."""


class Checkpointing(Enum):
    none = "none"
    attention = "attention"
    """Recompute only the attention core, softmax(QKᵀ)V (Korthikanti et al. 2022's selective recomputation)."""
    selective = "selective"
    """Op-level selective recomputation as torchtitan runs it: keep every other matrix product's output and the
    attention outputs, recompute the rest."""
    full = "full"


class ContextParallelMethod(Enum):
    alltoall = "alltoall"
    """All-to-all over heads (Ulysses): each rank attends over the whole sequence for heads / cp heads; any
    attention kernel, any device."""
    ring = "ring"
    """Ring attention over the sequence (torch's context_parallel on CUDA's SDPA kernels): GPUs only."""


class Precision(Enum):
    auto = "auto"
    """bf16 on GPUs, fp32 on CPUs."""
    bf16 = "bf16"
    fp16 = "fp16"
    fp32 = "fp32"


class Offload(Enum):
    none = "none"
    optimizer = "optimizer"
    """Optimizer state (and step) on the host: ZeRO and FSDP strategies."""
    parameters = "parameters"
    """Parameters and optimizer state on the host: ZeRO-3 and FSDP only."""


@dataclass
class ParallelismConfig:
    strategy: Strategy = Strategy.ddp
    """How data-parallel ranks hold and update the model: ddp, fsdp, fsdp_hybrid, zero1-3 or smddp."""
    dp: int = -1
    """Data-parallel degree; -1 infers it from the world size."""
    tp: int = 1
    """Tensor-parallel degree; -1 infers it. Must stay inside one node. With FSDP (no pipeline) it runs with
    sequence and loss parallelism, so model.seq_len must divide by it."""
    pp: int = 1
    """Pipeline-parallel degree; -1 infers it."""
    ep: int = 1
    """Expert-parallel degree (mixture-of-experts models): each rank holds experts / ep of every layer's experts.
    Its ranks are borrowed from the data- and tensor-parallel ones (dp × tp = expert shards × ep), so the world
    size stays dp × tp × pp."""
    cp: int = 1
    """Context-parallel degree: each sequence is split over cp ranks borrowed from the data-parallel ones
    (dp counts them: dp / cp replicas read distinct sequences)."""
    cp_method: ContextParallelMethod = ContextParallelMethod.alltoall
    """cp > 1: how attention sees the whole sequence: alltoall (Ulysses, any device) or ring (CUDA only)."""
    pp_schedule: str = "1f1b"
    """gpipe | 1f1b | interleaved-1f1b | zero-bubble (the interleaved ones run two stages per rank)."""
    pp_microbatches: int = -1
    """Micro batches a pipeline step runs (grad_accum, when pp > 1); -1: enough for a bubble under 20%."""
    pp_layers_per_stage: list[int] = field(default_factory=list)
    """Decoder layers of each pipeline stage; empty: an even split, the remainder to the middle stages."""
    shard_group_size: int = -1
    """fsdp_hybrid only: ranks per shard group; -1 means the data-parallel ranks of one node."""
    micro_batch: Any = 1
    """Sequences per data-parallel rank per forward pass, or `auto`: the largest that fits GPU memory."""
    grad_accum: int = -1
    """Micro batches per optimizer step; -1 infers it from `global_batch` (or 1)."""
    global_batch: int = -1
    """Sequences per optimizer step over all replicas; -1 derives micro_batch × grad_accum × dp."""
    activation_checkpointing: Checkpointing = Checkpointing.none
    """Recompute activations in the backward: none, attention (the attention core), selective (op-level: every
    other matrix product and attention kept) or full."""
    activation_checkpointing_every: int = 1
    """With activation_checkpointing=full: only every k-th block (the 1st, the (k+1)-th, ...) is recomputed, the
    others keep their activations (torchtitan's selective_ac_option=k; transformers' every_n_layers)."""
    mixed_precision: Precision = Precision.auto
    """Compute precision: auto (bf16 on GPUs, fp32 on CPUs), bf16, fp16 (with loss scaling) or fp32."""
    offload: Offload = Offload.none
    """Model state kept in host memory: none, optimizer, or parameters (sharded strategies only)."""
    activation_offload: bool = False
    """Move each block's saved activations to pinned host memory after its forward and prefetch them for
    its backward (ddp, fsdp, fsdp_hybrid, smddp)."""
    activation_offload_horizon: int = 2
    """With activation_offload: blocks fetched back ahead of the one whose backward runs."""
    smddp_fallback: bool = False
    """If smddp does not import in the container, warn and use NCCL instead of failing."""
