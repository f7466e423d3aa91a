"""Every registered model family, held to what the planner and the engines assume of it: the planner's
parameter count is the built module's (whole and per pipeline stage), the tensor-parallel plan names modules
that exist, the pipeline stages hold every parameter exactly once, and the weights' format reads back what
it wrote. The planner's registry and the trainer's list the same families."""

import pytest
import torch

from compiler.planner import models
from compiler.planner.pipeline import split_layers
from entrypoint.trainer.models import MODELS
from entrypoint.trainer.models.loss import IGNORE_INDEX
from tests.entrypoint_support import LLAMA_STYLE, tiny_plan

SHAPES = {
    "gpt2": (),
    "llama": LLAMA_STYLE,
    "llama-tied": ("model.position=rope", "model.activation=swiglu", "model.norm=rmsnorm", "model.bias=false"),
}
"""Shapes of the tiny model that every family builds (a family with other shape fields adds its own here)."""
CASES = [(family, shape) for family in MODELS for shape in SHAPES]


def count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_the_planner_and_the_trainer_list_the_same_families():
    assert set(MODELS) == set(models.FAMILIES)


@pytest.mark.parametrize(("family", "shape"), CASES)
def test_the_planners_count_is_the_built_modules(family, shape):
    config = tiny_plan(f"model.family={family}", *SHAPES[shape]).model
    spec, facts = MODELS[family], models.FAMILIES[family]
    with torch.device("meta"):
        module = spec.build(config)
    layers = facts.pipeline_layers(config)
    assert count(module) == facts.parameter_count(config, layers, first=True, last=True)


@pytest.mark.parametrize(("family", "shape"), CASES)
def test_the_tensor_parallel_plan_names_modules_of_every_block(family, shape):
    config = tiny_plan(f"model.family={family}", *SHAPES[shape]).model
    spec = MODELS[family]
    with torch.device("meta"):
        module = spec.build(config)
    plan = spec.tp_plan(config)
    assert plan and spec.blocks(module)
    for block in spec.blocks(module):
        for name in plan:
            assert isinstance(block.get_submodule(name), torch.nn.Linear), name


@pytest.mark.parametrize(("family", "shape"), CASES)
def test_pipeline_stages_hold_every_parameter_once(family, shape):
    """Each parameter in exactly one stage, but the tied one, in the first and the last; each stage's size
    is the planner's count of its share."""
    config = tiny_plan(f"model.family={family}", *SHAPES[shape]).model
    spec, facts = MODELS[family], models.FAMILIES[family]
    with torch.device("meta"):
        module = spec.build(config)
    counts = split_layers(facts.pipeline_layers(config), 3)
    starts = [sum(counts[:index]) for index in range(len(counts))]
    held: dict[str, int] = {}
    for index, (start, layers) in enumerate(zip(starts, counts, strict=True)):
        first, last = index == 0, index == len(counts) - 1
        stage = spec.stage(module, range(start, start + layers), first, last)
        assert count(stage) == facts.parameter_count(config, layers, first, last)
        for name, _ in stage.named_parameters():
            held[name] = held.get(name, 0) + 1
    tied = spec.tied_parameter(config)
    assert held == {name: 2 if name == tied else 1 for name, _ in module.named_parameters()}


@pytest.mark.parametrize(("family", "shape"), CASES)
def test_the_weights_format_reads_back_what_it_wrote(family, shape, tmp_path):
    plan = tiny_plan(f"model.family={family}", *SHAPES[shape])
    spec = MODELS[family]
    state = spec.build(plan.model).state_dict()
    spec.weights.save(tmp_path, state, plan.to_dict()["model"])
    loaded = spec.weights.load(tmp_path)
    assert loaded.keys() == state.keys()
    for name, value in state.items():
        assert torch.equal(loaded[name], value), name


@pytest.mark.parametrize("family", MODELS)
def test_the_loss_skips_masked_targets(family):
    """A target equal to IGNORE_INDEX (a prompt token under data.loss_on=assistant, padding) counts nowhere:
    the loss equals the loss over the other positions alone."""
    config = tiny_plan(f"model.family={family}").model
    spec = MODELS[family]
    torch.manual_seed(0)
    module = spec.build(config)
    inputs = torch.randint(0, config.vocab, (2, 16))
    targets = torch.randint(0, config.vocab, (2, 16))
    with torch.no_grad():
        output = module(inputs)
    masked = targets.clone()
    masked[:, :6] = IGNORE_INDEX
    assert spec.loss(output, masked).item() == pytest.approx(spec.loss(output[:, 6:], targets[:, 6:]).item(), rel=1e-5)
