"""A node's data for a tokenized format: the tokenizer's folder, the token cache (built by each node's first rank
when it is missing, reused otherwise) and the windows every rank reads from it, with the lines the run reports.
"""

import hashlib
import os
import shutil
import time
import uuid
from collections.abc import Callable
from datetime import date
from pathlib import Path

import torch.distributed as dist

from compiler.spec import Plan
from compiler.spec.contract import TOKENIZER_CHANNEL
from compiler.spec.s3 import download_s3
from compiler.spec.schema import DataFormat, DataSource
from compiler.spec.token_cache_key import TOKEN_CACHE_DIR, cache_key, keyed_by, tokenizer_hash
from compiler.spec.tokenizer import TokenizerFacts, replace_tokens, tokenizer_location
from entrypoint.launcher.cluster import Paths
from entrypoint.trainer.data import cache as token_cache
from entrypoint.trainer.data import data_format, documents, hub, shards
from entrypoint.trainer.data.base import CacheMeta
from entrypoint.trainer.data.windows import ShuffledWindows

POLL_S = 1.0


def tokenizer_folder(plan: Plan, paths: Paths, leader: bool) -> Path:
    """The tokenizer's files on this node: the mounted channel, the plan's folder, or an S3 prefix downloaded
    by the node's first rank (every rank calls this, then waits at a barrier) and checked as the planner
    checks a local one."""
    location = tokenizer_location(plan.data, plan.model)
    channel = paths.channel(TOKENIZER_CHANNEL)
    if channel.is_dir() and any(channel.iterdir()):
        return channel
    if location is None or not location.startswith("s3://"):
        return Path(location or channel)
    folder = cache_root(plan, paths) / "tokenizer"
    if leader and not folder.is_dir():
        download_s3(location, folder)
    dist.barrier()
    facts = TokenizerFacts.read(folder, data=plan.data)
    if facts.vocab > plan.model.vocab:
        raise ValueError(f"data.tokenizer: its {facts.vocab} token ids exceed model.vocab={plan.model.vocab}")
    if facts.eos_id is None or (plan.data.format is DataFormat.chat and not facts.chat_template):
        raise ValueError(f"data.tokenizer: {location} lacks an eos_token or, for chat, a chat template")
    return folder


def cache_root(plan: Plan, paths: Paths) -> Path:
    return Path(plan.data.cache) if plan.data.cache else paths.checkpoints / TOKEN_CACHE_DIR


def ensure_cache(
    plan: Plan, data_folder: Path, tokenizer: Path, root: Path, leader: bool, log: Callable[[str], None]
) -> Path:
    """The cache folder of this data; built here if missing, which the other ranks wait for by watching the folder
    appear (a barrier would time out on a large corpus; torchrun ends them if the first rank fails). Where every
    node sees the same `data.cache` folder, node k's first rank tokenizes share k of the documents (`shards`; files
    only, not `data=hf` datasets) and rank 0 writes the folder once all are there; else each node's first rank
    tokenizes them all. The key is computed by rank 0 and broadcast, so the data is hashed once."""
    train, validation = _sources(plan, data_folder)
    found = [_key(plan, tokenizer, data_folder, train, validation), False] if dist.get_rank() == 0 else ["", False]
    if dist.get_rank() == 0:
        found[1] = (root / found[0]).is_dir()
    dist.broadcast_object_list(found, src=0)
    folder, built = root / found[0], found[1]
    splits = {"train": train, "validation": validation}
    files = plan.data.source is not DataSource.hf
    if not built and files and plan.data.cache and plan.layout.nodes > 1 and shared(root):
        _build_shared(plan, splits, tokenizer, folder, leader, log)
    elif leader and not folder.is_dir():
        log(f"token cache       building {folder}")
        encoder = _encoder(plan, tokenizer, root)
        token_cache.build(root, folder.name, encoder, lambda: token_cache.batches(splits, plan), log)
    elif leader:
        log(f"token cache       reused {folder} (no tokenization)")
    while not folder.is_dir():  # the node's first rank is tokenizing: longer than a collective's timeout may allow
        time.sleep(POLL_S)
    dist.barrier()
    return folder


