"""How a rank leaves torch.distributed: the one way the built-in trainer, and the tests' and benches' scripts
that import it, end (a script written as a user's, like `dockyard init`'s train.py, ends the same way in two
lines of its own).

A process group can outlive `destroy_process_group`: Python objects may still reference it (FSDP's device
mesh, DDP's reducer, DeepSpeed's engine), and even with none, a gloo worker thread may still be letting go
of the last collective's work (a barrier's), whose captured thread-local state holds a Python object. If
the interpreter is finalizing by then, the thread, needing the GIL, is ended by Python
(`PyThread_exit_thread`, a `pthread_exit`), and that forced unwind through gloo's `noexcept` C++ frames
aborts the process: "terminate called without an active exception", SIGABRT, from a rank that had
finished its work (a core dump shows it: the main thread in `Py_FinalizeEx`, the worker in
`~AsyncBarrierWork`). So a rank synchronises (every collective is complete on every rank), destroys its
process groups while the interpreter is alive, flushes its output, and ends without finalizing.
"""

import multiprocessing
import os
import sys

import torch.distributed as dist


def leave(status: int = 0) -> None:
    """Returns only in a worker that torchrun's agent forked (`entrypoint.trainer.workers`): the agent waits
    for the function's result, and multiprocessing then ends the process without finalizing."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    if multiprocessing.parent_process() is None:
        os._exit(status)
