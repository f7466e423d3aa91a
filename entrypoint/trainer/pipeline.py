"""Pipeline parallelism (pp > 1) with torch.distributed.pipelining: the decoder cut into stages, each
replicated or sharded over the data-parallel ranks with FSDP2 and split over the tensor-parallel ranks.

The plan's layout says which stages a rank runs and which layers a stage holds; stage 0 also holds the
embeddings, the last stage the final norm and the output head. A schedule consumes the whole step: the
step's micro batches go in at the first stage, the targets at the last, and the gradients, scaled by
1/micro batches, are reduced by FSDP after the last micro batch. DDP's reducer fails under a schedule,
so a replicated stage is FSDP2 with shard groups of one (the layout's replicas). Checkpoints are each
stage's own keys (the whole model's parameter names) in one torch.distributed.checkpoint folder.

Tied embeddings: the last stage projects with its own copy of the token embedding. The copies start
equal (broadcast from the first stage), their gradients are summed between the two stages before every
update, so they stay equal; the gradient norm counts the weight once, and a checkpoint holds it once.
"""

from collections.abc import Sequence
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
from torch.utils.checkpoint import checkpoint

from compiler.spec import Plan
from entrypoint.trainer.model import Decoder, loss_fn, rope_tables
from entrypoint.trainer.optim import adamw, grad_norm, scale_gradients, set_lr
from entrypoint.trainer.parallel import fully_shard_options, tensor_parallel

SCHEDULES = {
    "gpipe": ScheduleGPipe,
    "1f1b": Schedule1F1B,
    "interleaved-1f1b": ScheduleInterleaved1F1B,
    "zero-bubble": ScheduleInterleavedZeroBubble,
}
"""`parallelism.pp_schedule` → schedule class; the first two run one stage per rank, the others several."""
FLAT_OPTIMIZER = StateDictOptions(flatten_optimizer_state_dict=True)
"""Optimizer state keyed by parameter name, so the stages' keys never collide in one checkpoint."""


class Stage(nn.Module):
    """Layers `layers` of a decoder, with the embeddings on the first stage and the final norm and head on the
    last. The parameters keep the whole decoder's names (`blocks.5.mlp.up.weight`), so a stage's checkpoint
    keys are those of the unpipelined model."""

    def __init__(self, decoder: Decoder, layers: range, first: bool, last: bool) -> None:
        super().__init__()
        self.config, self.first, self.last = decoder.config, first, last
        tied = decoder.head is None
        self.embed = decoder.embed if first or (last and tied) else None
        self.positions = decoder.positions if first else None
        self.blocks = nn.ModuleDict({str(index): decoder.blocks[index] for index in layers})
        self.norm = decoder.norm if last else None
        self.head = decoder.head if last else None
        self.rope = decoder.positions is None
        if self.rope:
            self.register_buffer("rope_cos", decoder.rope_cos, persistent=False)
            self.register_buffer("rope_sin", decoder.rope_sin, persistent=False)
        self.full_checkpointing = decoder.full_checkpointing

    @torch.no_grad()
    def reset_parameters(self, decoder: Decoder) -> None:
        """Initialise a stage materialised from the meta device as the whole decoder initialises its parts."""
        if self.rope:
            config = self.config
            cos, sin = rope_tables(config.hidden // config.heads, config.context, config.rope_theta)
            self.rope_cos.copy_(cos)
            self.rope_sin.copy_(sin)
        for name, param in self.named_parameters():
            decoder.init_parameter(name, param)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Tokens (batch, seq) or the previous stage's hidden states in; hidden states or logits out."""
        if self.first:
            tokens = x
            x = self.embed(tokens)
            if self.positions is not None:
                x = x + self.positions(torch.arange(tokens.shape[1], device=tokens.device))
        rope = (self.rope_cos, self.rope_sin) if self.rope else None
        for block in self.blocks.values():
            if self.full_checkpointing and self.training:
                x = checkpoint(block, x, rope, use_reentrant=False)
            else:
                x = block(x, rope)
        if not self.last:
            return x
        x = self.norm(x)
        return self.embed(x, project=True) if self.head is None else self.head(x)


def build_stages(plan: Plan, device: torch.device, pp_rank: int, on_meta: bool) -> list[Stage]:
    """This rank's stages. A small model is built whole (the same random numbers as an unpipelined run) and
    cut; a large one is built on the meta device and each stage materialised and initialised on its own."""
    layout = plan.layout
    with torch.device("meta") if on_meta else device:
        decoder = Decoder(plan.model)
    decoder.set_checkpointing(plan.parallelism.activation_checkpointing)
    last = layout.stages - 1
    stages = [
        Stage(decoder, layout.layers_of(stage), first=stage == 0, last=stage == last)
        for stage in layout.stages_of(pp_rank)
    ]
    if on_meta:
        for stage in stages:
            stage.to_empty(device=device)
            stage.reset_parameters(decoder)
    return stages


class PipelineEngine:
    """The engine interface of `parallel.TorchEngine` for a pipeline: `forward_backward` runs the schedule
    over the step's micro batches."""

    def __init__(self, plan: Plan, device: torch.device, on_meta: bool) -> None:
        self.plan, self.device = plan, device
        layout = plan.layout
        self.place = layout.coordinates(dist.get_rank())
        mesh = layout.build_mesh(device.type)
        self.parts = build_stages(plan, device, self.place.pp, on_meta)
        options = fully_shard_options(plan, mesh)
        # Zero-bubble's deferred weight gradients reach FSDP2 after a block's own reduction in torch 2.13 (a
        # quarter of them were lost on CPU): its stages are sharded as one unit, gathered whole.
        per_block = plan.parallelism.pp_schedule != "zero-bubble"
        for part in self.parts:
            if layout.tp > 1:
                tensor_parallel(part.blocks.values(), plan.model, mesh["tp"])
            for block in part.blocks.values() if per_block else ():
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
        self.schedule = schedule(stages[0] if single else stages, plan.batch.grad_accum, loss_fn=loss_fn)
        self.first, self.last = 0 in indices, layout.stages - 1 in indices

    def _tie_embeddings(self) -> tuple[nn.Parameter | None, dist.ProcessGroup | None]:
        """With tied embeddings: this rank's embedding weight (on the first and the last stage's ranks) and the
        group of the two ranks holding the copies of the same shard; every rank takes part in making groups."""
        layout = self.plan.layout
        if not self.plan.model.tied_embeddings:
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
        weight = part.embed.weight
        dist.broadcast(weight.to_local().detach(), src=source, group=mine)
        return weight, mine

    def forward_backward(self, micro_batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """The sum of the step's micro batches' losses on the last stage's ranks, zero on the others."""
        inputs = torch.cat([micro[0] for micro in micro_batches]).to(self.device)
        targets = torch.cat([micro[1] for micro in micro_batches]).to(self.device)
        losses: list[torch.Tensor] = []
        self.schedule.step(*((inputs,) if self.first else ()), target=targets if self.last else None, losses=losses)
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

    def _state(self) -> dict[str, dict]:
        model, optim = {}, {}
        for part, optimizer in zip(self.parts, self.optimizers, strict=True):
            model |= get_model_state_dict(part)
            optim |= get_optimizer_state_dict(part, optimizer, options=FLAT_OPTIMIZER)
        return {"model": model, "optim": optim}

    def save(self, folder: Path) -> None:
        dcp.save(self._state(), checkpoint_id=str(folder))

    def load(self, folder: Path) -> None:
        state = self._state()
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
