"""The pre-flight health check (`trainer.health_check`), run by every rank after the process group exists
and before the model is built.

Each node's first rank checks what the node has: the GPUs the plan expects (count, memory, and the ECC and
row-remapping failures `nvidia-smi` reports; XID errors live in the host's kernel log, out of a container's
sight), the EFA devices of an EFA instance type, and room for a checkpoint in /dev/shm (this node's share)
and in the checkpoint folder (the whole of it). Then all ranks time one all-reduce and compare its bus
bandwidth with what the instance type's link should carry. Every rank learns every node's findings, so each
fails with the same line: `health check failed on node 1 (algo-2): gpus: 7 visible, the plan expects 8`.
A node that failed a check of its own is also written to the output folder's `unhealthy-nodes`, which
Slurm's retry leaves out.
"""

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from compiler.spec import Plan
from compiler.spec.contract import UNHEALTHY_FILE
from entrypoint.launcher.cluster import Paths
from entrypoint.launcher.comm import detect
from entrypoint.trainer.faults import Faults

WARN_BELOW, FAIL_BELOW = 0.5, 0.1
"""Fractions of the expected bus bandwidth below which the all-reduce check warns and fails."""
PROBE_BYTES = {"cuda": 256 * 2**20, "cpu": 16 * 2**20}
"""The all-reduce's size: big enough that bandwidth, not latency, sets its time."""
PROBE_ROUNDS = 3
GPU_MEMORY_SLACK = 0.95
"""A card reports a little less memory than its datasheet's figure (the catalog's)."""
SHM = Path("/dev/shm")
NODE_VARIABLE = "DOCKYARD_NODE"
"""This node's name in the cluster, which the entrypoint sets: failures and stragglers name it."""


class HealthCheckError(RuntimeError):
    """A node failed the health check; the message is one line naming the node, the check and the value."""


@dataclass(frozen=True)
class Finding:
    check: str
    text: str
    failed: bool = False
    warning: bool = False
    collective: bool = False
    """Measured by all ranks together (the all-reduce): no one node is to blame."""


@dataclass(frozen=True)
class Where:
    node: int
    host: str

    def __str__(self) -> str:
        return f"node {self.node} ({self.host})"


