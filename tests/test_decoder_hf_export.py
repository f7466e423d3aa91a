"""The built-in decoder's final model in Hugging Face format: transformers' `AutoModelForCausalLM` loads the
files the weights format writes and computes the built-in module's logits (fp32, `hf_support.ATOL`; without
the q/k row reordering the Llama logits are 0.4 off), from one file and from shards; the format reads back
exactly what it wrote; generation_config.json is what transformers makes of the config; a shape with no
transformers architecture keeps model.pt.

All offline: the models are built from the tiny plan's shapes and random weights, nothing is downloaded."""

import json

import pytest
import torch
from transformers import AutoConfig, GenerationConfig

from entrypoint.trainer.models import MODELS
from entrypoint.trainer.models.decoder_hf import DecoderWeights
from entrypoint.trainer.models.weights import MODEL_FILE, SAFETENSORS_FILE, SAFETENSORS_INDEX
from tests.entrypoint_support import LLAMA_STYLE, tiny_plan
from tests.hf_support import assert_transformers_logits

SHAPES = {
    "gpt2": ("GPT2LMHeadModel", ()),
    "gpt2-untied": ("GPT2LMHeadModel", ("model.tied_embeddings=false",)),
    "llama-gqa": ("LlamaForCausalLM", LLAMA_STYLE),
    "llama-gqa-tied": ("LlamaForCausalLM", (*LLAMA_STYLE, "model.tied_embeddings=true")),
    "llama-bias-theta": ("LlamaForCausalLM", (*LLAMA_STYLE, "model.bias=true", "model.rope_theta=500000")),
}
"""Shapes of the tiny model (4 layers, hidden 128, 4 heads, vocab 2048) → the architecture each exports as."""
SPEC = MODELS["decoder"]
ONE_FILE_EXPORT = ["config.json", "generation_config.json", SAFETENSORS_FILE]
SMALL_SHARDS = 400_000
"""Bytes: the tiny model's ~4 MB of fp32 weights in about ten shards."""


def random_decoder(*overrides: str) -> tuple[torch.nn.Module, dict]:
    """The built-in decoder with every parameter random (norms' and biases' too, so that a misplaced one
    shows), in eval mode, and the plan's `model` section."""
    plan = tiny_plan(*overrides)
    torch.manual_seed(0)
    module = SPEC.build(plan.model).eval()
    with torch.no_grad():
        for param in module.parameters():
            param.normal_(std=0.2)
    return module, plan.to_dict()["model"]


@pytest.mark.parametrize("shape", SHAPES)
def test_transformers_loads_the_export_with_the_built_in_logits(shape, tmp_path):
    architecture, overrides = SHAPES[shape]
    module, config = random_decoder(*overrides)
    SPEC.weights.save(tmp_path, module.state_dict(), config)
    written = json.loads((tmp_path / "config.json").read_text())
    assert written["architectures"] == [architecture]
    generation = GenerationConfig.from_pretrained(tmp_path).to_diff_dict()
    assert generation == GenerationConfig.from_model_config(AutoConfig.from_pretrained(tmp_path)).to_diff_dict()
    assert sorted(path.name for path in tmp_path.iterdir()) == ONE_FILE_EXPORT
    assert_transformers_logits(module, tmp_path)


@pytest.mark.parametrize("shape", ["gpt2-untied", "llama-gqa-tied"])
def test_a_sharded_export_loads_and_reads_back_exactly(shape, tmp_path):
    module, config = random_decoder(*SHAPES[shape][1])
    state = module.state_dict()
    DecoderWeights(shard_size=SMALL_SHARDS).save(tmp_path, state, config)
    shards = sorted(path.name for path in tmp_path.glob("model-*.safetensors"))
    assert len(shards) > 2 and shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    assert (tmp_path / SAFETENSORS_INDEX).exists() and not (tmp_path / SAFETENSORS_FILE).exists()
    assert_transformers_logits(module, tmp_path)
    loaded = SPEC.weights.load(tmp_path)
    assert loaded.keys() == state.keys()
    for name, value in state.items():
        assert torch.equal(loaded[name], value), name


def test_an_export_replaces_the_previous_one_in_the_folder(tmp_path):
    """A rerun writing into the same folder: the earlier export's shards and index go, so that the folder
    holds one model; no `.partial` folder is left behind."""
    module, config = random_decoder()
    DecoderWeights(shard_size=SMALL_SHARDS).save(tmp_path, module.state_dict(), config)
    SPEC.weights.save(tmp_path, module.state_dict(), config)
    assert sorted(path.name for path in tmp_path.iterdir()) == ONE_FILE_EXPORT


@pytest.mark.parametrize("overrides", [("model.position=rope",), ("model.bias=false",), ("model.kv_heads=2",)])
def test_a_shape_without_a_transformers_architecture_keeps_model_pt(overrides, tmp_path):
    module, config = random_decoder(*overrides)
    state = module.state_dict()
    SPEC.weights.save(tmp_path, state, config)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["config.json", MODEL_FILE]
    loaded = SPEC.weights.load(tmp_path)
    assert loaded.keys() == state.keys() and all(torch.equal(loaded[name], state[name]) for name in state)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_planner_does_not_warn_of_a_shape_that_exports(shape):
    assert not any("transformers" in warning for warning in tiny_plan(*SHAPES[shape][1]).warnings)


def test_the_planner_warns_in_one_line_that_a_shape_keeps_model_pt():
    warnings = [warning for warning in tiny_plan("model.position=rope").warnings if "transformers" in warning]
    assert len(warnings) == 1 and "position=rope" in warnings[0] and "model.pt" in warnings[0], warnings


def test_an_export_that_fails_midway_leaves_the_previous_one_whole(tmp_path):
    """A tensor that cannot be written (a meta tensor) fails the export while its files are being written:
    the folder still holds the previous export, complete, and the new files only in `.partial`."""
    module, config = random_decoder()
    state = module.state_dict()
    SPEC.weights.save(tmp_path, state, config)
    broken = dict(state) | {"blocks.3.mlp.down.weight": torch.empty(128, 512, device="meta")}
    with pytest.raises(NotImplementedError, match="meta tensor"):
        SPEC.weights.save(tmp_path, broken, config)
    assert sorted(path.name for path in tmp_path.iterdir()) == [".partial", *ONE_FILE_EXPORT]
    assert_transformers_logits(module, tmp_path)
