"""The run record, `run.json` in the run's folder: the one record of a job, launched alone or as a sweep's
point. `dockyard status|logs|stop` and a sweep's summary read it.

It says which target runs the job and the handle that target gave it (a job name, an id), with which
image, how it moved through the shared statuses (`compiler.targets.base.STATUSES`) and how it ended, so a
run can be found and followed later from its folder or its id alone (every job's id is registered in
`compiler.targets.index`). A sweep's point that never became a job keeps a record too, with the status
`invalid` or `dry-run`, and is not registered.
"""

import errno
import fcntl
import json
import math
import os
import threading
import time
import types
import typing
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from compiler.spec import files
from compiler.spec.errors import as_json, shown
from compiler.targets import index
from compiler.targets.base import FINAL_STATUSES, PENDING, RUNNING

RECORD_FILE = "run.json"
INVALID, DRY_RUN = "invalid", "dry-run"
"""A sweep's points that never became jobs."""
OPEN_STATUSES = (PENDING, RUNNING)


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    run_dir: str
    run_id: str = ""
    target: str = ""
    image: str = ""
    status: str = PENDING
    handle: dict = field(default_factory=dict)
    """What the target needs to find the job again (`Target.submit`'s result)."""
    detail: str = ""
    """The platform's last words on the job, or the point's error."""
    attempts: int = 0
    exit_status: int | None = None
    started: float | None = None
    ended: float | None = None
    final: dict = field(default_factory=dict)
    """The last metrics the job reported (loss, tokens_per_s, ...)."""
    region: str = ""
    steps: int | None = None
    """The plan's training steps (`trainer.steps`): what a run's progress is counted against."""
    price_per_hour: float = 0.0
    predicted_s: float | None = None
    """The planner's predicted training time (GPU plans): the cost estimate of a run that has not run."""
    num: int | None = None
    """A sweep's job number; None for a single launch."""
    overrides: list[str] = field(default_factory=list)
    warm_pool: str = ""
    """The platform's words on the instances kept after the job (`JobState.warm_pool`)."""
    training_s: float | None = None
    billable_s: float | None = None
    """The platform's billed seconds (`JobState.billing`); the cost is reckoned from them when known."""
    restarts: int = 0
    """In-job restarts (`trainer.restarts`): torchrun restarted the workers this many times."""
    resumed: int = 0
    """`dockyard launch --resume` continued this run this many times (the latest attempt's job is
    `<run_id>-resume<resumed>`)."""

    @property
    def spot_saving(self) -> float | None:
        """The share of the training time not billed (managed spot)."""
        if not self.training_s or self.billable_s is None:
            return None
        return 1 - self.billable_s / self.training_s

    @property
    def wall_s(self) -> float | None:
        return None if self.started is None or self.ended is None else self.ended - self.started

    @property
    def cost_usd(self) -> float | None:
        seconds = next((s for s in (self.billable_s, self.wall_s, self.predicted_s) if s is not None), None)
        return None if seconds is None else self.price_per_hour * seconds / 3600


def update(record: RunRecord, **changes) -> RunRecord:
    return save(_changed(record, changes))


def update_if_open(run_dir: Path, **changes) -> RunRecord:
    """The record in `run_dir` with `changes`, unless it has ended: then as it is. It is read and written back
    under the record's lock, so a final record that the launching process writes meanwhile (the job's end,
    its exit status and metrics) is never overwritten with what was read before it."""
    with _locked(run_dir):
        current = load(run_dir)
        return current if current.status in FINAL_STATUSES else _write(_changed(current, changes))


def save(record: RunRecord) -> RunRecord:
    """Write the record atomically: a reader sees the old one or the new one, never half of either."""
    folder = Path(record.run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder):
        return _write(record)


def _changed(record: RunRecord, changes: dict[str, typing.Any]) -> RunRecord:
    if changes.get("status") in FINAL_STATUSES and record.ended is None:
        changes = {**changes, "ended": time.time()}
    return replace(record, **changes)


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold the record's lock, an `fcntl.flock` on the run folder itself (no lock file left in it), taken by
    every writer while it writes and by `update_if_open` from its read to its write. Each holder opens the
    folder itself, so it excludes other threads of this process as well as other processes; closing lets go."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def _write(record: RunRecord) -> RunRecord:
    """Write the record through a temporary file of this writer's own (a writer that takes no lock, such as an
    older dockyard, cannot write into it) and register the run; the caller holds the lock."""
    folder = Path(record.run_dir)
    temporary = folder / f".{RECORD_FILE}.{os.getpid()}-{threading.get_ident()}.tmp"
    temporary.write_text(json.dumps(asdict(record), indent=2, sort_keys=True) + "\n")
    temporary.replace(folder / RECORD_FILE)
    if record.run_id and record.status not in (INVALID, DRY_RUN):
        index.register(record.run_id, folder)
    return record


def load(run_dir: Path) -> RunRecord:
    """The record in `run_dir`; one that is not a record this dockyard writes is a FileError naming `run`."""
    path = run_dir / RECORD_FILE
    values = files.read_json_object(path, "run")
    kinds = {f.name: _json_types(f.type) for f in fields(RunRecord)}
    unknown = sorted(set(values) - set(kinds))
    if unknown:
        raise files.FileError(
            "run", path, f"has the unknown key {shown(unknown[0])}", "give a run this dockyard version launched"
        )
    if "run_dir" not in values:
        raise files.FileError("run", path, "has no run_dir", "give a run this dockyard version launched")
    for name, value in values.items():
        if not isinstance(value, kinds[name]) or (isinstance(value, bool) and bool not in kinds[name]):
            raise files.FileError("run", path, f"gives {name} = {as_json(value)}, of the wrong type")
    return RunRecord(**values)


def _json_types(annotation: object) -> tuple[type, ...]:
    """The JSON values a record field's annotation takes (JSON writes a float 1.0 as 1)."""
    union = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    kinds = tuple(typing.get_origin(a) or a for a in union)
    return (*kinds, int) if float in kinds else kinds


def load_all(folder: Path) -> list[RunRecord]:
    """Every record under `folder` (a sweep's points), in job order."""
    found = [load(path.parent) for path in folder.glob(f"**/{RECORD_FILE}")]
    return sorted(found, key=lambda record: (record.num is None, record.num or 0, record.run_dir))


def holds_file(folder: Path, name: str) -> bool:
    """Whether `folder` has the file `name`; False also where `folder` is no name the file system can hold
    (ENAMETOOLONG), as a run id of 300 characters is not."""
    try:
        return (folder / name).exists()
    except OSError as error:
        if error.errno != errno.ENAMETOOLONG:
            raise
        return False


def find(run: str) -> Path | None:
    """The folder of a run given its folder or its id (looked up in the index)."""
    if holds_file(Path(run), RECORD_FILE):
        return Path(run)
    folder = index.folder_of(run)
    return folder if folder is not None and holds_file(folder, RECORD_FILE) else None


def registered() -> tuple[list[RunRecord], list[files.FileError]]:
    """The records of every registered run whose folder is still there, newest first, and why each record
    that cannot be read was left out (one broken record must not hide the others)."""
    found, unreadable = [], []
    for folder in index.folders():
        if holds_file(folder, RECORD_FILE):
            try:
                found.append(load(folder))
            except files.FileError as error:
                unreadable.append(error)
    found.sort(key=lambda record: math.inf if record.started is None else record.started, reverse=True)
    return found, unreadable
