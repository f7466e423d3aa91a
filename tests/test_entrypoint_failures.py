"""Failures end the job: two entrypoints stand in for two nodes (one process each, on this machine).

A killed rank and a hung rank (SIGSTOP: alive, sockets open, never answering) must make the other node
exit non-zero within the configured collective timeout, with the reason in its failure file and its tracker's
run ended as failed.
"""

import signal
import time
from pathlib import Path

import psutil
import pytest

from entrypoint.launcher.failures import StopTracebacks
from entrypoint.trainer import checkpoint
from tests.entrypoint_support import (
    SHARED_CORES,
    entrypoint_env,
    free_port,
    is_rank,
    metrics,
    start_entrypoint,
    tiny_plan,
    train,
    write_plan,
)

pytestmark = pytest.mark.torchrun

TIMEOUT_S = 10
"""DOCKYARD_TIMEOUT for these jobs: what a collective may wait before it fails."""


def two_nodes(tmp_path: Path, *overrides: str):
    plan = tiny_plan("hardware.nodes=2", "hardware.processes_per_node=1", "trainer.steps=100000", *overrides)
    port = str(free_port())
    processes = []
    for rank in (0, 1):
        root = tmp_path / f"node{rank}"
        env = entrypoint_env(
            root,
            DOCKYARD_HOSTS="127.0.0.1,127.0.0.1",
            DOCKYARD_NODE_RANK=str(rank),
            DOCKYARD_MASTER_PORT=port,
            DOCKYARD_TIMEOUT=str(TIMEOUT_S),
            **SHARED_CORES,
        )
        processes.append(start_entrypoint(write_plan(plan, root), env))
    return processes


def wait_until_training(root: Path, processes, limit: float = 90) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if (root / "output/data/metrics.jsonl").exists() and metrics(root):
            return
        assert all(p.poll() is None for p in processes), "a node ended before training started"
        time.sleep(0.5)
    pytest.fail("training did not start")


def trainer_process(entrypoint) -> psutil.Process:
    """The rank: forked from the forkserver of torchrun's agent (entrypoint → agent → forkserver → rank)."""
    return next(filter(is_rank, psutil.Process(entrypoint.pid).children(recursive=True)))


def finish(process, limit: float) -> tuple[int, str, float]:
    started = time.monotonic()
    output, _ = process.communicate(timeout=limit)
    return process.returncode, output, time.monotonic() - started


def stop_everything(processes) -> None:
    for process in processes:
        if process.poll() is None:
            for child in psutil.Process(process.pid).children(recursive=True):
                child.send_signal(signal.SIGCONT)
                child.kill()
            process.kill()
            process.communicate()


@pytest.mark.timed  # a 10 s collective timeout: a busy neighbour's start-up could trip it
@pytest.mark.parametrize("fault", ["killed", "hung"])
def test_a_lost_rank_ends_the_other_node_with_an_error(tmp_path, fault, mlflow_server):
    from mlflow.tracking import MlflowClient

    tracked = ("trainer.trackers=[mlflow]", f"trainer.mlflow.tracking_uri={mlflow_server}")
    processes = two_nodes(tmp_path, *tracked, f"trainer.mlflow.experiment={fault}")
    try:
        wait_until_training(tmp_path / "node0", processes)
        victim = trainer_process(processes[1])
        victim.send_signal(signal.SIGKILL if fault == "killed" else signal.SIGSTOP)
        status, output, seconds = finish(processes[0], limit=TIMEOUT_S + 45)
    finally:
        stop_everything(processes)
    assert status != 0, output[-3000:]
    assert seconds < TIMEOUT_S + 30
    reason, context, *_ = (tmp_path / "node0/output/failure").read_text().splitlines()
    assert "Error" in reason and "torchrun exit status 1" in context
    if fault == "hung":  # the timeout's error says which step's collectives it was (tests/test_resilience.py)
        assert reason.startswith("CollectiveTimeoutError: step "), reason
        assert f"'s collectives timed out after {TIMEOUT_S} s: " in reason, reason
    assert "training failed" in output
    client = MlflowClient(mlflow_server)
    (tracked_run,) = client.search_runs([client.get_experiment_by_name(fault).experiment_id])
    assert tracked_run.info.status == "FAILED"


def test_sigterm_saves_a_checkpoint_that_the_next_run_resumes(tmp_path):
    """A stopped job (SageMaker's managed-spot interruption sends SIGTERM) checkpoints the step it is in, and the
    entrypoint says it stopped, not that it failed."""
    plan = tiny_plan("trainer.steps=100000", "trainer.checkpoint_interval=0")
    process = start_entrypoint(write_plan(plan, tmp_path), entrypoint_env(tmp_path))
    try:
        wait_until_training(tmp_path, [process])
        process.send_signal(signal.SIGTERM)
        status, output, seconds = finish(process, limit=60)
    finally:
        stop_everything([process])
    assert status != 0 and seconds < 35, output[-3000:]
    assert "dockyard-entrypoint: training stopped: JobStoppedError: stopped by SIGTERM" in output, output[-3000:]
    assert "(node 0, " in output.rsplit("training stopped: ", 1)[1]
    assert "Traceback" not in output and "SignalException" not in output, output[-3000:]  # a stop is no crash
    assert not (tmp_path / "output/failure").exists(), "a stopped job is no failure"
    ((step, _),) = checkpoint.complete(tmp_path / "checkpoints")
    train(plan, tmp_path, DOCKYARD_STOP_AT_STEP=str(step + 2))
    assert [record["step"] for record in metrics(tmp_path)][-2:] == [step + 1, step + 2]


def test_a_stops_tracebacks_are_dropped_and_any_other_is_passed_whole():
    """Rank tracebacks interleave, each line behind its rank's prefix; only those that end in a stop's
    exception are dropped, and only once the job is stopping."""
    agent = ["Traceback (most recent call last):\n", '  File "run.py", line 9\n', "    ^^^^\n"]
    agent += ["torch.distributed.elastic.multiprocessing.api.SignalException: Process 1 got signal: 15\n"]
    rank0 = ["[rank0]: Traceback (most recent call last):\n", '[rank0]:   File "train.py", line 1\n']
    rank0 += ["[rank0]: JobStoppedError: stopped by SIGTERM after step 2\n"]
    rank1 = ["[rank1]: Traceback (most recent call last):\n", '[rank1]:   File "data.py", line 3\n']
    rank1 += ["[rank1]: OSError: disk full\n"]
    lines = [rank0[0], rank1[0], rank0[1], rank1[1], rank0[2], rank1[2], "step 2\n", *agent]
    filtered = StopTracebacks()
    printed = [out for line in lines for out in filtered.passed(line, stopping=True)] + filtered.left()
    assert printed == [*rank1, "step 2\n"]
    running = StopTracebacks()
    assert [out for line in agent for out in running.passed(line, stopping=False)] == agent
