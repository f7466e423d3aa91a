"""`model.trainable_parameters` (axolotl's `unfrozen_parameters`): the patterns read as axolotl reads them, checked
against the checkpoint's tensor names when planning (one that matches nothing is refused by its key), counted for
the memory estimate, refused with LoRA; at the node only the parameters they choose train (the others keep their
checkpoint's values through an optimizer step) and the optimizer holds only those."""

import pytest
import torch
from safetensors.torch import load_file

from compiler.config.recipes import convert
from compiler.planner.estimate import parameter_count
from compiler.planner.summary import summary_lines
from compiler.spec.errors import ConfigError
from compiler.spec.trainable import chosen, name_pattern
from entrypoint.trainer.models import model_spec
from entrypoint.trainer.objective import NextToken
from entrypoint.trainer.optim import adamw
from tests.helpers import plan_for
from tests.pretrained import save_checkpoint

SECOND_BLOCK_MLP = "^model.layers.1.mlp.*"


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return save_checkpoint(tmp_path_factory.mktemp("trainable") / "llama", "llama", vocab=512)


def hf(llama, *overrides: str) -> tuple[str, ...]:
    return ("model=hf", f"model.path={llama}", "model.seq_len=16", *overrides)


def refused(*overrides: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        plan_for(*overrides)
    return caught.value


def test_patterns_read_as_axolotl_reads_them():
    names = ["model.layers.1.mlp.up_proj.weight", "model.layers.12.mlp.up_proj.weight", "model.layersX1.mlp"]
    assert chosen(["model.layers.1.mlp"], names) == ({names[0]}, [])  # a period is a period; from the start
    assert chosen(["model.layers.1.+"], names)[0] == {names[0], names[1]}  # but `.+` is any characters
    assert chosen(["layers.1", "^model.layers.[0-9]+.mlp.up_proj.weight$"], names) == (set(names[:2]), ["layers.1"])
    with pytest.raises(ValueError, match="row range"):
        name_pattern("^model.embed_tokens.weight$[:32000]")
    with pytest.raises(ValueError, match="not a regular expression"):
        name_pattern("model.(layers")


def test_the_plan_counts_what_the_patterns_choose_and_trains_only_their_share(llama):
    tensors = load_file(llama / "model.safetensors")
    mlp = sum(t.numel() for name, t in tensors.items() if name.startswith("model.layers.1.mlp."))
    gpu = ("hardware=p4d.24xlarge",)
    full = plan_for(*hf(llama, *gpu))
    part = plan_for(*hf(llama, *gpu, f"model.trainable_parameters=['{SECOND_BLOCK_MLP}']"))
    assert part.model.trainable_count == mlp > 0
    whole, partial = full.estimate.memory, part.estimate.memory
    assert partial.parameters == whole.parameters
    assert partial.optimizer == pytest.approx(whole.optimizer * mlp / parameter_count(full.model), rel=1e-3)
    assert partial.gradients == pytest.approx(whole.gradients * mlp / parameter_count(full.model), rel=1e-3)
    assert f"trains    {mlp:,} parameters matching {SECOND_BLOCK_MLP}; the rest frozen" in summary_lines(part)


def test_what_the_patterns_cannot_mean_is_refused_by_their_key(llama):
    nothing = refused(*hf(llama, "model.trainable_parameters=['^model.language_model.*']"))
    assert nothing.key == "model.trainable_parameters"
    assert "'^model.language_model.*' matches no tensor of" in nothing.one_line()
    assert "model.layers." in nothing.one_line()  # how the checkpoint's names read
    ranged = refused(*hf(llama, "model.trainable_parameters=['^lm_head.weight$[:10]']"))
    assert "row range" in ranged.one_line()
    lora = refused(*hf(llama, "model.lora.rank=8", f"model.trainable_parameters=['{SECOND_BLOCK_MLP}']"))
    assert lora.key == "model.trainable_parameters" and "LoRA freezes them all" in lora.one_line()
    assert refused("model=tiny", "model.trainable_parameters=[h]").key == "model.trainable_parameters"


def test_only_the_chosen_parameters_change_in_an_optimizer_step(llama):
    plan = plan_for(*hf(llama, f"model.trainable_parameters=['{SECOND_BLOCK_MLP}']", "trainer.lr=1e-2"))
    spec = model_spec(plan.model)
    torch.manual_seed(0)
    model = spec.build(plan.model)
    spec.init_weights(model)
    before = {name: param.detach().clone() for name, param in model.named_parameters()}
    optimizer = adamw(model, plan.trainer)
    inputs = torch.randint(512, (2, 16))
    NextToken(spec, 0).loss(model, inputs, torch.roll(inputs, -1, 1)).backward()
    optimizer.step()
    trained = {name for name, param in model.named_parameters() if not torch.equal(param, before[name])}
    assert trained == {name for name in before if name.startswith("model.layers.1.mlp.")} and len(trained) == 3
    held = [p for group in optimizer.param_groups for p in group["params"]]
    assert len(held) == 3 and all(p.requires_grad for p in held)


def test_convert_ports_unfrozen_parameters_to_a_full_fine_tune_and_leaves_them_out_under_an_adapter():
    patterns = ["^model.language_model.*", "^lm_head.*"]
    full = convert({"base_model": "google/gemma-3-1b-it", "unfrozen_parameters": patterns})
    assert "model.trainable_parameters=['^model.language_model.*','^lm_head.*']" in full.lines()
    assert not full.refused
    adapted = convert({"base_model": "google/gemma-3-1b-it", "unfrozen_parameters": patterns, "adapter": "lora"})
    assert not any(line.startswith("model.trainable_parameters") for line in adapted.lines())
    assert any(note.startswith("unfrozen_parameters: left out under adapter: lora") for note in adapted.notes)
    assert not adapted.refused
