"""dockyard's DPO losses against TRL's `DPOTrainer` (the reference implementation, a test-only dependency): the
same tiny model, batch and options give the same loss, rewards and gradients (fp32, CPU), for every loss type and
with precomputed reference log-probabilities."""

import copy

import pytest
import torch

from compiler.spec.schema import DpoConfig, DpoLoss
from entrypoint.trainer.dpo_loss import Completions, completion_logps, dpo_loss
from entrypoint.trainer.models.loss import IGNORE_INDEX
from tests.pretrained import hf_config, save_tokenizer

TOLERANCE = 1e-5
PAIRS = [  # token ids: prompts and completions of unequal lengths, so padding and per-token means matter
    {"prompt_ids": [5, 9, 14, 3], "chosen_ids": [21, 30, 2], "rejected_ids": [40, 2]},
    {"prompt_ids": [7, 8], "chosen_ids": [11, 12, 13, 2], "rejected_ids": [50, 51, 52, 53, 54, 2]},
    {"prompt_ids": [60, 61, 62], "chosen_ids": [70, 2], "rejected_ids": [71, 72, 2]},
]
OPTIONS = [
    DpoConfig(beta=0.1, loss=DpoLoss.sigmoid),
    DpoConfig(beta=0.5, loss=DpoLoss.hinge),
    DpoConfig(beta=0.3, loss=DpoLoss.ipo),
    DpoConfig(beta=0.2, loss=DpoLoss.robust, label_smoothing=0.1),
]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    folder = save_tokenizer(tmp_path_factory.mktemp("tokenizer"))
    loaded = AutoTokenizer.from_pretrained(folder)
    loaded.pad_token = loaded.eos_token
    return loaded


def tiny_llama(seed: int):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(hf_config("llama"))


def trl_trainer(tmp_path, tokenizer, options: DpoConfig, policy, reference):
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    args = DPOConfig(
        output_dir=str(tmp_path),
        beta=options.beta,
        loss_type=[options.loss.value],
        label_smoothing=options.label_smoothing,
        precompute_ref_log_probs=False,
        gradient_checkpointing=False,
        use_cpu=True,
        bf16=False,
        report_to="none",
    )
    rows = Dataset.from_list([{"prompt": "the 1th run", "chosen": " trains", "rejected": " nodes"}])
    return DPOTrainer(model=policy, ref_model=reference, args=args, train_dataset=rows, processing_class=tokenizer)


def dockyard_side(policy, reference, batch: dict, options: DpoConfig, precomputed: tuple | None):
    """TRL's padded batch ([chosen; rejected] rows) as dockyard's trainer sees it: inputs and shifted targets,
    the prompt and the padding no targets."""
    ids, completion = batch["input_ids"], batch["completion_mask"]
    inputs, targets = ids[:, :-1], ids[:, 1:].masked_fill(completion[:, 1:] == 0, IGNORE_INDEX)
    policy_side = completion_logps(policy(inputs).logits, targets)
    if precomputed is None:
        with torch.no_grad():
            reference_logps = completion_logps(reference(inputs).logits, targets).logps
        precomputed = reference_logps.chunk(2)
    half = len(PAIRS)
    chosen = Completions(policy_side.logps[:half], policy_side.tokens[:half])
    rejected = Completions(policy_side.logps[half:], policy_side.tokens[half:])
    return dpo_loss(chosen, rejected, *precomputed, options)


def gradients(model) -> dict[str, torch.Tensor]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a.float(), b.float(), atol=TOLERANCE, rtol=TOLERANCE)


@pytest.mark.parametrize("precompute", [False, True], ids=["reference-model", "precomputed"])
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: o.loss.value)
def test_loss_rewards_and_gradients_equal_trl(tmp_path, tokenizer, options, precompute):
    policy, reference = tiny_llama(seed=1), tiny_llama(seed=2)
    ours, ours_reference = copy.deepcopy(policy), copy.deepcopy(reference)
    trainer = trl_trainer(tmp_path, tokenizer, options, policy, reference)
    batch = trainer.data_collator.torch_call(PAIRS)
    precomputed = None
    if precompute:  # TRL reads them from the batch (`precompute_ref_log_probs`); any values do for the comparison
        trainer.precompute_ref_logps = True
        precomputed = (torch.tensor([-20.5, -31.0, -9.25]), torch.tensor([-18.0, -40.75, -12.5]))
        batch = batch | {"ref_chosen_logps": precomputed[0], "ref_rejected_logps": precomputed[1]}

    trainer.model.train()
    trl_loss = trainer.compute_loss(trainer.model, batch)
    trl_loss.backward()
    trl_metrics = {name: values[-1] for name, values in trainer._metrics["train"].items()}

    loss, metrics = dockyard_side(ours, ours_reference, batch, options, precomputed)
    loss.backward()

    assert abs(loss.item() - trl_loss.item()) <= TOLERANCE * max(1.0, abs(trl_loss.item()))
    for ours_name, trl_name in [
        ("rewards/chosen", "rewards/chosen"),
        ("rewards/rejected", "rewards/rejected"),
        ("rewards/margin", "rewards/margins"),
        ("rewards/accuracy", "rewards/accuracies"),
        ("logps/chosen", "logps/chosen"),
        ("logps/rejected", "logps/rejected"),
    ]:
        assert metrics[ours_name].item() == pytest.approx(trl_metrics[trl_name], abs=TOLERANCE, rel=TOLERANCE)
    theirs, mine = gradients(trainer.model), gradients(ours)
    assert theirs.keys() == mine.keys() and len(mine) > 10
    assert all(close(mine[name], theirs[name]) for name in mine), max(
        (mine[n] - theirs[n]).abs().max().item() for n in mine
    )
    assert any(grad.abs().max() > 1e-4 for grad in mine.values())  # the comparison is of real gradients


def test_a_policy_equal_to_its_reference_has_zero_rewards_and_the_loss_log_2():
    logps = Completions(torch.tensor([-3.0, -5.0]), torch.tensor([2, 4]))
    loss, metrics = dpo_loss(logps, logps, logps.logps, logps.logps, DpoConfig())
    assert loss.item() == pytest.approx(0.6931472)
    assert metrics["rewards/margin"].item() == 0 and metrics["rewards/accuracy"].item() == 0


def test_completion_logps_count_only_the_targets():
    logits = torch.zeros(1, 3, 4)  # uniform over 4 tokens: each target costs log 4
    targets = torch.tensor([[IGNORE_INDEX, 2, 3]])
    result = completion_logps(logits, targets)
    assert result.tokens.tolist() == [2]
    assert result.logps.item() == pytest.approx(-2 * torch.log(torch.tensor(4.0)).item())
