"""Recovery: in-job restarts under torchrun across two nodes (a real SIGKILL of a rank), async checkpoints
against sync ones, and what `launch --resume` refuses.

The two nodes are two entrypoints on this host, described to each other as a Kubeflow cluster would, sharing
one root as the local target's nodes share the run folder."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from compiler.launch.resume import check_reshard
from compiler.spec.contract import RESTARTS_FILE
from compiler.spec.errors import ConfigError
from compiler.targets import records
from entrypoint.launcher.cluster import Paths, discover
from entrypoint.launcher.main import WARM_WORKERS, launch_command, rendezvous_arguments, restart_env
from entrypoint.trainer.restarts import precedence
from tests.entrypoint_support import (
    CLUSTER_ENVIRONMENTS,
    RERUN_TOLERANCE,
    SHARED_CORES,
    entrypoint_env,
    free_port,
    is_rank,
    losses,
    metrics,
    plan_for,
    start_entrypoint,
    tiny_plan,
    train,
    write_plan,
)

RECOVERY = ("hardware.nodes=2", "hardware.processes_per_node=1", "trainer.steps=12", "trainer.checkpoint_interval=3")
TOLERANCE = 1e-5
"""The reference runs the same two ranks on one node, where gloo may sum in another order: the losses agree to
the last digit or so of the six logged."""


def start_two_nodes(plan, root: Path) -> list[subprocess.Popen]:
    port, path = str(free_port()), write_plan(plan, root)
    cluster = {"PET_NNODES": "2", "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": port, **SHARED_CORES}
    return [start_entrypoint(path, entrypoint_env(root, PET_NODE_RANK=str(rank), **cluster)) for rank in (0, 1)]


def wait_for_step(root: Path, step: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    path = root / "output/data/metrics.jsonl"
    while time.monotonic() < deadline:
        if path.exists() and any(json.loads(line)["step"] >= step for line in path.read_text().splitlines()):
            return
        time.sleep(0.05)
    raise AssertionError(f"no step {step} within {timeout} s")


def kill_one_rank(node: subprocess.Popen) -> None:
    """SIGKILL the node's worker: the trainer process torchrun's agent forked from its forkserver
    (entrypoint → agent → forkserver → worker; `entrypoint.trainer.workers`)."""
    (worker,) = filter(is_rank, psutil.Process(node.pid).children(recursive=True))
    worker.send_signal(signal.SIGKILL)


@pytest.mark.torchrun
def test_a_killed_rank_restarts_in_job_and_the_losses_match_the_uninterrupted_run(tmp_path):
    plan = tiny_plan(*RECOVERY, "trainer.restarts=1")
    # the same two ranks on one node: the uninterrupted losses
    reference = tiny_plan(*RECOVERY, "hardware.nodes=1", "hardware.processes_per_node=2")
    uninterrupted = losses(train(reference, tmp_path / "reference"))
    root = tmp_path / "job"
    nodes = start_two_nodes(plan, root)
    wait_for_step(root, 4)
    kill_one_rank(nodes[1])  # the other node restarts its worker without a failure of its own
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    restarts = root / f"output/data/{RESTARTS_FILE}"
    assert restarts.is_file(), outputs[0][-3000:] + outputs[1][-3000:]
    events = [json.loads(line) for line in restarts.read_text().splitlines()]
    assert len(events) == 1, events
    resumed_step, reached = events[0]["resumed_step"], events[0]["reached_step"]
    assert resumed_step in (3, 6, 9) and reached >= 4 and events[0]["steps_lost"] == reached - resumed_step
    assert "restart 1 of 1: local rank 0 on node 1 (node-1) failed: killed by SIGKILL" in outputs[1]
    # the cause, as node 1's entrypoint noted it, is in the record; node 0's ranks lost their peer after it
    assert events[0]["cause"] == "local rank 0 on node 1 (node-1): killed by SIGKILL", events[0]
    first, *after = events[0]["failures"]
    assert (first["host"], first["local_rank"], first["exit_code"]) == ("node-1", 0, -signal.SIGKILL)
    assert all(failure["host"] == "node-0" and failure["exit_code"] == 1 for failure in after), after
    # printed by global rank 0, on either node: c10d ranks the agents by address, then by pid, and both nodes
    # here are 127.0.0.1 (a pid that wrapped around puts node 1's agent first)
    assert "health check      skipped: in-job restart 1 on the nodes that passed it" in "".join(outputs)
    steps = [record["step"] for record in metrics(root)]
    assert steps.count(resumed_step + 1) == 2, steps  # that step ran before the kill and again after the restart
    resumed = losses(metrics(root))  # the last line of each step: after the restart
    assert max(resumed) == 12
    for step in range(resumed_step + 1, 13):
        assert resumed[step] == pytest.approx(uninterrupted[step], abs=TOLERANCE), step


def test_a_restart_is_put_down_to_the_rank_that_died_not_to_the_peers_that_lost_it():
    lost = {"exit_code": 1, "cause": "RuntimeError: [pair.cc:553] Connection closed by peer [172.17.0.3]:8110", "at": 1}
    killed = {"exit_code": -9, "cause": "killed by SIGKILL", "at": 2}
    failed = {"exit_code": 1, "cause": "OSError: [Errno 28] No space left on device", "at": 3}
    assert sorted([lost, failed, killed], key=precedence) == [killed, failed, lost]
    assert sorted([lost, failed], key=precedence) == [failed, lost]


def saved_state(folder: Path, scratch: Path) -> dict:
    """A DCP checkpoint's every value under flat keys (`model.<name>`, `optim.state.<name>.exp_avg`, ...)."""
    whole = scratch / f"{folder.parent.parent.name}.pt"
    dcp_to_torch_save(folder, whole)
    flat: dict = {}

    def walk(prefix: str, value: object) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), inner)
        else:
            flat[prefix] = value

    walk("", torch.load(whole, weights_only=False))
    return flat


