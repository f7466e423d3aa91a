"""Helpers for the entrypoint tests: plans, fixture device trees, clusters, and real torchrun runs."""

import json
import os
import shutil
import socket
import subprocess
import sys
from functools import cache
from pathlib import Path

import psutil

from compiler.config.compose import compose_config
from compiler.launch.plan import checked_plan
from compiler.spec import Plan
from compiler.spec.contract import NODES_PER_HOST
from compiler.spec.token_cache_key import TOKEN_CACHE_DIR
from entrypoint.launcher.main import WARM_WORKERS

REPO = Path(__file__).resolve().parent.parent

# Small enough that a step takes milliseconds on one core; everything else as in experiment=smoke.
TINY = (
    "experiment=smoke",
    "hardware.nodes=1",
    "hardware.processes_per_node=2",
    "model.seq_len=64",
    "trainer.steps=6",
    "trainer.warmup_steps=2",
    "trainer.log_interval=1",
    "trainer.checkpoint_interval=3",
)


LLAMA_STYLE = (
    "model.position=rope",
    "model.activation=swiglu",
    "model.norm=rmsnorm",
    "model.kv_heads=2",
    "model.bias=false",
    "model.tied_embeddings=false",
)
"""The tiny model in Llama's shape: RoPE, SwiGLU, RMSNorm, grouped-query attention, no biases, separate head."""

RERUN_TOLERANCE = 5e-6
"""Losses of the same computation run again in other processes (a resumed run, an in-job restart, a warm compile
cache, offloaded activations): the same operations on the same data, so a real error (a step lost or run twice, a
wrong data position, stale weights or optimizer state) moves a loss by 1e-3 or more. They are not bitwise equal
across processes: `metrics.jsonl` rounds losses to 6 decimals, so values a few ulps apart can print one unit apart
in the last digit (seen in CI after an in-job restart: 6.967583 against 6.967582), and 1e-6 as an absolute
tolerance fails on that (6.967583 - 6.967582 > 1e-6 in floats). Bitwise equality is kept only within one process
(the same threads and reduction order), as in test_activation_offload's gradients."""


@cache
def plan_for(*overrides: str) -> Plan:
    return checked_plan(compose_config(overrides))


def tiny_plan(*overrides: str) -> Plan:
    return plan_for(*TINY, *overrides)


INDUCTOR_ISA_FROM_CPUINFO = {"TORCHINDUCTOR_VEC_ISA_OK": "1"}
"""For a test whose runs compile with inductor on CPU: inductor trusts the vector ISAs /proc/cpuinfo lists instead of
compiling and loading a probe library for each (about 5 s of g++ per process on a cold cache, half a cold compile
here). g++ builds every ISA a CPU lists, so the probes would choose the same one (AVX-512 VNNI here, on the host and
in the image; AMX keeps its own probe): the kernels, and their build with g++ and Python.h, are a default job's."""


GPU_MODELS = {
    "p4d.24xlarge": ("NVIDIA A100-SXM4-40GB", 4),
    "p5.48xlarge": ("NVIDIA H100 80GB HBM3", 32),
    "p5en.48xlarge": ("NVIDIA H200", 16),
    "g5.48xlarge": ("NVIDIA A10G", 1),
}
"""Instance type: what NVIDIA's driver reports as the model, and the EFA devices the node shows."""

STACKS = {
    "legacy": ("1.5.0", "1.15.2"),
    "rdma-opt-in": ("1.6.0", "1.17.1"),
    "current": ("1.14.2", "2.1.0"),
}
"""EFA software stacks: (aws-ofi-nccl, libfabric) versions."""


