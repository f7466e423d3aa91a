"""The parallel layout of a plan's ranks: dp × tp × pp, and the one map from a global rank to its place.

Standard library only: the in-container trainer reads it through the plan. `compiler.planner.layout`
resolves and checks the degrees from the config; this module is what both sides then read: a rank's
(pp, dp, tp) coordinates, the pipeline stages and layers it holds, and the device mesh. Nothing else
computes `rank // tp`.

Ranks are laid out with tensor parallelism innermost (a tensor-parallel group is neighbours on one node)
and the pipeline outermost (with one stage per node, activations cross the network once per stage):
`rank = (pp_rank × dp + dp_rank) × tp + tp_rank`.
"""

from dataclasses import dataclass
from typing import Any, NamedTuple

PIPELINE_SCHEDULES = {"gpipe": 1, "1f1b": 1, "interleaved-1f1b": 2, "zero-bubble": 2}
"""`parallelism.pp_schedule` → pipeline stages each rank holds (interleaved schedules loop over two)."""


class Coordinates(NamedTuple):
    pp: int
    dp: int
    tp: int


@dataclass(frozen=True, kw_only=True)
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
    ep: int = 1
    """Expert-parallel degree: ranks of one dp × tp group that split each layer's experts."""
    cp: int = 1
    """Context-parallel degree: data-parallel ranks that split one sequence."""

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

    @property
    def data_replicas(self) -> int:
        """Replicas that read distinct sequences: dp / cp (a context-parallel group's cp ranks share theirs)."""
        return self.dp // self.cp

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
    def ranks_per_stage(self) -> int:
        """Ranks that run one pipeline stage (dp × tp; the world without a pipeline): those of the last stage
        compute the loss, and a stage's parameters live on its ranks only."""
        return self.dp * self.tp

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
