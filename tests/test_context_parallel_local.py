"""`parallelism.cp=2` on two local container nodes of one process each, so the two ranks of a context-parallel group
sit in different containers and every attention all-to-all and the loss's all-reduce cross the network between
them: the built-in decoder and a tiny `model=hf` Llama checkpoint, at seq_len 1024, on packed documents with
document-boundary masking, train to the step losses of the same plan at cp=1 on one host process."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.launch import runs
from tests.entrypoint_support import LLAMA_STYLE, losses, plan_for
from tests.entrypoint_support import train as train_on_host
from tests.pretrained import save_checkpoint
from tests.test_context_parallel import CP_TOLERANCE
from tests.text_corpus import documents, write_jsonl

pytestmark = pytest.mark.torchrun

DOCKYARD = str(Path(sys.executable).parent / "dockyard")


def common(data: Path, tokenizer: Path, model: tuple[str, ...]) -> tuple[str, ...]:
    """Two steps of two sequences of 1024 tokens (one micro batch of one sequence per step and replica, twice)."""
    return (
        "experiment=smoke",
        *model,
        "data=local",
        f"data.path={data}",
        "data.format=text",
        f"data.tokenizer={tokenizer}",
        "data.packing_mask=true",
        "parallelism=fsdp",
        "parallelism.micro_batch=1",
        "parallelism.grad_accum=2",
        "parallelism.global_batch=-1",
        "model.seq_len=1024",
        "trainer.steps=2",
        "trainer.warmup_steps=1",
        "trainer.log_interval=1",
        "trainer.checkpoint_interval=0",
    )


@pytest.mark.parametrize("family", ["decoder", "hf"])
def test_cp2_over_two_container_nodes_trains_packed_documents_to_the_losses_of_cp1(
    engine, tmp_path, hf_tokenizer, family
):
    data = write_jsonl(tmp_path / "data/train.jsonl", [{"text": doc} for doc in documents(400)]).parent
    tokenizer = shutil.copytree(hf_tokenizer, tmp_path / "tokenizer")
    tokenizer.chmod(0o755)  # pytest's folders are 0700 and transformers saves files 0600: open them to the containers
    for file in tokenizer.iterdir():
        file.chmod(0o644)
    if family == "hf":
        checkpoint = save_checkpoint(tmp_path / "llama", "llama", vocab=512, max_position_embeddings=1024)
        model: tuple[str, ...] = ("model=hf", f"model.path={checkpoint}")
    else:
        model = ("model.vocab=512", "model.context=1024", "model.layers=2", *LLAMA_STYLE)
    overrides = common(data, tokenizer, model)
    split = ("hardware.nodes=2", "hardware.processes_per_node=1", "parallelism.cp=2")
    command = [DOCKYARD, "launch", *overrides, *split, "hydra.run.dir=run"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "attention inside documents" in result.stdout + result.stderr
    assert "algo-1 | " in result.stdout and "algo-2 | " in result.stdout
    over_nodes = losses(runs.loss_curve(tmp_path / "run"))
    whole = plan_for(*overrides, "hardware.nodes=1", "hardware.processes_per_node=1")
    reference = losses(train_on_host(whole, tmp_path / "reference"))
    assert list(over_nodes) == [1, 2]
    assert over_nodes == pytest.approx(reference, abs=CP_TOLERANCE)
