"""The data format interface (`data.format`): how a format reads a record, turns a batch of records into token
ids and target flags, cuts its cached splits into windows, and says what a run reads. The tokenize step, the
cache and the trainer see a format only through this interface, so a format is one module and a registry line.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from compiler.spec import Plan
from compiler.spec.schema import LossOn
from compiler.spec.token_cache_key import META_FILE
from entrypoint.trainer.data.windows import ShuffledWindows


@dataclass(frozen=True)
class Encoded:
    ids: np.ndarray
    targets: np.ndarray
    eos_target: bool = True
    """Whether the end-of-text token after the document is a target: not where the template ends the last reply
    with its own end-of-turn marker, nor after a conversation that ends with no reply."""


Batch = list[tuple[str, Any]]
"""Records with where each is (for errors: "file, record n")."""


@dataclass
class SplitCounts:
    documents: int = 0
    tokens: int = 0
    targets: int = 0


@dataclass
class CacheMeta:
    """The counts of a token cache's splits, which the trainer reports (`meta.json`)."""

    key: str
    splits: dict[str, SplitCounts] = field(default_factory=dict)
    tokenize_s: float = 0.0

    @classmethod
    def read(cls, folder: Path) -> "CacheMeta":
        raw = json.loads((folder / META_FILE).read_text())
        return cls(raw["key"], {k: SplitCounts(**v) for k, v in raw["splits"].items()}, raw["tokenize_s"])


class Format(Protocol):
    def columns(self, field: str) -> tuple[str, ...]:
        """The columns a JSONL/Parquet/dataset row is read for (`field` is `data.field`)."""
        ...

    def record(self, row: dict, field: str, where: str) -> Any:
        """The row's record, its shape checked (raises ValueError naming `where`)."""
        ...

    def encoder(self, folder: Path, loss_on: LossOn, today: date) -> Callable[[Batch], list[Encoded]]:
        """A batch of records → their documents' ids and targets, with the tokenizer in `folder`."""
        ...

    def windows(self, split: Path, plan: Plan, eos: int) -> ShuffledWindows:
        """The windows of a cached split."""
        ...

    def check(self, plan: Plan, meta: CacheMeta) -> None:
        """Refuses a cache this run would train nothing on (raises TargetsError)."""
        ...

    def report(self, plan: Plan, meta: CacheMeta, folder: Path, windows: int) -> list[str]:
        """The lines that say what the run reads and how well it fills its windows."""
        ...


class TargetsError(ValueError):
    """A split with no or too few target tokens."""
