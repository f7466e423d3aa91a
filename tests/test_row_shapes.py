"""The row shapes recipes' datasets come in (`entrypoint/trainer/data/shapes.py`): alpaca and ShareGPT rows read
as conversations, preference rows whose prompt is implicit in their chosen and rejected conversations read as
pairs; each encoded with its targets where the recipe's tool puts them."""

from dataclasses import replace

import numpy as np
import pytest

from compiler.spec.schema import DataFormat, LossOn
from entrypoint.trainer.data import cache as token_cache
from entrypoint.trainer.data import data_format, documents
from tests.entrypoint_support import tiny_plan
from tests.text_corpus import train_tokenizer, write_jsonl

ALPACA = [
    {"instruction": "Name a colour.", "input": "", "output": "Blue."},
    {"instruction": "Add the numbers.", "input": "2 and 3", "output": "5"},
]
SHAREGPT = {
    "conversations": [
        {"from": "system", "value": "Be brief."},
        {"from": "human", "value": "Say hi."},
        {"from": "gpt", "value": "Hi."},
    ]
}
USER = {"role": "user", "content": "Say hi."}
IMPLICIT = {
    "chosen": [USER, {"role": "assistant", "content": "Hi."}],
    "rejected": [USER, {"role": "assistant", "content": "No."}],
}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def read(tmp_path, fmt: DataFormat, rows: list[dict]) -> list:
    return list(documents.records(write_jsonl(tmp_path / "rows.jsonl", rows), fmt, "text"))


def test_alpaca_rows_are_the_alpaca_prompt_and_the_output_as_completion(tmp_path, tokenizer):
    records = read(tmp_path, DataFormat.chat, ALPACA)
    assert records[0]["prompt"].endswith("### Instruction:\nName a colour.\n\n### Response:\n")
    assert "### Input:\n2 and 3\n\n### Response:\n" in records[1]["prompt"]
    assert "paired with an input" in records[1]["prompt"] and "paired" not in records[0]["prompt"]
    assert [record["completion"] for record in records] == ["Blue.", "5"]
    encoder = token_cache.Encoder(tokenizer, DataFormat.chat, LossOn.assistant)
    encoded = encoder.encode([("record 1", records[0])])[0]
    from transformers import AutoTokenizer

    targets = AutoTokenizer.from_pretrained(tokenizer).decode(encoded.ids[encoded.targets.astype(bool)])
    assert targets == "Blue."  # the loss on the output only (axolotl's train_on_inputs: false)


def test_sharegpt_rows_are_conversations_with_their_roles_mapped(tmp_path):
    (record,) = read(tmp_path, DataFormat.chat, [SHAREGPT])
    assert [m["role"] for m in record["messages"]] == ["system", "user", "assistant"]
    assert record["messages"][2]["content"] == "Hi."
    bad = {"conversations": [{"from": "narrator", "value": "Once"}]}
    with pytest.raises(ValueError, match=r"record 1: conversations\[1\] is not a ShareGPT turn: 'from' one of system"):
        read(tmp_path, DataFormat.chat, [bad])


def test_a_pairs_implicit_prompt_is_the_messages_both_start_with(tmp_path, tokenizer):
    (pair,) = read(tmp_path, DataFormat.preference, [IMPLICIT])
    assert pair["prompt"] == [USER]
    assert (pair["chosen"][0]["content"], pair["rejected"][0]["content"]) == ("Hi.", "No.")
    encoder = token_cache.Encoder(tokenizer, DataFormat.preference, LossOn.assistant)
    chosen, rejected = encoder.encode([("record 1", pair)])
    assert chosen.targets.sum() and rejected.targets.sum()
    alike = {"chosen": [USER], "rejected": [USER]}
    with pytest.raises(ValueError, match="must start with the same messages"):
        read(tmp_path, DataFormat.preference, [alike])


def test_max_prompt_length_cuts_a_pairs_prompt_from_the_left(tmp_path, tokenizer):
    """TRL's truncation of a DPO prompt: its last tokens are kept, the completion whole."""
    long = {"role": "user", "content": " ".join(["Say hi."] * 6)}
    pair = {"prompt": [long], "chosen": IMPLICIT["chosen"][1:], "rejected": IMPLICIT["rejected"][1:]}
    encoder = token_cache.Encoder(tokenizer, DataFormat.preference, LossOn.assistant)
    records = [("record 1", pair)]
    token_cache.build(tmp_path / "cache", "key", encoder, lambda: [("train", records)], lambda line: None)
    plan = tiny_plan()
    windows = data_format(DataFormat.preference).windows
    split = tmp_path / "cache" / "key" / "train"
    whole = windows(split, plan, 0)
    cut = windows(split, replace(plan, data=replace(plan.data, max_prompt_length=8)), 0)
    for document in (0, 1):
        tokens, targets = whole.window(document)
        prompt = int(np.argmax(targets))
        assert prompt > 8
        kept, flags = cut.window(document)
        assert int(np.argmax(flags)) == 8
        assert kept[:8].tolist() == tokens[prompt - 8 : prompt].tolist()
        assert kept[8:][flags[8:].astype(bool)].tolist() == tokens[targets.astype(bool)].tolist()
