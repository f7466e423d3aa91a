"""The streamed loss (`trainer.loss_chunk`, `entrypoint.trainer.models.loss.token_logps`) against the plain
cross-entropy of the whole logits: the same loss and the same gradients within float32 rounding (relative
1e-5), for the built-in decoder (tied and untied output projection) and a transformers model, the
next-token loss and DPO's log-probabilities; chunk sizes that do not divide the tokens included."""

import pytest
import torch
from torch import nn

from compiler.spec.errors import ConfigError
from compiler.spec.schema import DpoConfig
from entrypoint.trainer.dpo_loss import completion_logps
from entrypoint.trainer.models import model_spec
from entrypoint.trainer.models.loss import IGNORE_INDEX, mean_cross_entropy, mean_negative, token_logps
from entrypoint.trainer.objective import NextToken, Preference
from tests.entrypoint_support import plan_for
from tests.pretrained import save_checkpoint

TOLERANCE = {"rel": 1e-5, "abs": 1e-6}


def targets_with_ignored(vocab: int, shape: tuple[int, int]) -> torch.Tensor:
    targets = torch.randint(vocab, shape)
    targets[:, :3] = IGNORE_INDEX  # a prompt that does not count
    return targets


@pytest.mark.parametrize("chunk", [7, 64, 1000])
def test_token_logps_give_the_plain_cross_entropy_and_its_gradients(chunk):
    torch.manual_seed(0)
    hidden = torch.randn(2, 32, 16, requires_grad=True)
    head = nn.Linear(16, 300, bias=False)
    targets = targets_with_ignored(300, (2, 32))
    plain = mean_cross_entropy(head(hidden), targets)
    plain_grads = torch.autograd.grad(plain, [hidden, head.weight])
    streamed = mean_negative(token_logps(hidden, head, targets, chunk), targets)
    streamed_grads = torch.autograd.grad(streamed, [hidden, head.weight])
    assert streamed.item() == pytest.approx(plain.item(), **TOLERANCE)
    for ours, theirs in zip(streamed_grads, plain_grads, strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)


def model_and_plan(*overrides: str):
    plan = plan_for("experiment=smoke", *overrides)
    spec = model_spec(plan.model)
    torch.manual_seed(0)
    model = spec.build(plan.model)
    spec.init_weights(model)
    return plan, spec, model


def gradients(model: nn.Module, loss: torch.Tensor) -> dict[str, torch.Tensor]:
    named = [(name, param) for name, param in model.named_parameters() if param.requires_grad]
    return dict(zip([name for name, _ in named], torch.autograd.grad(loss, [p for _, p in named]), strict=True))


def assert_same_loss_and_gradients(spec, model, inputs, targets, chunk):
    plain = NextToken(spec, 0).loss(model, inputs, targets)
    streamed = NextToken(spec, chunk).loss(model, inputs, targets)
    assert streamed.item() == pytest.approx(plain.item(), **TOLERANCE)
    plain_grads, streamed_grads = gradients(model, plain), gradients(model, streamed)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(streamed_grads[name], grad, rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.parametrize("tied", ["true", "false"])
def test_the_decoder_trains_on_the_same_loss_streamed(tied):
    plan, spec, model = model_and_plan("model=tiny", "model.layers=1", f"model.tied_embeddings={tied}")
    inputs = torch.randint(plan.model.vocab, (2, 40))
    assert_same_loss_and_gradients(spec, model, inputs, targets_with_ignored(plan.model.vocab, (2, 40)), chunk=24)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    folder = save_checkpoint(tmp_path_factory.mktemp("chunked") / "model", "llama", vocab=512)
    return model_and_plan("model=hf", f"model.path={folder}", "model.seq_len=16")


def test_a_transformers_model_trains_on_the_same_loss_streamed(llama):
    _, spec, model = llama
    inputs = torch.randint(512, (2, 16))
    assert_same_loss_and_gradients(spec, model, inputs, targets_with_ignored(512, (2, 16)), chunk=5)
    assert model(inputs).logits.shape == (2, 16, 512)  # without targets, the logits as before


def test_dpo_log_probabilities_streamed_equal_those_of_the_whole_logits(llama):
    _, _, model = llama
    inputs, targets = torch.randint(512, (2, 16)), targets_with_ignored(512, (2, 16))
    streamed = Preference(DpoConfig(), model, loss_chunk=5)._completions(model, inputs, targets)
    plain = completion_logps(model(inputs).logits, targets)
    torch.testing.assert_close(streamed.logps, plain.logps, rtol=1e-5, atol=1e-5)
    assert streamed.tokens.tolist() == plain.tokens.tolist()


def test_a_negative_chunk_is_refused_with_its_key():
    with pytest.raises(ConfigError) as error:
        plan_for("experiment=smoke", "trainer.loss_chunk=-1")
    assert error.value.key == "trainer.loss_chunk"
