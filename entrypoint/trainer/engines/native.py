"""PyTorch-native strategies: DDP, FSDP (`fully_shard`, full or hybrid shard), tensor parallelism with
DTensor combined with FSDP, and activation checkpointing; checkpoints through torch.distributed.checkpoint.

The device mesh is the plan's layout's (`compiler.spec.ranks.Layout.build_mesh`): tensor parallelism innermost,
so the ranks of one tensor-parallel group are neighbours on one node.
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
from torch.distributed.tensor import DTensor, Shard
from torch.distributed.tensor.parallel import parallelize_module
from torch.nn.parallel import DistributedDataParallel

from compiler.spec import Plan
from compiler.spec.schema import ModelConfig, Offload, Precision
from compiler.spec.strategies import facts
from entrypoint.trainer.compiled import apply_compile
from entrypoint.trainer.context_parallel import context_groups
from entrypoint.trainer.engines.base import MicroBatches, builds_on_meta, evaluating, materialise
from entrypoint.trainer.engines.sequence_parallel import parallel_loss, parallelize
from entrypoint.trainer.models import ModelSpec
from entrypoint.trainer.models.experts import EXPERT_SHARDS, split_experts
from entrypoint.trainer.objective import make_objective
from entrypoint.trainer.offload import ActivationOffload
from entrypoint.trainer.optim import adamw, clip_gradients, set_lr

DTYPES = {Precision.bf16: torch.bfloat16, Precision.fp16: torch.float16, Precision.fp32: torch.float32}


def data_parallel_mesh(plan: Plan, mesh: DeviceMesh) -> DeviceMesh:
    """The mesh FSDP shards over: replicas × shard groups when they differ (hybrid, and DDP's replicated
    pipeline stages: shard groups of one), else the data-parallel ranks."""
    return mesh["rep", "dp"] if plan.layout.replicated else mesh["dp"]


def fully_shard_options(plan: Plan, mesh: DeviceMesh) -> dict:
    dtype = DTYPES[plan.parallelism.mixed_precision]
    options = {
        "mesh": data_parallel_mesh(plan, mesh),
        "mp_policy": MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32),
    }
    if plan.parallelism.offload is not Offload.none:  # FSDP2 offloads parameters, gradients and the update together
        options["offload_policy"] = CPUOffloadPolicy()
    return options


def tensor_parallel(spec: ModelSpec, module: nn.Module, model: ModelConfig, mesh: DeviceMesh) -> None:
    """Split every block of `module` (a pipeline stage) by the model's tensor-parallel plan, each block's input
    and output whole on every tensor-parallel rank."""
    plan = spec.tp_plan(model)
    for block in spec.blocks(module):
        parallelize_module(block, mesh, plan)


def sequence_parallel(spec: ModelSpec, module: nn.Module, model: ModelConfig, mesh: DeviceMesh) -> None:
    """The FSDP+TP engine's split of a whole model: the family's plan with sequence and loss parallelism
    (`engines.sequence_parallel`)."""
    parallelize(spec.blocks(module), spec.tp_plan(model), spec.output_projection(module), mesh)


def expert_parallel(plan: Plan, model: nn.Module, device_type: str, options: dict) -> list[nn.Module]:
    """`parallelism.ep`: each MoE layer's experts split over `ep` data-parallel ranks (`models.experts`) and
    sharded by FSDP2 over the other `dp / ep` (`efsdp`). The experts modules (none when ep is 1)."""
    layout = plan.layout
    if layout.ep == 1:
        return []
    if layout.tp > 1 or layout.pp > 1 or layout.replicated:
        raise NotImplementedError("expert parallelism runs with parallelism=fsdp, tp=1 and pp=1 (ep borrows dp ranks)")
    mesh = init_device_mesh(device_type, (layout.ep, layout.dp // layout.ep), mesh_dim_names=("ep", "efsdp"))
    parts = split_experts(model, mesh.get_group("ep"))
    for part in parts:
        part.dockyard_mesh = mesh
        fully_shard(part, **options | {"mesh": mesh["efsdp"]})
        for param in part.parameters():
            setattr(param, EXPERT_SHARDS, layout.ep)
    return parts


def sharded_copy(plan: Plan, spec: ModelSpec, model: nn.Module, mesh: DeviceMesh) -> nn.Module:
    """A copy of FSDP2's `model` sharded as it is, in the compute precision (it never trains), its parameters
    and buffers copied shard by shard: DPO's reference model (each rank holds only its shards)."""
    with torch.device("meta"):
        copied = spec.build(plan.model).to(DTYPES[plan.parallelism.mixed_precision]).requires_grad_(False)
    if plan.layout.tp > 1:
        sequence_parallel(spec, copied, plan.model, mesh["tp"])
    options = fully_shard_options(plan, mesh)
    for block in spec.blocks(copied):
        fully_shard(block, **options)
    fully_shard(copied, **options)
    copied.to_empty(device=next(model.parameters()).device)
    source = dict(model.named_parameters()) | dict(model.named_buffers())
    with torch.no_grad():
        for name, tensor in [*copied.named_parameters(), *copied.named_buffers()]:
            tensor.copy_(source[name])
    return copied


