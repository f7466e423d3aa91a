"""Checkpoints written atomically and resumed from the newest complete one.

A checkpoint is written into `step-NNNNNNNN.tmp`, its marker file last, and then renamed to
`step-NNNNNNNN`: a folder with the final name and a marker is complete, whatever happened to the job
while it was writing. The engine decides the format inside (torch.distributed.checkpoint shards for
DDP/FSDP/TP, DeepSpeed's own files for ZeRO). The newest `KEEP` complete checkpoints are kept.
"""

import contextlib
import json
import re
import shutil
from pathlib import Path
from typing import Protocol

import torch.distributed as dist

MARKER = "dockyard.json"
KEEP = 2
NAME = re.compile(r"^step-(\d{8})$")


class Saver(Protocol):
    def save(self, folder: Path) -> None: ...


def folder_for(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def complete(root: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every complete checkpoint under `root`, oldest first."""
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        match = NAME.match(path.name)
        if match and (path / MARKER).is_file():
            found.append((int(match[1]), path))
    return sorted(found)


def save(engine: Saver, root: Path, step: int, local_leader: bool, metadata: dict) -> Path:
    """Every rank calls this; `step` is the number of optimizer steps done."""
    final = folder_for(root, step)
    partial = final.with_name(final.name + ".tmp")
    if local_leader:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    engine.save(partial)
    dist.barrier()
    if local_leader:
        # On storage the nodes share (the local target's run folder) every node's leader finalizes the same
        # folder: whichever comes second finds it renamed, which is fine.
        with contextlib.suppress(FileNotFoundError):
            (partial / MARKER).write_text(json.dumps({"step": step, **metadata}, sort_keys=True))
        with contextlib.suppress(OSError):
            partial.rename(final)
        for _, old in complete(root)[:-KEEP]:
            shutil.rmtree(old, ignore_errors=True)
    dist.barrier()
    return final
