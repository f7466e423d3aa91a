"""`data.packing_strategy=bfd` (TRL's best-fit decreasing): each window holds whole documents. Properties over
random lengths: every document placed once, no window past its room, no document split, the decreasing best fit
never opening a window a document would have fitted; then the windows a split gives (padding no target, positions
restarting at each document, so attention stays inside it), overlong documents truncated or dropped, and the plan
and recipe ports."""

import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.config.recipes import convert
from compiler.planner.summary import summary_lines
from compiler.spec.errors import ConfigError
from compiler.spec.schema import DataFormat, Overlong, PackingStrategy
from entrypoint.trainer.data import FORMATS
from entrypoint.trainer.data import cache as token_cache
from entrypoint.trainer.data.best_fit import best_fit_decreasing
from entrypoint.trainer.data.windows import WholeDocuments, stored
from entrypoint.trainer.models.loss import IGNORE_INDEX
from tests.entrypoint_support import tiny_plan
from tests.helpers import plan_for
from tests.test_text_data import hand_made_split


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 40), max_size=60), st.integers(8, 32))
def test_best_fit_decreasing_places_each_document_whole_once(lengths, room):
    windows = best_fit_decreasing(np.asarray(lengths, dtype=np.int64), room)
    placed = sorted(document for window in windows for document in window)
    assert placed == list(range(len(lengths)))  # every document, once
    for window in windows:
        used = sum(lengths[document] for document in window)
        assert used <= room or len(window) == 1  # only an overlong document passes the room, alone
    fitting = [length for length in lengths if length < room]
    assert len(windows) >= len(lengths) - len(fitting) + -(-sum(fitting) // room)  # no fewer than the bound


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(1, 99), min_size=1, max_size=12), min_size=1, max_size=30))
def test_every_token_is_read_once_in_its_whole_document(docs):
    """Cut at each position 0, a window's tokens are whole documents (each with its end-of-text token 0) and then
    padding; over all windows each document appears once."""
    with tempfile.TemporaryDirectory() as folder:
        windows = WholeDocuments(split_of(Path(folder), docs), 12, 0, 0, mask_boundaries=True, drop_overlong=False)
        seen = []
        for index in range(windows.windows):
            tokens, targets = windows.window(index)
            assert len(tokens) == 13
            starts = np.flatnonzero(windows.positions(index) == 0).tolist() + [13]
            pieces = [tokens[a:b].tolist() for a, b in zip(starts, starts[1:], strict=False)]
            padding = int((targets == 0).sum())
            documents = pieces[:-1] if padding else pieces
            assert all(piece == [0] * len(piece) for piece in pieces[len(documents) :])
            seen += [tuple(piece) for piece in documents]
        assert sorted(seen) == sorted(tuple([*doc, 0]) for doc in docs)


def test_best_fit_picks_the_fullest_window_that_fits():
    # 7 and 6 open windows of 10 (rooms 3 and 4); 3 goes into the fuller (room 3), then 4 into the other
    assert best_fit_decreasing(np.asarray([7, 6, 3, 4]), 10) == [[0, 2], [1, 3]]


def split_of(tmp_path, docs):
    hand_made_split(tmp_path / "train", docs, [[1] * len(doc) for doc in docs])
    return stored(tmp_path / "train")