def this_node(plan: Plan) -> Where:
    node = int(os.environ.get("GROUP_RANK", dist.get_rank() // plan.layout.processes_per_node))
    return Where(node, os.environ.get(NODE_VARIABLE) or os.uname().nodename)


def gpu_findings(plan: Plan, expected: int, timeout_s: float) -> list[Finding]:
    """The GPUs this node shows against the `expected` count and the catalog's memory per card."""
    if not expected:
        return [Finding("gpus", "skipped: a CPU plan")]
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible < expected:
        return [Finding("gpus", f"{visible} visible, the plan expects {expected}", failed=True)]
    findings = [Finding("gpus", f"{visible} visible")]
    wanted = plan.instance.gpu_memory_gib * GPU_MEMORY_SLACK
    for index in range(expected):
        gib = torch.cuda.get_device_properties(index).total_memory / 2**30
        if gib < wanted:
            findings.append(
                Finding(
                    "gpu memory",
                    f"GPU {index} has {gib:.1f} GiB, {plan.instance.name} has {plan.instance.gpu_memory_gib} GiB cards",
                    failed=True,
                )
            )
    return findings + ecc_findings(timeout_s)


SMI_FIELDS = ("ecc.errors.uncorrected.volatile.total", "remapped_rows.failure")


def ecc_findings(timeout_s: float) -> list[Finding]:
    """Uncorrected ECC errors since the driver loaded, and failed row remappings, from `nvidia-smi`."""
    if shutil.which("nvidia-smi") is None:
        return [Finding("ecc", "skipped: no nvidia-smi in the image")]
    query = ["nvidia-smi", f"--query-gpu=index,{','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"]
    try:
        result = subprocess.run(query, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return [Finding("ecc", f"nvidia-smi did not answer in {timeout_s:g} s", failed=True)]
    if result.returncode != 0:
        return [Finding("ecc", f"skipped: nvidia-smi said {result.stdout.strip() or result.stderr.strip()}")]
    return parse_smi(result.stdout)


def parse_smi(text: str) -> list[Finding]:
    """`0, 0, No` per GPU; a count or `Yes` is a failure, `[N/A]` (a card without ECC) is not."""
    bad = []
    for line in text.strip().splitlines():
        index, *values = (value.strip() for value in line.split(","))
        for name, value in zip(SMI_FIELDS, values, strict=False):
            if value.isdigit() and int(value) or value == "Yes":
                bad.append(Finding("ecc", f"GPU {index} {name} = {value}", failed=True))
    return bad or [Finding("ecc", "no uncorrected errors or failed remappings")]


def efa_findings(plan: Plan, root: Path = Path("/")) -> list[Finding]:
    expected = plan.instance.efa_devices
    if not expected:
        return []
    found = detect(root).efa_devices
    if found < expected:
        return [Finding("efa", f"{found} EFA devices, {plan.instance.name} has {expected}", failed=True)]
    return [Finding("efa", f"{found} EFA devices")]


def room_findings(plan: Plan, paths: Paths) -> list[Finding]:
    """Free space for a checkpoint: this node's share in /dev/shm, the whole in the checkpoint folder."""
    whole = plan.derived.checkpoint_bytes
    share = whole * plan.layout.processes_per_node // plan.layout.world_size
    findings = []
    for check, folder, needed in (("shm", SHM, share), ("checkpoint room", paths.checkpoints, whole)):
        existing = next((p for p in (folder, *folder.parents) if p.exists()), None)
        if existing is None:
            continue
        free = shutil.disk_usage(existing).free
        text = f"{folder} has {mib(free)} free, a checkpoint needs {mib(needed)}"
        findings.append(Finding(check, text, failed=free < needed))
    return findings


def mib(count: int) -> str:
    return f"{count / 2**20:,.0f} MiB"


def expected_gbps(plan: Plan) -> float | None:
    """What one all-reduce's bus bandwidth should reach: `trainer.health_bandwidth_gbps`, else the catalog's
    link the all-reduce crosses (the network between nodes, the GPU link within one); None where the catalog
    has no figure (CPU types)."""
    if plan.trainer.health_bandwidth_gbps is not None:
        return plan.trainer.health_bandwidth_gbps
    link = plan.instance.network_gbps if plan.layout.nodes > 1 else plan.instance.gpu_link_gbps
    return link or None


def bandwidth_finding(measured: float, expected: float | None) -> Finding:
    """The all-reduce's bus bandwidth against the expectation: a warning below half, a failure below a tenth."""
    text = f"all-reduce bus bandwidth {measured:.3g} Gbit/s"
    if expected is None:
        return Finding("bandwidth", f"{text} (no expected figure for this instance type)", collective=True)
    text += f", expected {expected:.3g}"
    return Finding(
        "bandwidth",
        text,
        failed=measured < FAIL_BELOW * expected,
        warning=measured < WARN_BELOW * expected,
        collective=True,
    )


def measure_gbps(device: torch.device) -> float:
    """nccl-tests' bus bandwidth of an all-reduce, 2 (n - 1) / n × bytes / time, in Gbit/s (best of a few)."""
    size = PROBE_BYTES["cuda" if device.type == "cuda" else "cpu"]
    tensor = torch.ones(size // 4, device=device)
    world = dist.get_world_size()
    dist.all_reduce(tensor)  # the first one sets up connections
    best = float("inf")
    for _ in range(PROBE_ROUNDS):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    factor = 2 * (world - 1) / world if world > 1 else 1.0
    return factor * size * 8 / best / 1e9


def check(plan: Plan, paths: Paths, device: torch.device, faults: Faults) -> list[str]:
    """Run the health check on every rank; the lines rank 0 prints. Raises HealthCheckError (the same on
    every rank) when a node fails, after writing its name to `unhealthy-nodes`."""
    started = time.perf_counter()
    budget = plan.trainer.health_check_s
    where = this_node(plan)
    findings: list[Finding] = []
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        gpus = plan.instance.gpus and plan.layout.processes_per_node
        if where.host in faults.unhealthy:
            gpus += 1
        findings = [*gpu_findings(plan, gpus, budget), *efa_findings(plan), *room_findings(plan, paths)]
    findings.append(bandwidth_finding(measure_gbps(device), expected_gbps(plan)))
    elapsed = time.perf_counter() - started
    if elapsed > budget:
        findings.append(Finding("budget", f"took {elapsed:.1f} s, over trainer.health_check_s={budget:g}", failed=True))
    gathered: list[tuple[Where, list[Finding]] | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (where, findings))
    failures = [(at, f) for item in gathered if item for at, found in [item] for f in found if f.failed]
    if failures:
        own = [f for at, f in failures if at == where and not f.collective]
        if own and int(os.environ.get("LOCAL_RANK", "0")) == 0:
            paths.output_dir.mkdir(parents=True, exist_ok=True)
            with (paths.output_dir / UNHEALTHY_FILE).open("a") as unhealthy:
                unhealthy.write(where.host + "\n")
        at, first = failures[0]
        place = "all nodes" if first.collective else str(at)
        raise HealthCheckError(f"health check failed on {place}: {first.check}: {first.text}")
    return summary(gathered, time.perf_counter() - started)


def summary(gathered: list, seconds: float) -> list[str]:
    """`health check  passed in 1.2 s` and each node's findings (the collective one once)."""
    lines = [f"health check      passed in {seconds:.1f} s"]
    seen_collective = False
    for at, findings in filter(None, gathered):
        for finding in findings:
            if finding.collective:
                if seen_collective:
                    continue
                seen_collective = True
            label = "warning" if finding.warning else "ok"
            lines.append(f"  {'all nodes' if finding.collective else at}: {finding.check}: {finding.text} ({label})")
    return lines
