"""Imported by the forkserver of `entrypoint.trainer.workers` (the last module it preloads) and by nothing else:
the forkserver ends without finalizing its interpreter.

The forkserver holds torch, torch._dynamo and the trainer, and tearing those down took 1-2 s of CPU once the
job had ended, while it still held the node's log pipe open, so the entrypoint waited for it before the
container could exit (a two-rank job ended 1.6 s after its agent). It has nothing to flush or release: it
only forks workers, and it ends when the agent closes its end of their pipe. Its workers are unaffected:
every forked process ends through `os._exit` already (`multiprocessing.forkserver`), without calling exit
handlers.
"""

import atexit
import os

atexit.register(os._exit, 0)  # runs first: exit handlers run last-registered first