def device_tree(root: Path, instance: str, stack: str | None) -> Path:
    """Files standing in for a node's devices and libraries, where `comm.detect` looks for them."""
    (root / "sys/class/net/lo").mkdir(parents=True)
    (root / "sys/class/net/eth0").mkdir()
    if instance in GPU_MODELS:
        model, efa = GPU_MODELS[instance]
        for index in range(8):
            gpu = root / f"proc/driver/nvidia/gpus/0000:{index + 16:02x}:00.0"
            gpu.mkdir(parents=True)
            (gpu / "information").write_text(f"Model: \t\t {model}\nIRQ:   \t\t 0\nBus Type: \t PCIe\n")
        for index in range(efa):
            (root / f"sys/class/infiniband/rdmap{index + 16}s0").mkdir(parents=True)
    if stack is not None:
        ofi, libfabric = STACKS[stack]
        library = root / "opt/amazon/ofi-nccl/lib/libnccl-net.so"
        library.parent.mkdir(parents=True)
        library.write_bytes(b"\x7fELF\x00...NET/OFI Initializing aws-ofi-nccl " + ofi.encode() + b"\x00...")
        (root / "opt/amazon/efa_installed_packages").write_text(
            "# EFA installer version: 1.x\n# Debug packages installed: no\n# Packages installed:\n"
            f"ibverbs-utils_50.0-1_amd64 libfabric-aws-bin_{libfabric}amzn1.0_amd64 efa-config_1.17-1_all\n"
        )
    return root


def sagemaker_tree(root: Path, hosts: list[str], current: str) -> Path:
    config = root / "input/config"
    config.mkdir(parents=True)
    groups = [{"instance_group_name": "homogeneousCluster", "instance_type": "ml.p5.48xlarge", "hosts": hosts}]
    resources = {
        "current_host": current,
        "current_instance_type": "ml.p5.48xlarge",
        "current_group_name": "homogeneousCluster",
        "hosts": hosts,
        "instance_groups": groups,
        "network_interface_name": "eth0",
    }
    (config / "resourceconfig.json").write_text(json.dumps(resources))
    (config / "hyperparameters.json").write_text(json.dumps({"epochs": "3", "sagemaker_region": '"us-east-1"'}))
    (config / "inputdataconfig.json").write_text(json.dumps({"train": {"TrainingInputMode": "File"}}))
    return root