def gathered_experts(param: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """An expert parameter whole, on CPU: its FSDP2 shards gathered, then every expert-parallel rank's experts
    (in rank order: rank r holds the r-th `experts / ep`)."""
    block = (param.full_tensor() if isinstance(param, DTensor) else param).detach().contiguous()
    blocks = [torch.empty_like(block) for _ in range(dist.get_world_size(group))]
    dist.all_gather(blocks, block, group=group)
    return torch.cat(blocks).cpu()


def whole_experts(value: DTensor, mesh: DeviceMesh) -> DTensor:
    """An expert tensor FSDP2 holds over `efsdp` (this rank's `experts / ep` of a layer), as the layer's whole
    tensor over the (ep, efsdp) mesh: the same local storage, the global shape and offsets of all experts."""
    shape = (value.shape[0] * mesh["ep"].size(), *value.shape[1:])
    stride = torch.empty(shape, device="meta").stride()
    placements = [Shard(0), Shard(0)]
    return DTensor.from_local(value.to_local(), mesh, placements, run_check=False, shape=shape, stride=stride)


class TorchEngine:
    """DDP (and smddp) or FSDP2 with tensor parallelism: the engine interface of `engines.base.Engine`."""

    def __init__(self, plan: Plan, spec: ModelSpec, device: torch.device) -> None:
        self.plan, self.spec, self.device = plan, spec, device
        self.experts: list[nn.Module] = []
        with torch.device("meta") if builds_on_meta(plan) or spec.builds_empty else device:
            model = spec.build(plan.model)
        par = plan.parallelism
        dtype = DTYPES[par.mixed_precision]
        self.autocast_dtype = dtype if dtype is not torch.float32 else None
        self.scaler = torch.amp.GradScaler(device.type) if par.mixed_precision is Precision.fp16 else None
        spec.set_checkpointing(model, par.activation_checkpointing, par.activation_checkpointing_every)
        if par.activation_offload:
            spec.set_activation_offload(model, ActivationOffload(device, par.activation_offload_horizon))
        context = context_groups(plan.layout.dp, plan.layout.cp)
        if context is not None:
            spec.set_context_parallel(model, context)
        apply_compile(model, spec.blocks(model), plan.trainer)
        if facts(par.strategy).replicated:
            if plan.layout.tp > 1 or plan.layout.ep > 1:
                raise NotImplementedError("tensor and expert parallelism run with parallelism=fsdp, not ddp")
            materialise(spec, model, device)
            self.objective = make_objective(plan, spec, model)  # a reference copy is made before DDP wraps
            # Gradients as views into DDP's buckets: no second copy of them (the planner counts one).
            self.model: nn.Module = DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None, gradient_as_bucket_view=True
            )
        else:
            mesh = plan.layout.build_mesh(device.type)
            if plan.layout.tp > 1:
                sequence_parallel(spec, model, plan.model, mesh["tp"])
            options = fully_shard_options(plan, mesh)
            self.experts = expert_parallel(plan, model, device.type, options)
            for block in spec.blocks(model):
                fully_shard(block, **options)
            self.model = fully_shard(model, **options)
            self.autocast_dtype = None  # FSDP casts parameters itself
            materialise(spec, model, device)
            self.objective = make_objective(plan, spec, model, lambda policy: sharded_copy(plan, spec, policy, mesh))
        self.parts = [model]
        self.optimizer = adamw(self.model, plan.trainer)
        self.params = [p for p in self.model.parameters() if p.requires_grad]

    def forward_backward(self, micro_batches: MicroBatches) -> torch.Tensor:
        """One step's micro batches, one after the other: the sum of their losses (detached); their gradients,
        scaled by 1/grad_accum, accumulate and are reduced after the last."""
        total = torch.zeros((), device=self.device)
        for index, (inputs, targets) in enumerate(micro_batches):
            total += self._micro_batch(inputs.to(self.device), targets.to(self.device), index == len(micro_batches) - 1)
        return total

    def _micro_batch(self, inputs: torch.Tensor, targets: torch.Tensor, last_micro: bool) -> torch.Tensor:
        with self._gradient_sync(last_micro), parallel_loss(self.plan.layout.tp):
            with self._autocast():
                loss = self.objective.loss(self.model, inputs, targets)
            scaled = loss / self.plan.batch.grad_accum
            (self.scaler.scale(scaled) if self.scaler else scaled).backward()
        return loss.detach()

    def evaluate(self, micro_batches: MicroBatches) -> torch.Tensor:
        total = torch.zeros((), device=self.device)
        with evaluating(self.model), self._autocast(), parallel_loss(self.plan.layout.tp):
            for inputs, targets in micro_batches:
                total += self.objective.loss(self.model, inputs.to(self.device), targets.to(self.device))
        return total

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.autocast_dtype:
            return torch.autocast(self.device.type, dtype=self.autocast_dtype)
        return contextlib.nullcontext()

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
        self._average_expert_gradients()
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

    def _average_expert_gradients(self) -> None:
        """An expert's gradient sums every rank's tokens (the all-to-all's backward) and FSDP2 averages it over
        `efsdp` only: dividing by `ep` more gives the mean over all data-parallel ranks the other parameters
        get. (FSDP2's own divide factor would reduce with PREMUL_SUM, which gloo lacks.)"""
        for part in self.experts:
            for param in part.parameters():
                if param.grad is not None:
                    param.grad.div_(self.plan.layout.ep)

    def checkpoint_state(self) -> dict:
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        return {"model": model_state, "optim": optim_state}

    def save(self, folder: Path) -> None:
        dcp.save(self._whole_experts(self.checkpoint_state()), checkpoint_id=str(folder))

    def load(self, folder: Path) -> None:
        state = self.checkpoint_state()
        dcp.load(self._whole_experts(state), checkpoint_id=str(folder))  # in place: the views share the storage
        set_state_dict(self.model, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])

    def _whole_experts(self, state: dict) -> dict:
        """The checkpoint's state with each expert tensor (a parameter, its AdamW moments) seen as the layer's
        whole `[experts, ...]` tensor sharded over (ep, efsdp), sharing this rank's storage: each rank then
        writes and reads its own experts under the parameter's name, as without expert parallelism."""
        meshes = {name: group.dockyard_mesh for name, _, group in self._expert_parameters()}
        if not meshes:
            return state
        model = {
            name: whole_experts(value, meshes[name]) if name in meshes else value
            for name, value in state["model"].items()
        }
        moments = {
            name: {
                key: whole_experts(value, meshes[name]) if isinstance(value, DTensor) else value
                for key, value in held.items()
            }
            if name in meshes
            else held
            for name, held in state["optim"]["state"].items()
        }
        return {"model": model, "optim": state["optim"] | {"state": moments}}

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model's weights on CPU, on rank 0 (empty elsewhere); every rank must call it. Expert-parallel
        experts are gathered from their ranks (each holds `experts / ep` of every layer)."""
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(self.model, options=options)
        gathered = {
            name: gathered_experts(param, part.dockyard_mesh.get_group("ep"))
            for name, param, part in self._expert_parameters()
        }
        return state | gathered if dist.get_rank() == 0 else {}

    def _expert_parameters(self) -> list[tuple[str, nn.Parameter, nn.Module]]:
        """Every expert parameter by its name in the model, with its experts module."""
        owner = {id(param): part for part in self.experts for param in part.parameters()}
        return [(name, param, owner[id(param)]) for name, param in self.model.named_parameters() if id(param) in owner]
