"""Sweeps that train: the tiny model on the local target, one container node × one process per point,
a few steps each, two points at a time, on a real Docker engine."""

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from compiler.targets.local.runner import RUN_LABEL

pytestmark = pytest.mark.torchrun

DOCKYARD = str(Path(sys.executable).parent / "dockyard")
SWEEP = ["launch", "-m", "hydra/launcher=dockyard", "hydra.sweep.dir=sweep", "hydra.launcher.max_concurrent=2"]
SMALL = [
    "trainer.steps=6",
    "trainer.log_interval=2",
    "trainer.checkpoint_interval=0",
    "trainer.warmup_steps=1",
    "hardware.nodes=1",
    "hardware.processes_per_node=1",
    "model.seq_len=64",
]


def sweep(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run([DOCKYARD, *SWEEP, *SMALL, *args], cwd=cwd, capture_output=True, text=True, timeout=900)
    (cwd / "output.log").write_text(result.stdout + result.stderr)  # for a failing test's reader
    return result


def summary_rows(sweep_dir: Path) -> list[dict]:
    with (sweep_dir / "summary.csv").open() as file:
        return list(csv.DictReader(file))


def containers_of(engine, sweep_dir: Path) -> list:
    """The containers of this sweep's runs still on the engine (the engine is shared, so other runs' are not ours)."""
    run_ids = [json.loads(path.read_text())["run_id"] for path in sweep_dir.glob("*/run.json")]
    assert run_ids
    return [
        c for run_id in run_ids for c in engine.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"})
    ]


def test_four_points_share_one_image_and_end_in_a_summary_and_a_plot(tmp_path, engine):
    result = sweep(tmp_path, "trainer.lr=0.001,0.003", "parallelism=ddp,fsdp")
    assert result.returncode == 0, result.stderr[-2000:]
    folder = tmp_path / "sweep"
    image_lines = [line for line in result.stdout.splitlines() if line.startswith("image     ")]
    assert len(image_lines) == 1, image_lines  # one build (or one lookup) for the four points
    references = {json.loads((folder / str(n) / "image.json").read_text())["reference"] for n in range(4)}
    assert len(references) == 1
    rows = summary_rows(folder)
    assert [r["job"] for r in rows] == ["0", "1", "2", "3"]
    assert {r["status"] for r in rows} == {"completed"}
    for num, row in enumerate(rows):
        metrics = [json.loads(line) for line in (folder / str(num) / "nodes/algo-1/output/data/metrics.jsonl").open()]
        assert metrics[-1]["step"] == 6
        assert float(row["final_loss"]) == round(metrics[-1]["loss"], 4)
        assert float(row["tokens_per_s"]) > 0 and float(row["wall_s"]) > 0
        assert json.loads((folder / str(num) / "run.json").read_text())["run_id"].endswith(f"-{num}")
    assert rows[0]["overrides"].endswith("trainer.lr=0.001 parallelism=ddp")
    cores = len(os.sched_getaffinity(0))  # two one-node points at a time: each rank takes half the cores
    threads = f"OMP_NUM_THREADS={max(1, cores // 2)}  # {cores} CPUs split among the training processes on this "
    assert f"{threads}machine: 2 node(s) × 1" in (folder / "0/logs/algo-1.log").read_text()
    markdown = (folder / "summary.md").read_text()
    assert "| 3 | trainer.lr=0.003 parallelism=fsdp | completed |" in markdown
    assert (folder / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not containers_of(engine, folder)


def test_invalid_points_are_skipped_a_failed_point_is_reported_and_the_others_complete(tmp_path, engine):
    """tp=3 cannot divide one rank: skipped. The second point's gloo cannot find its network interface, so its
    trainer exits non-zero; the first completes."""
    interfaces = "+target.environment.GLOO_SOCKET_IFNAME=eth0,no-such-interface"
    result = sweep(tmp_path, "hydra.launcher.skip_invalid=true", "parallelism.tp=1,3", interfaces)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("dockyard: error: job ")]
    assert [line.split(" (")[0] for line in errors] == [f"dockyard: error: job {n}" for n in (1, 2, 3)], errors
    assert "GLOO_SOCKET_IFNAME=no-such-interface): exit status 1; see " in errors[0]
    assert all("parallelism.tp: dp=? × tp=3" in line for line in errors[1:]), errors
    rows = summary_rows(tmp_path / "sweep")
    assert [r["status"] for r in rows] == ["completed", "failed", "invalid", "invalid"]
    assert float(rows[0]["final_loss"]) > 0 and rows[1]["final_loss"] == ""


def test_optuna_sweep_minimises_the_final_loss(tmp_path, engine):
    result = sweep(
        tmp_path,
        "hydra/sweeper=optuna",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.n_jobs=2",
        "hydra.sweeper.direction=minimize",
        "hydra.sweeper.sampler.seed=1",
        "hydra.launcher.objective=loss",
        "trainer.lr=interval(0.001,0.01)",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    folder = tmp_path / "sweep"
    best = yaml.safe_load((folder / "optimization_results.yaml").read_text())
    points = [json.loads((folder / str(n) / "run.json").read_text()) for n in range(2)]
    losses = {o: point["final"]["loss"] for point in points for o in point["overrides"] if o.startswith("trainer.lr=")}
    assert len(losses) == 2 and best["best_value"] == min(losses.values())
    assert losses[f"trainer.lr={best['best_params']['trainer.lr']}"] == best["best_value"]
    assert "Best value" in result.stdout + result.stderr
    assert [r["status"] for r in summary_rows(folder)] == ["completed", "completed"]


def interruptible() -> None:
    """Ctrl-C's default action in the child, as a terminal gives it: a shell that started this test run in
    the background has SIGINT ignored, and Python then never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_the_running_point_and_cancels_the_queued_ones(tmp_path, engine):
    """One point at a time, three long points: Ctrl-C while the first trains."""
    options = [option for option in SWEEP + SMALL if "max_concurrent" not in option and "steps=" not in option]
    command = [DOCKYARD, *options, "hydra.launcher.max_concurrent=1", "trainer.steps=100000", "trainer.seed=1,2,3"]
    log = (tmp_path / "output.log").open("w")
    sweep = subprocess.Popen(
        command, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, text=True, preexec_fn=interruptible
    )
    first_log = tmp_path / "sweep/0/logs/algo-1.log"
    deadline = time.monotonic() + 600
    while '"step": ' not in (first_log.read_text() if first_log.exists() else "") and time.monotonic() < deadline:
        assert sweep.poll() is None, (tmp_path / "output.log").read_text()[-3000:]
        time.sleep(1)
    sweep.send_signal(signal.SIGINT)
    assert sweep.wait(timeout=120) != 0
    assert "interrupted: cancelling the points not started" in (tmp_path / "output.log").read_text()
    rows = summary_rows(tmp_path / "sweep")
    assert [r["status"] for r in rows] == ["stopped", "cancelled", "cancelled"]
    assert not (tmp_path / "sweep/1/logs").exists()  # never started
    assert not containers_of(engine, tmp_path / "sweep")
    run_id = json.loads((tmp_path / "sweep/0/run.json").read_text())["run_id"]
    assert not engine.networks.list(names=[f"dockyard-{run_id}"])
