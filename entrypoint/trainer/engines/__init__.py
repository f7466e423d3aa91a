"""The engines, by the name the strategy table gives (`compiler.spec.strategies`): the plan's strategy
and pipeline degree pick one.

An engine's module is imported only when its engine is made: DeepSpeed's imports DeepSpeed, and importing
torch.distributed.pipelining fixes inductor's cache folder, which `compiled.use_warm_cache` must set first.
"""

import importlib

import torch

from compiler.spec import Plan
from compiler.spec.strategies import DEEPSPEED_ENGINE, PIPELINE_ENGINE, TORCH_ENGINE, engine_name
from entrypoint.trainer.engines.base import Engine
from entrypoint.trainer.models import model_spec

ENGINES = {
    TORCH_ENGINE: ("native", "TorchEngine"),
    DEEPSPEED_ENGINE: ("zero", "DeepSpeedEngine"),
    PIPELINE_ENGINE: ("pipeline", "PipelineEngine"),
}
"""Engine name → (its module in this package, its class)."""


def engine_class(name: str) -> type[Engine]:
    module, cls = ENGINES[name]
    return getattr(importlib.import_module(f"{__name__}.{module}"), cls)


def make_engine(plan: Plan, device: torch.device) -> Engine:
    """The plan's engine with the plan's model, seeded so that every strategy draws the same weights."""
    torch.manual_seed(plan.trainer.seed)
    engine = engine_class(engine_name(plan.parallelism.strategy, plan.layout.pp))
    return engine(plan, model_spec(plan.model), device)
