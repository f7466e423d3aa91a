"""`dockyard tokenize` on two local container nodes: each node's log says its share and about half the documents,
the shards hold a one-worker cache's ids document for document, and a training launch on that cache tokenizes
nothing."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from compiler.spec import Plan
from compiler.spec.token_cache_key import META_FILE
from entrypoint.trainer.data import cache as token_cache
from entrypoint.trainer.data import shards
from tests.text_corpus import documents, train_tokenizer, write_jsonl

pytestmark = pytest.mark.torchrun

DOCKYARD = str(Path(sys.executable).parent / "dockyard")


def dockyard(tmp_path: Path, *args: str) -> str:
    result = subprocess.run([DOCKYARD, *args], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_two_nodes_tokenize_half_each_and_training_reads_the_shards(engine, tmp_path):
    tokenizer = train_tokenizer(tmp_path / "tokenizer")
    docs = documents(300)
    write_jsonl(tmp_path / "data" / "train.jsonl", [{"text": doc} for doc in docs])
    options = ["experiment=smoke", "data=local", f"data.path={tmp_path / 'data'}", "data.format=text"]
    options += [f"data.tokenizer={tokenizer}", "model.vocab=512", f"data.cache={tmp_path / 'cache'}"]
    options += ["model.seq_len=64", "hardware.processes_per_node=1"]  # the claims are per node, not per process
    output = dockyard(tmp_path, "tokenize", *options, "hydra.run.dir=tokenize")
    assert "tokenize  2 workers, one per node" in output
    counts = []
    for node in (1, 2):
        assert f"algo-{node} | token cache       building" in output and f"share {node} of 2" in output
        counts.append(int(output.split(f"algo-{node} | tokenizing        ")[1].split(" documents")[0]))
    assert sum(counts) == 300 and min(counts) > 100, counts
    assert "tokenized         " in output and "300 documents" in output

    (folder,) = (p for p in (tmp_path / "cache").iterdir() if (p / META_FILE).is_file())
    plan = Plan.from_json((tmp_path / "tokenize" / "plan.json").read_text())
    stream = shards.open_split(folder, "train", plan)
    encoder = token_cache.Encoder(tokenizer, plan.data.format, plan.data.loss_on)
    eos = encoder.facts.eos_id
    for number, encoded in enumerate(encoder.encode([("", doc) for doc in docs])):
        start, end = int(stream.starts[number]), int(stream.starts[number + 1])
        assert np.array_equal(stream.tokens[start:end], np.append(encoded.ids, eos)), number

    trained = dockyard(tmp_path, "launch", *options, "trainer.steps=4", "hydra.run.dir=train")
    assert "token cache       reused" in trained and "tokenizing" not in trained
