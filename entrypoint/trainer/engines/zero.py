"""DeepSpeed ZeRO stages 1-3: the JSON config generated from the plan, and the engine behind the
interface of `engines.base.Engine`. DeepSpeed is imported only when a ZeRO strategy runs."""

import copy
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from compiler.spec import Plan
from compiler.spec.schema import Offload, Precision
from compiler.spec.strategies import facts
from entrypoint.trainer.compiled import apply_compile
from entrypoint.trainer.engines.base import MicroBatches, evaluating, materialise
from entrypoint.trainer.engines.native import DTYPES
from entrypoint.trainer.models import ModelSpec
from entrypoint.trainer.objective import make_objective
from entrypoint.trainer.optim import adamw, set_lr


def deepspeed_config(plan: Plan) -> dict[str, Any]:
    """DeepSpeed's config for the plan: batch split, precision, ZeRO stage and offload, clipping.

    The optimizer is PyTorch's AdamW handed to DeepSpeed (so every strategy runs the same update);
    DeepSpeed calls such optimizers untested and, with offload, would insist on its CPU Adam, which
    needs a compiled extension: both checks are turned off explicitly. Bucket sizes are the planner's.
    """
    par, batch = plan.parallelism, plan.batch
    strategy = facts(par.strategy)
    zero: dict[str, Any] = {"stage": strategy.zero_stage, **plan.derived.deepspeed_buckets}
    if par.offload is not Offload.none:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if par.offload is Offload.parameters:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if strategy.shards_parameters:
        zero["stage3_gather_16bit_weights_on_model_save"] = False
    return {
        "train_batch_size": batch.global_batch,
        "train_micro_batch_size_per_gpu": batch.micro_batch,
        "gradient_accumulation_steps": batch.grad_accum,
        "gradient_clipping": plan.trainer.grad_clip,
        "bf16": {"enabled": par.mixed_precision is Precision.bf16 and plan.instance.has_gpus},
        "fp16": {"enabled": par.mixed_precision is Precision.fp16, "loss_scale": 0, "initial_scale_power": 16},
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


def build_partitioned(plan: Plan, spec: ModelSpec, config: dict[str, Any]) -> nn.Module:
    """ZeRO-3 builds the model already partitioned (no rank ever holds all of it), then initialises it one
    gathered parameter at a time on rank 0, drawing the same random numbers as a whole-model build."""
    import deepspeed

    with deepspeed.zero.Init(config_dict_or_path=config):
        model = spec.build(plan.model)
    for name, param in model.named_parameters():
        with deepspeed.zero.GatheredParameters([param], modifier_rank=0):
            if dist.get_rank() == 0:
                spec.init_parameter(model, name, param)
    return model


def build_whole(plan: Plan, spec: ModelSpec, device: torch.device) -> nn.Module:
    """ZeRO-1 and 2 keep a whole model on every rank; a family that builds empty fills it after."""
    if not spec.builds_empty:
        return spec.build(plan.model).to(device)
    with torch.device("meta"):
        model = spec.build(plan.model)
    materialise(spec, model, device)
    return model


def skip_shared_memory_op() -> None:
    """On CPU, DeepSpeed's communication start compiles its shared-memory all-reduce, a C++ extension: it
    needs a compiler the images do not carry (every ZeRO job on CPU containers failed with `c++: not found`)
    and takes 20-40 s where one exists. Only DeepSpeed's `inference_all_reduce` uses it; training's
    collectives go through torch.distributed. Marking the op incompatible in DeepSpeed's table of
    compatible ops, read just before the build, skips it."""
    import deepspeed.ops
    from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder

    deepspeed.ops.__compatible_ops__[ShareMemCommBuilder.NAME] = False


class DeepSpeedEngine:
    def __init__(self, plan: Plan, spec: ModelSpec, device: torch.device) -> None:
        import deepspeed

        self.plan, self.spec, self.device = plan, spec, device
        if device.type == "cpu":
            skip_shared_memory_op()
        deepspeed.init_distributed(dist_backend=dist.get_backend())  # adopts the process group train.py made
        config = deepspeed_config(plan)
        self.partitioned = facts(plan.parallelism.strategy).shards_parameters
        model = build_partitioned(plan, spec, config) if self.partitioned else build_whole(plan, spec, device)
        par = plan.parallelism
        spec.set_checkpointing(model, par.activation_checkpointing, par.activation_checkpointing_every)
        apply_compile(model, spec.blocks(model), plan.trainer)
        # DPO's reference without LoRA: a whole copy in the compute precision (ZeRO-1/2; the planner's rule)
        dtype = DTYPES[plan.parallelism.mixed_precision]
        self.objective = make_objective(plan, spec, model, lambda policy: copy.deepcopy(policy).to(dtype))
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=adamw(model, plan.trainer), config=config
        )
        self.model = self.engine
        self.parts = [model]

    def forward_backward(self, micro_batches: MicroBatches) -> torch.Tensor:
        """The sum of the step's micro batches' losses; DeepSpeed scales by 1/grad_accum and reduces at the
        accumulation boundary itself."""
        total = torch.zeros((), device=self.device)
        for index, (inputs, targets) in enumerate(micro_batches):
            loss = self.objective.loss(self.engine, inputs.to(self.device), targets.to(self.device))
            self.engine.backward(loss)
            if index < len(micro_batches) - 1:
                self.engine.step()  # only counts the micro batch; the update happens at the boundary
            total += loss.detach()
        return total

    def evaluate(self, micro_batches: MicroBatches) -> torch.Tensor:
        total = torch.zeros((), device=self.device)
        with evaluating(self.engine):
            for inputs, targets in micro_batches:
                total += self.objective.loss(self.engine, inputs.to(self.device), targets.to(self.device))
        return total

    def step(self, lr: float) -> float:
        set_lr(self.optimizer, lr)
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else 0.0

    def save(self, folder: Path) -> None:
        self.engine.save_checkpoint(str(folder.parent), tag=folder.name, save_latest=False)

    def load(self, folder: Path) -> None:
        path, _ = self.engine.load_checkpoint(str(folder.parent), tag=folder.name)
        if path is None:
            raise RuntimeError(f"DeepSpeed could not load the checkpoint in {folder}")

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """The whole model on rank 0; ZeRO-3 gathers its partitioned parameters for it."""
        import deepspeed

        params = list(self.engine.module.parameters())
        with deepspeed.zero.GatheredParameters(params, modifier_rank=None, enabled=self.partitioned):
            if dist.get_rank() != 0:
                return {}
            return {name: value.detach().cpu().clone() for name, value in self.engine.module.state_dict().items()}
