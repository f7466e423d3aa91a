"""The decoder matches the plan's parameter count; data, schedule and DeepSpeed config are what the plan says."""

import numpy as np
import pytest
import torch

from compiler.spec.schema import Checkpointing
from entrypoint.trainer.data.batches import Batches, SyntheticTokens
from entrypoint.trainer.data.windows import TokenFiles
from entrypoint.trainer.engines.zero import deepspeed_config
from entrypoint.trainer.models import MODELS
from entrypoint.trainer.optim import lr_at
from tests.entrypoint_support import plan_for, run_on_two_ranks, tiny_plan

META_INIT = """
import sys, torch, torch.distributed as dist
from compiler.spec import Plan
from entrypoint.trainer.engines import native
from entrypoint.trainer.models import model_spec
from entrypoint.trainer.data.batches import Batches, make_source

plan = Plan.from_json(open(sys.argv[1]).read())
dist.init_process_group("gloo")
native.builds_on_meta = lambda plan: True  # as for a model too large for one GPU
engine = native.TorchEngine(plan, model_spec(plan.model), torch.device("cpu"))
full = engine.full_state_dict()
inputs, targets = Batches(make_source(plan, None), plan, dist.get_rank()).micro_batch(0, 0)
loss = engine.forward_backward([(inputs, targets)]).item()
if dist.get_rank() == 0:
    print("RESULT", loss, full["blocks.0.mlp.up.weight"].std().item(), full["blocks.0.mlp.down.weight"].std().item())
"""


@pytest.mark.parametrize("model", ["tiny", "gpt2-124m", "llama3.2-1b"])
def test_parameter_count_matches_the_plan(model):
    plan = plan_for(
        "experiment=smoke", f"model={model}", "hardware.processes_per_node=2", "hardware.memory_check=false"
    )
    with torch.device("meta"):
        decoder = MODELS["decoder"].build(plan.model)
    assert sum(p.numel() for p in decoder.parameters()) == plan.parameters


@pytest.mark.parametrize("llama", [False, True])
def test_decoder_is_causal(llama):
    overrides = ("model.position=rope", "model.activation=swiglu", "model.norm=rmsnorm", "model.kv_heads=2") * llama
    plan = tiny_plan(*overrides)
    torch.manual_seed(0)
    decoder = MODELS["decoder"].build(plan.model)
    decoder.set_checkpointing(Checkpointing.selective)
    tokens = torch.randint(0, plan.model.vocab, (2, 16))
    changed = tokens.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % plan.model.vocab
    logits, logits_changed = decoder(tokens), decoder(changed)
    assert logits.shape == (2, 16, plan.model.vocab)
    torch.testing.assert_close(logits[:, :10], logits_changed[:, :10])
    assert not torch.allclose(logits[:, 10:], logits_changed[:, 10:])


def test_synthetic_tokens_follow_a_fixed_successor():
    source = SyntheticTokens(vocab=64, seq_len=8, seed=1)
    first, again = source.walks(torch.arange(4)), source.walks(torch.arange(4))
    assert first.shape == (4, 9) and torch.equal(first, again)
    assert torch.equal(source.successor[first[:, :-1]], first[:, 1:])
    inputs, targets = source(torch.arange(4))  # a micro batch: each token's target is the next one
    assert torch.equal(inputs, first[:, :-1]) and torch.equal(targets, first[:, 1:])


def test_ranks_get_disjoint_samples_that_cover_the_global_batch():
    plan = tiny_plan("hardware.processes_per_node=4", "parallelism.micro_batch=2", "parallelism.grad_accum=3")
    seen = []
    for rank in range(4):
        batches = Batches(lambda indices: (indices[:, None].repeat(1, 2), indices[:, None]), plan, rank)
        seen += [int(i) for micro in range(3) for i in batches.micro_batch(step=1, micro=micro)[0][:, 0]]
    assert sorted(seen) == list(range(24, 48))  # step 1 of a 24-sequence global batch


def test_token_files_read_across_file_boundaries(tmp_path):
    np.arange(0, 10, dtype=np.uint16).tofile(tmp_path / "a.bin")
    np.arange(10, 25, dtype=np.uint16).tofile(tmp_path / "b.bin")
    files = TokenFiles(tmp_path, "uint16", seq_len=4, seed=0)
    assert files.windows == 6
    inputs, targets = files(torch.arange(12))
    assert torch.equal(inputs[:, 1:], targets[:, :-1])  # the targets are the inputs shifted by one
    rows = torch.cat([inputs, targets[:, -1:]], dim=1)  # the windows of seq_len + 1 tokens
    starts = sorted(int(row[0]) for row in rows[:6])
    assert starts == [0, 4, 8, 12, 16, 20]  # every window once per epoch, in a seeded order
    assert all(torch.equal(row, torch.arange(row[0], row[0] + 5)) for row in rows)
    assert not torch.equal(rows[:6, 0], rows[6:, 0])  # the next epoch is shuffled afresh


def test_learning_rate_schedule():
    """Pre-training's cosine_to_min: the warm-up reaches lr on its last step, the cosine lr × min_lr_ratio on the
    run's last step (transformers' schedules: tests/test_schedules.py)."""
    plan = tiny_plan("trainer.steps=11", "trainer.warmup_steps=2", "trainer.lr=1.0")
    assert [lr_at(step, plan.trainer, plan.derived) for step in (0, 1, 2)] == [0.5, 1.0, 1.0]
    assert lr_at(10, plan.trainer, plan.derived) == pytest.approx(plan.trainer.min_lr_ratio)


def test_deepspeed_config_from_the_plan():
    plan = plan_for(
        "experiment=llama3-8b-p5x4",
        "data=synthetic",
        "parallelism=zero3",
        "parallelism.offload=parameters",
        "parallelism.tp=1",
    )
    config = deepspeed_config(plan)
    assert config["train_batch_size"] == plan.batch.global_batch
    assert config["train_micro_batch_size_per_gpu"] * config["gradient_accumulation_steps"] * plan.layout.dp == (
        plan.batch.global_batch
    )
    assert config["zero_optimization"]["stage"] == 3
    assert config["zero_optimization"]["offload_param"]["device"] == "cpu"
    assert config["bf16"]["enabled"] and not config["fp16"]["enabled"]


@pytest.mark.torchrun
def test_fsdp_materialises_a_meta_model_shard_by_shard(tmp_path):
    """The path large models take (`engines.base.builds_on_meta`): shard on the meta device, then initialise."""
    plan = tiny_plan("parallelism=fsdp", "model.position=rope", "model.activation=swiglu", "model.norm=rmsnorm")
    loss, std, residual_std = map(float, run_on_two_ranks(META_INIT, plan, tmp_path).split("RESULT ")[1].split())
    assert abs(loss - np.log(plan.model.vocab)) < 0.2  # an initialised model predicts about uniformly
    assert std == pytest.approx(0.02, rel=0.05)
    assert residual_std == pytest.approx(0.02 / (2 * plan.model.layers) ** 0.5, rel=0.05)
