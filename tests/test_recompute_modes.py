"""Activation checkpointing modes: what each keeps for the backward, measured on CPU, against the planner.

The built-in decoder runs a forward pass under PyTorch's MemTracker (every tensor allocation counted); what is
still alive after it, less the logits, is what the backward will read: the planner's activations term."""

import dataclasses

import pytest
import torch
from torch.distributed._tools.mem_tracker import MemTracker

from compiler.planner import estimate
from compiler.planner.summary import summary_lines
from compiler.spec.errors import ConfigError
from compiler.spec.schema import Checkpointing
from entrypoint.trainer.models import MODELS
from tests.helpers import plan_for

LLAMA_SMALL = (
    "model=tiny", "model.hidden=256", "model.ffn_hidden=704", "model.vocab=512", "model.activation=swiglu",
    "model.norm=rmsnorm", "model.position=rope", "model.bias=false", "model.kv_heads=2",
    "model.tied_embeddings=false", "model.seq_len=256", "model.layers=4", "parallelism.mixed_precision=fp32",
)  # fmt: skip


@pytest.fixture(scope="module")
def llama():
    plan = plan_for("experiment=smoke", *LLAMA_SMALL)
    torch.manual_seed(0)
    return plan, torch.randint(0, plan.model.vocab, (2, plan.model.seq_len))


def _kept_after_forward(plan, tokens, mode: Checkpointing) -> int:
    torch.manual_seed(0)
    decoder = MODELS["decoder"].build(plan.model).train()
    decoder.set_checkpointing(mode)
    cpu = torch.device("cpu")
    with MemTracker() as tracker:
        tracker.track_external(decoder)
        before = tracker.get_tracker_snapshot("current")[cpu]["Total"]
        logits = decoder(tokens)
        after = tracker.get_tracker_snapshot("current")[cpu]["Total"]
    return after - before - logits.numel() * logits.element_size()


def _predicted(plan, tokens, mode: Checkpointing) -> float:
    par = dataclasses.replace(plan.parallelism, activation_checkpointing=mode)
    per_token = estimate.activation_bytes_per_token(plan.model, par, tp=1)["layer"]
    return tokens.numel() * (plan.model.layers * per_token + plan.model.hidden * 4)


def test_each_mode_keeps_what_the_planner_predicts_relative_to_none(llama):
    """The planner's ratio between modes is the measured one within 10%: op-level selective keeps about a third
    of what no checkpointing keeps, the attention-only mode nearly all of it."""
    plan, tokens = llama
    measured = {mode: _kept_after_forward(plan, tokens, mode) for mode in Checkpointing}
    predicted = {mode: _predicted(plan, tokens, mode) for mode in Checkpointing}
    for mode in (Checkpointing.attention, Checkpointing.selective):
        ratio, expected = measured[mode] / measured[Checkpointing.none], predicted[mode] / predicted[Checkpointing.none]
        assert ratio == pytest.approx(expected, rel=0.10), mode
    assert measured[Checkpointing.selective] < 0.45 * measured[Checkpointing.none]
    assert measured[Checkpointing.full] < measured[Checkpointing.selective] < measured[Checkpointing.attention]
    assert measured[Checkpointing.selective] == pytest.approx(predicted[Checkpointing.selective], rel=0.15)


def test_op_level_recomputation_gives_the_gradients_of_none(llama):
    plan, tokens = llama
    gradients = {}
    for mode in (Checkpointing.none, Checkpointing.selective):
        torch.manual_seed(0)
        decoder = MODELS["decoder"].build(plan.model).train()
        decoder.set_checkpointing(mode)
        decoder(tokens).float().logsumexp(-1).mean().backward()
        gradients[mode] = [p.grad for p in decoder.parameters()]
    for plain, recomputed in zip(gradients[Checkpointing.none], gradients[Checkpointing.selective], strict=True):
        torch.testing.assert_close(recomputed, plain)


def _kept(model, tokens, forward) -> int:
    """Bytes a forward pass leaves alive for the backward, less its logits."""
    cpu = torch.device("cpu")
    with MemTracker() as tracker:
        tracker.track_external(model)
        before = tracker.get_tracker_snapshot("current")[cpu]["Total"]
        logits = forward(model, tokens)
        after = tracker.get_tracker_snapshot("current")[cpu]["Total"]
    return after - before - logits.numel() * logits.element_size()


def _predicted_every(plan, tokens, every: int) -> float:
    par = dataclasses.replace(
        plan.parallelism, activation_checkpointing=Checkpointing.full, activation_checkpointing_every=every
    )
    per_token = estimate.activation_bytes_per_token(plan.model, par, tp=1)["layer"]
    return tokens.numel() * (plan.model.layers * per_token + plan.model.hidden * 4)


