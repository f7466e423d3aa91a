"""The data format seam's conformance suite: every format in `FORMATS` reads its records from a JSONL file, refuses
a row of another shape naming it, encodes them into the token cache, and serves windows of seq_len + 1 tokens cut
from exactly the ids it encoded."""

from dataclasses import replace

import pytest

from compiler.spec.schema import DataFormat, LossOn
from entrypoint.trainer.data import FORMATS, data_format, documents
from entrypoint.trainer.data import cache as token_cache
from tests.entrypoint_support import tiny_plan
from tests.text_corpus import conversations, sentences, train_tokenizer, write_jsonl


def rows(fmt: DataFormat) -> list[dict]:
    """Twenty records of the format, as users write them."""
    if fmt is DataFormat.text:
        return [{"text": text} for text in sentences(20, seed=1)]
    if fmt is DataFormat.chat:
        return [{"messages": messages} for messages in conversations(20, seed=1)]
    said = sentences(60, seed=2)
    return [{"prompt": said[3 * i], "chosen": said[3 * i + 1], "rejected": said[3 * i + 2]} for i in range(20)]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def test_every_tokenized_data_format_in_the_schema_is_registered():
    assert set(FORMATS) == set(DataFormat) - {DataFormat.tokens}  # token files are read as they are


@pytest.mark.parametrize("fmt", list(FORMATS), ids=lambda f: f.value)
def test_a_row_of_another_shape_is_named(tmp_path, fmt):
    other = {"neither": 1}
    path = write_jsonl(tmp_path / "rows.jsonl", [*rows(fmt)[:1], other])
    with pytest.raises(ValueError, match=r"rows.jsonl, record 2: "):
        list(documents.records(path, fmt, "text"))


@pytest.mark.parametrize("fmt", list(FORMATS), ids=lambda f: f.value)
def test_the_cached_windows_hold_the_encoded_ids(tmp_path, tokenizer, fmt):
    path = write_jsonl(tmp_path / "data" / "rows.jsonl", rows(fmt))
    records = [(f"record {n}", r) for n, r in enumerate(documents.records(path, fmt, "text"), 1)]
    encoder = token_cache.Encoder(tokenizer, fmt, LossOn.assistant)
    encoded = encoder.encode(records)
    assert len(encoded) == len(records) * (2 if fmt is DataFormat.preference else 1)
    meta = token_cache.build(tmp_path / "cache", "key", encoder, lambda: [("train", records)], lambda line: None)
    assert meta.splits["train"].documents == len(encoded)

    plan = tiny_plan()
    plan = replace(plan, data=replace(plan.data, format=fmt, packing=True))
    split = tmp_path / "cache" / "key" / "train"
    windows = data_format(fmt).windows(split, plan, encoder.facts.eos_id)
    first, _ = windows.window(0)
    assert windows.windows >= 1 and len(first) == plan.model.seq_len + 1
    shown = min(len(first), len(encoded[0].ids))
    assert first[:shown].tolist() == encoded[0].ids[:shown].tolist()
    lines = data_format(fmt).report(plan, meta, split.parent, windows.windows)
    assert any(line.startswith(("documents", "pairs")) for line in lines)
