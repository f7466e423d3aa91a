"""`dockyard-entrypoint [train] [--plan PATH] [--explain]`: what every node of a job runs.

It loads the plan, finds the cluster and this node's rank, sets the communication environment, picks
the backend, and starts torchrun for the built-in trainer or the user's script. `--explain` prints all
of that and starts nothing. It imports neither torch nor Hydra: start-up stays fast and it runs outside
a container just the same. When training fails, the reason goes to the failure file (SageMaker shows
/opt/ml/output/failure) and the exit status is non-zero.
"""

import argparse
import collections
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from compiler.spec import Plan
from compiler.spec.errors import ConfigError
from compiler.spec.schema import Entry
from entrypoint.backend import Backend, BackendError, choose_backend, smddp_available
from entrypoint.cluster import SAGEMAKER_ROOT, ClusterError, Node, Paths, discover, wait_for_hosts
from entrypoint.comm import Detected, EnvRow, comm_env, detect

DEFAULT_PLAN = Path("/opt/dockyard/plan.json")
"""Where images bake the plan; --plan or DOCKYARD_PLAN point elsewhere."""
CODE_DIR = Path("/opt/dockyard/code")
"""Where images put trainer.source_dir; DOCKYARD_CODE_DIR points elsewhere (outside a container)."""
DEFAULT_TIMEOUT_S = 600.0
USER_ERROR, TRAINING_FAILED = 2, 1
TAIL_LINES = 80


@dataclass(frozen=True)
class Launch:
    plan: Plan
    node: Node
    paths: Paths
    detected: Detected
    backend: Backend
    env: tuple[EnvRow, ...]
    command: tuple[str, ...]


