"""The run record, `run.json` in the run folder: what `dockyard status`, `logs` and `stop` read.

It says which target ran the job, with which image, how many attempts it took and how it ended, so a
run can be found and followed later from its folder or its id alone.
"""

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

RECORD_FILE = "run.json"


@dataclass(frozen=True)
class RunRecord:
    run_dir: str
    run_id: str
    target: str
    image: str
    status: str
    """submitted, running, completed, failed or stopped."""
    attempts: int = 0
    exit_status: int | None = None
    started: float = 0.0
    ended: float | None = None


def start(run_dir: Path, run_id: str, target: str, image: str) -> RunRecord:
    return save(RunRecord(str(run_dir), run_id, target, image, status="submitted", started=time.time()))


def update(record: RunRecord, **changes) -> RunRecord:
    if changes.get("status") in ("completed", "failed", "stopped"):
        changes["ended"] = time.time()
    return save(replace(record, **changes))


def save(record: RunRecord) -> RunRecord:
    path = Path(record.run_dir) / RECORD_FILE
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(asdict(record), indent=2) + "\n")
    temporary.replace(path)
    return record


def load(run_dir: Path) -> RunRecord:
    return RunRecord(**json.loads((run_dir / RECORD_FILE).read_text()))


def find(run: str, search_root: Path) -> Path | None:
    """The folder of a run given its folder or its id (searched under `search_root`)."""
    if (Path(run) / RECORD_FILE).exists():
        return Path(run)
    for path in sorted(search_root.glob(f"**/{RECORD_FILE}")):
        if json.loads(path.read_text()).get("run_id") == run:
            return path.parent
    return None
