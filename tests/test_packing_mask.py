"""`data.packing_mask=true`: a packed window carries each token's position in its document, and the models
attend inside documents only, so a window of several documents gives each document the logits it has alone.
(Exact resume with the mask: tests/test_entrypoint_text_data.py, the chat run.)"""

import numpy as np
import pytest
import torch

from compiler.spec.errors import ConfigError
from entrypoint.trainer.data.cache import _write_split
from entrypoint.trainer.data.windows import PackedDocuments
from entrypoint.trainer.models import MODELS
from entrypoint.trainer.models.loss import IGNORE_INDEX
from entrypoint.trainer.models.packed import packed, unpacked
from tests.entrypoint_support import tiny_plan
from tests.helpers import plan_for

ATOL = 1e-5
"""fp32 logits of magnitude ~1: the masked window and the lone document differ only in the order the kernels
sum (the masked keys weigh zero); the largest difference measured over these models is 6e-7."""

LENGTHS = (5, 9, 4)
"""Three documents (with their end-of-text tokens) in a window of 18 inputs: the last one is cut by the window."""


def window_of(documents: list[torch.Tensor]) -> torch.Tensor:
    """The packed inputs of one window holding `documents` back to back."""
    positions = torch.cat([torch.arange(len(doc)) for doc in documents])
    return packed(torch.cat(documents).unsqueeze(0), positions.unsqueeze(0))


def random_documents(vocab: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    return [torch.randint(0, vocab, (length,), generator=generator) for length in LENGTHS]


def assert_documents_alone(model, vocab: int, logits_of) -> None:
    documents = random_documents(vocab)
    with torch.no_grad():
        together = logits_of(model(window_of(documents)))[0]
        start = 0
        for doc in documents:
            alone = logits_of(model(doc.unsqueeze(0)))[0]
            torch.testing.assert_close(together[start : start + len(doc)], alone, atol=ATOL, rtol=0)
            start += len(doc)
        plain = logits_of(model(unpacked(window_of(documents))[0]))[0]
    assert not torch.allclose(plain[LENGTHS[0] :], together[LENGTHS[0] :], atol=1e-3)  # unmasked attention differs


@pytest.mark.parametrize("llama", [False, True])
def test_the_decoder_attends_inside_documents(llama):
    """GPT-2 style (learned positions) and Llama style (RoPE, grouped-query attention), selective recomputation."""
    overrides = ("model.position=rope", "model.activation=swiglu", "model.norm=rmsnorm", "model.kv_heads=2") * llama
    plan = tiny_plan(*overrides)
    torch.manual_seed(0)
    decoder = MODELS["decoder"].build(plan.model).eval()
    assert_documents_alone(decoder, plan.model.vocab, lambda logits: logits)


@pytest.mark.parametrize("architecture", ["llama", "gpt2", "qwen2", "mistral", "gemma", "qwen3"])
def test_transformers_models_attend_inside_documents(architecture, hf_checkpoints):
    """Through the `hf` family's module: position_ids that restart give transformers' block-diagonal mask."""
    plan = plan_for("experiment=smoke", "model=hf", f"model.path={hf_checkpoints[architecture]}")
    spec = MODELS["hf"]
    with torch.device("meta"):
        model = spec.build(plan.model)
    model.to_empty(device="cpu")
    spec.init_weights(model)
    model.eval()
    assert_documents_alone(model, plan.model.vocab, lambda output: output.logits)


def test_packed_windows_carry_positions_and_skip_the_first_token_of_each_document(tmp_path):
    """Documents 0..3 of 4, 6, 3 and 5 tokens (their end-of-text tokens included), windows of 8 + 1 tokens."""
    lengths = (4, 6, 3, 5)
    docs = [(np.full(n, 10 * (i + 1), dtype=np.uint32), np.ones(n, dtype=np.uint8)) for i, n in enumerate(lengths)]
    _write_split(tmp_path / "train", docs)
    windows = PackedDocuments(tmp_path / "train", seq_len=8, seed=0, mask_boundaries=True)
    assert windows.windows == 2
    assert windows.positions(0).tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 4]
    assert windows.positions(1).tolist() == [0, 1, 0, 1, 2, 0, 1, 2, 3]  # the cut document restarts at the window
    order = windows._order(0)
    inputs, targets = windows(torch.arange(2))
    first = int(order[0])
    tokens, positions = unpacked(inputs)
    assert inputs.shape == (2, 2, 8) and positions[0].tolist() == windows.positions(first)[:-1].tolist()
    expected = torch.from_numpy(windows.window(first)[0][1:].astype(np.int64))
    expected[torch.from_numpy(windows.positions(first)[1:]) == 0] = IGNORE_INDEX
    assert targets[0].tolist() == expected.tolist()
    unmasked, _ = PackedDocuments(tmp_path / "train", seq_len=8, seed=0)(torch.arange(2))
    assert torch.equal(unmasked, tokens)  # the same token windows as plain packing


def test_an_unknown_transformers_architecture_is_refused(tmp_path, hf_checkpoints):
    config = (hf_checkpoints["llama"] / "config.json").read_text().replace('"llama"', '"olmo"')
    (tmp_path / "config.json").write_text(config)
    for name in ("model.safetensors", "generation_config.json"):
        if (hf_checkpoints["llama"] / name).is_file():
            (tmp_path / name).write_bytes((hf_checkpoints["llama"] / name).read_bytes())
    with pytest.raises(ConfigError, match="checked for llama.*not olmo"):
        plan_for(
            "model=hf",
            f"model.path={tmp_path}",
            "data=s3",
            "data.uri=s3://bucket/docs",
            "data.format=text",
            "data.packing_mask=true",
        )
