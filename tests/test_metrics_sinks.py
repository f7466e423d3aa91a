"""The metrics seam: the planner's tracker names are the trainer's registry; a line the `jsonl` sink writes is
what SageMaker's metric regexes and the run reader both read (Python's `re` stands in for SageMaker's regex
engine: these patterns use nothing the two treat differently); every tracker records the run where its own
reader finds it (TensorBoard's event reader, a real MLflow server, a W&B offline run); and a tracker that is
down costs one warning, never the records."""

import io
import re

import pytest

from compiler.launch import runs
from compiler.spec.contract import REPORTED_METRICS, TRACKERS
from compiler.targets.sagemaker import translate
from entrypoint.trainer.metrics import SINKS, TrackedRun, open_sinks
from tests.helpers import plan_for
from tests.local_server import free_port

RECORD = {
    "step": 40,
    "loss": 2.5e-05,
    "val_loss": 3.25,
    "lr": 3e-4,
    "grad_norm": 0.75,
    "tokens_per_s": 91234.5,
    "mfu": 0.4125,
}
RECORDS = [
    {"step": step, "loss": 4.0 / step, "lr": 3e-4, "grad_norm": 0.5, "mfu": None, "elapsed_s": 0.25 * step}
    for step in (1, 10, 20)
]
RECORDS[-1] = RECORDS[-1] | {"val_loss": 0.3}


def test_the_planner_knows_the_trainers_sinks():
    assert set(SINKS) == set(TRACKERS)


def test_jsonl_is_always_on_and_listed_once():
    assert plan_for("trainer.trackers=[tensorboard,jsonl,tensorboard]").trainer.trackers == ["jsonl", "tensorboard"]


def test_a_jsonl_line_is_read_by_sagemaker_and_by_the_run_reader(tmp_path):
    printed = io.StringIO()
    sink = SINKS["jsonl"](TrackedRun(plan_for(), tmp_path / "output/data", "r"), printed)
    sink.write(RECORD)
    sink.close()
    found = {}
    for definition in translate.metric_definitions():
        match = re.search(definition["Regex"], printed.getvalue())
        assert match, definition
        found[definition["Name"]] = float(match.group(1))
    assert found == {name: RECORD[name] for name in REPORTED_METRICS}
    assert runs.loss_curve(tmp_path) == [RECORD]


def record_run(run: TrackedRun) -> None:
    sinks = open_sinks(run.plan.trainer.trackers, run)
    for record in RECORDS:
        for sink in sinks:
            sink.write(record)
    for sink in sinks:
        sink.close()


def test_every_tracker_records_the_run(tmp_path, mlflow_server, monkeypatch):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.delenv("WANDB_MODE", raising=False)
    plan = plan_for(
        "trainer.trackers=[tensorboard,mlflow,wandb]",
        f"trainer.mlflow.tracking_uri={mlflow_server}",
        "trainer.mlflow.experiment=every-tracker",
    )
    output = tmp_path / "output/data"
    record_run(TrackedRun(plan, output, "run-1"))

    events = EventAccumulator(str(output / "tensorboard"))
    events.Reload()
    assert [(event.step, event.value) for event in events.Scalars("loss")] == [
        (record["step"], pytest.approx(record["loss"])) for record in RECORDS
    ]
    assert [event.step for event in events.Scalars("val_loss")] == [20]
    assert "mfu" not in events.Tags()["scalars"]  # null on CPU: no point

    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name("every-tracker")
    (found,) = client.search_runs([experiment.experiment_id])
    assert found.info.run_name == "run-1" and found.info.status == "FINISHED"
    assert found.data.tags["dockyard.plan_hash"] == plan.content_hash
    assert found.data.params["global_batch"] == str(plan.batch.global_batch)
    history = client.get_metric_history(found.info.run_id, "loss")
    assert [(metric.step, metric.value) for metric in history] == [(r["step"], r["loss"]) for r in RECORDS]

    (offline,) = (output / "wandb").glob("offline-run-*/run-*.wandb")  # the folder `wandb sync` uploads
    assert b"val_loss" in offline.read_bytes()

    assert runs.loss_curve(tmp_path) == RECORDS


def test_a_tracker_that_is_down_costs_one_warning_and_no_records(tmp_path, capsys, monkeypatch):
    for name in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(name, raising=False)  # the sink's quick-failure defaults, undone after the test
    closed = f"http://127.0.0.1:{free_port()}"
    plan = plan_for("trainer.trackers=[mlflow]", f"trainer.mlflow.tracking_uri={closed}")
    record_run(TrackedRun(plan, tmp_path / "output/data", "down"))
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "the mlflow tracker failed" in warnings[0], warnings
    assert runs.loss_curve(tmp_path) == RECORDS


def test_a_tracker_failing_mid_run_is_left_out_after_one_warning(tmp_path, mlflow_server, capsys):
    from mlflow.tracking import MlflowClient

    plan = plan_for("trainer.trackers=[mlflow]", f"trainer.mlflow.tracking_uri={mlflow_server}")
    jsonl, mlflow = open_sinks(plan.trainer.trackers, TrackedRun(plan, tmp_path / "output/data", "mid-run"))
    mlflow.write(RECORDS[0])
    MlflowClient(mlflow_server).delete_run(mlflow.sink.run_id)  # the server refuses what follows
    for record in RECORDS:
        jsonl.write(record)
        mlflow.write(record)
    mlflow.close()
    assert mlflow.sink is None
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "the mlflow tracker failed" in warnings[0], warnings
    assert runs.loss_curve(tmp_path) == RECORDS
