"""Pipeline parallelism (pp > 1) with torch.distributed.pipelining: the model cut into stages (by its
`ModelSpec.stage`), each replicated or sharded over the data-parallel ranks with FSDP2 and split over the
tensor-parallel ranks.

The plan's layout says which stages a rank runs and which layers a stage holds; stage 0 also holds the
input side (the embeddings), the last stage the output side (final norm and head). A schedule consumes
the whole step: the step's micro batches go in at the first stage, the targets at the last, and the
gradients, scaled by 1/micro batches, are reduced by FSDP after the last micro batch. DDP's
reducer fails under a schedule, so a replicated stage is FSDP2 with shard groups of one (the layout's
replicas). Checkpoints are each stage's own keys (the whole model's parameter names) in one
torch.distributed.checkpoint folder.

Tied embeddings (`ModelSpec.tied_parameter`): the last stage projects with its own copy of the token
embedding. The copies start equal (broadcast from the first stage), their gradients are summed between
the two stages before every update, so they stay equal; the gradient norm counts the weight once, and a
checkpoint holds it once.
"""

from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import fully_shard
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
    ScheduleInterleavedZeroBubble,
)

from compiler.spec import Plan
from entrypoint.trainer.engines.base import MicroBatches, builds_on_meta, evaluating, materialise
from entrypoint.trainer.engines.native import fully_shard_options, tensor_parallel
from entrypoint.trainer.models import ModelSpec
from entrypoint.trainer.objective import NextToken
from entrypoint.trainer.optim import adamw, grad_norm, scale_gradients, set_lr

SCHEDULES = {
    "gpipe": ScheduleGPipe,
    "1f1b": Schedule1F1B,
    "interleaved-1f1b": ScheduleInterleaved1F1B,
    "zero-bubble": ScheduleInterleavedZeroBubble,
}
"""`parallelism.pp_schedule` → schedule class; the first two run one stage per rank, the others several."""
FLAT_OPTIMIZER = StateDictOptions(flatten_optimizer_state_dict=True)
"""Optimizer state keyed by parameter name, so the stages' keys never collide in one checkpoint."""


def build_stages(plan: Plan, spec: ModelSpec, device: torch.device, pp_rank: int) -> list[nn.Module]:
    """This rank's stages. A small model is built whole (the same random numbers as an unpipelined run) and
    cut; a large one is built on the meta device and each stage materialised and initialised on its own."""
    layout, on_meta = plan.layout, builds_on_meta(plan)
    with torch.device("meta") if on_meta else device:
        model = spec.build(plan.model)
    par = plan.parallelism
    spec.set_checkpointing(model, par.activation_checkpointing, par.activation_checkpointing_every)
    last = layout.stages - 1
    stages = [
        spec.stage(model, layout.layers_of(stage), first=stage == 0, last=stage == last)
        for stage in layout.stages_of(pp_rank)
    ]
    for stage in stages:
        materialise(spec, stage, device)
    return stages


