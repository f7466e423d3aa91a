"""The communication environment and backend: rules from detected facts, and golden --explain tables for
SageMaker/Kubeflow/Slurm/SkyPilot × p4d/p5/p5en/g5/cpu × EFA software stacks, from fixture device trees."""

import dataclasses
from pathlib import Path

import pytest

from entrypoint.launcher.backend import BackendError, choose_backend
from entrypoint.launcher.cluster import single_node
from entrypoint.launcher.comm import Detected, Interface, choose_interface, comm_env, detect
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
    interface = choose_interface(node, detected).name
    return {row.name: row for row in comm_env(node, detected, backend, environ or {}, interface)}


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


def sagemaker_node(network_interface: str | None, source: str = "sagemaker"):
    return dataclasses.replace(
        single_node({}), source=source, hosts=("algo-1", "algo-2"), nnodes=2, master_addr="algo-1",
        network_interface=network_interface,
    )  # fmt: skip


def test_a_named_interface_the_container_has_is_kept():
    detected = Detected(interfaces=("eth0", "ethwe"), route_interface="eth0")
    assert choose_interface(sagemaker_node("ethwe"), detected) == Interface("ethwe")


def test_a_named_interface_the_container_lacks_gives_the_detected_one():
    chosen = choose_interface(sagemaker_node("ethwe"), Detected(interfaces=("eth0",), route_interface="eth0"))
    assert chosen.name == "eth0"
    assert chosen.replaced == (
        "resourceconfig.json names interface ethwe, which this container lacks (it has eth0); "
        "using eth0, which holds the default route"
    )
    # no default route: eth0 or an ens/enp name, else the first interface other than loopback
    assert choose_interface(sagemaker_node("ethwe"), Detected(interfaces=("ens5", "veth1"))).name == "ens5"
    lacking = choose_interface(sagemaker_node("eth0", "slurm"), Detected(interfaces=("bond0", "ib0")))
    assert lacking.name == "bond0" and lacking.replaced.startswith("the slurm cluster names interface eth0")


def test_a_named_interface_is_trusted_where_the_interfaces_cannot_be_listed():
    assert choose_interface(sagemaker_node("ethwe"), Detected()) == Interface("ethwe")


def test_detect_reads_the_default_route(tmp_path):
    devices = device_tree(tmp_path, "cpu", None)
    (devices / "proc/net").mkdir(parents=True)
    (devices / "proc/net/route").write_text(
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
        "eth0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"
        "eth0\t00000000\t010011AC\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
    )
    assert detect(devices).route_interface == "eth0"


def sdk_v3_launch(tmp_path: Path, environ: dict[str, str]):
    """Node 2 of SDK v3's local mode: resourceconfig.json names ethwe, the container has only eth0."""
    root = sagemaker_tree(tmp_path / "opt-ml", ["algo-1", "algo-2"], "algo-2")
    resources = root / "input/config/resourceconfig.json"
    resources.write_text(resources.read_text().replace('"eth0"', '"ethwe"'))
    devices = detect(device_tree(tmp_path / "devices", "cpu", None))
    return prepare(two_node_plan("cpu"), PLAN_PATH, environ, devices, root, False)


def test_sdk_v3_interface_hint_falls_back_to_the_container_s_interface(tmp_path):
    launch = sdk_v3_launch(tmp_path, {})
    env = {row.name: row.value for row in launch.env}
    assert (env["GLOO_SOCKET_IFNAME"], env["SM_NETWORK_INTERFACE_NAME"]) == ("eth0", "eth0")
    assert '"network_interface_name":"eth0"' in env["SM_TRAINING_ENV"]
    assert (
        "warning     resourceconfig.json names interface ethwe, which this container lacks (it has eth0); "
        "using eth0, the usual name of a node's network interface\n"
    ) in explain(launch)


def test_a_training_runs_table_counts_the_toolkits_variables_unless_verbose(tmp_path):
    launch = sdk_v3_launch(tmp_path, {})
    quiet, full = explain(launch, toolkit_rows=False), explain(launch)
    count = sum(1 for row in launch.env if row.name.startswith("SM_"))
    listed_from = full.index("SageMaker training toolkit\n")
    assert "SM_HOSTS=" in full[listed_from:]
    assert quiet == full[:listed_from] + (
        f"SageMaker training toolkit: {count} SM_* variables set (--explain or DOCKYARD_VERBOSE=1 lists them)\n"
    )


def test_sdk_v3_interface_the_user_set_is_kept(tmp_path):
    launch = sdk_v3_launch(tmp_path, {"GLOO_SOCKET_IFNAME": "eth7", "SM_NETWORK_INTERFACE_NAME": "eth7"})
    rows = {row.name: row for row in launch.env}
    for name in ("GLOO_SOCKET_IFNAME", "SM_NETWORK_INTERFACE_NAME"):
        assert (rows[name].value, rows[name].set_here) == ("eth7", False)
        assert "dockyard: eth0" in rows[name].reason