@pytest.mark.torchrun
def test_async_checkpoints_restore_what_sync_ones_do(tmp_path, tiny_runs):
    """FSDP (sharded state, the harder case for staging): the async checkpoint at step 3 is complete (marker,
    final name) and holds exactly what the sync one holds, and a run resumed from it gives the uninterrupted
    (sync-checkpointing) run's losses. The async run is stopped there (DOCKYARD_STOP_AT_STEP): it ends after
    step 3 without exporting a model."""
    base = ("hardware.nodes=1", "hardware.processes_per_node=2", "parallelism=fsdp")
    sync_root, sync = tiny_runs("fsdp")  # tiny_plan(*base), uninterrupted
    asynchronous = train(
        tiny_plan(*base, "trainer.checkpoint_async=true"), tmp_path / "async", DOCKYARD_STOP_AT_STEP="3"
    )
    assert (tmp_path / "async/checkpoints/step-00000003/dockyard.json").is_file()
    assert not list((tmp_path / "async/checkpoints").glob("*.tmp"))
    assert [r["step"] for r in asynchronous] == [1, 2, 3]
    assert not (tmp_path / "async/model/model.safetensors").exists()
    roots = {"sync": sync_root, "async": tmp_path / "async"}
    written = {kind: saved_state(root / "checkpoints/step-00000003", tmp_path) for kind, root in roots.items()}
    assert written["sync"].keys() == written["async"].keys()
    for key, value in written["sync"].items():
        assert torch.equal(value, written["async"][key]) if torch.is_tensor(value) else value == written["async"][key]
    train(tiny_plan(*base, "trainer.checkpoint_async=true"), tmp_path / "async")
    resumed, uninterrupted = losses(metrics(tmp_path / "async")), losses(sync)
    for step in (4, 5, 6):
        assert resumed[step] == pytest.approx(uninterrupted[step], abs=RERUN_TOLERANCE), step


def test_async_checkpoints_with_zero_are_refused_in_one_line():
    with pytest.raises(ConfigError) as error:
        tiny_plan("parallelism=zero2", "trainer.checkpoint_async=true")
    assert error.value.key == "trainer.checkpoint_async"
    assert "\n" not in error.value.one_line()


