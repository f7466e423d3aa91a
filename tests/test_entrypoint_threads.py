"""CPU training's threads per process: the machine's CPUs shared out among every training process on it,
nodes that share the machine (the local target's containers) included."""

import os

import pytest

from compiler.spec.contract import NODES_PER_HOST
from entrypoint.launcher.cluster import ClusterError
from entrypoint.launcher.threads import threads_env
from tests.entrypoint_support import entrypoint_env, tiny_plan, write_plan
from tests.test_entrypoint_cli import entrypoint


@pytest.mark.parametrize(
    ("cpus", "nodes", "processes", "threads"),
    [
        (16, "1", 1, "16"),  # a lone process keeps every CPU, as without dockyard
        (16, "1", 2, "8"),  # torchrun would give each one thread and leave 14 CPUs idle
        (16, "2", 2, "4"),  # two local container nodes on one 16-CPU machine
        (2, "2", 1, "1"),  # two single-process nodes on two cores: one thread each, not two
        (2, "2", 2, "1"),  # more processes than CPUs: still one thread each
        (7, "2", 1, "3"),
    ],
)
def test_each_process_gets_its_share_of_the_machines_cpus(cpus, nodes, processes, threads):
    row, _ = threads_env("gloo", processes, cpus, {NODES_PER_HOST: nodes})
    assert (row.name, row.value, row.set_here) == ("OMP_NUM_THREADS", threads, True)
    split = f"{cpus} CPUs split among the training processes on this machine: {nodes} node(s) × {processes}"
    assert split in row.reason


def test_without_a_hint_the_node_has_the_machine_to_itself():
    row, _ = threads_env("gloo", 4, 32, {})
    assert row.value == "8"


def test_the_users_value_is_kept():
    threads, wait = threads_env(
        "gloo", 1, 16, {NODES_PER_HOST: "2", "OMP_NUM_THREADS": "3", "OMP_WAIT_POLICY": "ACTIVE"}
    )
    assert (threads.value, threads.set_here) == ("3", False)
    assert "set by the user (dockyard: 8)" in threads.reason
    assert (wait.value, wait.set_here) == ("ACTIVE", False)


def test_idle_threads_sleep_so_that_a_shared_machine_is_not_spun_away():
    _, wait = threads_env("gloo", 2, 16, {})
    assert (wait.name, wait.value, wait.set_here) == ("OMP_WAIT_POLICY", "PASSIVE", True)


@pytest.mark.parametrize("backend", ["nccl", "smddp"])
def test_gpu_training_keeps_torchruns_threads(backend):
    assert threads_env(backend, 8, 192, {NODES_PER_HOST: "1"}) == []


def test_uncounted_cpus_set_nothing():
    assert threads_env("gloo", 2, 0, {}) == []


@pytest.mark.parametrize("value", ["0", "-1", "two", "", "2.5", "²"])
def test_a_hint_that_is_not_a_number_of_nodes_is_refused(value):
    with pytest.raises(ClusterError, match=f"^{NODES_PER_HOST}=.* is not a number of nodes: unset it or give"):
        threads_env("gloo", 1, 2, {NODES_PER_HOST: value})


def test_explain_shows_the_threads_and_a_bad_hint_is_one_line_exit_2(tmp_path):
    plan = write_plan(tiny_plan("hardware.processes_per_node=1"), tmp_path)
    cpus = len(os.sched_getaffinity(0))
    shared = entrypoint("--explain", f"--plan={plan}", env=entrypoint_env(tmp_path / "root", **{NODES_PER_HOST: "2"}))
    assert shared.returncode == 0, shared.stderr
    assert f"OMP_NUM_THREADS={max(1, cpus // 2)}  # {cpus} CPUs split among" in shared.stdout
    assert "OMP_WAIT_POLICY=PASSIVE  # idle threads sleep" in shared.stdout
    bad = entrypoint("--explain", f"--plan={plan}", env=entrypoint_env(tmp_path / "root", **{NODES_PER_HOST: "x"}))
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and f"{NODES_PER_HOST}='x' is not a number of nodes" in bad.stderr
