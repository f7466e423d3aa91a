"""Trackers in a real local run: the image installs the pinned clients the plan uses, the trainer in the
container logs to a real MLflow server on the host's loopback (which the local target relays to the
containers) and to TensorBoard (W&B's offline run is tested in test_metrics_sinks); the run ends with its
loss.png, which `dockyard status RUN --plot` draws again. Tracker credentials reach the containers from the
shell, never the plan or the request. A run that `dockyard stop` stops saves a checkpoint and ends its MLflow
run as KILLED."""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from compiler.images.build import build_image, ensure_base_image
from compiler.launch import runs
from compiler.targets import records
from compiler.targets.local import runner
from compiler.targets.local import translate as local
from entrypoint.trainer import checkpoint
from tests.helpers import plan_for, unconstrained_packages

DOCKYARD = str(Path(sys.executable).parent / "dockyard")
PNG = b"\x89PNG\r\n\x1a\n"
TOKEN = "mlflow-token-that-stays-in-the-shell"


def tracked_plan(tracking_uri: str, *overrides: str):
    return plan_for(
        "experiment=smoke",
        "hardware.nodes=1",
        "trainer.log_interval=2",
        "trainer.trackers=[tensorboard,mlflow]",
        f"trainer.mlflow.tracking_uri={tracking_uri}",
        *overrides,
    )


def tracked_image(engine, plan) -> str:
    ensure_base_image(engine, plan.image, sys.stdout)
    return build_image(plan, engine, cwd=Path.cwd()).reference


def test_a_tracker_on_the_hosts_loopback_is_reached_through_the_host():
    request = local.to_request(tracked_plan("http://localhost:5000/"), "i", run_id="r", run_dir=Path("/runs/r"))
    (container,) = request.containers
    assert container.environment["DOCKYARD_MLFLOW_TRACKING_URI"] == "http://host.docker.internal:5000/"
    assert request.loopback_ports == (5000,)
    started = runner.at_host_address(container.environment, "172.18.0.1")
    assert started["DOCKYARD_MLFLOW_TRACKING_URI"] == "http://172.18.0.1:5000/"  # a Host header MLflow accepts
    remote = local.to_request(tracked_plan("https://mlflow.example.com"), "i", run_id="r", run_dir=Path("/runs/r"))
    assert "DOCKYARD_MLFLOW_TRACKING_URI" not in remote.containers[0].environment and not remote.loopback_ports


def test_tracker_credentials_come_from_the_shell_only():
    assert runner.credentials({"MLFLOW_TRACKING_TOKEN": TOKEN, "HOME": "/root"}) == {"MLFLOW_TRACKING_TOKEN": TOKEN}


