"""`model=hf`: the checkpoint's config.json, read when the config is made, fills the model's shape, so the
planner sizes a Hugging Face model as it sizes the built-in one.

Only config.json is read here, never the weights (a local folder's links and index are checked: every shard
it names lies in it): from the folder, as the one object under an s3:// prefix, or from the Hub over HTTPS
for a Hub id (with the caller's HF_TOKEN for gated models: the token stays on this machine, the plan records
only the id). The nodes fetch the weights themselves.
"""

import os
import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from compiler.config.checkpoint_tensors import check_lora_targets, count_trainable
from compiler.core import grammar
from compiler.core.architectures import model_fields
from compiler.spec.checkpoint_files import check_folder
from compiler.spec.errors import ConfigError, shown
from compiler.spec.files import SMALL_FILE, decoded, json_object, read_json_object

CONFIG_FILE = "config.json"
REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_./-]{0,199}")
"""A Hub branch, tag or commit hash."""
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,95}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,95})?")
SHIPPED = Path(__file__).resolve().parents[2] / "conf" / "model" / "hub"
"""config.json of the Hub checkpoints the example experiments name, as the Hub serves them (`<id>/config.json`)."""
HUB = "https://huggingface.co"
"""The Hub, or the mirror HF_ENDPOINT names (as huggingface_hub reads it)."""
REQUIRED_SHAPE = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "context")
"""The shape fields without a default: a config that sets one for model=hf is told the checkpoint decides."""
SHAPE_DEFAULT_SEQ_LEN = 8192
"""`model.seq_len` when the command line leaves it unset: the checkpoint's context, up to this."""


def fill_from_checkpoint(model: DictConfig) -> None:
    """Set the shape fields of `model` (the composed `model` node, family hf) from its checkpoint; a shape
    field the config set itself is refused, since the checkpoint decides it."""
    path = model.path
    if not path:
        raise ConfigError(
            "model.path", "is empty", "set model.path to a checkpoint folder, an s3:// prefix or a Hub id"
        )
    revision = str(model.get("revision") or "main")
    if revision != "main" and (path.startswith("s3://") or Path(path).is_dir()):
        raise ConfigError(
            "model.revision",
            f"{shown(revision)} names a Hub revision, and {shown(path)} is not a Hub id",
            "remove model.revision: a folder or an s3:// prefix holds one revision",
        )
    if not REVISION.fullmatch(revision):
        raise ConfigError("model.revision", f"{shown(revision)} is not a branch, tag or commit", "like main or v1.0")
    fields = model_fields(read_config(path, revision), f"{path}/{CONFIG_FILE}")
    if Path(path).is_dir():  # the targets mount it, from wherever the command ran
        check_folder(Path(path))
        model.path = str(Path(path).resolve())
    for name, value in fields.items():
        if name in REQUIRED_SHAPE and not OmegaConf.is_missing(model, name):
            raise ConfigError(
                f"model.{name}", f"is read from {path}/{CONFIG_FILE} for model.family=hf", f"drop model.{name}"
            )
        if isinstance(value, dict):  # model.moe, model.mla: a typed node takes its fields one by one
            for key, item in value.items():
                model[name][key] = item
        else:
            model[name] = value
    if Path(model.path).is_dir():
        check_lora_targets(model, Path(model.path))
        count_trainable(model, Path(model.path))
    if OmegaConf.is_missing(model, "seq_len"):
        model.seq_len = min(fields["context"], SHAPE_DEFAULT_SEQ_LEN)


def read_config(path: str, revision: str = "main") -> dict[str, Any]:
    """The checkpoint's config.json, from a folder, an s3:// prefix or the Hub (at `revision`)."""
    where = f"{path}/{CONFIG_FILE}"
    if path.startswith("s3://"):
        grammar.check_s3_uri("model.path", path)  # before the network: S3 would refuse it slower
        return json_object(decoded(_read_s3(path), "model.path", where), "model.path", where)
    if Path(path).is_dir():
        file = Path(path) / CONFIG_FILE
        if not file.exists() and not file.is_symlink():
            raise ConfigError("model.path", f"{path} holds no {CONFIG_FILE}", "point it at a save_pretrained folder")
        return read_json_object(file, "model.path")
    if HUB_ID.fullmatch(path) and not path.startswith((".", "/")):
        shipped = SHIPPED / path / CONFIG_FILE
        if shipped.is_file() and revision == "main":  # an example experiment's checkpoint: planned offline
            return read_json_object(shipped, "model.path")
        return json_object(decoded(_read_hub(path, revision), "model.path", where), "model.path", where)
    raise ConfigError("model.path", f"{shown(path)} is not a folder, an s3:// prefix or a Hub id", "check the path")


def _read_s3(uri: str) -> bytes:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    key = f"{prefix.rstrip('/')}/{CONFIG_FILE}" if prefix else CONFIG_FILE
    try:
        return boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read(SMALL_FILE + 1)
    except (BotoCoreError, ClientError) as exc:
        raise ConfigError("model.path", f"cannot read s3://{bucket}/{key} ({exc})", "check the prefix") from None


def _read_hub(model_id: str, revision: str) -> bytes:
    import urllib.error  # only here: every command imports this module, few read the Hub
    import urllib.parse
    import urllib.request

    endpoint = os.environ.get("HF_ENDPOINT", HUB).rstrip("/")
    at = urllib.parse.quote(revision, safe="")
    request = urllib.request.Request(f"{endpoint}/{model_id}/resolve/{at}/{CONFIG_FILE}")
    token = os.environ.get("HF_TOKEN")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.read(SMALL_FILE + 1)
    except (urllib.error.URLError, TimeoutError) as exc:
        raise ConfigError(
            "model.path",
            f"cannot read {model_id}'s {CONFIG_FILE} from the Hub ({getattr(exc, 'reason', exc)})",
            "check the id (and HF_TOKEN for a gated model), or download it and give the folder",
        ) from None