def test_windows_hold_whole_documents_padded_and_attending_within_themselves(tmp_path):
    docs = [[5, 6, 7], [8, 9], [10, 11, 12, 13, 14, 15, 16]]  # 4, 3 and 8 tokens with their end-of-text token
    windows = WholeDocuments(split_of(tmp_path, docs), 8, seed=0, eos=0, mask_boundaries=True, drop_overlong=False)
    assert windows.windows == 2
    rows = {tuple(windows.window(index)[0].tolist()) for index in range(2)}
    assert rows == {(10, 11, 12, 13, 14, 15, 16, 0, 0), (5, 6, 7, 0, 8, 9, 0, 0, 0)}
    number = next(i for i in range(2) if windows.window(i)[0][0] == 5)
    tokens, targets = windows.window(number)
    assert targets.tolist() == [1, 1, 1, 1, 1, 1, 1, 0, 0]  # the padding is no target
    assert windows.positions(number).tolist() == [0, 1, 2, 3, 0, 1, 2, 0, 1]
    inputs, labels = windows.rows([number])
    assert labels[0].tolist()[3] == IGNORE_INDEX  # 8 begins a document: not predicted from the one before
    assert labels[0].tolist()[-2:] == [IGNORE_INDEX, IGNORE_INDEX]
    unmasked = WholeDocuments(split_of(tmp_path / "b", docs), 8, 0, 0, mask_boundaries=False, drop_overlong=False)
    assert unmasked.positions(0) is None


def test_overlong_documents_are_cut_alone_or_dropped(tmp_path):
    docs = [[5, 6], [7, 8, 9, 10, 11, 12, 13, 14], [15]]  # the second is 9 tokens, past seq_len 4 + 1
    split = split_of(tmp_path, docs)
    cut = WholeDocuments(split, 4, 0, 0, mask_boundaries=False, drop_overlong=False)
    assert sorted(tuple(cut.window(i)[0].tolist()) for i in range(cut.windows)) == [(5, 6, 0, 15, 0), (7, 8, 9, 10, 11)]
    dropped = WholeDocuments(split, 4, 0, 0, mask_boundaries=False, drop_overlong=True)
    assert [dropped.window(i)[0].tolist() for i in range(dropped.windows)] == [[5, 6, 0, 15, 0]]
    plan = tiny_plan("model.seq_len=4")
    plan = dataclasses.replace(
        plan, data=dataclasses.replace(plan.data, format=DataFormat.text, packing_strategy=PackingStrategy.bfd)
    )
    text = FORMATS[DataFormat.text]
    assert isinstance(text.windows(split, plan, 0), WholeDocuments)
    meta = token_cache.CacheMeta("key", {"train": token_cache.SplitCounts(3, 10, 10)})
    line = text.report(plan, meta, split, 2)[1]
    assert "bfd: 2 windows of 5 of whole documents, efficiency 80.0%, 1 truncated" in line
    drop = dataclasses.replace(plan, data=dataclasses.replace(plan.data, overlong=Overlong.drop))
    assert "1 dropped (data.overlong=drop)" in text.report(drop, meta, split, 1)[1]


def test_bfd_is_planned_for_packed_documents_only(tmp_path, hf_tokenizer):
    (tmp_path / "a.txt").write_text("some text")
    data = (
        "data=local",
        f"data.path={tmp_path}",
        "data.format=text",
        f"data.tokenizer={hf_tokenizer}",
        "model.vocab=512",
    )
    plan = plan_for(*data, "data.packing_strategy=bfd")
    assert plan.data.packing_strategy is PackingStrategy.bfd
    assert "packed whole (best-fit decreasing, longer ones truncated)" in "\n".join(summary_lines(plan))
    with pytest.raises(ConfigError) as caught:
        plan_for(*data, "data.packing_strategy=bfd", "data.packing=false")
    assert caught.value.key == "data.packing_strategy"


def test_convert_ports_trls_packing_strategy():
    default = dict(a.split("=", 1) for a in convert({"dataset_name": "x/y", "packing": True}).lines())
    assert (default["data.packing_strategy"], default["data.packing_mask"]) == ("bfd", "true")  # TRL's default
    wrapped = dict(a.split("=", 1) for a in convert({"packing": True, "packing_strategy": "wrapped"}).lines())
    assert wrapped["data.packing_strategy"] == "wrapped" and "data.packing_mask" not in wrapped
    assert convert({"packing": True, "packing_strategy": "bfd_split"}).refused[0].startswith("packing_strategy:")
