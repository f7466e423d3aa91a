"""What the token cache is keyed by, and the count it records: shared by the trainer, which builds and reads
the cache (`entrypoint.trainer.data.cache`), and the host, which reads the dataset's measured token count
from an earlier run's cache when it plans the next run on the same data (`compiler.launch.dataset`).

The key hashes the data's file names and bytes, the tokenizer's files and the options that change the
tokens, so the same (data, tokenizer, options) gives the same folder on every node and on the host.
Standard library only.
"""

import hashlib
import json
from pathlib import Path

from compiler.spec.plan import Plan
from compiler.spec.schema import DataFormat
from compiler.spec.tokenizer import CONFIG_FILE, TEMPLATE_FILE, TEMPLATES_DIR, TOKENIZER_FILE

CACHE_VERSION = 2
"""Raised when the cache's layout or the encoding changes, so that old folders are not read (2: chat rendered
by transformers, with its date)."""
TOKEN_CACHE_DIR = "token-cache"
"""The cache's folder under the checkpoints when `data.cache` is unset."""
META_FILE = "meta.json"
"""In each cache folder: the key, the documents and tokens of each split, the tokenization's time."""
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")
TEXT_SUFFIX = ".txt"
PARQUET_SUFFIX = ".parquet"
DATASET_MARKER = "state.json"
"""The file `Dataset.save_to_disk` writes beside its Arrow shards."""


def kind(path: Path) -> str | None:
    """The document file's kind by its suffix, None for a file that holds no documents."""
    name = path.name
    for suffix in (*JSONL_SUFFIXES, TEXT_SUFFIX, PARQUET_SUFFIX):
        if name.endswith(suffix):
            return suffix
    return None


def sources(folder: Path) -> list[Path]:
    """The readable files and saved datasets under `folder` (or `folder` itself if it is one), sorted."""
    if folder.is_file() or (folder / DATASET_MARKER).is_file():
        return [folder]
    datasets = sorted(p.parent for p in folder.rglob(DATASET_MARKER))
    files = [
        p
        for p in sorted(folder.rglob("*"))
        if p.is_file() and kind(p) is not None and not any(d in p.parents for d in datasets)
    ]
    return sorted([*files, *datasets])


def split_sources(folder: Path, held_out: str | None) -> tuple[list[Path], list[Path]]:
    """The training sources and, when `data.validation` is a path, the held-out ones under it."""
    found = sources(folder)
    if held_out is None:
        return found, []
    validation = folder / held_out
    inside = [p for p in found if p == validation or validation in p.parents]
    return [p for p in found if p not in inside], inside


def content_hash(paths: list[Path], root: Path) -> str:
    """A hash of the sources' names (relative to `root`) and bytes."""
    digest = hashlib.blake2b(digest_size=16)
    for path in paths:
        for file in sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]:
            digest.update(str(file.relative_to(root)).encode() + b"\0")
            with file.open("rb") as stream:
                while chunk := stream.read(1 << 20):
                    digest.update(chunk)
    return digest.hexdigest()


def cache_key(plan: Plan, tokenizer: Path, data_folder: Path, train: list[Path], validation: list[Path]) -> str:
    """What the arrays depend on: the data's names and bytes, the tokenizer's files, and the format options
    (the seed only when it draws the validation documents)."""
    return keyed_by(plan, tokenizer, content_hash(train, data_folder), content_hash(validation, data_folder))


def keyed_by(plan: Plan, tokenizer: Path, train: str, validation: str) -> str:
    """The cache key of data whose training and held-out documents hash to `train` and `validation`."""
    data = plan.data
    drawn = isinstance(data.validation, int | float) and not isinstance(data.validation, bool)  # a fraction, rows
    options = {
        "version": CACHE_VERSION,
        "format": data.format.value,
        "field": data.field,
        "loss_on": data.loss_on.value if data.format is DataFormat.chat else None,
        "chat_date": plan.chat_date,
        "validation": data.validation,
        "seed": plan.trainer.seed if drawn else None,
        "train": train,
        "validation_data": validation,
        "tokenizer": tokenizer_hash(tokenizer),
    }
    replaced = {"chat_template": data.chat_template, "eos_token": data.eos_token}
    options |= {name: value for name, value in replaced.items() if value is not None}  # the tokenizer's, replaced
    return hashlib.blake2b(json.dumps(options, sort_keys=True).encode(), digest_size=12).hexdigest()


def tokenizer_hash(tokenizer: Path) -> str:
    """What the tokenizer's files hold: its vocabulary and pipeline, its settings and its chat templates."""
    names = (TOKENIZER_FILE, CONFIG_FILE, TEMPLATE_FILE, TEMPLATES_DIR)
    return content_hash([p for p in (tokenizer / n for n in names) if p.exists()], tokenizer)


def training_tokens(folder: Path) -> int:
    """The training split's token count a cache folder recorded."""
    return int(json.loads((folder / META_FILE).read_text())["splits"]["train"]["tokens"])