@pytest.mark.torchrun
def test_a_local_run_logs_to_mlflow_and_tensorboard_and_is_plotted(engine, mlflow_server, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    plan = tracked_plan(
        mlflow_server,
        "hardware.processes_per_node=1",
        "model.seq_len=64",
        "trainer.steps=6",
        "trainer.mlflow.experiment=local-target",
    )
    image = tracked_image(engine, plan)
    freeze = engine.containers.run(image, ["pip", "freeze"], entrypoint=[], remove=True, network_mode="none")
    assert unconstrained_packages(freeze.decode(), plan) == []  # the clients' dependencies are constrained
    run_dir = tmp_path / "run"
    request = local.to_request(plan, image, run_id="dockyard-trackers-test", run_dir=run_dir)
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", TOKEN)  # the server ignores it; it must not be written anywhere
    with open(tmp_path / "run.out", "w") as out:
        record = runs.execute(runs.new_record(plan, request, run_dir, image), plan, request, out=out)
    log = (tmp_path / "run.out").read_text()
    assert record.status == "completed", log[-3000:]
    assert "warning" not in log, log[-3000:]
    curve = runs.loss_curve(run_dir)
    assert [m["step"] for m in curve] == [1, 2, 4, 6]

    client = MlflowClient(mlflow_server)
    (found,) = client.search_runs([client.get_experiment_by_name("local-target").experiment_id])
    assert found.data.tags["dockyard.plan_hash"] == plan.content_hash
    assert found.data.tags["dockyard.run_id"] == "dockyard-trackers-test"
    history = client.get_metric_history(found.info.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(m["step"], m["loss"]) for m in curve]

    output = run_dir / "nodes/algo-1/output/data"
    events = EventAccumulator(str(output / "tensorboard"))
    events.Reload()
    assert [event.step for event in events.Scalars("loss")] == [1, 2, 4, 6]

    written = [path for path in run_dir.rglob("*") if path.is_file() and path.suffix in (".json", ".log", ".jsonl")]
    assert not [path for path in written if TOKEN in path.read_text(errors="replace")]
    assert TOKEN not in request.to_json() and TOKEN not in plan.to_json()

    assert (run_dir / "loss.png").read_bytes()[:8] == PNG
    (run_dir / "loss.png").unlink()
    shown = subprocess.run([DOCKYARD, "status", str(run_dir), "--plot"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert f"plot      {run_dir / 'loss.png'}" in shown.stdout
    assert (run_dir / "loss.png").read_bytes()[:8] == PNG


def stop_with_the_cli(run_dir: Path) -> str:
    """`dockyard stop RUN_DIR`, as a user in another shell: what it printed."""
    stop = subprocess.run([DOCKYARD, "stop", str(run_dir)], capture_output=True, text=True, timeout=120)
    return stop.stdout + stop.stderr


def press_ctrl_c(run_dir: Path) -> str:
    """SIGINT to this process, as Ctrl-C in the launch's terminal: the launch runs in the main thread, where the
    test has put Python's own handler back (a suite started in the background has SIGINT ignored)."""
    os.kill(os.getpid(), signal.SIGINT)
    return ""


STOPS = {
    "dockyard stop": (
        stop_with_the_cli,
        "stopped   dockyard-stop-tracked\n",
        "dockyard: the job was stopped by `dockyard stop`",
        "stopped by `dockyard stop`",
    ),
    "ctrl-c": (press_ctrl_c, "", "dockyard: interrupted: stopping the nodes (Ctrl-C again kills them)", "interrupted"),
}
"""How a user stops a run → what the stopping command printed, what the launch printed, the record's detail."""


@pytest.mark.torchrun
@pytest.mark.parametrize("how", list(STOPS))
def test_a_stopped_local_run_saves_a_checkpoint_and_ends_its_mlflow_run_killed(engine, mlflow_server, tmp_path, how):
    """`dockyard stop`, or Ctrl-C in the launch's terminal, sends the nodes SIGTERM: the trainer saves a checkpoint
    at the end of its step and ends its tracker's run, well before SIGKILL, and the launch says the job was
    stopped, not that it failed."""
    from mlflow.tracking import MlflowClient

    stop, said, launch_said, detail = STOPS[how]
    experiment = f"stopped-run-{how.replace(' ', '-')}"
    plan = tracked_plan(
        mlflow_server,
        "hardware.processes_per_node=1",
        "trainer.steps=100000",
        "trainer.checkpoint_interval=0",
        f"trainer.mlflow.experiment={experiment}",
    )
    run_dir = tmp_path / "run"
    request = local.to_request(plan, tracked_image(engine, plan), run_id="dockyard-stop-tracked", run_dir=run_dir)
    record = runs.new_record(plan, request, run_dir, request.image)
    stopped_by: list[str] = []

    def stop_once_it_trains() -> None:
        deadline = time.monotonic() + 300
        while not runs.loss_curve(run_dir) and time.monotonic() < deadline:
            time.sleep(0.5)
        stopped_by.append(stop(run_dir))

    stopper = threading.Thread(target=stop_once_it_trains)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # put back below
    with open(tmp_path / "run.out", "w") as out:
        stopper.start()
        try:  # in the main thread, where Ctrl-C lands
            runs.execute(record, plan, request, out=out)
        except KeyboardInterrupt:
            assert how == "ctrl-c"
        finally:
            signal.signal(signal.SIGINT, previous)
        stopper.join(timeout=120)
    log = (tmp_path / "run.out").read_text()
    assert stopped_by == [said], log[-3000:]
    ended = records.load(run_dir)
    assert (ended.status, ended.detail) == ("stopped", detail), log[-3000:]
    assert launch_said in log and "failed" not in log, log[-3000:]
    ((step, _),) = checkpoint.complete(run_dir / "checkpoints")  # the one checkpoint, saved at SIGTERM
    stopped = f"training stopped: JobStoppedError: stopped by SIGTERM after step {step}; its checkpoint is saved"
    assert f"algo-1 | dockyard-entrypoint: {stopped}" in log, log[-3000:]  # before SIGKILL: the launcher said so
    assert not runner.running("dockyard-stop-tracked", engine)

    client = MlflowClient(mlflow_server)
    (found,) = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    assert found.info.status == "KILLED"
