"""What each `parallelism.strategy` is, in one table that the planner and the runtime both read: which
engine runs it, what it shards, and what it combines with. Standard library only (the image ships it).

The planner's rules and estimates and the trainer's engines ask this table instead of naming strategies,
so a strategy's facts change in one place.
"""

from dataclasses import dataclass, replace

from compiler.spec.schema.parallelism import Strategy

TORCH_ENGINE = "torch"
"""DDP and FSDP2 (with tensor parallelism), `entrypoint/trainer/engines/native.py`."""
DEEPSPEED_ENGINE = "deepspeed"
"""DeepSpeed ZeRO, `entrypoint/trainer/engines/zero.py`."""
PIPELINE_ENGINE = "pipeline"
"""Any plan with pp > 1: stages replicated or sharded with FSDP2, `entrypoint/trainer/engines/pipeline.py`."""


@dataclass(frozen=True)
class StrategyFacts:
    engine: str
    """The engine that runs the strategy without a pipeline."""
    shards_optimizer: bool = False
    """Optimizer state split over the shard group; False: every rank holds the whole model state."""
    shards_gradients: bool = False
    """Gradients reduce-scattered for every micro batch instead of all-reduced once per step."""
    shards_parameters: bool = False
    zero_stage: int = 0
    """DeepSpeed's ZeRO stage; 0 for PyTorch's strategies."""
    shard_groups: bool = False
    """Sharded within groups of `shard_group_size` ranks and replicated across them."""
    tensor_parallel: bool = False
    """Combines with tp > 1."""
    pipeline: bool = False
    """Combines with the trainer's pipeline (pp > 1)."""
    activation_offload: bool = False
    """Runs `parallelism.activation_offload` (the PyTorch engines' blocks offload their saved tensors)."""
    backend: str | None = None
    """The process-group backend the strategy is, when it is one (SageMaker's library); else nccl or gloo."""

    @property
    def replicated(self) -> bool:
        """Every rank holds the whole model state (DDP's full copy, which runs under autocast)."""
        return not self.shards_optimizer

    @property
    def offloads_optimizer(self) -> bool:
        """Can keep the optimizer state in host memory (`parallelism.offload=optimizer`): the sharded ones."""
        return self.shards_optimizer

    @property
    def offloads_parameters(self) -> bool:
        """Can keep the parameters in host memory too (`parallelism.offload=parameters`)."""
        return self.shards_parameters


_FSDP = StrategyFacts(
    TORCH_ENGINE,
    shards_optimizer=True,
    shards_gradients=True,
    shards_parameters=True,
    tensor_parallel=True,
    pipeline=True,
    activation_offload=True,
)

STRATEGIES: dict[Strategy, StrategyFacts] = {
    Strategy.ddp: StrategyFacts(TORCH_ENGINE, pipeline=True, activation_offload=True),
    Strategy.fsdp: _FSDP,
    Strategy.fsdp_hybrid: replace(_FSDP, shard_groups=True),
    Strategy.zero1: StrategyFacts(DEEPSPEED_ENGINE, shards_optimizer=True, zero_stage=1),
    Strategy.zero2: StrategyFacts(DEEPSPEED_ENGINE, shards_optimizer=True, shards_gradients=True, zero_stage=2),
    Strategy.zero3: StrategyFacts(
        DEEPSPEED_ENGINE, shards_optimizer=True, shards_gradients=True, shards_parameters=True, zero_stage=3
    ),
    Strategy.smddp: StrategyFacts(TORCH_ENGINE, activation_offload=True, backend="smddp"),
}


def facts(strategy: Strategy) -> StrategyFacts:
    return STRATEGIES[strategy]


def engine_name(strategy: Strategy, pp: int) -> str:
    """The engine that runs a plan: the pipeline's for pp > 1, else the strategy's."""
    return PIPELINE_ENGINE if pp > 1 else STRATEGIES[strategy].engine
