"""The records a Plan holds besides the config sections: the instance type's facts, the resolved layout
and batch, the values the runtime takes from the planner, and the planner's prediction.

Standard library only (the image ships it). Records are built keyword by keyword: their fields are
numbers of the same type, where a positional mix-up would go unnoticed.
"""

from dataclasses import dataclass, field, fields

from compiler.spec.ranks import Layout

__all__ = ["Batch", "Derived", "Estimate", "InstanceType", "Layout", "Memory", "Throughput"]


@dataclass(frozen=True, kw_only=True)
class InstanceType:
    name: str
    gpus: int
    gpu_model: str
    gpu_memory_gib: float
    peak_bf16_tflops: float
    """Dense tensor-core bf16 peak per GPU; 0 where the GPU has no bf16 (V100, T4)."""
    peak_fp16_tflops: float
    """Dense tensor-core fp16 peak per GPU."""
    gpu_link_gbps: float
    """GPU-to-GPU bandwidth inside a node, one direction: NVLink, or PCIe 4.0 x16 where there is none."""
    efa_devices: int
    vcpus: int
    memory_gib: float
    """Host memory; with `vcpus`, what a Kubernetes pod that fills the node requests."""
    network_gbps: float
    price_per_hour: float
    """On-demand USD per hour of the instance (EC2's), or of the rate the plan's target bills (see
    `managed_price_per_hour`)."""
    managed_price_per_hour: float
    """SageMaker training's on-demand USD per hour for the `ml.` type: what a target that bills its own
    rate charges; the planner puts it in `price_per_hour` for such targets."""
    smddp: bool
    """SageMaker's data-parallel library (smddp) supports this type."""

    @property
    def has_gpus(self) -> bool:
        return self.gpus > 0

    @property
    def has_bf16(self) -> bool:
        return self.peak_bf16_tflops > 0

    def peak_tflops(self, precision: str) -> float:
        """The dense peak per GPU that a job computing in `precision` can reach (fp32 runs its matmuls
        on the tensor cores in the 16-bit format the GPU has, as TF32 does on Ampere and later)."""
        return self.peak_fp16_tflops if precision == "fp16" or not self.has_bf16 else self.peak_bf16_tflops


@dataclass(frozen=True, kw_only=True)
class Batch:
    micro_batch: int
    grad_accum: int
    global_batch: int
    """Sequences per optimizer step: micro_batch × grad_accum × dp (with pp > 1, grad_accum is the number of
    micro batches one pipeline step runs)."""
    seq_len: int
    tokens_per_step: int


@dataclass(frozen=True, kw_only=True)
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
    reference: int = 0
    """trainer.objective=dpo: the frozen reference model's weights (none with LoRA or precomputed log-probs)."""

    @property
    def total(self) -> int:
        return sum(getattr(self, f.name) for f in fields(self))

    @property
    def terms(self) -> dict[str, int]:
        """Every term, but `reference` only where a plan has one."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "reference" or self.reference}

    def largest_term(self) -> str:
        terms = self.terms
        return max(terms, key=terms.__getitem__)


@dataclass(frozen=True, kw_only=True)
class Throughput:
    flops_per_token: float
    step_seconds: float
    compute_seconds: float
    exposed_communication_seconds: float
    tokens_per_second: float
    mfu: float
    bubble: float = 0.0
    """Share of the step a pipeline rank idles (the schedule's warm-up and drain)."""
    point_to_point_seconds: float = 0.0
    """Sending activations and their gradients between pipeline stages (counted as exposed)."""
    matmul_efficiency: float = 0.0
    """The share of the GPU's dense peak the compute was predicted at."""
    efficiency_source: str = ""
    """Where that share comes from (the published runs it was fitted to, or an assumption)."""


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """What the plan will need per GPU and how fast it should run; stored in the plan."""

    memory: Memory
    gpu_memory: int
    throughput: Throughput
    stage_memory: tuple[int, ...] = ()
    """Predicted peak bytes per GPU of each pipeline rank, in pp order (empty without a pipeline)."""
    host_memory: dict[str, int] = field(default_factory=dict)
    """Host bytes per node that offload holds (pinned), by what they are; empty without offload."""


@dataclass(frozen=True, kw_only=True)
class DatasetTokens:
    """The training data's token count, as far as the host knows it when planning, and where it comes from."""

    tokens: int
    source: str
    """`data.tokens`, or the token cache folder (an earlier run's) that measured it."""


@dataclass(frozen=True, kw_only=True)
class Derived:
    """Values the runtime needs that the planner computes, resolved at compile time so the image does not
    carry the planner: one formula each, used by both the prediction and the run."""

    flops_per_token: float
    """Model FLOPs per trained token (`compiler.planner.speed.flops_per_token`); the trainer's MFU."""
    lr: float
    """The peak learning rate the trainer uses: `trainer.lr`, scaled to the global batch by `lr_scaling`."""
    warmup_steps: int = 0
    """The warm-up's steps: `trainer.warmup_steps`, or ceil(warmup_ratio × steps) (the HF Trainer's rounding)."""
    deepspeed_buckets: dict[str, int] = field(default_factory=dict)
    """DeepSpeed's bucket sizes in elements (`compiler.planner.estimate.deepspeed_buckets`)."""
    checkpoint_bytes: int = 0
    """One checkpoint's size on disk (`compiler.planner.host_memory.checkpoint_bytes`): the health check looks for
    that much room."""
