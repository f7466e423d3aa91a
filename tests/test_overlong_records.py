"""Records longer than their own window (`data.overlong`): truncated at the end (the default) or dropped, counted in
the run's first lines and named in the plan's summary; and documents of 128K tokens (a tiny tokenizer's), packed
with document-boundary masking or one a window, at seq_len 131072."""

import dataclasses

import numpy as np
import pytest
import torch

from compiler.planner.summary import summary_lines
from compiler.spec.errors import ConfigError
from compiler.spec.schema import DataFormat, Overlong
from entrypoint.trainer.data import FORMATS
from entrypoint.trainer.data import cache as token_cache
from entrypoint.trainer.data.preference import PreferencePairs
from entrypoint.trainer.data.windows import PackedDocuments, SeparateDocuments, stored
from tests.entrypoint_support import tiny_plan
from tests.helpers import plan_for
from tests.test_text_data import hand_made_split
from tests.text_corpus import sentences


def with_data(plan, **fields):
    """`plan` as if its data section said `fields` (the windows and reports read only the plan)."""
    return dataclasses.replace(plan, data=dataclasses.replace(plan.data, **fields))


def every_row(windows) -> list[list[int]]:
    """The input rows of one epoch, in the order read."""
    return [row.tolist() for index in range(windows.windows) for row in windows(torch.tensor([index]))[0]]


def test_dropped_documents_get_no_window_and_the_run_counts_them(tmp_path):
    docs = [[5, 6], [7, 8, 9, 10, 11, 12], [13, 14, 15]]  # with its end-of-text token the second is 7 > 4 + 1
    hand_made_split(tmp_path / "train", docs, [[1] * len(doc) for doc in docs])
    plan = with_data(tiny_plan("model.seq_len=4"), format=DataFormat.text, packing=False)
    meta = token_cache.CacheMeta("key", {"train": token_cache.SplitCounts(3, 14, 14)})
    text, split = FORMATS[DataFormat.text], stored(tmp_path / "train")

    truncated = text.windows(split, plan, 0)
    assert truncated.windows == 3 and [7, 8, 9, 10] in every_row(truncated)
    assert "off: 3 windows of 5, efficiency 66.7%, 1 truncated" in text.report(plan, meta, split, 3)[1]

    plan = with_data(plan, overlong=Overlong.drop)
    dropped = text.windows(split, plan, 0)
    assert dropped.windows == 2
    assert sorted(every_row(dropped)) == [[5, 6, 0, 0], [13, 14, 15, 0]]
    line = text.report(plan, meta, split, 2)[1]
    assert "off: 2 windows of 5, efficiency 50.0%, 1 dropped (data.overlong=drop)" in line


def test_a_pair_with_an_overlong_completion_is_dropped_whole(tmp_path):
    docs = [[5, 6, 7], [5, 6, 8, 9], [10, 11], [10, 12, 13, 14, 15, 16]]  # the second pair's rejected one is long
    hand_made_split(tmp_path / "train", docs, [[1] * len(doc) for doc in docs])
    plan = with_data(tiny_plan("model.seq_len=4"), format=DataFormat.preference, overlong=Overlong.drop)
    meta = token_cache.CacheMeta("key", {"train": token_cache.SplitCounts(4, 19, 9)})
    preference, split = FORMATS[DataFormat.preference], stored(tmp_path / "train")
    pairs = preference.windows(split, plan, 0)
    assert isinstance(pairs, PreferencePairs) and pairs.windows == 1
    assert every_row(pairs) == [[5, 6, 7, 0], [5, 6, 8, 9]]  # the first pair's chosen, then its rejected
    assert [inputs.tolist() for inputs, _ in pairs.every_pair(0, 1, 2)] == [[[5, 6, 7, 0], [5, 6, 8, 9]]]
    lines = preference.report(plan, meta, split, pairs.windows)
    assert "dropped           1 pairs longer than seq_len 4 + 1 (data.overlong=drop)" in lines


def test_the_plan_says_what_becomes_of_long_records_and_refuses_drop_where_windows_are_packed(tmp_path, hf_tokenizer):
    text = ("data=local", f"data.path={tmp_path}", "data.format=text", f"data.tokenizer={hf_tokenizer}")
    text += ("model.vocab=512", "data.packing=false")
    assert "one document a window (longer ones truncated)" in "\n".join(summary_lines(plan_for(*text)))
    dropped = plan_for(*text, "data.overlong=drop")
    assert dropped.data.overlong is Overlong.drop
    assert "one document a window (longer ones dropped)" in "\n".join(summary_lines(dropped))
    with pytest.raises(ConfigError) as error:
        plan_for(*text, "data.overlong=drop", "data.packing=true")
    assert error.value.key == "data.overlong" and "set data.packing=false" in error.value.one_line()
    with pytest.raises(ConfigError, match="^data.overlong: drop leaves out records, and token arrays have none"):
        plan_for("experiment=smoke", "data.overlong=drop")


LONG = 131072
"""seq_len of a 128K-token run."""


def long_documents(hf_tokenizer) -> list[np.ndarray]:
    """Three documents of a tiny tokenizer's tokens: 1.4 windows, half a window, and 0.7 of one."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(hf_tokenizer / "tokenizer.json"))
    text = " ".join(sentences(4000, seed=5))
    ids = np.asarray(tokenizer.encode(text).ids, dtype=np.uint32)
    stream = np.tile(ids, -(-2 * LONG // len(ids)) + 1)
    return [stream[: LONG * 14 // 10], stream[: LONG // 2], stream[: LONG * 7 // 10]]


def test_documents_of_128k_tokens_pack_with_their_boundaries_and_fit_or_not_their_own_windows(tmp_path, hf_tokenizer):
    docs = long_documents(hf_tokenizer)
    hand_made_split(tmp_path / "train", [doc.tolist() for doc in docs], [[1] * len(doc) for doc in docs])
    lengths = [len(doc) + 1 for doc in docs]  # each with its end-of-text token
    packed = PackedDocuments(tmp_path / "train", LONG, seed=0, mask_boundaries=True)
    assert packed.windows == (sum(lengths) - 1) // LONG == 2
    first, second = packed.positions(0), packed.positions(1)
    assert first.tolist() == list(range(LONG + 1))  # the first document fills the first window
    starts = np.flatnonzero(second == 0).tolist()  # the window's start, then the second and third documents'
    assert starts == [0, lengths[0] - LONG, lengths[0] + lengths[1] - LONG]
    assert second[: starts[1]].tolist() == list(range(starts[1]))
    assert int(second.max()) <= LONG  # no position past the window, as none past the model's context

    separate = SeparateDocuments(tmp_path / "train", LONG, seed=0, eos=0)
    assert separate.overlong().tolist() == [True, False, False]
    tokens, targets = separate.window(0)
    assert len(tokens) == LONG + 1 and tokens.tolist() == docs[0][: LONG + 1].tolist()  # truncated at the end
    separate.drop_overlong()
    assert separate.windows == 2 and {separate.shuffled(index) for index in range(2)} == {1, 2}