def prepare(
    plan: Plan,
    plan_path: Path,
    environ: Mapping[str, str],
    detected: Detected,
    sagemaker_root: Path,
    smddp: bool,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> Launch:
    """Everything the node will do, decided without side effects (the explain table prints this)."""
    node = discover(environ, sagemaker_root)
    if node.nnodes != plan.layout.nodes:
        raise ClusterError(
            f"the plan is for {plan.layout.nodes} nodes, but this {node.source} cluster has {node.nnodes}"
        )
    root = sagemaker_root if node.source == "sagemaker" else Path(environ.get("DOCKYARD_ROOT", str(SAGEMAKER_ROOT)))
    backend = choose_backend(plan, detected.gpus, smddp)
    rows = comm_env(node, detected, backend.name, environ, debug=environ.get("DOCKYARD_DEBUG") == "1")
    rows += trainer_env(backend.name, root, timeout, environ)
    command = torchrun_command(plan, node, plan_path, environ)
    return Launch(plan, node, Paths(root), detected, backend, tuple(rows), command)


def trainer_env(backend: str, root: Path, timeout: float, environ: Mapping[str, str]) -> list[EnvRow]:
    """What the trainer reads from the entrypoint (`entrypoint.train`), and unbuffered logs."""
    rows = [
        EnvRow("DOCKYARD_BACKEND", backend, "the process-group backend chosen above", True),
        EnvRow("DOCKYARD_ROOT", str(root), "data, model, checkpoints, metrics and failure live under it", True),
        EnvRow("DOCKYARD_TIMEOUT", str(int(timeout)), "seconds any collective may wait before the job fails", True),
    ]
    if "PYTHONUNBUFFERED" not in environ:
        rows.append(EnvRow("PYTHONUNBUFFERED", "1", "every rank's log lines appear as they are written", True))
    return rows


def torchrun_command(plan: Plan, node: Node, plan_path: Path, environ: Mapping[str, str]) -> tuple[str, ...]:
    launcher = (
        "python",
        "-m",
        "torch.distributed.run",
        f"--nnodes={node.nnodes}",
        f"--nproc-per-node={plan.layout.processes_per_node}",
        f"--node-rank={node.node_rank}",
        f"--master-addr={node.master_addr}",
        f"--master-port={node.master_port}",
        "--max-restarts=0",
    )
    trainer = plan.trainer
    if trainer.entry is Entry.builtin:
        return (*launcher, "-m", "entrypoint.train", f"--plan={plan_path}")
    code = Path(environ.get("DOCKYARD_CODE_DIR", str(CODE_DIR)))
    hyperparameters = {**trainer.hyperparameters, **_sagemaker_hyperparameters(node)}
    arguments = [part for key, value in sorted(hyperparameters.items()) for part in (f"--{key}", _text(value))]
    return (*launcher, str(code / trainer.script), *arguments)


def _sagemaker_hyperparameters(node: Node) -> dict[str, object]:
    """Values set on the SageMaker job itself win over the plan's; SageMaker's own sagemaker_* keys are not
    the script's. SageMaker stores each value JSON-encoded in a string."""
    values = {}
    for key, raw in (node.hyperparameters or {}).items():
        if key.startswith("sagemaker_"):
            continue
        try:
            values[key] = json.loads(raw)
        except ValueError:
            values[key] = raw
    return values


def _text(value: object) -> str:
    return json.dumps(value) if isinstance(value, dict | list | bool) or value is None else str(value)


def explain(launch: Launch) -> str:
    plan, node = launch.plan, launch.node
    lines = [
        f"plan        {plan.name}: {plan.parallelism.strategy.value}, {plan.layout.world_size} processes "
        f"({plan.layout.nodes} × {plan.layout.processes_per_node}) on {plan.instance.name}",
        f"cluster     {node.source}: node {node.node_rank} of {node.nnodes} ({node.current_host})",
        f"master      {node.master_addr}:{node.master_port}",
        f"hosts       {', '.join(node.hosts)}",
        f"detected    {launch.detected.describe()}",
        f"backend     {launch.backend.name}",
        *(f"warning     {warning}" for warning in launch.backend.warnings),
        f"paths       model {launch.paths.model}, checkpoints {launch.paths.checkpoints}, "
        f"failure {launch.paths.failure}",
        f"command     {' '.join(launch.command)}",
        "environment",
        *(f"  {row.name}={row.value}  # {row.reason}" for row in launch.env),
    ]
    return "\n".join(lines) + "\n"


def child_environment(launch: Launch, environ: Mapping[str, str]) -> dict[str, str]:
    return {**environ, **{row.name: row.value for row in launch.env if row.set_here}}


def run(launch: Launch, env: dict[str, str]) -> int:
    """Start torchrun, pass its output through, and on failure write why to the failure file."""
    command = [sys.executable if launch.command[0] == "python" else launch.command[0], *launch.command[1:]]
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for name in ("SIGTERM", "SIGINT"):
        signal.signal(getattr(signal, name), lambda number, _: process.send_signal(number))
    for line in process.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        tail.append(line.rstrip("\n"))
    status = process.wait()
    if status != 0:
        write_failure(launch, failure_reason(status, list(tail)), f"torchrun exit status {status}", list(tail))
    return status


FAILURE_PATTERNS = (
    re.compile(r"\b(\w+(Error|Exception)|Timed out|timed out)\b.*"),
    re.compile(r"\bSignal \d+ \(\w+\) received\b.*"),
)
"""What a failed rank leaves in the log, most telling first: an exception (a collective's timeout is one),
then the signal that killed a rank (torchrun also ends the healthy ranks of a node with SIGTERM)."""


def failure_reason(status: int, tail: list[str]) -> str:
    """The last line of the log matching the first pattern that matches at all, else the exit status."""
    for pattern in FAILURE_PATTERNS:
        for line in reversed(tail):
            if "ChildFailedError" not in line and (match := pattern.search(line)):
                return match[0].strip()
    return f"torchrun exited with status {status}"


def write_failure(launch: Launch, reason: str, context: str, tail: list[str]) -> None:
    """The reason first (SageMaker shows the file's first 1,024 characters), then the log's last lines."""
    node = launch.node
    text = f"{reason}\nnode {node.node_rank} ({node.current_host}), {context}\n\n" + "\n".join(tail) + "\n"
    print(f"dockyard-entrypoint: training failed: {reason}", file=sys.stderr)
    launch.paths.failure.parent.mkdir(parents=True, exist_ok=True)
    launch.paths.failure.write_text(text)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dockyard-entrypoint", description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", choices=["train"], help="SageMaker starts containers with 'train'")
    parser.add_argument("--plan", type=Path, help=f"the plan (default: $DOCKYARD_PLAN or {DEFAULT_PLAN})")
    parser.add_argument("--explain", action="store_true", help="print rank, master, environment; train nothing")
    parser.add_argument("--timeout", type=float, help="seconds to wait for hosts and for any collective (600)")
    parser.add_argument("--sagemaker-root", type=Path, default=SAGEMAKER_ROOT, help=argparse.SUPPRESS)
    parser.add_argument("--device-root", type=Path, default=Path("/"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    plan_path = args.plan or Path(os.environ.get("DOCKYARD_PLAN", str(DEFAULT_PLAN)))
    if not plan_path.is_file():
        _exit(f"no plan at {plan_path}; pass --plan PATH or set DOCKYARD_PLAN")
    try:
        text = plan_path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        _exit(f"plan: cannot read {plan_path} ({error}); recompile it with `dockyard plan`")
    try:
        plan = Plan.from_json(text)
        # the plan's target.environment counts as the user's, also where the target did not pass it in
        environ = {**plan.target.environment, **os.environ}
        timeout = args.timeout or float(environ.get("DOCKYARD_TIMEOUT", DEFAULT_TIMEOUT_S))
        detected = detect(args.device_root)
        launch = prepare(plan, plan_path, environ, detected, args.sagemaker_root, smddp_available(), timeout)
    except (ConfigError, ClusterError, BackendError) as error:
        _exit(str(error))
    if args.explain:
        print(explain(launch), end="")
        return
    for warning in launch.backend.warnings:
        print(f"dockyard-entrypoint: warning: {warning}", file=sys.stderr)
    try:
        wait_for_hosts(launch.node.hosts, timeout)
    except ClusterError as error:
        write_failure(launch, str(error), "before training started", [])
        sys.exit(TRAINING_FAILED)
    print(explain(launch), end="", flush=True)
    status = run(launch, child_environment(launch, environ))
    sys.exit(TRAINING_FAILED if status else 0)


def _exit(message: str) -> None:
    print(f"dockyard-entrypoint: error: {message}", file=sys.stderr)
    sys.exit(USER_ERROR)
