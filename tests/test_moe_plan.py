"""Mixtures of experts, planned from the real config.json of six checkpoints (tests/data/moe/SOURCES.md): the
planner's total and active parameters against the model transformers builds from the same file (meta device),
the MoE experiment's plan, and what expert parallelism (`parallelism.ep`) does to memory and to the step."""

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from compiler.config.compose import compose_config
from compiler.planner import estimate, speed
from compiler.planner.fit import _candidates
from compiler.planner.models import family, model_facts
from compiler.spec import Layout
from compiler.spec.schema import Strategy
from tests.helpers import plan_for

DOCKYARD = str(Path(sys.executable).parent / "dockyard")
CHECKPOINTS = Path(__file__).parent / "data" / "moe"
NAMES = sorted(folder.name for folder in CHECKPOINTS.iterdir() if folder.is_dir())
ROUTED = re.compile(r"\.mlp\.experts\.")
"""transformers' routed experts (fused `mlp.experts.gate_up_proj`...), not the shared ones (`shared_expert(s)`)."""
EXPERIMENT = "experiment=qwen3-30b-a3b-p5x2"


def model_of(name: str):
    return compose_config(("model=hf", f"model.path={CHECKPOINTS / name}", "model.seq_len=512")).model


def built_by_transformers(name: str) -> tuple[int, int]:
    """(total, active) parameters of transformers' model from the same config.json: active counts a token's
    experts_per_token of the routed experts. The quantization is the checkpoint's storage, not the trained
    layout, and auto_map names remote code transformers has built in."""
    config = json.loads((CHECKPOINTS / name / "config.json").read_text())
    config = {key: value for key, value in config.items() if key not in ("quantization_config", "auto_map")}
    with torch.device("meta"):
        module = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    total = sum(p.numel() for p in module.parameters())
    routed = sum(p.numel() for name, p in module.named_parameters() if ROUTED.search(name))
    model = model_of(name)
    return total, round(total - routed * (1 - model.moe.experts_per_token / model.moe.experts))


def test_the_six_checkpoints_are_the_six_architectures():
    assert {model_of(name).architecture for name in NAMES} == {
        "mixtral",
        "qwen2_moe",
        "qwen3_moe",
        "olmoe",
        "gpt_oss",
        "deepseek_v3",
    }


@pytest.mark.parametrize("name", NAMES)
def test_total_and_active_parameters_are_transformers(name):
    total, active = built_by_transformers(name)
    facts = model_facts(model_of(name))
    assert facts.total == pytest.approx(total, rel=0.005)
    assert facts.active_parameters == pytest.approx(active, rel=0.02)
    assert facts.active_parameters < facts.total / 2  # every one of them is sparse


