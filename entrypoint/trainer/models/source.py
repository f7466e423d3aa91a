"""Where a node finds `model=hf`'s checkpoint: the `pretrained` channel the target filled (a mounted folder,
SageMaker's copy of an S3 prefix), else `model.path` itself when it is a folder on this node (a shared file
system), else fetched into the channel by each node's first process: an s3:// prefix with the job's
credentials, a Hub id with `huggingface_hub` and the HF_TOKEN the target passed to the job (never the plan).
"""

import dataclasses
import os
from pathlib import Path

import torch.distributed as dist

from compiler.spec import Plan
from compiler.spec.contract import PRETRAINED_CHANNEL
from compiler.spec.s3 import download_s3
from entrypoint.launcher.cluster import Paths

FETCHED = ("*.json", "*.safetensors", "*.model", "*.txt", "*.jinja")
"""What a Hub download brings: config, weights and tokenizer files (never other formats' weights)."""


def with_local_checkpoint(plan: Plan, paths: Paths) -> Plan:
    """The plan with `model.path` naming a folder on this node that holds the checkpoint."""
    model = plan.model
    if model.family != "hf":
        return plan
    folder, fetched = checkpoint_folder(model.path, paths)
    if fetched:
        if int(os.environ.get("LOCAL_RANK", "0")) == 0:
            fetch(model.path, folder, model.revision)
        dist.barrier()
    return dataclasses.replace(plan, model=dataclasses.replace(model, path=str(folder)))


def checkpoint_folder(path: str, paths: Paths) -> tuple[Path, bool]:
    """The folder on this node that holds (or is to hold) the checkpoint `model.path` names, and whether it is
    still to be fetched there."""
    channel = paths.channel(PRETRAINED_CHANNEL)
    if channel.is_dir() and any(channel.iterdir()):
        return channel, False
    if Path(path).is_dir():
        return Path(path), False
    return channel, True


def fetch(source: str, folder: Path, revision: str = "main") -> None:
    """The checkpoint into `folder`: an S3 prefix's objects, or a Hub id's files at `revision`."""
    folder.mkdir(parents=True, exist_ok=True)
    if source.startswith("s3://"):
        download_s3(source, folder)
        return
    from huggingface_hub import snapshot_download

    token = os.environ.get("HF_TOKEN")
    snapshot_download(source, revision=revision, local_dir=folder, allow_patterns=list(FETCHED), token=token)
