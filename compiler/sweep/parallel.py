"""A large sweep's points prepared across the machine's cores.

Preparing a point (compose, validate, plan, request) is milliseconds of CPU and nothing else, so a batch of at
least `PER_WORKER` points per core is split among forked worker processes, one per core. A fork keeps what the
sweep's process holds (Hydra's loader, the schemas, the compose cache, warmed first with every distinct set
of group choices; that heap frozen out of garbage collection), so a worker pays only for its own points.
Each worker sends back its points in order, with what preparing each printed and, in a dry run, its request's
text and record made, but not its configs: the sweep composes a point's configs again only where they are read
(a launch's job files), from its warm cache. The points, their order, their errors and the output are the serial
path's. Where `fork` is missing, or on one core, the points are prepared in the sweep's own process.
"""

import contextlib
import gc
import io
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import IO, Any

PER_WORKER = 32
"""Points each worker must get for a pool to pay off: a fork and sending the points back cost about what
preparing 10-20 points does."""
CHUNKS_PER_WORKER = 4
"""Chunks handed to each worker: points differ in cost (a new set of group choices composes from scratch),
so smaller chunks even the load out, and each chunk's round trip is cheap."""

Prepare = Callable[[tuple[str, ...], int, IO[str]], Any]
"""Prepare one point (its overrides and job number), printing to the given stream."""
Pack = Callable[[Any], Any]
"""Make a prepared point cheap to send back (its configs left out)."""

_prepare: Prepare | None = None
_pack: Pack | None = None


def workers_for(points: int) -> int:
    """How many processes prepare a batch of `points` (1: the sweep's own)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(cores(), points // PER_WORKER))


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def prepare_all(
    numbered: Sequence[tuple[tuple[str, ...], int]], prepare: Prepare, pack: Pack, out: IO[str], workers: int
) -> list[Any]:
    """Every point of `numbered` prepared by `workers` forked processes, in order; what each printed is
    written to `out` in the points' order."""
    size = max(1, -(-len(numbered) // (workers * CHUNKS_PER_WORKER)))
    chunks = [numbered[i : i + size] for i in range(0, len(numbered), size)]
    points = []
    context = multiprocessing.get_context("fork")  # the workers inherit the loader and the warm cache
    # a worker that dies (killed, out of memory) fails the sweep here (BrokenProcessPool), never hangs it
    with (
        _heap_frozen(),
        ProcessPoolExecutor(workers, mp_context=context, initializer=_start, initargs=(prepare, pack)) as pool,
    ):
        for chunk in pool.map(_prepare_chunk, chunks):
            for point, printed in chunk:
                out.write(printed)
                points.append(point)
    return points


@contextlib.contextmanager
def _heap_frozen() -> Iterator[None]:
    """The sweep's objects (Hydra, the schemas, the cached bases: hundreds of thousands) left out of garbage
    collection while the workers run. Each point's configs are cyclic garbage, so collections run every few
    points, and a full one walked that whole inherited heap (and copied the pages it touched): frozen, the
    workers of a 1,000-point sweep spent about 12% less CPU time. Frozen before the fork, they are frozen in
    every worker too. A heap frozen by the caller stays frozen."""
    frozen_by_caller = gc.get_freeze_count() > 0
    gc.freeze()
    try:
        yield
    finally:
        if not frozen_by_caller:
            gc.unfreeze()


def _start(prepare: Prepare, pack: Pack) -> None:
    """In each worker: the sweep's functions, inherited through the fork (never pickled)."""
    global _prepare, _pack
    _prepare, _pack = prepare, pack


def _prepare_chunk(chunk: Sequence[tuple[tuple[str, ...], int]]) -> list[tuple[Any, str]]:
    """In a worker: each point of `chunk` prepared and packed, with what preparing it printed."""
    assert _prepare is not None and _pack is not None
    prepared = []
    for overrides, num in chunk:
        printed = io.StringIO()
        prepared.append((_pack(_prepare(overrides, num, printed)), printed.getvalue()))
    return prepared
