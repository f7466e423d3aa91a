"""The metrics seam: the planner's tracker names are the trainer's registry; a line the `jsonl` sink writes is
what SageMaker's metric regexes and the run reader both read (Python's `re` stands in for SageMaker's regex
engine: these patterns use nothing the two treat differently); every tracker records the run where its own
reader finds it (TensorBoard's event reader, a real MLflow server, a W&B offline run) and ends it as the run
ended (finished, stopped or failed), and shows the samples of `trainer.sample_prompts` as its text; and a tracker
that is down costs one warning, never the records."""

import http.server
import io
import json
import re
import struct
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from compiler.launch import runs
from compiler.spec import Plan
from compiler.spec.contract import REPORTED_METRICS, SAMPLES_FILE, TRACKERS
from compiler.spec.errors import ConfigError
from compiler.targets.sagemaker import translate
from entrypoint.trainer.metrics import SINKS, RunEnd, Sample, TrackedRun, open_sinks
from entrypoint.trainer.samples import log_samples
from tests.helpers import plan_for
from tests.local_server import free_port

RECORD = {
    "step": 40,
    "step_loss": 1.5e-05,  # before loss: SageMaker's regex for loss must not take it
    "loss": 2.5e-05,
    "val_loss": 3.25,
    "lr": 3e-4,
    "grad_norm": 0.75,
    "tokens_per_s": 91234.5,
    "mfu": 0.4125,
}
RECORDS = [
    {
        "step": step,
        "loss": 4.0 / step,
        "step_loss": 3.0 / step,
        "lr": 3e-4,
        "grad_norm": 0.5,
        "mfu": None,
        "elapsed_s": 0.25 * step,
    }
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
    sink.close(RunEnd.finished)
    found = {}
    for definition in translate.metric_definitions():
        match = re.search(definition["Regex"], printed.getvalue())
        assert match, definition
        found[definition["Name"]] = float(match.group(1))
    assert found == {name: RECORD[name] for name in REPORTED_METRICS}
    assert runs.loss_curve(tmp_path) == [RECORD]


def record_run(run: TrackedRun, end: RunEnd = RunEnd.finished) -> None:
    sinks = open_sinks(run.plan.trainer.trackers, run)
    for record in RECORDS:
        for sink in sinks:
            sink.write(record)
    for sink in sinks:
        sink.close(end)


def every_tracker(mlflow_server: str, experiment: str) -> Plan:
    """A plan whose trackers are TensorBoard, the MLflow server (its runs in `experiment`) and W&B."""
    return plan_for(
        "trainer.trackers=[tensorboard,mlflow,wandb]",
        f"trainer.mlflow.tracking_uri={mlflow_server}",
        f"trainer.mlflow.experiment={experiment}",
    )


def test_every_tracker_records_the_run(tmp_path, mlflow_server, monkeypatch):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.delenv("WANDB_MODE", raising=False)
    plan = every_tracker(mlflow_server, "every-tracker")
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
    for name in ("loss", "step_loss"):  # the window's mean and the step's own, as in metrics.jsonl
        history = client.get_metric_history(found.info.run_id, name)
        assert [(metric.step, metric.value) for metric in history] == [(r["step"], r[name]) for r in RECORDS]
    assert [event.value for event in events.Scalars("step_loss")] == [pytest.approx(r["step_loss"]) for r in RECORDS]

    (offline,) = (output / "wandb").glob("offline-run-*/run-*.wandb")  # the folder `wandb sync` uploads
    assert b"val_loss" in offline.read_bytes()

    assert runs.loss_curve(tmp_path) == RECORDS


SAMPLES = [Sample(20, "say: red | blue", "red\nblue"), Sample(20, "hi", "\x1b[31mhi")]
"""A completion of two lines, one with a bar (a Markdown table's separator), one with a terminal escape."""


def test_every_tracker_shows_the_samples(tmp_path, mlflow_server, monkeypatch, capsys):
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.delenv("WANDB_MODE", raising=False)
    plan = every_tracker(mlflow_server, "samples")
    output = tmp_path / "output/data"
    sinks = open_sinks(plan.trainer.trackers, TrackedRun(plan, output, "samples"))
    log_samples(SAMPLES, sinks)
    for sink in sinks:
        sink.close(RunEnd.finished)

    printed = capsys.readouterr()
    assert "warning" not in printed.err
    shown = [line for line in printed.out.splitlines() if line.startswith("sample ")]
    assert shown == ["sample       20  say: red | blue → red", "sample       20  hi → \\x1b[31mhi"]
    written = [json.loads(line) for line in (output / SAMPLES_FILE).read_text().splitlines()]
    assert written == [asdict(sample) for sample in SAMPLES]

    events = EventAccumulator(str(output / "tensorboard"))
    events.Reload()
    (text,) = events.Tensors("samples/text_summary")
    table = text.tensor_proto.string_val[0].decode()
    assert text.step == 20 and "| say: red \\| blue | red<br>blue |" in table, table

    client = MlflowClient(mlflow_server)
    (run,) = client.search_runs([client.get_experiment_by_name("samples").experiment_id])
    artifact = Path(client.download_artifacts(run.info.run_id, "samples/step-00000020.jsonl", str(tmp_path)))
    assert [json.loads(line) for line in artifact.read_text().splitlines()] == written

    (logged,) = (output / "wandb").glob("offline-run-*/files/media/table/samples_*.table.json")
    wandb_table = json.loads(logged.read_text())
    assert wandb_table["columns"] == ["step", "prompt", "completion"]
    assert wandb_table["data"] == [[sample.step, sample.prompt, sample.completion] for sample in SAMPLES]


def wandb_exit_code(output: Path) -> int:
    """The exit code in an offline W&B run's exit record, the record `wandb sync` reports the run's end by. The
    run file is W&B's header (7 bytes) and then LevelDB's log format: 32 KiB blocks of chunks, each after a
    header of checksum (4 bytes), length (2) and type (1: a whole record, 4: a record's last chunk)."""
    from wandb.proto import wandb_internal_pb2

    (path,) = (output / "wandb").glob("offline-run-*/run-*.wandb")
    data, block = path.read_bytes(), 32768
    position, chunks, exits = 7, b"", []
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a header is padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        chunks += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record.FromString(chunks)
            chunks = b""
            if record.WhichOneof("record_type") == "exit":
                exits.append(record.exit.exit_code)
    (code,) = exits
    return code


def test_each_tracker_ends_its_run_as_the_run_ended(tmp_path, mlflow_server, monkeypatch):
    """MLflow has a status for each end; W&B's client only finishes or fails a run, so a stopped run fails with
    the code W&B gives a run that Ctrl-C ended."""
    from mlflow.tracking import MlflowClient

    monkeypatch.delenv("WANDB_MODE", raising=False)
    plan = every_tracker(mlflow_server, "run-ends")
    for end in RunEnd:
        record_run(TrackedRun(plan, tmp_path / end.value, end.value), end)

    client = MlflowClient(mlflow_server)
    ended = client.search_runs([client.get_experiment_by_name("run-ends").experiment_id])
    assert {run.info.run_name: run.info.status for run in ended} == {
        "finished": "FINISHED",
        "stopped": "KILLED",
        "failed": "FAILED",
    }
    assert {end.value: wandb_exit_code(tmp_path / end.value) for end in RunEnd} == {
        "finished": 0,
        "stopped": 255,
        "failed": 1,
    }


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
    mlflow.close(RunEnd.finished)
    assert mlflow.sink is None
    warnings = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "the mlflow tracker failed" in warnings[0], warnings
    assert runs.loss_curve(tmp_path) == RECORDS


ARN = "arn:aws:sagemaker:us-west-2:123456789012:mlflow-tracking-server/team-runs"


@pytest.fixture
def signed_proxy(mlflow_server) -> Iterator[tuple[str, list[dict]]]:
    """SageMaker's MLflow endpoint stood in for by a proxy on loopback that records each request (method, URL,
    headers, body) and passes it to the real MLflow server; a managed server is MLflow's REST API behind
    SigV4, which the test checks on the recorded requests."""
    seen: list[dict] = []

    class Proxy(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802  (http.server's names)
            self._relay()

        def do_POST(self):  # noqa: N802
            self._relay()

        def _relay(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append({"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body})
            upstream = urllib.request.Request(
                mlflow_server + self.path,
                data=body if self.command == "POST" else None,
                method=self.command,
                headers={"Content-Type": self.headers.get("Content-Type", "application/json")},
            )
            try:
                with urllib.request.urlopen(upstream, timeout=30) as answer:
                    status, payload = answer.status, answer.read()
            except urllib.error.HTTPError as error:
                status, payload = error.code, error.read()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()


def test_a_sagemaker_managed_mlflow_arn_goes_through_the_plugin_signed_with_sigv4(
    tmp_path, mlflow_server, signed_proxy, monkeypatch
):
    """The image installs sagemaker-mlflow for an ARN (tests/test_images_render.py); here the plugin resolves
    the ARN (to the stand-in endpoint, as SAGEMAKER_MLFLOW_CUSTOM_ENDPOINT lets it) and signs every request
    with the node's AWS credentials for the service sagemaker-mlflow in the ARN's region: the signatures are
    recomputed with botocore, and the run reaches the server."""
    import mlflow.tracking._tracking_service.utils as tracking
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    from mlflow.tracking import MlflowClient

    endpoint, seen = signed_proxy
    monkeypatch.setenv("SAGEMAKER_MLFLOW_CUSTOM_ENDPOINT", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDDOCKYARDTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "dockyard-test-secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the sink sets the process's URI: undone after
    monkeypatch.setattr(tracking, "_tracking_uri", None)
    plan = plan_for("trainer.trackers=[mlflow]", f"trainer.mlflow.tracking_uri={ARN}", "trainer.mlflow.experiment=sm")
    record_run(TrackedRun(plan, tmp_path / "output/data", "managed-1"))

    assert len(seen) >= 2 + len(RECORDS)  # experiment, run, parameters, one batch per record, the end
    signer = SigV4Auth(Credentials("AKIDDOCKYARDTEST", "dockyard-test-secret"), "sagemaker-mlflow", "us-west-2")
    for request in seen:
        headers = {name.lower(): value for name, value in request["headers"].items()}
        authorization = headers["authorization"]
        scope = f"Credential=AKIDDOCKYARDTEST/{headers['x-amz-date'][:8]}/us-west-2/sagemaker-mlflow/aws4_request"
        assert authorization.startswith(f"AWS4-HMAC-SHA256 {scope}, SignedHeaders="), authorization
        assert headers["x-mlflow-sm-tracking-server-arn"] == ARN
        signed = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
        replay = AWSRequest(
            method=request["method"],
            url=endpoint + request["path"],
            data=request["body"],
            headers={name: headers[name] for name in signed},
        )
        replay.context["timestamp"] = headers["x-amz-date"]
        expected = signer.signature(signer.string_to_sign(replay, signer.canonical_request(replay)), replay)
        assert authorization.endswith(f"Signature={expected}"), request["path"]

    client = MlflowClient(mlflow_server)
    (found,) = client.search_runs([client.get_experiment_by_name("sm").experiment_id])
    history = client.get_metric_history(found.info.run_id, "loss")
    assert [(metric.step, metric.value) for metric in history] == [(r["step"], r["loss"]) for r in RECORDS]


def test_a_wrong_mlflow_arn_is_one_line():
    for uri in (ARN.replace("mlflow-tracking-server", "notebook-instance"), ARN.replace("123", "١٢٣"), ARN + "\n"):
        with pytest.raises(ConfigError, match=r"^trainer.mlflow.tracking_uri: .* is not a SageMaker MLflow"):
            plan_for("trainer.trackers=[mlflow]", f"trainer.mlflow.tracking_uri='{uri}'")
    planned = plan_for("trainer.trackers=[mlflow]", f"trainer.mlflow.tracking_uri={ARN}")
    assert any("sagemaker-mlflow:*" in warning for warning in planned.warnings)