@pytest.mark.parametrize("model_type", ["mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "gpt_oss", "deepseek_v3"])
def test_a_tiny_checkpoint_saved_by_transformers_counts_as_built(model_type, tmp_path):
    """transformers 5 writes some keys under other names than the Hub's files (Qwen's num_experts as
    num_local_experts): what `save_pretrained` writes plans too, to the parameter."""
    shape = {"hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 32, "num_hidden_layers": 3}
    shape |= {"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 128}
    shape |= {"num_experts": 8, "num_local_experts": 8, "n_routed_experts": 8, "num_experts_per_tok": 2}
    shape |= {"first_k_dense_replace": 1, "q_lora_rank": 24, "kv_lora_rank": 16, "n_shared_experts": 1}
    shape |= {"qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8, "n_group": 1, "topk_group": 1}
    config = AutoConfig.for_model(model_type, **shape)
    config.save_pretrained(tmp_path)
    with torch.device("meta"):
        module = AutoModelForCausalLM.from_config(config)
    model = compose_config(("model=hf", f"model.path={tmp_path}", "model.seq_len=64")).model
    assert model_facts(model).total == sum(p.numel() for p in module.parameters())


def test_the_shapes_config_json_gives():
    deepseek, qwen2 = model_of("DeepSeek-V3"), model_of("Qwen1.5-MoE-A2.7B")
    assert (deepseek.moe.experts, deepseek.moe.experts_per_token, deepseek.moe.dense_layers) == (256, 8, 3)
    assert deepseek.moe.shared_ffn_hidden == 2048 and deepseek.mla.kv_lora_rank == 512
    assert (qwen2.moe.shared_ffn_hidden, qwen2.moe.shared_gate, qwen2.moe.dense_layers) == (5632, True, 0)
    assert model_of("gpt-oss-20b").moe.biased and model_of("Mixtral-8x7B-v0.1").moe.experts == 8


@pytest.mark.parametrize(("name", "method"), [("gpt-oss-20b", "mxfp4"), ("DeepSeek-V3", "fp8")])
def test_a_quantized_checkpoint_is_planned_as_bf16_with_a_warning(name, method):
    model = model_of(name)
    warnings = list(family(model).check(model))
    assert model.quantization == method
    assert any(f"{method}-quantized" in warning and "bf16" in warning for warning in warnings)


def test_the_moe_experiment_plans_both_counts_without_the_network():
    plan = plan_for(EXPERIMENT)
    total, active = built_by_transformers("Qwen3-30B-A3B")
    assert (plan.parameters, plan.active_parameters) == (total, active)
    assert plan.layout.ep == 8
    # FLOPs from the active parameters: 6 × those a token is multiplied by, not 6 × all 30.5B
    assert 6 * (active - plan.model.vocab * plan.model.hidden) < plan.derived.flops_per_token < 6 * active * 1.5
    assert plan.estimate is not None and plan.estimate.memory.total < 80 * 2**30


def test_the_summary_shows_total_and_active(tmp_path):
    result = subprocess.run(
        [DOCKYARD, "plan", EXPERIMENT, f"hydra.run.dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "30,532.1M parameters (3,353.0M active: 8 of 128 experts per token, ep=8)" in result.stdout


def test_ep_three_of_eight_experts_is_one_line_exit_2(tmp_path):
    mixtral = CHECKPOINTS / "Mixtral-8x7B-v0.1"
    args = [EXPERIMENT, f"model.path={mixtral}", "hardware.nodes=3", "parallelism.ep=3", f"hydra.run.dir={tmp_path}"]
    result = subprocess.run(
        [DOCKYARD, "plan", *args], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "parallelism.ep" in result.stderr and "divides 8" in result.stderr


def memory_at(plan, ep: int, strategy: str | None = None) -> estimate.Memory:
    par, layout = plan.parallelism, dataclasses.replace(plan.layout, ep=ep)
    if strategy is not None:  # a replicated strategy shards nothing
        par = dataclasses.replace(par, strategy=Strategy(strategy))
        layout = dataclasses.replace(layout, shard_degree=1)
    return estimate.memory(plan.model, par, layout, plan.batch.micro_batch)


def test_ep_splits_the_experts_where_nothing_else_shards_them():
    """DDP replicates every weight: ep=8 leaves each GPU 1/8 of the routed experts and their states. FSDP
    already shards them over its 16 ranks, which ep borrows: the states per GPU stay."""
    plan = plan_for(EXPERIMENT)
    facts = model_facts(plan.model)
    ddp_one, ddp_eight = memory_at(plan, 1, "ddp"), memory_at(plan, 8, "ddp")
    routed = facts.parameters.routed_experts
    assert ddp_one.parameters - ddp_eight.parameters == pytest.approx(4 * routed * 7 / 8, rel=1e-6)
    assert ddp_one.optimizer - ddp_eight.optimizer == pytest.approx(8 * routed * 7 / 8, rel=1e-6)
    fsdp_one, fsdp_eight = memory_at(plan, 1), memory_at(plan, 8)
    assert fsdp_eight.parameters == pytest.approx(fsdp_one.parameters, rel=1e-6)


def test_the_step_pays_for_the_dispatch_and_more_across_nodes():
    plan = plan_for(EXPERIMENT)
    sequences = plan.batch.tokens_per_step // (plan.batch.seq_len * plan.layout.dp)
    share = estimate.Share.whole(plan.model)

    def dispatch(ep: int) -> float:
        layout: Layout = dataclasses.replace(plan.layout, ep=ep)
        return speed.expert_parallel_seconds(plan.model, plan.instance, layout, sequences, share)

    assert dispatch(1) == 0 < dispatch(2) < dispatch(8) < dispatch(16)
    assert dispatch(16) / dispatch(8) > 2  # ep=16 leaves the node: the network, not NVLink


def test_the_fit_search_tries_ep_on_a_model_with_experts_only():
    moe = compose_config((EXPERIMENT, "parallelism.ep=1"))
    dense = compose_config(("experiment=llama3-8b-p5x4",))
    assert [change for change, _ in _candidates(moe) if "ep=" in change] == [
        "parallelism.ep=2",
        "parallelism.ep=4",
        "parallelism.ep=8",
    ]
    assert not [change for change, _ in _candidates(dense) if "ep=" in change]
