"""The trainer's DPO objective (`entrypoint.trainer.objective`) on a tiny saved model, in-process: the reference is
the starting weights (the base model under LoRA, a frozen copy without), the micro batch's rows are chosen then
rejected, and the metrics are the means since they were last read."""

import pytest
import torch

from compiler.spec.schema import DpoConfig
from entrypoint.trainer.data.preference import PreferencePairs
from entrypoint.trainer.dpo_loss import Completions, completion_logps, dpo_loss
from entrypoint.trainer.models import model_spec
from entrypoint.trainer.models.loss import IGNORE_INDEX
from entrypoint.trainer.objective import NextToken, Preference, make_objective
from tests.entrypoint_support import plan_for
from tests.pretrained import save_checkpoint
from tests.test_text_data import hand_made_split
from tests.text_corpus import train_tokenizer, write_jsonl


@pytest.fixture(scope="module")
def dpo_overrides(tmp_path_factory) -> tuple[str, ...]:
    root = tmp_path_factory.mktemp("dpo")
    model = save_checkpoint(root / "model", "llama", vocab=512)
    train_tokenizer(model)
    write_jsonl(root / "data/train.jsonl", [{"prompt": "say: hi\n", "chosen": "hi.", "rejected": "hi!"}])
    data = ("data=local", f"data.path={root / 'data'}", "data.format=preference", "trainer.objective=dpo")
    return ("experiment=smoke", "model=hf", f"model.path={model}", "model.seq_len=16", *data)


def built(plan):
    spec = model_spec(plan.model)
    model = spec.build(plan.model)
    spec.init_weights(model)
    return spec, model


BATCH = torch.tensor([[3, 4, 5, 6], [3, 4, 7, 8]])  # one pair: the chosen row, then the rejected row
TARGETS = torch.tensor([[IGNORE_INDEX, 5, 6, 9], [IGNORE_INDEX, 7, 8, 9]])


def test_under_lora_the_reference_is_the_base_model_with_the_adapters_disabled(dpo_overrides):
    plan = plan_for(*dpo_overrides, "model.lora.rank=8")
    spec, model = built(plan)
    objective = make_objective(plan, spec, model)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            param.data.normal_(0, 0.5)  # a trained adapter: the policy now differs from its base
    with torch.no_grad(), model.disable_adapter():
        base = completion_logps(model(BATCH).logits, TARGETS).logps
    policy = completion_logps(model(BATCH).logits, TARGETS)
    assert not torch.allclose(policy.logps, base)
    loss = objective.loss(model, BATCH, TARGETS)
    expected, metrics = dpo_loss(
        Completions(policy.logps[:1], policy.tokens[:1]),
        Completions(policy.logps[1:], policy.tokens[1:]),
        base[:1],
        base[1:],
        plan.trainer.dpo,
    )
    assert loss.item() == pytest.approx(expected.item(), abs=1e-6)
    assert objective.metrics()["rewards/margin"] == pytest.approx(metrics["rewards/margin"].item(), abs=1e-6)
    assert objective.metrics() == {}  # read once


def test_without_lora_the_reference_is_a_frozen_copy_of_the_starting_weights(dpo_overrides):
    plan = plan_for(*dpo_overrides)
    spec, model = built(plan)
    objective = make_objective(plan, spec, model)
    assert isinstance(objective, Preference)
    assert objective.loss(model, BATCH, TARGETS).item() == pytest.approx(0.6931472)  # the policy is its reference
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.01)
    assert all(not p.requires_grad for p in objective.reference.parameters())  # never trained
    assert objective.loss(model, BATCH, TARGETS).item() != pytest.approx(0.6931472)


def test_sft_keeps_the_next_token_loss(dpo_overrides):
    plan = plan_for(*dpo_overrides[:4])
    spec, model = built(plan)
    objective = make_objective(plan, spec, model)
    assert isinstance(objective, NextToken)
    assert objective.loss(model, BATCH, TARGETS).item() == pytest.approx(spec.loss(model(BATCH), TARGETS).item())
    assert DpoConfig() == plan.trainer.dpo


@pytest.fixture
def one_rank(tmp_path):
    """A process group of this process alone: `precompute` gathers every rank's share."""
    store = torch.distributed.FileStore(str(tmp_path / "store"), 1)
    torch.distributed.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    torch.distributed.destroy_process_group()


def test_precomputed_reference_log_probabilities_give_the_same_loss(dpo_overrides, one_rank, tmp_path):
    plan = plan_for(*dpo_overrides, "trainer.dpo.precompute_reference=true")
    spec, model = built(plan)
    live, precomputed = make_objective(plan, spec, model), make_objective(plan, spec, model)
    docs = [[3, 4, 5, 6], [3, 4, 7, 8], [9, 10, 11], [9, 12, 13, 14, 15]]  # two pairs
    hand_made_split(tmp_path / "train", docs, [[0, 1, 1, 1], [0, 1, 1, 1], [0, 1, 1], [0, 1, 1, 1, 1]])
    pairs = PreferencePairs(tmp_path / "train", seq_len=4, seed=0, eos=0)
    precomputed.precompute(pairs.every_pair(rank=0, ranks=1, micro=1))
    assert precomputed.reference is None and len(precomputed.precomputed) == 4
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.01)  # trained: the policy moves, the reference must not
    inputs, targets = pairs(torch.tensor([0, 1]))
    assert precomputed.loss(model, inputs, targets).item() == pytest.approx(live.loss(model, inputs, targets).item())
    assert live.loss(model, inputs, targets).item() != pytest.approx(0.6931472)


def test_every_pair_is_computed_once_over_the_ranks_in_as_many_micro_batches(tmp_path):
    docs = [[3, 4], [3, 5]] * 5  # five pairs
    hand_made_split(tmp_path / "train", docs, [[0, 1]] * 10)
    pairs = PreferencePairs(tmp_path / "train", seq_len=4, seed=0, eos=0)
    shares = [list(pairs.every_pair(rank, ranks=2, micro=2)) for rank in (0, 1)]
    assert [len(share) for share in shares] == [2, 2]  # ranks 0 and 1 hold pairs 0 2 4 and 1 3
    assert [len(inputs) for inputs, _ in shares[0]] == [4, 2] and [len(inputs) for inputs, _ in shares[1]] == [4, 2]


def test_beside_fsdp_the_reference_is_a_frozen_copy_sharded_as_the_policy(dpo_overrides, one_rank):
    from torch.distributed.tensor import DTensor

    from entrypoint.trainer.engines.native import TorchEngine

    one = ("parallelism=fsdp", "hardware.nodes=1", "hardware.processes_per_node=1", "parallelism.mixed_precision=fp32")
    plan = plan_for(*dpo_overrides, *one)
    engine = TorchEngine(plan, model_spec(plan.model), torch.device("cpu"))
    reference = engine.objective.reference
    assert all(isinstance(p, DTensor) and not p.requires_grad for p in reference.parameters())
    assert engine.objective.loss(engine.model, BATCH, TARGETS).item() == pytest.approx(0.6931472)  # starts equal
    engine.forward_backward([(BATCH, TARGETS)])
    engine.step(lr=1e-3)
    assert engine.objective.loss(engine.model, BATCH, TARGETS).item() < 0.6931  # the policy moved, its reference not
