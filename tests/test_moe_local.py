"""A tiny Qwen3-MoE saved by transformers fine-tunes end to end on two local container nodes (2 processes each)
with `parallelism=fsdp parallelism.ep=2`: each expert-parallel pair holds 2 of the 4 experts, FSDP2 shards
them over the other pair; its step losses are ep=1's, `moe_aux_loss` and `expert_load_imbalance` are in
every metrics line, and the export loads in transformers with its expert weights changed."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from compiler.launch import runs
from compiler.spec.contract import EXPERT_LOAD_IMBALANCE, MOE_AUX_LOSS
from tests.pretrained import save_checkpoint

pytestmark = pytest.mark.torchrun

DOCKYARD = str(Path(sys.executable).parent / "dockyard")
EP_TOLERANCE = 1e-4
"""ep=2 against ep=1, per logged loss over 6 steps on 4 ranks (`test_moe_training.EP_TOLERANCE`'s reordered sums,
a few steps further)."""


def launch(folder: Path, checkpoint: Path, ep: int) -> Path:
    command = [DOCKYARD, "launch", "experiment=smoke", "model=hf", f"model.path={checkpoint}", "parallelism=fsdp"]
    command += [f"parallelism.ep={ep}", "trainer.steps=6", "trainer.lr=1e-2", "trainer.log_interval=1"]
    command += ["model.seq_len=64", "trainer.checkpoint_interval=0", "hydra.run.dir=run"]
    folder.mkdir()
    result = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = folder / "run"
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    return run_dir


def test_a_mixture_of_experts_fine_tunes_on_two_nodes_with_expert_parallelism(engine, tmp_path):
    checkpoint = save_checkpoint(tmp_path / "qwen3_moe", "qwen3_moe")
    curves = {ep: runs.loss_curve(launch(tmp_path / f"ep{ep}", checkpoint, ep)) for ep in (1, 2)}
    losses = {ep: [row["loss"] for row in curve] for ep, curve in curves.items()}
    assert len(losses[2]) == 6 and losses[2][-1] < losses[2][0]
    assert losses[2] == pytest.approx(losses[1], abs=EP_TOLERANCE)
    for row in curves[2]:
        assert row[MOE_AUX_LOSS] > 0 and 1 <= row[EXPERT_LOAD_IMBALANCE] <= 4, row

    source = AutoModelForCausalLM.from_pretrained(checkpoint).state_dict()
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "ep2/run/model").state_dict()
    experts = "model.layers.0.mlp.experts.down_proj"
    assert exported[experts].shape == source[experts].shape == (4, 64, 32)
    assert not torch.allclose(exported[experts], source[experts])
