"""The real chat templates of popular models (tests/data/chat_templates/, sources in its README) on tiny
tokenizers with their special tokens: dockyard's ids equal transformers' `apply_chat_template`, and its
targets are exactly each assistant reply as the template writes it, with the end-of-turn marker after it.
No torchrun (the launch through the token cache: tests/test_chat_launch.py)."""

from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np
import pytest
from jinja2 import TemplateError

from compiler.spec.schema import LossOn
from entrypoint.trainer.data.chat import ChatEncoder, ChatRecordError

TEMPLATES_DIR = Path(__file__).parent / "data" / "chat_templates"


@dataclass(frozen=True)
class Model:
    bos: str | None
    eos: str
    special: tuple[str, ...]
    marker: str
    """The end-of-turn token the template writes after a reply."""
    trims: bool
    """The template writes a reply with `| trim` (else as it is)."""


MODELS = {
    "llama3.2": Model(
        "<|begin_of_text|>", "<|eot_id|>", ("<|start_header_id|>", "<|end_header_id|>"), "<|eot_id|>", True
    ),
    "llama3.3": Model(
        "<|begin_of_text|>", "<|eot_id|>", ("<|start_header_id|>", "<|end_header_id|>"), "<|eot_id|>", True
    ),
    "qwen2.5": Model(None, "<|im_end|>", ("<|endoftext|>", "<|im_start|>"), "<|im_end|>", False),
    "qwen3": Model(None, "<|im_end|>", ("<|endoftext|>", "<|im_start|>"), "<|im_end|>", False),
    "mistral-v0.3": Model("<s>", "</s>", ("[INST]", "[/INST]", "[TOOL_CALLS]"), "</s>", True),
    "gemma2": Model("<bos>", "<eos>", ("<start_of_turn>", "<end_of_turn>"), "<end_of_turn>", True),
    "gemma3": Model("<bos>", "<eos>", ("<start_of_turn>", "<end_of_turn>"), "<end_of_turn>", True),
    "phi3.5": Model("<s>", "<|endoftext|>", ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>"), "<|end|>", False),
    "phi4-mini": Model(None, "<|endoftext|>", ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>"), "<|end|>", False),
    "smollm2": Model("<|im_start|>", "<|im_end|>", ("<|endoftext|>",), "<|im_end|>", False),
}


def chat(*turns: str, system: str | None = None) -> list[dict]:
    roles = ["user", "assistant"] * len(turns)
    messages = [{"role": role, "content": text} for role, text in zip(roles, turns, strict=False)]
    return ([{"role": "system", "content": system}] if system else []) + messages


CONVERSATIONS = {
    "one turn": chat("What is two plus two?", "Four."),
    "system, two turns": chat("Name a colour.", "Blue.", "Another one?", "Green.", system="Answer in one word."),
    "reply repeated by the user": chat("Say exactly: the sky is blue", "the sky is blue", "the sky is blue?", "Yes."),
    "empty reply": chat("Say nothing.", "", "Now say hi.", "hi"),
    "unicode": chat("Übersetze: 猫 🐈", "Katze — 猫 (ねこ) 🐈"),
    "markers as text": chat("What does <|im_end|> or [INST] mean?", "They are markers like </s> and <|end|>."),
    "padded reply": chat("Pad it.", "  padded reply \n"),
}


def make_tokenizer(folder: Path, name: str) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    model = MODELS[name]
    special = [t for t in dict.fromkeys([model.eos, model.marker, *model.special, model.bos or model.eos])]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    corpus = [m["content"] for c in CONVERSATIONS.values() for m in c] * 3
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator(corpus, trainer)
    wrapped = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=model.eos, bos_token=model.bos)
    wrapped.chat_template = (TEMPLATES_DIR / f"{name}.jinja").read_text()
    wrapped.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def encoders(tmp_path_factory) -> dict[str, ChatEncoder]:
    return {
        name: ChatEncoder(make_tokenizer(tmp_path_factory.mktemp(name), name), LossOn.assistant, date.today())
        for name in MODELS
    }


def target_runs(tokenizer, ids: np.ndarray, targets: np.ndarray) -> list[str]:
    """The text of each run of consecutive target tokens."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], targets, [0]])))
    return [tokenizer.decode(ids[a:b].tolist()) for a, b in zip(edges[::2], edges[1::2], strict=True)]


@pytest.mark.parametrize("conversation", CONVERSATIONS)
@pytest.mark.parametrize("name", MODELS)
def test_ids_are_transformers_and_targets_are_the_replies(encoders, name, conversation):
    encoder, model, messages = encoders[name], MODELS[name], CONVERSATIONS[conversation]
    try:
        expected_ids = encoder.tokenizer.apply_chat_template(messages, tokenize=True)["input_ids"]
    except TemplateError as error:  # the template refuses the conversation (Gemma 2 with a system message;
        # Gemma 3 accepts one, prefixed to the first user turn)
        with pytest.raises(ChatRecordError, match=f"the chat template raised: {error}"):
            encoder.encode({"messages": messages})
        return
    encoded = encoder.encode({"messages": messages})
    assert encoded.ids.tolist() == expected_ids
    replies = [m["content"] for m in messages if m["role"] == "assistant"]
    expected = [(reply.strip() if model.trims else reply) + model.marker for reply in replies]
    runs = target_runs(encoder.tokenizer, encoded.ids, encoded.targets)
    assert len(runs) == len(expected)
    for run, reply in zip(runs, expected, strict=True):  # a reply's first token may start on the space before it
        assert run.endswith(reply) and not run[: len(run) - len(reply)].strip(), (run, reply)
    assert not encoded.eos_target  # the template's end-of-turn marker is trained instead


def test_the_templates_date_is_the_plans(encoders):
    encoder = encoders["llama3.2"]
    messages = CONVERSATIONS["one turn"]
    today = encoder.tokenizer.decode(encoder.encode({"messages": messages}).ids.tolist())
    assert f"Today Date: {date.today():%d %b %Y}" in today
    planned = ChatEncoder(Path(encoder.tokenizer.name_or_path), LossOn.assistant, date(2031, 2, 3))
    assert "Today Date: 03 Feb 2031" in encoder.tokenizer.decode(planned.encode({"messages": messages}).ids.tolist())
