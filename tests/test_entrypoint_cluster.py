"""Cluster discovery: each source from its own inputs, the order between them, and waiting for hosts."""

import subprocess
import sys

import pytest

from compiler.spec.hostlist import HostListError, expand_hostlist
from entrypoint.launcher.cluster import (
    ClusterError,
    discover,
    from_dockyard,
    from_kubeflow,
    from_sagemaker,
    from_skypilot,
    from_slurm,
    wait_for_hosts,
)
from tests.entrypoint_support import CLUSTER_ENVIRONMENTS, sagemaker_tree


def test_sagemaker_contract_files(tmp_path):
    root = sagemaker_tree(tmp_path, ["algo-1", "algo-2", "algo-10"], "algo-10")
    node = from_sagemaker(root, {})
    assert node.hosts == ("algo-1", "algo-2", "algo-10")
    assert (node.node_rank, node.nnodes, node.master_addr, node.master_port) == (2, 3, "algo-1", 29500)
    assert node.network_interface == "eth0"
    assert node.channels == ("train",)
    assert node.hyperparameters["epochs"] == "3"


def test_sagemaker_absent(tmp_path):
    assert from_sagemaker(tmp_path, {}) is None


def test_sagemaker_host_missing_from_list(tmp_path):
    root = sagemaker_tree(tmp_path, ["algo-1", "algo-2"], "algo-3")
    with pytest.raises(ClusterError, match="algo-3"):
        from_sagemaker(root, {})


def test_kubeflow_pet_variables():
    node = from_kubeflow(CLUSTER_ENVIRONMENTS["kubeflow"])
    assert (node.source, node.nnodes, node.node_rank) == ("kubeflow", 2, 1)
    assert (node.master_addr, node.master_port) == ("llama-master-0", 23456)


def test_kubeflow_master_addr_and_rank():
    env = {"MASTER_ADDR": "job-master-0", "MASTER_PORT": "1234", "WORLD_SIZE": "4", "RANK": "3"}
    assert from_kubeflow(env) is None  # MASTER_ADDR alone is not Kubernetes
    node = from_kubeflow({**env, "KUBERNETES_SERVICE_HOST": "10.96.0.1"})
    assert (node.nnodes, node.node_rank, node.master_port) == (4, 3, 1234)


def test_kubeflow_rank_out_of_range():
    with pytest.raises(ClusterError, match="outside"):
        from_kubeflow({**CLUSTER_ENVIRONMENTS["kubeflow"], "PET_NODE_RANK": "2"})


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("node1", ["node1"]),
        ("gpu-[01-03,7],login", ["gpu-01", "gpu-02", "gpu-03", "gpu-7", "login"]),
        ("r[1-2]-n[8-9]", ["r1-n8", "r1-n9", "r2-n8", "r2-n9"]),
        ("a[098-100]x", ["a098x", "a099x", "a100x"]),
        ("run-node-0-[0-2].run", ["run-node-0-0.run", "run-node-0-1.run", "run-node-0-2.run"]),
    ],
)
def test_slurm_hostlist(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text", ["gpu-[a-b]", "gpu-[1-]", "gpu-[1-2-3]", "gpu-[]"])
def test_a_malformed_hostlist_is_a_cluster_error(text):
    with pytest.raises(HostListError, match=r"is not a list of numbers and ranges"):
        expand_hostlist(text)
    with pytest.raises(ClusterError, match=r"is not a list of numbers and ranges"):
        from_slurm({"SLURM_JOB_NODELIST": text, "SLURMD_NODENAME": "gpu-1"})


def test_slurm_rank_from_node_name():
    node = from_slurm(CLUSTER_ENVIRONMENTS["slurm"])
    assert (node.hosts, node.node_rank, node.master_addr) == (("p5-st-1", "p5-st-2"), 1, "p5-st-1")


def test_skypilot():
    node = from_skypilot(CLUSTER_ENVIRONMENTS["skypilot"])
    assert (node.hosts, node.node_rank, node.master_addr) == (("10.0.1.17", "10.0.1.23"), 1, "10.0.1.17")


def test_dockyard_variables():
    node = from_dockyard({"DOCKYARD_HOSTS": "b, a", "DOCKYARD_CURRENT_HOST": "b", "DOCKYARD_MASTER_PORT": "4000"})
    assert (node.hosts, node.node_rank, node.master_addr, node.master_port) == (("a", "b"), 1, "a", 4000)
    assert from_dockyard({"DOCKYARD_HOSTS": "x,y", "DOCKYARD_NODE_RANK": "1"}).current_host == "y"
    compressed = from_dockyard({"DOCKYARD_HOSTS": "r-[0-9].r", "DOCKYARD_NODE_RANK": "9"})
    assert (compressed.nnodes, compressed.current_host, compressed.master_addr) == (10, "r-9.r", "r-0.r")


def test_discovery_order(tmp_path):
    everything = {**CLUSTER_ENVIRONMENTS["slurm"], **CLUSTER_ENVIRONMENTS["skypilot"], "DOCKYARD_HOSTS": "a"}
    assert discover(everything, tmp_path).source == "slurm"
    root = sagemaker_tree(tmp_path / "sm", ["algo-1"], "algo-1")
    assert discover(everything, root).source == "sagemaker"
    single = discover({}, tmp_path)
    assert (single.source, single.nnodes, single.node_rank) == ("single", 1, 0)


def test_wait_for_hosts_until_they_resolve():
    attempts = {"late": 0}
    now = [0.0]

    def resolve(host):
        attempts[host] = attempts.get(host, 0) + 1
        if host == "late" and attempts[host] < 3:
            raise OSError("not yet")

    wait_for_hosts(("early", "late"), 30, resolve, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert attempts == {"early": 1, "late": 3}


def test_wait_for_hosts_times_out():
    now = [0.0]

    def resolve(host):
        raise OSError("no such host")

    with pytest.raises(ClusterError, match="within 5 s: ghost"):
        wait_for_hosts(("ghost",), 5, resolve, clock=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))


def test_entrypoint_imports_neither_hydra_nor_docker():
    code = (
        "import sys, entrypoint.launcher.main, entrypoint.trainer.train; "
        "print(sorted({'hydra', 'docker'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
