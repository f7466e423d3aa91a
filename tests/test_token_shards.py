"""The token cache in shards (`entrypoint.trainer.data.shards`), without torchrun: workers' shares tile the
documents (one large JSONL file cut by bytes), and the sharded cache read through its `meta.json` gives the
one-worker cache's splits, counts and windows, in the same order, with a drawn or a separate validation split.
(On two nodes, through the entrypoint: tests/test_entrypoint_text_data.py.)"""

import gzip
import json

import numpy as np
import pytest
import torch

from compiler.spec.token_cache_key import split_sources
from entrypoint.trainer.data import cache as token_cache
from entrypoint.trainer.data import data_format, documents, prepare, shards
from entrypoint.trainer.data.base import CacheMeta
from entrypoint.trainer.data.batches import Batches
from tests.test_text_data import text_plan
from tests.text_corpus import documents as corpus_documents
from tests.text_corpus import write_jsonl


def corpus(folder):
    """A large JSONL file, a blank line among its records, a compressed one and a held-out folder."""
    write_jsonl(folder / "a.jsonl", [{"text": doc} for doc in corpus_documents(400, seed=1)])
    with (folder / "a.jsonl").open("a") as stream:
        stream.write("\n" + "".join(json.dumps({"text": doc}) + "\n" for doc in corpus_documents(100, seed=2)))
    with gzip.open(folder / "b.jsonl.gz", "wt") as stream:
        stream.writelines(json.dumps({"text": doc}) + "\n" for doc in corpus_documents(60, seed=3))
    write_jsonl(folder / "held" / "c.jsonl", [{"text": doc} for doc in corpus_documents(50, seed=4)])
    return folder


def read(pieces, plan) -> list[tuple[str, object]]:
    """(split, record) of a worker's pieces, in order."""
    return [(split, record) for split, batch in shards.share_batches(pieces, plan) for _, record in batch]


@pytest.mark.parametrize("workers", [2, 3, 5])
def test_the_shares_tile_the_documents_in_order(tmp_path, hf_tokenizer, workers):
    data = corpus(tmp_path / "data")
    plan = text_plan(data, hf_tokenizer, "data.validation=held")
    train, validation = split_sources(data, "held")
    shares = shards.shares({"train": train, "validation": validation}, workers)
    expected = [
        (split, record)
        for split, paths in (("train", train), ("validation", validation))
        for path in paths
        for record in documents.records(path, plan.data.format, plan.data.field)
    ]
    assert [pair for pieces in shares for pair in read(pieces, plan)] == expected
    assert all(read(pieces, plan) for pieces in shares)  # the large file is cut: no worker goes idle


def test_two_workers_get_about_half_the_documents_of_one_file(tmp_path, hf_tokenizer):
    data = tmp_path / "data"
    write_jsonl(data / "one.jsonl", [{"text": doc} for doc in corpus_documents(1000, seed=5)])
    plan = text_plan(data, hf_tokenizer)
    first, second = (len(read(p, plan)) for p in shards.shares({"train": split_sources(data, None)[0]}, 2))
    assert first + second == 1000 and abs(first - second) < 100, (first, second)


def one_worker_cache(plan, data, tokenizer, root, held):
    train, validation = split_sources(data, held)
    key = "one"
    splits = {"train": train, "validation": validation}
    encoder = token_cache.Encoder(tokenizer, plan.data.format, plan.data.loss_on)
    token_cache.build(root, key, encoder, lambda: token_cache.batches(splits, plan), lambda line: None)
    return root / key


def sharded_cache(plan, data, tokenizer, root, held, workers):
    train, validation = split_sources(data, held)
    shares = shards.shares({"train": train, "validation": validation}, workers)
    encoder = token_cache.Encoder(tokenizer, plan.data.format, plan.data.loss_on)
    for worker in reversed(range(workers)):  # in any order
        shards.write_shard(root, "many", worker, workers, encoder, shares[worker], plan, lambda line: None)
    return shards.assemble(root, "many", workers, plan, lambda line: None)


@pytest.mark.parametrize(
    "overrides, held",
    [
        ((), None),
        (("data.validation=0.2",), None),
        (("data.validation=held",), "held"),
        (("data.validation=0.1", "data.packing=false"), None),
        (("data.validation=7",), None),
    ],
    ids=["no-validation", "drawn", "held-out-folder", "drawn-unpacked", "rows"],
)
def test_the_sharded_cache_reads_as_the_one_worker_cache(tmp_path, hf_tokenizer, overrides, held):
    data = corpus(tmp_path / "data")
    plan = text_plan(data, hf_tokenizer, *overrides)
    one = one_worker_cache(plan, data, hf_tokenizer, tmp_path / "cache", held)
    many = sharded_cache(plan, data, hf_tokenizer, tmp_path / "cache", held, workers=3)
    assert CacheMeta.read(many).splits == CacheMeta.read(one).splits
    eos = token_cache.Encoder(hf_tokenizer, plan.data.format, plan.data.loss_on).facts.eos_id
    for split in ("train", "validation"):
        a, b = shards.open_split(one, split, plan), shards.open_split(many, split, plan)
        assert np.array_equal(a.starts, b.starts)
        assert np.array_equal(a.tokens[:], b.tokens[:]) and np.array_equal(a.targets[:], b.targets[:])
    opened = [prepare.open_windows(plan, folder, eos) for folder in (one, many)]
    assert opened[0][2] == opened[1][2]  # the lines the run reports
    for dp_rank in (0, 1):
        ours, theirs = (Batches(train, plan, dp_rank) for train, _, _ in opened)
        for step in range(3 * plan.trainer.steps):
            for mine, other in zip(ours.micro_batch(step, 0), theirs.micro_batch(step, 0), strict=True):
                assert torch.equal(mine, other)


def test_a_shard_already_written_is_kept(tmp_path, hf_tokenizer):
    data = corpus(tmp_path / "data")
    plan = text_plan(data, hf_tokenizer)
    sharded_cache(plan, data, hf_tokenizer, tmp_path / "cache", None, workers=2)
    lines: list[str] = []
    shards.write_shard(tmp_path / "cache", "many", 1, 2, None, [], plan, lines.append)
    assert lines == ["tokenize          shard 2 of 2 already written"]
    assert data_format(plan.data.format) is not None
