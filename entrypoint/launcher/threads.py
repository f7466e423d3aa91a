"""CPU training's threads per process (OMP_NUM_THREADS): the CPUs the node may run on, shared out among every
training process on the machine, nodes that share it included (`NODES_PER_HOST`); and threads that sleep while
they wait for work (OMP_WAIT_POLICY), so that a machine shared with anything else is not spun away."""

from collections.abc import Mapping

from compiler.spec.contract import NODES_PER_HOST, node_count
from entrypoint.launcher.cluster import ClusterError
from entrypoint.launcher.comm import EnvRow, env_row


def threads_env(backend: str, processes_per_node: int, cpus: int, environ: Mapping[str, str]) -> list[EnvRow]:
    """CPU training: each process's threads (OMP_NUM_THREADS), the `cpus` it may run on shared out among every
    training process on the machine, as accelerate sizes them. torchrun gives one thread to each of several
    processes and every CPU to a lone one; nodes that share a machine (`NODES_PER_HOST`, the local target's
    containers) would then each take every CPU: two such nodes on two cores trained 4.5x slower
    (bench/local_threads.py)."""
    if backend != "gloo" or not cpus:
        return []
    nodes = nodes_per_host(environ)
    sharing = nodes * processes_per_node
    reason = f"{cpus} CPUs split among the training processes on this machine: {nodes} node(s) × {processes_per_node}"
    return [
        env_row("OMP_NUM_THREADS", str(max(1, cpus // sharing)), reason, environ),
        env_row("OMP_WAIT_POLICY", "PASSIVE", WAIT_REASON, environ),
    ]


WAIT_REASON = "idle threads sleep: spinning ones take the cores from any other process on them"
"""OpenMP's threads otherwise spin between operations (libgomp's default); on cores that anything else also
runs on (another job, a test beside it, another node's container) the spinning starves it: two one-process
trainings of the smoke model at once on two cores, each with two threads, took 11x as long as with sleeping
threads, while one alone was 15% faster spinning (bench/cpu_wait.py). CPU training is the local and test case,
where cores are shared; a dedicated CPU cluster may set OMP_WAIT_POLICY=ACTIVE."""


def nodes_per_host(environ: Mapping[str, str]) -> int:
    value = environ.get(NODES_PER_HOST, "1")
    nodes = node_count(value)
    if nodes is None:
        raise ClusterError(f"{NODES_PER_HOST}={value!r} is not a number of nodes: unset it or give a whole number >= 1")
    return nodes