def test_every_other_block_recomputed_keeps_what_the_planner_predicts(llama):
    """Full recomputation of blocks 0 and 2 of 4 (torchtitan's selective_ac_option=2): what it keeps for the
    backward against what no checkpointing keeps is the planner's ratio within 10%, halfway to full's."""
    plan, tokens = llama

    def kept(mode: Checkpointing, every: int = 1) -> int:
        torch.manual_seed(0)
        decoder = MODELS["decoder"].build(plan.model).train()
        decoder.set_checkpointing(mode, every)
        return _kept(decoder, tokens, lambda model, batch: model(batch))

    every_other, none, full = kept(Checkpointing.full, 2), kept(Checkpointing.none), kept(Checkpointing.full)
    expected = _predicted_every(plan, tokens, 2) / _predicted(plan, tokens, Checkpointing.none)
    assert every_other / none == pytest.approx(expected, rel=0.10)
    assert (every_other - full) / (none - full) == pytest.approx(0.5, rel=0.10)  # half keep all, half their input


def test_every_other_block_recomputed_gives_the_gradients_of_none(llama):
    plan, tokens = llama
    model, tokens = dataclasses.replace(plan.model, layers=2, seq_len=64), tokens[:, :64]  # block 0 recomputed, 1 not
    gradients = []
    for mode, every in ((Checkpointing.none, 1), (Checkpointing.full, 2)):
        torch.manual_seed(0)
        decoder = MODELS["decoder"].build(model).train()
        decoder.set_checkpointing(mode, every)
        decoder(tokens).float().logsumexp(-1).mean().backward()
        gradients.append([p.grad for p in decoder.parameters()])
    for plain, recomputed in zip(*gradients, strict=True):
        torch.testing.assert_close(recomputed, plain)


def test_a_hugging_face_model_recomputes_every_other_layer_as_the_planner_counts(tmp_path):
    """model=hf through transformers' every_n_layers: 2 of 4 decoder layers recomputed keep halfway between full
    recomputation and none, as the planner's estimate has it."""
    from tests.pretrained import save_checkpoint

    folder = save_checkpoint(tmp_path / "llama", "llama", num_hidden_layers=4, hidden_size=128, intermediate_size=256)
    plan = plan_for("experiment=smoke", "model=hf", f"model.path={folder}", "model.seq_len=128")
    spec, tokens = MODELS["hf"], torch.randint(0, plan.model.vocab, (2, plan.model.seq_len))

    def kept(mode: Checkpointing, every: int = 1) -> int:
        torch.manual_seed(0)
        model = spec.build(plan.model).train()
        spec.set_checkpointing(model, mode, every)
        return _kept(model, tokens, lambda model, batch: model(batch).logits)

    full, none, every_other = kept(Checkpointing.full), kept(Checkpointing.none), kept(Checkpointing.full, 2)
    predicted = [_predicted_every(plan, tokens, every) for every in (1, 2)]
    predicted_none = _predicted(plan, tokens, Checkpointing.none)
    measured_ratio = (every_other - full) / (none - full)
    assert measured_ratio == pytest.approx((predicted[1] - predicted[0]) / (predicted_none - predicted[0]), rel=0.10)
    assert 0.4 < measured_ratio < 0.6


def test_the_plan_of_every_other_block_lies_between_none_and_full_and_says_so():
    """Llama 3 8B on 8 H100s: memory, step time and the summary line of activation_checkpointing_every=2."""
    common = ("model=llama3-8b", "hardware=p5.48xlarge", "parallelism=fsdp", "hardware.memory_check=false")
    plans = {
        name: plan_for(*common, *overrides)
        for name, overrides in {
            "none": ["parallelism.activation_checkpointing=none"],
            "full": ["parallelism.activation_checkpointing=full"],
            "every 2": ["parallelism.activation_checkpointing=full", "parallelism.activation_checkpointing_every=2"],
        }.items()
    }
    activations = {name: plan.estimate.memory.activations for name, plan in plans.items()}
    steps = {name: plan.estimate.throughput.step_seconds for name, plan in plans.items()}
    assert activations["full"] < activations["every 2"] < activations["none"]
    assert steps["none"] < steps["every 2"] < steps["full"]
    assert "checkpointing full every 2 blocks" in "\n".join(summary_lines(plans["every 2"]))


@pytest.mark.parametrize(
    "overrides",
    [
        ["parallelism.activation_checkpointing=selective", "parallelism.activation_checkpointing_every=2"],
        ["parallelism.activation_checkpointing=full", "parallelism.activation_checkpointing_every=0"],
        ["parallelism.activation_checkpointing=full", "parallelism.activation_checkpointing_every=2",
         "parallelism.activation_offload=true", "parallelism=fsdp"],
    ],
    ids=["not-full", "zero", "offload"],
)  # fmt: skip
def test_an_every_that_cannot_work_is_refused_naming_its_key(overrides):
    with pytest.raises(ConfigError) as refused:
        plan_for("experiment=smoke", *overrides)
    assert refused.value.key == "parallelism.activation_checkpointing_every"
