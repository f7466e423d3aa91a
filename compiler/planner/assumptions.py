"""What the planner assumes rather than measures, in one place: the GPU constants a measurement on a GPU
(`bench/planner_accuracy.py --device cuda`, `bench/train_gpu.py`) is to replace, each with its source.
`report.md` lists them under the estimate."""

from dataclasses import dataclass

from compiler.spec import schema

CUDA_CONTEXT_BYTES = 600 * 2**20
"""CUDA context, cuBLAS workspace and kernels: outside PyTorch's allocator, inside the GPU's memory. Assumed
(see `ASSUMPTIONS`): no GPU measurement of it is recorded yet."""
NCCL_BYTES_PER_GROUP = 200 * 2**20
"""NCCL's buffers per communicator a rank joins. Assumed (see `ASSUMPTIONS`)."""
ALLOCATOR_MARGIN = 0.08
"""Fragmentation of PyTorch's caching allocator, as a share of what tensors occupy. Assumed (see
`ASSUMPTIONS`)."""
ASSUMED_MATMUL_EFFICIENCY = 0.4
"""Share of the GPU's dense bf16 peak a step's FLOPs reach in eager PyTorch (torchtitan's Llama 3 8B on H100
reports MFU in the mid-30s to 40s %; llm.c reaches about 48% for GPT-2 1.5B). Assumed: the predicted MFU
follows from it, it is not a measurement."""


@dataclass(frozen=True)
class EfficiencyFit:
    """A GPU family's matmul efficiency fitted to published runs: `peak_share` of the dense peak for GEMMs at
    least `full_width` wide over micro batches of at least `full_tokens` tokens, falling as a power of each
    below that."""

    peak_share: float
    full_width: int
    width_exponent: float
    full_tokens: int
    tokens_exponent: float
    source: str


_A100_RUNS = "fitted to 38 published A100 runs (llm-foundry MPT 1B-70B, bench/published)"
_H100_RUNS = "fitted to 17 published H100 runs (llm-foundry MPT 1B-30B, torchtitan Llama 3.1 8B, bench/published)"
MATMUL_EFFICIENCY = {
    "A100": EfficiencyFit(0.60, 8192, 0.04, 16384, 0.07, _A100_RUNS),
    "H100": EfficiencyFit(0.43, 8192, 0.04, 16384, 0.07, _H100_RUNS),
    "H200": EfficiencyFit(0.43, 8192, 0.04, 16384, 0.07, f"H100's fit, the same compute ({_H100_RUNS})"),
}
"""Per GPU family (a prefix of the catalog's `gpu_model`): a least-squares fit of the log of the efficiency each
published run implies (`bench/planner_published.py --fit`) on the GEMMs' width and tokens; the size
dependence is weak on these runs (exponents 0.04 and 0.07): the family sets the level."""
COMPILE_SPEEDUP = 1.16
"""trainer.compile's speed-up of a step: torchtitan's Llama 3.1 8B FSDP on 8 and 128 H100s, the same runs with
and without torch.compile (5,762 → 6,667 and 5,605 → 6,514 tokens/s per GPU: 1.157 and 1.162)."""
RECOMPUTE_FLOPS = {
    schema.Checkpointing.none: 1.0,
    schema.Checkpointing.attention: 1.03,
    schema.Checkpointing.selective: 1.12,
    schema.Checkpointing.full: 4 / 3,
}
"""Hardware FLOPs over model FLOPs: full recomputation repeats the forward pass (2 of 6 units per parameter);
recomputing the attention core's 3% is assumed from Korthikanti et al. 2022 (2.7% for their GPT-3 175B); the
op-level selective policy recomputes the k, output and up projections, about a third of the forward's products
in a Llama layer (12% more)."""
RECOMPUTE_TIME = {
    **RECOMPUTE_FLOPS,
    schema.Checkpointing.selective: 1.05,
    schema.Checkpointing.full: 1.14,
}
"""A step's time over the same step without recomputation. Full recomputation's repeated forward costs 14%
on the published runs, not the third its FLOPs say (the fit's factor for llm-foundry's checkpointed rows
against the others on the same GPUs, 1.17 in efficiency: 4/3 ÷ 1.17); the op-level policy's 12% more FLOPs are
scaled the same way."""


@dataclass(frozen=True)
class Assumption:
    """A constant of the estimate that no measurement of dockyard's backs yet, and where its value comes from."""

    name: str
    value: str
    source: str


ASSUMPTIONS = (
    Assumption(
        "CUDA context",
        f"{CUDA_CONTEXT_BYTES // 2**20} MiB per GPU",
        "an allowance for the CUDA context, cuBLAS's workspace and the kernels; not measured by dockyard",
    ),
    Assumption(
        "NCCL buffers",
        f"{NCCL_BYTES_PER_GROUP // 2**20} MiB per communicator",
        "an allowance for NCCL's buffers and kernels; not measured by dockyard",
    ),
    Assumption(
        "allocator margin",
        f"{ALLOCATOR_MARGIN:.0%} of tensor bytes",
        "an allowance for the fragmentation of PyTorch's caching allocator; not measured by dockyard",
    ),
    Assumption(
        "matmul efficiency",
        f"{ASSUMED_MATMUL_EFFICIENCY:.0%} of the dense peak on GPUs without published runs (A100, H100, H200: "
        "fitted, bench/published)",
        "torchtitan's Llama 3 8B on H100 (MFU mid-30s to 40s %), llm.c's GPT-2 1.5B (about 48%); the predicted "
        "step time and MFU follow from it",
    ),
    Assumption(
        "attention recomputation",
        f"{RECOMPUTE_FLOPS[schema.Checkpointing.attention]:g} × the model FLOPs",
        "Korthikanti et al. 2022 (2.7% more FLOPs for GPT-3 175B)",
    ),
    Assumption(
        "selective recomputation",
        f"{RECOMPUTE_TIME[schema.Checkpointing.selective]:g} × the step time",
        "the op-level policy's 12% more FLOPs, at full recomputation's fitted cost per FLOP",
    ),
)
"""What the memory and speed estimates assume rather than measure; `report.md` lists them."""