def test_checkpoint_minutes_and_steps_are_one_clock():
    with pytest.raises(ConfigError) as error:
        tiny_plan("trainer.checkpoint_minutes=60")
    assert error.value.key == "trainer.checkpoint_minutes"


@pytest.mark.parametrize(
    ("before", "after", "key"),
    [
        (("model.layers=2",), ("model.layers=3",), "model.layers"),
        (("parallelism=ddp",), ("parallelism=zero2",), "parallelism.strategy"),
        (("parallelism=zero2",), ("parallelism=zero2", "hardware.processes_per_node=1"), "hardware.nodes"),
    ],
)
def test_what_a_checkpoint_cannot_become_is_refused_in_one_line(before, after, key):
    with pytest.raises(ConfigError) as error:
        check_reshard(tiny_plan(*before), tiny_plan(*after))
    assert error.value.key == key
    assert "\n" not in error.value.one_line()


def test_another_data_parallel_degree_is_resharded():
    check_reshard(tiny_plan("parallelism=fsdp"), tiny_plan("parallelism=fsdp", "hardware.processes_per_node=1"))


DOCKYARD = str(Path(sys.executable).parent / "dockyard")


@pytest.mark.parametrize(
    ("status", "checkpoint", "message"),
    [
        ("running", True, "--resume: run smoke-1 is still running; dockyard stop smoke-1"),
        ("failed", False, "--resume: run smoke-1 has no complete checkpoint in"),
    ],
)
def test_resume_refuses_a_run_it_cannot_continue_in_one_line(tmp_path, status, checkpoint, message):
    run_dir = tmp_path / "run"
    records.save(records.RunRecord(run_dir=str(run_dir), run_id="smoke-1", target="local", status=status))
    if checkpoint:
        (run_dir / "checkpoints/step-00000005").mkdir(parents=True)
        (run_dir / "checkpoints/step-00000005/dockyard.json").write_text("{}")
    result = subprocess.run([DOCKYARD, "launch", "--resume", "smoke-1"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"dockyard: error: {message}"), line
    assert {path.name for path in run_dir.iterdir()} == ({"run.json", "checkpoints"} if checkpoint else {"run.json"})


def test_restarts_start_torchrun_under_the_c10d_rendezvous_with_a_fresh_store(tmp_path):
    node = discover(CLUSTER_ENVIRONMENTS["kubeflow"], tmp_path)
    assert rendezvous_arguments(node, 0)[-1] == "--max-restarts=0"  # the static rendezvous, as before
    assert rendezvous_arguments(node, 2) == (
        "--rdzv-backend=c10d",
        "--rdzv-endpoint=llama-master-0:23456",
        "--rdzv-id=dockyard",
        "--rdzv-conf=is_host=false",
        "--max-restarts=2",
    )
    # the built-in trainer's workers fork from a warm interpreter, with restarts or without (entrypoint.trainer.workers)
    for restarts in (0, 1):
        command = launch_command(tiny_plan(f"trainer.restarts={restarts}"), node, Paths(tmp_path), tmp_path, [])
        assert command[:3] == ("python", "-m", WARM_WORKERS) and command[-3:-1] == ("-m", "entrypoint.trainer")
    assert [row.name for row in restart_env(2, {})] == ["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"]
    assert restart_env(2, {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"}) == []  # the user's setting stands
    assert restart_env(0, {}) == []


def test_the_planner_counts_the_async_checkpoint_staging_in_host_memory():
    overrides = ("experiment=llama3-8b-p5x4",)
    sync, background = plan_for(*overrides), plan_for(*overrides, "trainer.checkpoint_async=true")
    assert "checkpoint staging" not in sync.estimate.host_memory
    staged = background.estimate.host_memory["checkpoint staging"]
    per_rank = 12 * sync.parameters / sync.layout.shard_degree / sync.layout.tp
    assert staged == pytest.approx(per_rank * sync.layout.processes_per_node, rel=0.05)
