"""The rules of `trainer.trackers`, `trainer.mlflow` and `trainer.wandb`: which trackers, and where they send."""

import dataclasses
from collections.abc import Iterator
from urllib.parse import urlsplit

from compiler.core import grammar
from compiler.spec import schema
from compiler.spec.contract import ALWAYS_ON_TRACKER, TRACKERS
from compiler.spec.errors import ConfigError, UnknownNameError
from compiler.spec.schema.trainer import sagemaker_mlflow


def resolve_trackers(trainer: schema.TrainerConfig) -> schema.TrainerConfig:
    """`trainer` with `trackers` listing jsonl first (always on, listed or not) and every name once, so that
    `[mlflow]` and `[jsonl,mlflow,mlflow]` make the same plan."""
    names = dict.fromkeys([ALWAYS_ON_TRACKER, *trainer.trackers])
    return dataclasses.replace(trainer, trackers=list(names))


def check_trackers(trainer: schema.TrainerConfig) -> Iterator[str]:
    for name in trainer.trackers:
        if name not in TRACKERS:
            raise UnknownNameError("trainer.trackers", "tracker", name, TRACKERS)
    if trainer.entry is schema.Entry.script and trainer.trackers != [ALWAYS_ON_TRACKER]:
        raise ConfigError(
            "trainer.trackers",
            "are the built-in trainer's; a script logs to its own trackers",
            "leave trainer.trackers out with trainer=script",
        )
    check_tracker_names(trainer)
    if "mlflow" in trainer.trackers or trainer.mlflow.tracking_uri is not None:  # checked where it is off too
        check_mlflow_uri(trainer.mlflow.tracking_uri)
        if sagemaker_mlflow(trainer.mlflow.tracking_uri):
            yield (
                "trainer.mlflow.tracking_uri: a SageMaker managed MLflow server; the image installs the "
                "sagemaker-mlflow plugin, and the nodes sign its requests with their AWS role, which needs "
                "sagemaker-mlflow:* on the server (a SageMaker job's role; IRSA on Kubernetes)"
            )


MAX_MLFLOW_NAME = 500
"""MLflow's longest experiment name (`mlflow.utils.validation.MAX_EXPERIMENT_NAME_LENGTH`)."""
MAX_WANDB_PROJECT = 128
WANDB_FORBIDDEN = "/\\#?%:"
"""The characters W&B refuses in a project name (`wandb.sdk.wandb_settings.Settings.validate_project`)."""


def check_tracker_names(trainer: schema.TrainerConfig) -> None:
    """The names the trackers take, checked where the tracker is off too (a sweep may turn it on): what MLflow
    and W&B accept, on one printable line."""
    names = {
        "trainer.mlflow.experiment": (trainer.mlflow.experiment, MAX_MLFLOW_NAME, ""),
        "trainer.mlflow.run_name": (trainer.mlflow.run_name, MAX_MLFLOW_NAME, ""),
        "trainer.wandb.project": (trainer.wandb.project, MAX_WANDB_PROJECT, WANDB_FORBIDDEN),
    }
    for key, (name, longest, forbidden) in names.items():
        if name is None and key == "trainer.mlflow.run_name":
            continue
        if not isinstance(name, str) or not name.strip() or not name.isprintable() or len(name) > longest:
            raise ConfigError(
                key,
                f"{grammar.shown(name)} is not a name the tracker takes",
                f"give 1 to {longest} printable characters",
            )
        if any(character in name for character in forbidden):
            raise ConfigError(key, f"{grammar.shown(name)} holds one of {forbidden}, which W&B refuses", "drop them")


def check_mlflow_uri(uri: str | None) -> None:
    key = "trainer.mlflow.tracking_uri"
    if uri is None:
        raise ConfigError(key, "is missing for the mlflow tracker", "set trainer.mlflow.tracking_uri=http://HOST:PORT")
    if sagemaker_mlflow(uri):
        return
    if uri.startswith("arn:"):
        raise ConfigError(
            key,
            f"{grammar.shown(uri)} is not a SageMaker MLflow tracking server's ARN",
            "give arn:aws:sagemaker:REGION:ACCOUNT:mlflow-tracking-server/NAME, as the SageMaker console shows it",
        )
    parts = urlsplit(uri)
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ConfigError(
            key,
            "holds credentials, which would be stored in the plan"
            if parts.username or parts.password
            else "holds a query or fragment (where a token would be), which would be stored in the plan",
            "export MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) instead: "
            "the local and Slurm targets pass them to the nodes, target.secrets does on SageMaker and Kubernetes",
        )
    if parts.scheme not in ("http", "https") or not parts.hostname or not grammar.DOMAIN.fullmatch(parts.netloc):
        raise ConfigError(
            key,
            f"{grammar.shown(uri)} is not an http(s)://HOST[:PORT] URL",
            "set trainer.mlflow.tracking_uri=http://HOST:PORT",
        )
    grammar.check_port(key, parts.netloc)
