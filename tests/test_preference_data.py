"""`data.format=preference` without torchrun: pairs read from files with their shapes checked, rendered as chat's
prompt/completion rows (the same ids and targets), and served as micro batches of chosen rows then rejected
rows, cut at the window's end with the cut pairs counted."""

from datetime import date

import numpy as np
import pytest
import torch

from compiler.spec.schema import DataFormat, LossOn
from entrypoint.trainer.data import FORMATS, documents
from entrypoint.trainer.data import cache as token_cache
from entrypoint.trainer.data.chat import ChatEncoder
from entrypoint.trainer.data.preference import PreferencePairs
from entrypoint.trainer.models.loss import IGNORE_INDEX
from tests.entrypoint_support import tiny_plan
from tests.test_text_data import hand_made_split
from tests.text_corpus import train_tokenizer, write_jsonl

PROMPT = [{"role": "system", "content": "be brief."}, {"role": "user", "content": "say: the cat sees a tree"}]
CHOSEN = [{"role": "assistant", "content": "the cat sees a tree."}]
REJECTED = [{"role": "assistant", "content": "a dog finds the river!"}]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_tokenizer(tmp_path_factory.mktemp("tokenizer"))


def test_message_pairs_render_as_chat_completions_with_the_replies_as_targets(tokenizer):
    pair = {"prompt": PROMPT, "chosen": CHOSEN, "rejected": REJECTED}
    chosen, rejected = token_cache.Encoder(tokenizer, DataFormat.preference, LossOn.all).encode([("a, record 1", pair)])
    chat = ChatEncoder(tokenizer, LossOn.assistant, date.today())
    for encoded, completion in ((chosen, CHOSEN), (rejected, REJECTED)):
        expected = chat.encode({"prompt": PROMPT, "completion": completion})
        assert encoded.ids.tolist() == expected.ids.tolist() and encoded.targets.tolist() == expected.targets.tolist()
        replies = chat.tokenizer.decode(encoded.ids[encoded.targets == 1].tolist())
        assert replies == completion[0]["content"] + "<|end|>"  # not the prompt: loss_on=all is not a pair's


def test_text_pairs_share_the_prompt_and_target_the_completions(tokenizer):
    pair = {"prompt": "say: hi\n", "chosen": "hi.", "rejected": "hello!"}
    chosen, rejected = token_cache.Encoder(tokenizer, DataFormat.preference, LossOn.assistant).encode([("a", pair)])
    decode = ChatEncoder(tokenizer, LossOn.assistant, date.today()).tokenizer.decode
    assert decode(chosen.ids.tolist()) == "say: hi\nhi." and decode(chosen.ids[chosen.targets == 1].tolist()) == "hi."
    assert decode(rejected.ids[rejected.targets == 1].tolist()) == "hello!"


@pytest.mark.parametrize(
    "row",
    [{"prompt": "p", "chosen": "c"}, {"prompt": "p", "chosen": CHOSEN, "rejected": REJECTED}, {"messages": CHOSEN}],
    ids=["no-rejected", "text-and-messages", "a-conversation"],
)
def test_a_row_that_is_no_pair_is_named(tmp_path, row):
    path = write_jsonl(tmp_path / "pairs.jsonl", [{"prompt": "p", "chosen": "c", "rejected": "r"}, row])
    with pytest.raises(ValueError, match=r"pairs.jsonl, record 2: no preference pair"):
        list(documents.records(path, DataFormat.preference, "text"))


def test_a_micro_batch_is_the_chosen_rows_then_the_rejected_ones(tmp_path):
    # pairs: (prompt 5 6 | chosen 7), (prompt 5 6 | rejected 8 9); then a pair whose chosen one is cut
    docs = [[5, 6, 7], [5, 6, 8, 9], [10, 11], [10, 12, 13, 14, 15, 16]]
    flags = [[0, 0, 1], [0, 0, 1, 1], [0, 1], [0, 1, 1, 1, 1, 1]]
    hand_made_split(tmp_path / "train", docs, flags)
    pairs = PreferencePairs(tmp_path / "train", seq_len=4, seed=0, eos=0)
    assert pairs.windows == 2
    first = pairs._order(0).tolist().index(0)
    inputs, targets = pairs(torch.tensor([first, 1 - first]))
    assert inputs.tolist() == [[5, 6, 7, 0], [10, 11, 0, 0], [5, 6, 8, 9], [10, 12, 13, 14]]
    no = IGNORE_INDEX
    assert targets.tolist() == [[no, 7, 0, no], [11, 0, no, no], [no, 8, 9, 0], [12, 13, 14, 15]]


def test_the_run_reports_the_pairs_it_cut(tmp_path):
    docs = [[5, 6, 7], [5, 6, 8, 9], [10, 11], [10, 12, 13, 14, 15, 16]]
    hand_made_split(tmp_path / "train", docs, [[1] * len(doc) for doc in docs])
    plan = tiny_plan("model.seq_len=4")
    meta = token_cache.CacheMeta("key", {"train": token_cache.SplitCounts(4, int(np.sum([len(d) for d in docs])), 9)})
    lines = FORMATS[DataFormat.preference].report(plan, meta, tmp_path, windows=2)
    assert "truncated         1 pairs longer than seq_len 4 + 1 (the prompt kept first)" in lines
