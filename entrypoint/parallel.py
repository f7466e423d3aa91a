"""PyTorch-native strategies: DDP, FSDP (`fully_shard`, full or hybrid shard), tensor parallelism with
DTensor combined with FSDP, and activation checkpointing; checkpoints through torch.distributed.checkpoint.

The device mesh is laid out with tensor parallelism innermost, so the ranks of one tensor-parallel group
are neighbours on one node, and data-parallel rank = global rank // tp.
"""

import contextlib
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.nn.parallel import DistributedDataParallel

from compiler.spec import Plan
from compiler.spec.schema import Offload, Precision, Strategy
from entrypoint.model import Decoder, loss_fn
from entrypoint.optim import adamw, clip_gradients, set_lr

DTYPES = {Precision.bf16: torch.bfloat16, Precision.fp16: torch.float16, Precision.fp32: torch.float32}


def build_mesh(plan: Plan, device_type: str) -> DeviceMesh:
    layout, strategy = plan.layout, plan.parallelism.strategy
    if strategy is Strategy.fsdp_hybrid:
        shard = layout.shard_degree
        return init_device_mesh(device_type, (layout.dp // shard, shard, layout.tp), mesh_dim_names=("rep", "dp", "tp"))
    return init_device_mesh(device_type, (layout.dp, layout.tp), mesh_dim_names=("dp", "tp"))


def tensor_parallel(model: Decoder, mesh: DeviceMesh) -> None:
    """Megatron-style: q/k/v and the MLP's input projections split by columns (heads, hidden units),
    the output projections by rows; embeddings and norms stay whole on every tensor-parallel rank."""
    plan = {"attention.q": ColwiseParallel(), "attention.k": ColwiseParallel(), "attention.v": ColwiseParallel()}
    plan |= {"attention.o": RowwiseParallel(), "mlp.up": ColwiseParallel(), "mlp.down": RowwiseParallel()}
    if model.config.activation.value == "swiglu":
        plan["mlp.gate"] = ColwiseParallel()
    for block in model.blocks:
        parallelize_module(block, mesh, plan)


class TorchEngine:
    """One optimizer step = grad_accum micro batches through `forward_backward`, then `step`."""

    def __init__(self, plan: Plan, model: Decoder, device: torch.device) -> None:
        self.plan, self.device = plan, device
        par = plan.parallelism
        dtype = DTYPES[par.mixed_precision]
        self.autocast_dtype = dtype if dtype is not torch.float32 else None
        self.scaler = torch.amp.GradScaler(device.type) if par.mixed_precision is Precision.fp16 else None
        model.set_checkpointing(par.activation_checkpointing)
        if plan.trainer.compile:
            for block in model.blocks:
                block.compile()
        if par.strategy in (Strategy.ddp, Strategy.smddp):
            if plan.layout.tp > 1:
                raise NotImplementedError("tensor parallelism runs with parallelism=fsdp, not ddp")
            # Gradients as views into DDP's buckets: no second copy of them (the planner counts one).
            self.model: nn.Module = DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None, gradient_as_bucket_view=True
            )
        else:
            mesh = build_mesh(plan, device.type)
            if plan.layout.tp > 1:
                tensor_parallel(model, mesh["tp"])
            dp_mesh = mesh["rep", "dp"] if par.strategy is Strategy.fsdp_hybrid else mesh["dp"]
            options = {
                "mesh": dp_mesh,
                "mp_policy": MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32),
            }
            if par.offload is not Offload.none:  # FSDP2 offloads parameters, gradients and the update together
                options["offload_policy"] = CPUOffloadPolicy()
            for block in model.blocks:
                fully_shard(block, **options)
            self.model = fully_shard(model, **options)
            self.autocast_dtype = None  # FSDP casts parameters itself
            if any(p.is_meta for p in model.parameters()):
                model.to_empty(device=device)
                model.reset_parameters()
        self.optimizer = adamw(self.model, plan.trainer)
        self.params = [p for p in self.model.parameters() if p.requires_grad]

    def forward_backward(self, inputs: torch.Tensor, targets: torch.Tensor, last_micro: bool) -> torch.Tensor:
        """The micro batch's loss (detached); its gradient, scaled by 1/grad_accum, is accumulated."""
        autocast = (
            torch.autocast(self.device.type, dtype=self.autocast_dtype)
            if self.autocast_dtype
            else contextlib.nullcontext()
        )
        with self._gradient_sync(last_micro):
            with autocast:
                loss = loss_fn(self.model(inputs), targets)
            scaled = loss / self.plan.batch.grad_accum
            (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        return loss.detach()

    def _gradient_sync(self, last_micro: bool) -> contextlib.AbstractContextManager:
        """Reduce gradients across data-parallel ranks only after the last micro batch of a step."""
        if isinstance(self.model, DistributedDataParallel) and not last_micro:
            return self.model.no_sync()
        if isinstance(self.model, FSDPModule):
            self.model.set_requires_gradient_sync(last_micro)
        return contextlib.nullcontext()

    def step(self, lr: float) -> float:
        """Clip, update, clear; returns the gradient norm before clipping."""
        set_lr(self.optimizer, lr)
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        norm = clip_gradients(self.params, self.plan.trainer.grad_clip)
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def save(self, folder: Path) -> None:
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(folder))

    def load(self, folder: Path) -> None:
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        state = {"model": model_state, "optim": optim_state}
        dcp.load(state, checkpoint_id=str(folder))
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's weights on CPU, on rank 0 (empty elsewhere); every rank must call it."""
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(self.model, options=options)
        return state if dist.get_rank() == 0 else {}
