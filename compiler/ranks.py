"""The parallel layout of a plan's ranks: dp × tp × pp, and the one map from a global rank to its place.

Standard library only, because the in-container trainer asks it too (at the seam it moves into
`compiler/spec/`, the only compiler code the image ships). `compiler.layout` resolves and checks the
degrees from the config; this module is what both sides then read: a rank's (pp, dp, tp) coordinates,
the pipeline stages and layers it holds, and the device mesh. Nothing else computes `rank // tp`.

Ranks are laid out with tensor parallelism innermost (a tensor-parallel group is neighbours on one node)
and the pipeline outermost (with one stage per node, activations cross the network once per stage):
`rank = (pp_rank × dp + dp_rank) × tp + tp_rank`.
"""

from dataclasses import dataclass
from typing import Any, NamedTuple

PIPELINE_SCHEDULES = {"gpipe": 1, "1f1b": 1, "interleaved-1f1b": 2, "zero-bubble": 2}
"""`parallelism.pp_schedule` → pipeline stages each rank holds (interleaved schedules loop over two)."""
ZERO_BUBBLE_SHARE = 1 / 3
"""Zero-bubble schedules fill the interleaved bubble with the weight-gradient halves of the backward, which
is about a third of a micro batch's compute (Qi et al. 2023): what is left is a third of the bubble."""


class Coordinates(NamedTuple):
    pp: int
    dp: int
    tp: int


@dataclass(frozen=True)
class Layout:
    """How the world's ranks split into data, tensor and pipeline parallel groups."""

    nodes: int
    processes_per_node: int
    world_size: int
    dp: int
    tp: int
    pp: int
    shard_degree: int
    """Ranks that share one copy of the model state (1 for DDP; the shard group for FSDP and ZeRO)."""
    stages_per_rank: int = 1
    """Pipeline stages each pipeline rank holds: 2 for the interleaved schedules, else 1."""
    layers_per_stage: tuple[int, ...] = ()
    """Decoder layers of each pipeline stage, in stage order (empty without a pipeline)."""

    def coordinates(self, rank: int) -> Coordinates:
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} is outside a world of {self.world_size}")
        return Coordinates(pp=rank // (self.dp * self.tp), dp=rank // self.tp % self.dp, tp=rank % self.tp)

    def rank_of(self, pp: int, dp: int, tp: int) -> int:
        """The global rank at coordinates (pp, dp, tp): the inverse of `coordinates`."""
        return (pp * self.dp + dp) * self.tp + tp

    @property
    def stages(self) -> int:
        return self.pp * self.stages_per_rank

    def stages_of(self, pp_rank: int) -> tuple[int, ...]:
        """The stages a pipeline rank runs: `pp_rank`, `pp_rank + pp`, ... (the interleaved schedules' loop)."""
        return tuple(pp_rank + loop * self.pp for loop in range(self.stages_per_rank))

    def layers_of(self, stage: int) -> range:
        """The decoder layers of one stage; stage 0 also holds the embeddings, the last the norm and head."""
        if not self.layers_per_stage:
            raise ValueError("a layout without pipeline stages")
        start = sum(self.layers_per_stage[:stage])
        return range(start, start + self.layers_per_stage[stage])

    @property
    def loss_ranks(self) -> int:
        """Ranks that compute the loss: all but the pipeline's earlier stages."""
        return self.world_size // self.pp

    @property
    def replicated(self) -> bool:
        """The data-parallel ranks hold more than one copy of the model state (DDP, hybrid FSDP)."""
        return self.shard_degree < self.dp

    def mesh_shape(self) -> tuple[tuple[int, ...], tuple[str, ...]]:
        """The device mesh's sizes and dimension names; replicated layouts split dp into replicas ("rep")
        × shard groups ("dp"), the rank order staying (pp, dp, tp)."""
        if self.replicated:
            replicas = self.dp // self.shard_degree
            return (self.pp, replicas, self.shard_degree, self.tp), ("pp", "rep", "dp", "tp")
        return (self.pp, self.dp, self.tp), ("pp", "dp", "tp")

    def build_mesh(self, device_type: str) -> Any:
        """The DeviceMesh over every rank (torch is imported here only: the planner never calls this)."""
        from torch.distributed.device_mesh import init_device_mesh

        shape, names = self.mesh_shape()
        return init_device_mesh(device_type, shape, mesh_dim_names=names)


def split_layers(layers: int, stages: int) -> tuple[int, ...]:
    """An even split of `layers` over `stages`; a remainder goes to the middle stages first, because the
    first stage also holds the embeddings and the last the final norm, the head and the loss."""
    base, extra = divmod(layers, stages)
    counts = [base] * stages
    middle_first = sorted(range(stages), key=lambda stage: (stage in (0, stages - 1), stage == stages - 1))
    for stage in middle_first[:extra]:
        counts[stage] += 1
    return tuple(counts)


def bubble_fraction(pp: int, microbatches: int, schedule: str) -> float:
    """Share of a step a pipeline rank idles: (pp − 1) / (m + pp − 1), the warm-up and drain of pp − 1
    micro batches, shrunk by the virtual stages of the interleaved schedules (Narayanan et al. 2021)."""
    idle = (pp - 1) / PIPELINE_SCHEDULES[schedule]
    if schedule == "zero-bubble":
        idle *= ZERO_BUBBLE_SHARE
    return idle / (microbatches + idle) if pp > 1 else 0.0


def default_microbatches(pp: int, schedule: str, limit: float = 0.2) -> int:
    """The fewest micro batches, a multiple of pp, that keep the bubble under `limit`."""
    microbatches = pp
    while bubble_fraction(pp, microbatches, schedule) >= limit:
        microbatches += pp
    return microbatches