class PipelineEngine:
    """The engine interface of `engines.base.Engine` for a pipeline: `forward_backward` runs the schedule
    over the step's micro batches, `evaluate` the schedule's forward-only pass."""

    def __init__(self, plan: Plan, spec: ModelSpec, device: torch.device) -> None:
        self.plan, self.spec, self.device = plan, spec, device
        layout = plan.layout
        self.place = layout.coordinates(dist.get_rank())
        mesh = layout.build_mesh(device.type)
        self.parts = build_stages(plan, spec, device, self.place.pp)
        options = fully_shard_options(plan, mesh)
        # Zero-bubble's deferred weight gradients reach FSDP2 after a block's own reduction in torch 2.13 (a
        # quarter of them were lost on CPU): its stages are sharded as one unit, gathered whole.
        per_block = plan.parallelism.pp_schedule != "zero-bubble"
        for part in self.parts:
            if layout.tp > 1:
                tensor_parallel(spec, part, plan.model, mesh["tp"])
            for block in spec.blocks(part) if per_block else ():
                fully_shard(block, **options)
            fully_shard(part, **options)
        self.optimizers = [adamw(part, plan.trainer) for part in self.parts]
        self.params = [p for part in self.parts for p in part.parameters() if p.requires_grad]
        self.tied, self.tied_group = self._tie_embeddings()
        copy = self.tied if self.tied is not None and self.place.pp != 0 else None
        self.counted = [p for p in self.params if p is not copy]
        group = mesh["pp"].get_group()
        indices = layout.stages_of(self.place.pp)
        stages = [
            PipelineStage(part, index, layout.stages, device, group=group)
            for part, index in zip(self.parts, indices, strict=True)
        ]
        schedule = SCHEDULES[plan.parallelism.pp_schedule]
        single = layout.stages_per_rank == 1
        self.schedule = schedule(stages[0] if single else stages, plan.batch.grad_accum, loss_fn=spec.loss)
        self.objective = NextToken(spec)  # the schedule's loss: the planner refuses other objectives with pp > 1
        self.first, self.last = 0 in indices, layout.stages - 1 in indices

    def _tie_embeddings(self) -> tuple[nn.Parameter | None, dist.ProcessGroup | None]:
        """With tied embeddings: this rank's embedding weight (on the first and the last stage's ranks) and the
        group of the two ranks holding the copies of the same shard; every rank takes part in making groups."""
        layout, tied = self.plan.layout, self.spec.tied_parameter(self.plan.model)
        if tied is None:
            return None, None
        last = layout.stages_of(layout.pp - 1)[-1]
        mine = None
        for dp in range(layout.dp):
            for tp in range(layout.tp):
                pair = [layout.rank_of(0, dp, tp), layout.rank_of(layout.pp - 1, dp, tp)]
                group = dist.new_group(pair)
                if dist.get_rank() in pair:
                    mine, source = group, pair[0]
        if mine is None:
            return None, None
        part = self.parts[0] if self.place.pp == 0 else self.parts[layout.stages_of(self.place.pp).index(last)]
        weight = part.get_parameter(tied)
        dist.broadcast(weight.to_local().detach(), src=source, group=mine)
        return weight, mine

    def forward_backward(self, micro_batches: MicroBatches) -> torch.Tensor:
        """The sum of the step's micro batches' losses on the last stage's ranks, zero on the others."""
        return self._run(self.schedule.step, micro_batches)

    def evaluate(self, micro_batches: MicroBatches) -> torch.Tensor:
        """The schedule's forward-only pass (it runs every stage under no_grad); the last stage's ranks
        get the losses. The micro batches are the step's: the schedule splits the batch into as many."""
        with evaluating(*self.parts):
            return self._run(self.schedule.eval, micro_batches)

    def _run(self, run, micro_batches: MicroBatches) -> torch.Tensor:
        inputs = torch.cat([micro[0] for micro in micro_batches]).to(self.device)
        targets = torch.cat([micro[1] for micro in micro_batches]).to(self.device)
        losses: list[torch.Tensor] = []
        run(*((inputs,) if self.first else ()), target=targets if self.last else None, losses=losses)
        total = torch.zeros((), device=self.device)
        for loss in losses:
            total += loss.detach()
        return total

    def step(self, lr: float) -> float:
        """Clip over every stage's gradients, update, clear; the norm before clipping."""
        if self.tied is not None:
            dist.all_reduce(self.tied.grad.to_local(), group=self.tied_group)
        norm = grad_norm(self.counted, self.plan.layout.ranks_per_stage)
        scale_gradients(self.params, self.plan.trainer.grad_clip, norm)
        for optimizer in self.optimizers:
            set_lr(optimizer, lr)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return norm

    def checkpoint_state(self) -> dict[str, dict]:
        model, optim = {}, {}
        for part, optimizer in zip(self.parts, self.optimizers, strict=True):
            model |= get_model_state_dict(part)
            optim |= get_optimizer_state_dict(part, optimizer, options=FLAT_OPTIMIZER)
        return {"model": model, "optim": optim}

    def save(self, folder: Path) -> None:
        dcp.save(self.checkpoint_state(), checkpoint_id=str(folder))

    def load(self, folder: Path) -> None:
        state = self.checkpoint_state()
        dcp.load(state, checkpoint_id=str(folder))
        for part, optimizer in zip(self.parts, self.optimizers, strict=True):
            set_model_state_dict(part, state["model"], options=StateDictOptions(strict=False))
            set_optimizer_state_dict(part, optimizer, state["optim"], options=FLAT_OPTIMIZER)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's weights on CPU, on rank 0 (empty elsewhere): each stage's first data- and
        tensor-parallel rank gathers its stages and sends them to rank 0; every rank must call it."""
        state: dict[str, torch.Tensor] = {}
        for part in self.parts:
            gathered = get_model_state_dict(part, options=StateDictOptions(full_state_dict=True))
            state |= {name: value.detach().cpu() for name, value in gathered.items()}
        leader = self.place.dp == 0 and self.place.tp == 0
        pieces = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
        dist.gather_object(state if leader else {}, pieces, dst=0)
        if dist.get_rank() != 0:
            return {}
        return {name: value for piece in pieces for name, value in piece.items()}
