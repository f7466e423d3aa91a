"""Two nodes through the real entrypoint and torchrun (a CPU process each, gloo): with a cache folder both share
(`data.cache`), node k tokenizes share k of the documents and the run trains the step losses of nodes that each
tokenize everything into a cache of their own (today's per-node cache). (A later launch on that folder tokenizes
nothing: tests/test_tokenize_local.py.)"""

from pathlib import Path

import pytest

from tests.entrypoint_support import (
    RERUN_TOLERANCE,
    SHARED_CORES,
    entrypoint_env,
    free_port,
    losses,
    metrics,
    start_entrypoint,
    tiny_plan,
    write_plan,
)
from tests.text_corpus import documents, write_jsonl

pytestmark = pytest.mark.torchrun


def two_nodes(tmp_path: Path, name: str, plan) -> tuple[list[str], list[dict]]:
    """Both nodes' output, and the first node's metrics."""
    port, processes = str(free_port()), []
    for rank in (0, 1):
        root = tmp_path / name / f"node{rank}"
        env = entrypoint_env(
            root,
            DOCKYARD_HOSTS="127.0.0.1,127.0.0.1",
            DOCKYARD_NODE_RANK=str(rank),
            DOCKYARD_MASTER_PORT=port,
            **SHARED_CORES,
        )
        processes.append(start_entrypoint(write_plan(plan, root), env))
    outputs = [process.communicate(timeout=240)[0] for process in processes]
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output[-4000:]
    return outputs, metrics(tmp_path / name / "node0")


def test_two_nodes_split_the_tokenization_of_a_shared_cache_and_train_as_before(tmp_path, hf_tokenizer):
    data = tmp_path / "data"
    write_jsonl(data / "train.jsonl", [{"text": doc} for doc in documents(300)])
    options = (
        "hardware.nodes=2",
        "hardware.processes_per_node=1",
        "data=local",
        f"data.path={data}",
        "data.format=text",
        f"data.tokenizer={hf_tokenizer}",
        "model.vocab=512",
        "data.validation=0.2",
        "trainer.eval_interval=3",
    )
    per_node, today = two_nodes(tmp_path, "per-node", tiny_plan(*options))
    assert all("token cache       building" in out and "tokenizes share" not in out for out in per_node)

    shared = tiny_plan(*options, f"data.cache={tmp_path / 'shared-cache'}")
    split, records = two_nodes(tmp_path, "split", shared)
    for node, output in enumerate(split):
        assert f"this node tokenizes share {node + 1} of 2" in output, output[-3000:]
    tokenized = [int(out.split("tokenizing        ")[1].split(" documents")[0]) for out in split]
    assert sum(tokenized) == 300 and min(tokenized) > 100, tokenized  # about half each
    assert "2 shards assembled" in split[0]
    for step, loss in losses(today).items():
        assert losses(records)[step] == pytest.approx(loss, abs=RERUN_TOLERANCE), step
    assert records[-1]["val_loss"] == pytest.approx(today[-1]["val_loss"], abs=RERUN_TOLERANCE)
