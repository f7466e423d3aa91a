"""The `mlflow` sink: a run on the MLflow tracking server of `trainer.mlflow`, with the plan's parameters and
hash as params and tags, and every record's values as metrics at its step.

Credentials (MLFLOW_TRACKING_TOKEN, MLFLOW_TRACKING_USERNAME/PASSWORD) come from the node's environment,
where the target puts them; DOCKYARD_MLFLOW_TRACKING_URI is the server's address as this node reaches it
(the local target's containers reach a server on the host's loopback through the host). A SageMaker managed
MLflow server's ARN goes through the sagemaker-mlflow plugin the image installs for it: it resolves the ARN to
the server's URL and signs every request with SigV4 and the node's AWS credentials.
"""

import os
import time
from typing import Any

from compiler.spec.schema.trainer import sagemaker_mlflow
from entrypoint.trainer.metrics.base import RunEnd, Sample, TrackedRun, numbers, samples_jsonl

QUICK_FAILURE = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
"""MLflow's client retries a request 7 times with backoff (minutes) by default: a server that is down should
cost the run one warning, not minutes of every step. A value the user set is kept."""
RUN_STATUS = {RunEnd.finished: "FINISHED", RunEnd.stopped: "KILLED", RunEnd.failed: "FAILED"}
"""MLflow's run status for each end (`mlflow.entities.RunStatus`)."""


def samples_artifact(step: int) -> str:
    """Where in the run's artifacts the samples of `step` go."""
    return f"samples/step-{step:08d}.jsonl"


class MlflowSink:
    def __init__(self, run: TrackedRun) -> None:
        for name, value in QUICK_FAILURE.items():
            os.environ.setdefault(name, value)
        import mlflow
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        settings = run.plan.trainer.mlflow
        uri = os.environ.get("DOCKYARD_MLFLOW_TRACKING_URI") or settings.tracking_uri
        if uri and sagemaker_mlflow(uri):
            mlflow.set_tracking_uri(uri)  # the plugin signs and routes by the process's tracking URI
        self.client = MlflowClient(uri)
        experiment = self.client.get_experiment_by_name(settings.experiment)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(settings.experiment)
        params = run.params()
        tags = {f"dockyard.{key}": params[key] for key in ("run_id", "plan_hash", "image")}
        name = settings.run_name or run.run_id
        self.run_id = self.client.create_run(experiment_id, run_name=name, tags=tags).info.run_id
        self.client.log_batch(self.run_id, params=[Param(key, value) for key, value in params.items()])

    def write(self, record: dict[str, Any]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, record["step"]) for key, value in numbers(record).items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def write_samples(self, samples: list[Sample]) -> None:
        """The samples as the run's artifact `samples/step-N.jsonl` (MLflow's metrics are numbers only)."""
        self.client.log_text(self.run_id, samples_jsonl(samples), samples_artifact(samples[0].step))

    def close(self, end: RunEnd) -> None:
        self.client.set_terminated(self.run_id, status=RUN_STATUS[end])
