"""How a rank leaves torch.distributed: the one way the built-in trainer, and every script the tests start
under torchrun, end.

A process group outlives `destroy_process_group` while Python objects still reference it (FSDP's device
mesh, DDP's reducer, DeepSpeed's engine). Its gloo worker threads, which hold the tensors of finished work,
are then torn down while the interpreter finalizes; a thread that needs the GIL at that point is ended by
Python (`PyThread_exit_thread`, a `pthread_exit`), and that forced unwind through gloo's `noexcept` C++
frames aborts the process: "terminate called without an active exception", SIGABRT, from a rank that had
finished its work. So a rank synchronises (every collective is complete on every rank), destroys its
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
