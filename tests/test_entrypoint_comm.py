"""The communication environment and backend: rules from detected facts, and golden --explain tables for
SageMaker/Kubeflow/Slurm/SkyPilot × p4d/p5/p5en/g5/cpu × EFA software stacks, from fixture device trees."""

import dataclasses
from pathlib import Path

import pytest

from entrypoint.launcher.backend import BackendError, choose_backend
from entrypoint.launcher.cluster import single_node
from entrypoint.launcher.comm import Detected, comm_env, detect
from entrypoint.launcher.main import explain, prepare
from tests.entrypoint_support import CLUSTER_ENVIRONMENTS, GPU_MODELS, STACKS, device_tree, plan_for, sagemaker_tree

PLAN_PATH = Path("/opt/dockyard/plan.json")
INSTANCES = (*GPU_MODELS, "cpu")
EFA_NAMES = {"FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "NCCL_PROTO", "NCCL_LAUNCH_MODE", "NCCL_NET_SHARED_COMMS"}


def two_node_plan(instance: str, *overrides: str):
    if instance == "cpu":
        return plan_for("experiment=smoke", "hardware.nodes=2", "hardware.processes_per_node=2", *overrides)
    return plan_for(
        "experiment=gpt2-124m-p4d",
        "parallelism=fsdp",
        f"hardware={instance}",
        "hardware.nodes=2",
        "data=synthetic",
        "trainer.compile=false",
        "parallelism.global_batch=-1",
        *overrides,
    )


def test_detect_reads_the_device_tree(tmp_path):
    detected = detect(device_tree(tmp_path, "p5.48xlarge", "current"))
    assert detected == Detected(
        gpus=8,
        gpu_model="NVIDIA H100 80GB HBM3",
        efa_devices=32,
        ofi_nccl=(1, 14, 2),
        libfabric=(2, 1, 0),
        interfaces=("eth0",),
    )


def test_detect_on_a_bare_machine(tmp_path):
    assert detect(tmp_path) == Detected()


def rows(detected: Detected, backend="nccl", environ=None, nnodes=2):
    node = dataclasses.replace(
        single_node({}),
        source="dockyard",
        hosts=("a", "b")[:nnodes],
        nnodes=nnodes,
        master_addr="a",
        master_port=29500,
        network_interface="eth0",
    )
    return {row.name: row for row in comm_env(node, detected, backend, environ or {})}


def test_no_efa_variables_without_an_efa_device():
    # the libraries are installed (an image built for p5) but the node has no EFA device: NCCL would hang
    detected = Detected(gpus=8, gpu_model="NVIDIA H100 80GB HBM3", efa_devices=0, ofi_nccl=(1, 5, 0), libfabric=(1, 15))
    assert not EFA_NAMES & set(rows(detected))


def test_legacy_stack_on_p4d_gets_the_full_preset():
    detected = Detected(8, "NVIDIA A100-SXM4-40GB", 4, (1, 5, 0), (1, 15, 2), ("eth0",))
    env = rows(detected)
    assert {name: env[name].value for name in EFA_NAMES} == {
        "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": "1",
        "NCCL_PROTO": "simple",
        "NCCL_LAUNCH_MODE": "PARALLEL",
        "NCCL_NET_SHARED_COMMS": "0",
    }


def test_current_stack_needs_none_of_it():
    detected = Detected(8, "NVIDIA H100 80GB HBM3", 32, (1, 14, 2), (2, 1, 0), ("eth0",))
    assert set(rows(detected)) == {"NCCL_SOCKET_IFNAME", "TORCH_NCCL_ASYNC_ERROR_HANDLING"}


def test_rdma_only_where_the_gpu_supports_it():
    g5 = Detected(8, "NVIDIA A10G", 1, (1, 6, 0), (1, 17, 1), ("eth0",))
    p4d = Detected(8, "NVIDIA A100-SXM4-40GB", 4, (1, 6, 0), (1, 17, 1), ("eth0",))
    assert "FI_EFA_USE_DEVICE_RDMA" not in rows(g5)
    assert rows(p4d)["FI_EFA_USE_DEVICE_RDMA"].value == "1"


def test_a_variable_the_user_set_is_kept():
    detected = Detected(8, "NVIDIA A100-SXM4-40GB", 4, (1, 5, 0), (1, 15, 2), ("eth0",))
    row = rows(detected, environ={"NCCL_PROTO": "LL128"})["NCCL_PROTO"]
    assert (row.value, row.set_here) == ("LL128", False)
    assert "dockyard: simple" in row.reason


def test_gloo_gets_its_interface_and_no_nccl_variables():
    env = rows(Detected(interfaces=("eth0",)), backend="gloo")
    assert set(env) == {"GLOO_SOCKET_IFNAME"}
    assert rows(Detected(interfaces=("eth0",)), backend="gloo", nnodes=1) == {}


def test_backend_choice():
    assert choose_backend(two_node_plan("cpu"), gpus=0, smddp=False).name == "gloo"
    assert choose_backend(two_node_plan("p5.48xlarge"), gpus=8, smddp=False).name == "nccl"
    with pytest.raises(BackendError, match="has 0 GPUs"):
        choose_backend(two_node_plan("p5.48xlarge"), gpus=0, smddp=False)


def test_smddp_backend_or_fallback():
    plan = two_node_plan("p4d.24xlarge", "parallelism=smddp")
    assert choose_backend(plan, gpus=8, smddp=True).name == "smddp"
    with pytest.raises(BackendError, match="smddp_fallback"):
        choose_backend(plan, gpus=8, smddp=False)
    allowed = two_node_plan("p4d.24xlarge", "parallelism=smddp", "parallelism.smddp_fallback=true")
    fallback = choose_backend(allowed, gpus=8, smddp=False)
    assert fallback.name == "nccl" and "using nccl" in fallback.warnings[0]


def cluster(tmp_path: Path, source: str) -> tuple[dict[str, str], Path]:
    if source == "sagemaker":
        return {}, sagemaker_tree(tmp_path / "opt-ml", ["algo-1", "algo-2"], "algo-2")
    return dict(CLUSTER_ENVIRONMENTS[source]), tmp_path / "no-sagemaker"


def communication(table: str) -> str:
    """The table without the toolkit's rows (tests/test_entrypoint_toolkit.py) and the user, which is the
    machine's running the tests."""
    lines = table.split("SageMaker training toolkit\n")[0].splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("user "))


@pytest.mark.parametrize("source", ["sagemaker", "kubeflow", "slurm", "skypilot"])
def test_explain_golden(tmp_path, golden, source):
    environ, sagemaker_root = cluster(tmp_path, source)
    sections = []
    for instance in INSTANCES:
        for stack in STACKS if instance != "cpu" else [None]:
            devices = device_tree(tmp_path / f"{instance}-{stack}", instance, stack)
            launch = prepare(two_node_plan(instance), PLAN_PATH, environ, detect(devices), sagemaker_root, False)
            versions = f", aws-ofi-nccl {STACKS[stack][0]} / libfabric {STACKS[stack][1]}" if stack else ""
            text = communication(explain(launch)).replace(str(sagemaker_root), "/opt/ml")
            sections.append(f"### {instance}{versions}\n{text}")
    golden.check(f"explain/{source}.txt", "\n".join(sections))