def _build_shared(
    plan: Plan, splits: dict[str, list[Path]], tokenizer: Path, folder: Path, leader: bool, log: Callable[[str], None]
) -> None:
    """Node k's first rank tokenizes share k of the documents; rank 0 writes the cache folder when all are there."""
    nodes = plan.layout.nodes
    node = int(os.environ.get("GROUP_RANK", dist.get_rank() * nodes // dist.get_world_size()))
    if leader:
        log(f"token cache       building {folder}: this node tokenizes share {node + 1} of {nodes}")
        share = shards.shares(splits, nodes)[node]
        encoder = _encoder(plan, tokenizer, folder.parent)
        shards.write_shard(folder.parent, folder.name, node, nodes, encoder, share, plan, log)
    if dist.get_rank() == 0:
        shards.assemble(folder.parent, folder.name, nodes, plan, log)


def _encoder(plan: Plan, tokenizer: Path, root: Path) -> token_cache.Encoder:
    today = date.fromisoformat(plan.chat_date) if plan.chat_date else None
    folder = recipe_tokenizer(plan, tokenizer, root)
    return token_cache.Encoder(folder, plan.data.format, plan.data.loss_on, today)


def recipe_tokenizer(plan: Plan, tokenizer: Path, root: Path) -> Path:
    """The tokenizer with `data.chat_template` and `data.eos_token` written in (a copy under `root`, named by what
    its files and these settings hold, and moved into place whole), or `tokenizer` itself where neither is set.
    The token cache's key hashes the tokenizer's own files and these two settings, as the host computes it."""
    if plan.data.chat_template is None and plan.data.eos_token is None:
        return tokenizer
    digest = hashlib.blake2b(digest_size=8)
    for part in (tokenizer_hash(tokenizer), plan.data.chat_template or "", plan.data.eos_token or ""):
        digest.update(part.encode() + b"\0")
    copy = root / f"tokenizer-{digest.hexdigest()}"
    if not copy.is_dir():
        root.mkdir(parents=True, exist_ok=True)
        partial = root / f".{copy.name}.{uuid.uuid4().hex}.partial"
        shutil.copytree(tokenizer, partial)
        replace_tokens(partial, plan.data)
        try:
            partial.rename(copy)
        except OSError:
            shutil.rmtree(partial)  # another rank's copy is in place, with the same contents
    return copy


def shared(root: Path) -> bool:
    """Whether every node sees the same cache folder (a shared file system, or one host's folder mounted in every
    container): rank 0 writes a file there and every rank looks for it. Every rank calls this."""
    probe = [f".probe-{uuid.uuid4().hex}" if dist.get_rank() == 0 else ""]
    dist.broadcast_object_list(probe, src=0)
    if dist.get_rank() == 0:
        root.mkdir(parents=True, exist_ok=True)
        (root / probe[0]).touch()
    dist.barrier()
    seen: list[bool] = [False] * dist.get_world_size()
    dist.all_gather_object(seen, (root / probe[0]).is_file())
    if dist.get_rank() == 0:
        (root / probe[0]).unlink()
    return all(seen)


def _sources(plan: Plan, data_folder: Path) -> tuple[list, list]:
    """The training and held-out sources: files under the data folder, or (`data=hf`) datasets."""
    held_out = plan.data.validation if isinstance(plan.data.validation, str) else None
    if plan.data.source is DataSource.hf:
        return hub.hub_sources(plan.data), hub.hub_sources(plan.data, held_out) if held_out else []
    train, validation = documents.split_sources(data_folder, held_out)
    if not train:
        raise FileNotFoundError(f"no documents (.jsonl[.gz|.zst], .txt, .parquet, datasets) under {data_folder}")
    return train, validation


def held_out_sources(plan: Plan, data_folder: Path) -> list:
    """The held-out sources alone (`data.validation` a path, or data=hf's split)."""
    return _sources(plan, data_folder)[1]


def _key(plan: Plan, tokenizer: Path, data_folder: Path, train: list, validation: list) -> str:
    if plan.data.source is DataSource.hf:
        return keyed_by(plan, tokenizer, hub.fingerprint(train), hub.fingerprint(validation))
    return cache_key(plan, tokenizer, data_folder, train, validation)


def open_windows(plan: Plan, folder: Path, eos: int) -> tuple[ShuffledWindows, ShuffledWindows | None, list[str]]:
    """The training windows, the validation windows (None without `data.validation`) and the lines that say
    what the run reads and how well it fills its windows."""
    meta = CacheMeta.read(folder)
    shape = data_format(plan.data.format)
    shape.check(plan, meta)
    train_split = shards.open_split(folder, "train", plan)
    train = shape.windows(train_split, plan, eos)
    validation = None
    if plan.data.validation is not None:
        validation = shape.windows(shards.open_split(folder, "validation", plan), plan, eos)
    if train.windows < 1 or (validation is not None and validation.windows < 1):
        empty = "training" if train.windows < 1 else "validation"
        raise ValueError(f"the {empty} documents fill less than one window of seq_len {plan.model.seq_len} + 1 tokens")
    return train, validation, shape.report(plan, meta, train_split, train.windows)
