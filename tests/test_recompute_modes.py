"""Activation checkpointing modes: what each keeps for the backward, measured on CPU, against the planner.

The built-in decoder runs a forward pass under PyTorch's MemTracker (every tensor allocation counted); what is
still alive after it, less the logits, is what the backward will read: the planner's activations term."""

import dataclasses

import pytest
import torch
from torch.distributed._tools.mem_tracker import MemTracker

from compiler.planner import estimate
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
