"""End to end through an EMULATED cluster: the smoke plan's manifests, their pods started as local Docker
containers by `tests.kubelet_emulation` (which plays the JobSet, Job and Kubeflow controllers and the kubelet;
no API server or kubelet can run here). The image, its arguments, the environment the manifests and the
controllers give each pod, the volumes and the pods' DNS names are the real ones; scheduling, GPUs and the
API are not."""

import io
import json
import sys
from pathlib import Path

import pytest

from compiler.images.build import build_image, ensure_base_image
from compiler.targets.kubernetes import translate
from tests.helpers import plan_for
from tests.kubelet_emulation import LABEL, Emulation

pytestmark = pytest.mark.torchrun

SHORT = ("trainer.steps=6", "trainer.log_interval=1", "trainer.checkpoint_interval=5", "trainer.warmup_steps=2")
SHORT += ("model.seq_len=64", "hardware.processes_per_node=1")
"""The claims are about pods (each finds its rank in what its manifest and controller gave it) and the claim's
volume: one process a pod, at a quarter of the smoke model's sequence length, proves them as the full shape does."""


@pytest.mark.parametrize("kind", ["jobset", "pytorchjob", "indexed_job"])
def test_smoke_plan_trains_through_emulated_pods(kind, engine, tmp_path):
    plan = plan_for("experiment=smoke", "target=kubernetes", f"target.kind_of_job={kind}", "target.claim=runs", *SHORT)
    ensure_base_image(engine, plan.image, sys.stdout)
    image = build_image(plan, engine, cwd=Path.cwd()).reference
    run_id = f"smoke-{kind.replace('_', '-')}"
    request = translate.to_request(plan, image, run_id=run_id)
    claim = tmp_path / "claim"
    out = io.StringIO()

    statuses = Emulation(request.manifests, tmp_path / "kubelet", {"runs": claim}, client=engine).run(out)

    log = out.getvalue()
    assert set(statuses.values()) == {0}, log[-4000:]
    assert len(statuses) == 2
    hosts = translate.hostnames(plan, run_id)
    source = "kubeflow" if kind == "pytorchjob" else "dockyard"
    for rank, host in enumerate(hosts):  # each pod found its own rank, from what its manifest gave it
        assert f"{host.split('.')[0]} | cluster     {source}: node {rank} of 2" in log
    losses = [json.loads(line.split(" | ", 1)[1])["loss"] for line in log.splitlines() if '"loss"' in line]
    assert losses[-1] < losses[0]
    assert (claim / run_id / "model" / "model.safetensors").exists()
    assert (claim / run_id / "checkpoints" / "step-00000005" / "dockyard.json").exists()
    assert engine.containers.list(all=True, filters={"label": f"{LABEL}={run_id}"}) == []
