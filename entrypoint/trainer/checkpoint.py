"""Checkpoints written atomically and resumed from the newest complete one.

A checkpoint is written into `step-NNNNNNNN.tmp`, its marker file last, and then renamed to
`step-NNNNNNNN`: a folder with the final name and a marker is complete, whatever happened to the job
while it was writing. The engine decides the format inside (torch.distributed.checkpoint shards for
DDP/FSDP/TP, DeepSpeed's own files for ZeRO). The newest `KEEP` complete checkpoints are kept.

`Checkpoints` decides when (every `trainer.checkpoint_interval` steps, or every `checkpoint_minutes` on
rank 0's clock, and after the last step) and how: in the foreground, or with `trainer.checkpoint_async` in
the background, where the state is copied to host memory, training goes on, and the marker and rename follow
once every rank's write has finished. One write at a time: a checkpoint that falls due while the last one is
still being written waits for it.
"""

import contextlib
import json
import re
import shutil
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Protocol

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

from compiler.spec.contract import CHECKPOINT_MARKER
from compiler.spec.schema import TrainerConfig

MARKER = CHECKPOINT_MARKER
KEEP = 2
NAME = re.compile(r"^step-(\d{8})$")
PROGRESS = "progress"


class Saver(Protocol):
    def save(self, folder: Path) -> None: ...


class StateSaver(Saver, Protocol):
    def checkpoint_state(self) -> dict:
        """What `save` writes through torch.distributed.checkpoint (engines that can save in the background)."""
        ...


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


def progress(folder: Path) -> dict:
    """The training loop's progress a complete checkpoint's marker holds (empty for one written without)."""
    return json.loads((folder / MARKER).read_text()).get(PROGRESS, {})


def save(engine: Saver, root: Path, step: int, local_leader: bool, metadata: dict) -> Path:
    """Every rank calls this; `step` is the number of optimizer steps done."""
    partial = _begin(root, step, local_leader)
    engine.save(partial)
    return _finish(root, step, local_leader, metadata)


def _begin(root: Path, step: int, local_leader: bool) -> Path:
    """The empty folder a checkpoint is written into."""
    partial = _partial(root, step)
    if local_leader:
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    return partial


def _partial(root: Path, step: int) -> Path:
    final = folder_for(root, step)
    return final.with_name(final.name + ".tmp")


def _finish(root: Path, step: int, local_leader: bool, metadata: dict) -> Path:
    """Once every rank has written its part: the marker, then the final name."""
    final, partial = folder_for(root, step), _partial(root, step)
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


class Checkpoints:
    """When the trainer checkpoints, and the one background write that may be under way."""

    def __init__(
        self, engine: Saver, root: Path, trainer: TrainerConfig, local_leader: bool, metadata: dict, cuda: bool
    ) -> None:
        self.engine, self.root, self.trainer = engine, root, trainer
        self.local_leader, self.metadata = local_leader, metadata
        self.device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
        self.last_saved = time.monotonic()
        self.pending: tuple[int, Future, dict] | None = None
        self.group = self.stager = None
        if trainer.checkpoint_async:
            # the background write's collectives run beside training's, so they get a process group of their
            # own (gloo: a CPU one, as the write is from host memory)
            self.group = dist.new_group(backend="gloo")
            self.stager = DefaultStager(
                StagingOptions(
                    use_pinned_memory=cuda, use_shared_memory=False, use_async_staging=False, use_non_blocking_copy=cuda
                )
            )

    def due(self, done_steps: int) -> bool:
        """Whether a checkpoint falls due after `done_steps` steps, the same answer on every rank: by the
        step count, or by rank 0's clock, broadcast (one scalar) so that no rank decides alone; and after the
        last step when checkpoints are on, so that a completed run resumes where it ended (`launch --resume`)."""
        if done_steps == self.trainer.steps:
            return bool(self.trainer.checkpoint_interval or self.trainer.checkpoint_minutes)
        if self.trainer.checkpoint_interval:
            return done_steps % self.trainer.checkpoint_interval == 0
        if not self.trainer.checkpoint_minutes:
            return False
        elapsed = time.monotonic() - self.last_saved >= self.trainer.checkpoint_minutes * 60
        flag = torch.tensor(float(elapsed), device=self.device)
        dist.broadcast(flag, src=0)
        return bool(flag.item())

    def save(self, step: int, progress: dict | None = None) -> None:
        """The checkpoint after `step` steps: written now, or started in the background. `progress` (what the
        training loop keeps beside the engine's state at this step: the validation losses early stopping
        compares) goes into its marker, as `progress` reads it back on resuming."""
        self.wait()
        self.last_saved = time.monotonic()
        metadata = self.metadata | {PROGRESS: progress or {}}
        if self.group is None:
            save(self.engine, self.root, step, self.local_leader, metadata)
            return
        partial = _begin(self.root, step, self.local_leader)
        state = self.engine.checkpoint_state()  # type: ignore[attr-defined]
        written = dcp.async_save(state, checkpoint_id=str(partial), process_group=self.group, async_stager=self.stager)
        if not isinstance(written, Future):  # torch returns a response object only when staging is asynchronous
            written = written.upload_completion
        self.pending = (step, written, metadata)

    def poll(self) -> None:
        """Complete the background write once every rank's part is written (one scalar all-reduce per step
        while one is under way; nothing otherwise)."""
        if self.pending is None:
            return
        done = torch.tensor(float(self.pending[1].done()), device=self.device)
        dist.all_reduce(done, op=dist.ReduceOp.MIN)
        if done.item():
            self.wait()

    def wait(self) -> None:
        """Wait for the background write, if one is under way, and complete it."""
        if self.pending is None:
            return
        step, written, metadata = self.pending
        self.pending = None
        written.result()
        _finish(self.root, step, self.local_leader, metadata)

    def close(self) -> None:
        self.wait()
        if self.stager is not None:
            self.stager.close()
            self.stager = None
