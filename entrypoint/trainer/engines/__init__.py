"""The engines, by the name the strategy table gives (`compiler.spec.strategies`): the plan's strategy
and pipeline degree pick one. (DeepSpeed itself is imported only when its engine is built.)"""

import torch

from compiler.spec import Plan
from compiler.spec.strategies import DEEPSPEED_ENGINE, PIPELINE_ENGINE, TORCH_ENGINE, engine_name
from entrypoint.trainer.engines.base import Engine
from entrypoint.trainer.engines.native import TorchEngine
from entrypoint.trainer.engines.pipeline import PipelineEngine
from entrypoint.trainer.engines.zero import DeepSpeedEngine
from entrypoint.trainer.models import model_spec

ENGINES: dict[str, type[Engine]] = {
    TORCH_ENGINE: TorchEngine,
    DEEPSPEED_ENGINE: DeepSpeedEngine,
    PIPELINE_ENGINE: PipelineEngine,
}


def make_engine(plan: Plan, device: torch.device) -> Engine:
    """The plan's engine with the plan's model, seeded so that every strategy draws the same weights."""
    torch.manual_seed(plan.trainer.seed)
    engine = ENGINES[engine_name(plan.parallelism.strategy, plan.layout.pp)]
    return engine(plan, model_spec(plan.model), device)