CLUSTER_ENVIRONMENTS = {
    "kubeflow": {
        "PET_NNODES": "2",
        "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": "llama-master-0",
        "PET_MASTER_PORT": "23456",
    },
    "slurm": {
        "SLURM_JOB_NODELIST": "p5-st-[1-2]",
        "SLURMD_NODENAME": "p5-st-2",
        "SLURM_NNODES": "2",
        "SLURM_NODEID": "1",
    },
    "skypilot": {"SKYPILOT_NODE_IPS": "10.0.1.17\n10.0.1.23\n", "SKYPILOT_NODE_RANK": "1", "SKYPILOT_NUM_NODES": "2"},
}
"""Node 1 of a 2-node job as each scheduler describes it (SageMaker's comes as files: `sagemaker_tree`)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_plan(plan: Plan, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "plan.json"
    path.write_text(plan.to_json())
    return path


SHARED_CORES = {NODES_PER_HOST: "2"}
"""For two nodes started on this machine: they say so, as a user whose nodes share machines would, and the
entrypoint gives each rank its share of the cores (a rank of all the cores beside another takes about eight
times as long per step here)."""


def entrypoint_env(root: Path, **extra: str) -> dict[str, str]:
    """A clean environment for `python -m entrypoint`: no cluster variables from the machine running tests."""
    keep = ("PATH", "HOME", "LANG", "TMPDIR", "VIRTUAL_ENV")
    env = {name: os.environ[name] for name in keep if name in os.environ}
    env.update(DOCKYARD_ROOT=str(root), DOCKYARD_MASTER_PORT=str(free_port()), PYTHONPATH=str(REPO))
    return {**env, **extra}


def start_entrypoint(plan_path: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "entrypoint", "train", f"--plan={plan_path}", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def train(plan: Plan, root: Path, timeout: float = 240, **env: str) -> list[dict]:
    """Run the entrypoint (and through it torchrun and the trainer) to completion; its metrics lines."""
    process = start_entrypoint(write_plan(plan, root), entrypoint_env(root, **env))
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output[-4000:]
    return metrics(root)


def stopped_at(step: int, uninterrupted: Path, root: Path) -> Path:
    """`root` as a run stopped after its checkpoint at `step` (DOCKYARD_STOP_AT_STEP) leaves it for the next part
    to resume from, without running those steps again: the uninterrupted run's checkpoint at `step` and its
    token cache, copied. The same plan computed the same steps, so the shards and the cache are the bytes the
    stopped run writes (the checkpoint's `.metadata` and the cache's `meta.json` differ only in ids and timings)."""
    for name in (f"step-{step:08d}", TOKEN_CACHE_DIR):
        if (uninterrupted / "checkpoints" / name).is_dir():
            shutil.copytree(uninterrupted / "checkpoints" / name, root / "checkpoints" / name)
    return root


def run_on_two_ranks(body: str, plan: Plan, folder: Path, timeout: float = 120) -> str:
    """Run a test's script on two torchrun ranks, with the plan's path as its argument; its standard output.

    The script ends here, the way the trainer ends (`entrypoint.trainer.teardown.leave`), so that no test script can
    end another way: one whose objects still hold the process group when it exits (a pipeline engine, an FSDP
    mesh) can abort at interpreter shutdown, after its work is done, and fail the test by chance."""
    script = folder / "two_ranks.py"
    script.write_text(f"{body}\nfrom entrypoint.trainer.teardown import leave\nleave()\n")
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", f"--master-port={free_port()}"]
    command += [str(script), str(write_plan(plan, folder))]
    env = entrypoint_env(folder)
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def run_plans_on_two_ranks(body: str, plans: dict[str, Plan], folder: Path, timeout: float = 120) -> dict[str, dict]:
    """Run a test's script over several plans on two torchrun ranks (`run_on_two_ranks`): each plan is written to
    a folder of its name and listed by name in `plans.json` beside the script's argument; the script prints one
    line `RESULT <name> <json>` per plan. The parsed results by name."""
    paths = {name: str(write_plan(plan, folder / name)) for name, plan in plans.items()}
    (folder / "plans.json").write_text(json.dumps(paths))
    output = run_on_two_ranks(body, next(iter(plans.values())), folder, timeout)
    results = {}
    for line in output.splitlines():
        if line.startswith("RESULT"):
            _, name, data = line.split(" ", 2)
            results[name] = json.loads(data)
    return results


def metrics(root: Path) -> list[dict]:
    path = root / "output/data/metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def losses(records: list[dict]) -> dict[int, float]:
    return {record["step"]: record["loss"] for record in records}


def hetero_tree(root: Path, current: str) -> Path:
    """resourceconfig.json of a heterogeneous cluster as SageMaker writes it: two GPU nodes in group
    `train`, one CPU node in group `prep`."""
    config = root / "input/config"
    config.mkdir(parents=True)
    groups = [
        {"instance_group_name": "train", "instance_type": "ml.p4d.24xlarge", "hosts": ["algo-2", "algo-3"]},
        {"instance_group_name": "prep", "instance_type": "ml.c5.xlarge", "hosts": ["algo-1"]},
    ]
    group = next(g["instance_group_name"] for g in groups if current in g["hosts"])
    resources = {
        "current_host": current,
        "current_instance_type": next(g["instance_type"] for g in groups if current in g["hosts"]),
        "current_group_name": group,
        "hosts": ["algo-1", "algo-2", "algo-3"],
        "instance_groups": groups,
        "network_interface_name": "eth0",
    }
    (config / "resourceconfig.json").write_text(json.dumps(resources))
    (config / "inputdataconfig.json").write_text(json.dumps({"plan": {"TrainingInputMode": "File"}}))
    return root


def is_rank(process: psutil.Process) -> bool:
    """A rank of a built-in training: forked by the forkserver that torchrun's agent forked, so the agent, the
    forkserver and each rank run the same command line (entrypoint → agent → forkserver → rank)."""
    try:
        parent = process.parent()
        return all(WARM_WORKERS in " ".join(p.cmdline()) for p in (process, parent, parent.parent()))
    except (psutil.Error, AttributeError):  # gone, or no parent (the machine's first process)
        return False
