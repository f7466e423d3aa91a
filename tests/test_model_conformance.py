"""Every registered model family, held to what the planner and the engines assume of it: the planner's
parameter count is the built module's (whole and per pipeline stage), the tensor-parallel plan names modules
that exist and leaves only norms to run on sequence shards, the pipeline stages hold every parameter exactly
once, and the weights' format reads back what it wrote. The planner's registry and the trainer's list the same
families.

The built-in decoder is built in three shapes; `hf` from a tiny checkpoint of each architecture the planner
knows (pipeline stages are the decoder's alone: the planner refuses pp > 1 for hf)."""

import pytest
import torch
from torch.distributed.tensor.parallel import SequenceParallel

from compiler.core.architectures import architecture
from compiler.planner import models
from compiler.planner.pipeline import split_layers
from compiler.spec import Plan
from entrypoint.trainer.engines.sequence_parallel import sequence_parallel_plan
from entrypoint.trainer.models import MODELS
from entrypoint.trainer.models.loss import IGNORE_INDEX
from tests.entrypoint_support import LLAMA_STYLE, tiny_plan
from tests.pretrained import TINY

SHAPES = {
    "gpt2": (),
    "llama": LLAMA_STYLE,
    "llama-tied": ("model.position=rope", "model.activation=swiglu", "model.norm=rmsnorm", "model.bias=false"),
}
"""Shapes of the built-in decoder."""
DECODER_CASES = [("decoder", shape) for shape in SHAPES]
CASES = DECODER_CASES + [("hf", architecture) for architecture in sorted(TINY)]


@pytest.fixture
def plan_of(hf_checkpoints):
    def plan(family: str, shape: str) -> Plan:
        if family == "hf":
            return tiny_plan("model=hf", f"model.path={hf_checkpoints[shape]}")
        return tiny_plan(f"model.family={family}", *SHAPES[shape])

    return plan


def count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def test_the_planner_and_the_trainer_list_the_same_families():
    assert set(MODELS) == set(models.FAMILIES)


@pytest.mark.parametrize(("family", "shape"), CASES)
def test_the_planners_count_is_the_built_modules(family, shape, plan_of):
    config = plan_of(family, shape).model
    spec, facts = MODELS[family], models.model_facts(config)
    with torch.device("meta"):
        module = spec.build(config)
    assert count(module) == facts.parameter_count(facts.layers, first=True, last=True)


@pytest.mark.parametrize(("family", "shape"), CASES)
def test_the_tensor_parallel_plan_names_modules_of_every_block(family, shape, plan_of):
    config = plan_of(family, shape).model
    spec = MODELS[family]
    with torch.device("meta"):
        module = spec.build(config)
    if family == "hf" and not architecture(config.architecture).tensor_parallel:
        with pytest.raises(NotImplementedError, match=f"{shape}'s tensor-parallel plan|no tensor-parallel plan for"):
            spec.tp_plan(config)
        return
    plan = spec.tp_plan(config)
    assert plan and spec.blocks(module)
    for block in spec.blocks(module):
        for name in plan:
            assert isinstance(block.get_submodule(name), torch.nn.Linear), name
        # sequence parallelism runs every other child of a block with parameters on sequence shards: norms only
        styles = sequence_parallel_plan(plan, block)
        on_shards = [name for name, style in styles.items() if isinstance(style, SequenceParallel)]
        assert on_shards and all(type(block.get_submodule(name)).__name__.endswith("Norm") for name in on_shards)
    head = spec.output_projection(module)  # split by vocabulary under tensor parallelism: a weight of its own
    assert head is None if config.tied_embeddings else isinstance(head, torch.nn.Linear)


@pytest.mark.parametrize(("family", "shape"), DECODER_CASES)
def test_pipeline_stages_hold_every_parameter_once(family, shape):
    """Each parameter in exactly one stage, but the tied one, in the first and the last; each stage's size
    is the planner's count of its share."""
    config = tiny_plan(f"model.family={family}", *SHAPES[shape]).model
    spec, facts = MODELS[family], models.model_facts(config)
    with torch.device("meta"):
        module = spec.build(config)
    counts = split_layers(facts.layers, 3)
    starts = [sum(counts[:index]) for index in range(len(counts))]
    held: dict[str, int] = {}
    for index, (start, layers) in enumerate(zip(starts, counts, strict=True)):
        first, last = index == 0, index == len(counts) - 1
        stage = spec.stage(module, range(start, start + layers), first, last)
        assert count(stage) == facts.parameter_count(layers, first, last)
        for name, _ in stage.named_parameters():
            held[name] = held.get(name, 0) + 1
    tied = spec.tied_parameter(config)
    assert held == {name: 2 if name == tied else 1 for name, _ in module.named_parameters()}


@pytest.mark.parametrize(("family", "shape"), CASES)
def test_the_weights_format_reads_back_what_it_wrote(family, shape, plan_of, tmp_path):
    """Every tensor back under its name; a tied one (the output head sharing the embedding) may come back once."""
    plan = plan_of(family, shape)
    spec = MODELS[family]
    state = spec.build(plan.model).state_dict()
    spec.weights.save(tmp_path, state, plan.to_dict()["model"])
    loaded = spec.weights.load(tmp_path)
    stored = {value.untyped_storage().data_ptr(): name for name, value in state.items() if name in loaded}
    for name, value in state.items():
        assert torch.equal(loaded[stored[value.untyped_storage().data_ptr()]], value), name
    assert set(loaded) <= set(state)


@pytest.mark.parametrize(("family", "shape"), CASES)
def test_the_loss_skips_masked_targets(family, shape, plan_of):
    """A target equal to IGNORE_INDEX (a prompt token under data.loss_on=assistant, padding) counts nowhere:
    the loss equals the cross-entropy over the other positions alone."""
    config = plan_of(family, shape).model
    spec = MODELS[family]
    torch.manual_seed(0)
    module = spec.build(config)
    inputs = torch.randint(0, config.vocab, (2, 16))
    targets = torch.randint(0, config.vocab, (2, 16))
    with torch.no_grad():
        output = module(inputs)
    logits = getattr(output, "logits", output)
    masked = targets.clone()
    masked[:, :6] = IGNORE_INDEX
    kept = torch.nn.functional.cross_entropy(logits[:, 6:].flatten(0, 1), targets[:, 6:].flatten())
    assert spec.loss(output, masked).item() == pytest.approx(kept.item(), rel=1e-5)
