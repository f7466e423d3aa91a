"""`dockyard-entrypoint [train] [--plan PATH] [--explain]`: what every node of a job runs.

It loads the plan, finds the cluster and this node's rank, sets the communication environment and the
SageMaker training toolkit's SM_* variables, picks the backend, prepares /opt/ml and drops root, and
starts torchrun for the built-in trainer or the user's script. `--explain` prints all of that and starts
nothing. It imports neither torch nor Hydra: start-up stays fast and it runs outside
a container just the same. When training fails, the reason goes to the failure file (SageMaker shows
/opt/ml/output/failure) and the exit status is non-zero.
"""

import argparse
import collections
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from compiler.spec import Plan
from compiler.spec.contract import RUN_AS_USER
from compiler.spec.errors import ConfigError
from compiler.spec.schema import Entry, Job, Launcher
from entrypoint.launcher import toolkit
from entrypoint.launcher.backend import Backend, BackendError, choose_backend, smddp_available
from entrypoint.launcher.cluster import (
    SAGEMAKER_ROOT,
    ClusterError,
    Node,
    Paths,
    current_group,
    discover,
    wait_for_hosts,
    within_group,
)
from entrypoint.launcher.comm import Detected, EnvRow, Interface, choose_interface, comm_env, detect
from entrypoint.launcher.failures import (
    WORKER_FAILED,
    StopTracebacks,
    failure_reason,
    note_failure,
    termination_message,
    worker_failure,
)
from entrypoint.launcher.privileges import Account, PathError, check_writable, choose_account, drop_to, hand_over
from entrypoint.launcher.secrets import with_secrets
from entrypoint.launcher.threads import threads_env

DEFAULT_PLAN = Path("/opt/dockyard/plan.json")
"""Where images bake the plan; --plan or DOCKYARD_PLAN point elsewhere."""
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
    channels: tuple[str, ...] = ()
    account: Account | None = None
    """The user training drops to; None to train as the user the entrypoint started as."""
    interface: Interface = Interface(None)

    @property
    def warnings(self) -> tuple[str, ...]:
        """The backend's warnings, and why the interface the cluster named is not used."""
        replaced = (self.interface.replaced,) if self.interface.replaced else ()
        return (*self.backend.warnings, *replaced)

    @property
    def user(self) -> str:
        if self.account is not None:
            return f"{self.account}, dropped to from root after preparing the paths"
        if os.getuid() == 0:
            return f"root: no user {RUN_AS_USER} that root can become here"
        return f"uid {os.getuid()}, as started"


def prepare(
    plan: Plan,
    plan_path: Path,
    environ: Mapping[str, str],
    detected: Detected,
    sagemaker_root: Path,
    smddp: bool,
    timeout: float = DEFAULT_TIMEOUT_S,
    machine: toolkit.Machine | None = None,
    account: Account | None = None,
) -> Launch:
    """Everything the node will do, decided without side effects (the explain table prints this)."""
    node = discover(environ, sagemaker_root)
    group = current_group(node) if plan.hardware.groups else None
    if group is not None:
        node = within_group(node, group)
    trains = group in (None, plan.hardware.train_group)
    if trains and node.nnodes != plan.layout.nodes:
        raise ClusterError(
            f"the plan is for {plan.layout.nodes} nodes, but this {node.source} cluster has {node.nnodes}"
        )
    root = sagemaker_root if node.source == "sagemaker" else Path(environ.get("DOCKYARD_ROOT", str(SAGEMAKER_ROOT)))
    paths = Paths(root)
    backend = choose_backend(plan, detected.gpus, smddp)
    interface = choose_interface(node, detected)
    found = toolkit.found_channels(paths) if node.input_data_config is None else []
    job = toolkit.job(plan, node, interface.name, found)
    arguments = script_arguments(job.hyperparameters)
    script = plan.trainer.script if plan.trainer.entry is Entry.script else None
    debug = environ.get("DOCKYARD_DEBUG") == "1"
    rows = comm_env(node, detected, backend.name, environ, interface.name, debug=debug)
    rows += trainer_env(backend.name, root, timeout, environ, account, node.current_host)
    rows += restart_env(plan.trainer.restarts, environ)
    machine = machine or toolkit.Machine(cpus=0, gpus=detected.gpus)
    processes = 1 if plan.job is Job.evaluate else plan.layout.processes_per_node  # the harness: one process
    rows += threads_env(backend.name, processes, machine.affinity, environ)
    rows += toolkit.toolkit_env(job, node, paths, script, arguments, machine, environ)
    command = launch_command(plan, node, paths, plan_path, arguments) if trains else group_command(plan, group)
    if account is not None:
        command = (*drop_to(account), *command)
    channels = tuple(sorted(job.input_data_config))
    return Launch(plan, node, paths, detected, backend, tuple(rows), command, channels, account, interface)


def trainer_env(
    backend: str, root: Path, timeout: float, environ: Mapping[str, str], account: Account | None, host: str = ""
) -> list[EnvRow]:
    """What the trainer reads from the entrypoint (`entrypoint.trainer.train`), unbuffered logs, and NCCL's
    flight recorder."""
    rows = [
        EnvRow("DOCKYARD_BACKEND", backend, "the process-group backend chosen above", True),
        EnvRow("DOCKYARD_ROOT", str(root), "data, model, checkpoints, metrics and failure live under it", True),
        EnvRow("DOCKYARD_TIMEOUT", str(int(timeout)), "seconds any collective may wait before the job fails", True),
    ]
    if host:
        rows.append(EnvRow("DOCKYARD_NODE", host, "health checks, stragglers and hangs name this node by it", True))
    if backend in ("nccl", "smddp"):
        rows += [
            EnvRow(name, value, reason, name not in environ)
            for name, value, reason in flight_recorder(Paths(root).output)
        ]
    if "PYTHONUNBUFFERED" not in environ:
        rows.append(EnvRow("PYTHONUNBUFFERED", "1", "every rank's log lines appear as they are written", True))
    if account is not None:
        rows.append(EnvRow("HOME", account.home, f"training runs as {account.name}; root's home is not its", True))
    return rows


FRESH_STORE = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE"


def restart_env(restarts: int, environ: Mapping[str, str]) -> list[EnvRow]:
    """With in-job restarts, every attempt's workers meet in a store of their own: the agents' shared one
    keeps the failed attempt's keys, and the next attempt's ranks would connect to dead addresses."""
    if not restarts or FRESH_STORE in environ:
        return []
    return [EnvRow(FRESH_STORE, "1", "each in-job restart's workers meet in a fresh store (trainer.restarts)", True)]


def flight_recorder(output: Path) -> list[tuple[str, str, str]]:
    """NCCL's flight recorder (torch's ProcessGroupNCCL): what each rank's last collectives were, dumped to a
    file per rank in the output folder when a collective times out."""
    return [
        ("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000", "NCCL's flight recorder keeps each rank's last 2,000 collectives"),
        ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1", "a collective's timeout dumps the flight recorder"),
        ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", str(output / "nccl_trace_rank_"), "where it goes, one file per rank"),
    ]


def group_command(plan: Plan, group: str) -> tuple[str, ...]:
    """What a group that does not train runs (`trainer.group_commands.<group>`), split like a shell line and
    started without a shell, once per node of the group."""
    line = plan.trainer.group_commands.get(group)
    if not line:
        raise ClusterError(f"this node is in instance group '{group}', which has no trainer.group_commands.{group}")
    return tuple(shlex.split(line))


def launch_command(plan: Plan, node: Node, paths: Paths, plan_path: Path, arguments: list[str]) -> tuple[str, ...]:
    """torchrun with a process per GPU (or CPU slot) for the built-in trainer or the script; for a script
    with `trainer.launcher=per_node`, the script alone, once per node; for an evaluation (`job` evaluate), the
    harness once (`entrypoint.evaluation`)."""
    trainer = plan.trainer
    if plan.job is Job.evaluate:
        return ("python", "-m", "entrypoint.evaluation", f"--plan={plan_path}")
    if trainer.entry is Entry.script and trainer.launcher is Launcher.per_node:
        return ("python", str(paths.code / trainer.script), *arguments)
    launcher = (
        "python",
        "-m",
        WARM_WORKERS if trainer.entry is Entry.builtin else "torch.distributed.run",
        f"--nnodes={node.nnodes}",
        f"--nproc-per-node={plan.layout.processes_per_node}",
        *rendezvous_arguments(node, trainer.restarts),
    )
    if trainer.entry is Entry.builtin:
        return (*launcher, "-m", "entrypoint.trainer", f"--plan={plan_path}")
    return (*launcher, str(paths.code / trainer.script), *arguments)


WARM_WORKERS = "entrypoint.trainer.workers"
"""torchrun for the built-in trainer: its workers, restarted ones too, fork from an interpreter that imported the
trainer once per node, instead of each importing torch again (a user's script runs under torchrun itself)."""

RENDEZVOUS_ID = "dockyard"
"""The c10d rendezvous' run id: one job per rendezvous endpoint, so any fixed name will do."""


def rendezvous_arguments(node: Node, restarts: int) -> tuple[str, ...]:
    """How torchrun's agents meet. Without restarts, the static rendezvous: ranks follow the node order.
    With `trainer.restarts`, torchrun's c10d rendezvous, the one that meets again: the static one keeps one
    store for every attempt, whose keys from the failed attempt mislead the next, and an agent whose workers
    are healthy never learns that another node restarts. Under c10d an agent whose worker dies opens a new
    round, the other nodes' agents see it waiting and restart their workers too, and every attempt gets a
    fresh store. Node 0 hosts the rendezvous at the master's address; c10d orders the nodes by host name."""
    if not restarts:
        return (
            f"--node-rank={node.node_rank}",
            f"--master-addr={node.master_addr}",
            f"--master-port={node.master_port}",
            "--max-restarts=0",
        )
    return (
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={node.master_addr}:{node.master_port}",
        f"--rdzv-id={RENDEZVOUS_ID}",
        f"--rdzv-conf=is_host={str(node.node_rank == 0).lower()}",
        f"--max-restarts={restarts}",
    )


def script_arguments(hyperparameters: Mapping[str, object]) -> list[str]:
    """`--key value` per hyperparameter, in key order; lists, objects, booleans and null as JSON."""
    return [part for key, value in sorted(hyperparameters.items()) for part in (f"--{key}", _text(value))]


def _text(value: object) -> str:
    return json.dumps(value) if isinstance(value, dict | list | bool) or value is None else str(value)


def explain(launch: Launch, *, toolkit_rows: bool = True) -> str:
    """What the node will do and why. Without `toolkit_rows` (a training run's log unless verbose) the
    SageMaker toolkit's variables, over half of the table, are counted in one line instead of listed."""
    plan, node = launch.plan, launch.node
    listed = [row for row in launch.env if toolkit.is_toolkit(row)]
    toolkit_lines = (
        ["SageMaker training toolkit", *(_line(row, EXPLAIN_WIDTH) for row in listed)]
        if toolkit_rows
        else [f"SageMaker training toolkit: {len(listed)} SM_* variables set (--explain or {VERBOSE}=1 lists them)"]
    )
    lines = [
        f"plan        {plan.name}: {plan.parallelism.strategy.value}, {plan.layout.world_size} processes "
        f"({plan.layout.nodes} × {plan.layout.processes_per_node}) on {plan.instance.name}",
        f"cluster     {node.source}: node {node.node_rank} of {node.nnodes} ({node.current_host})",
        f"master      {node.master_addr}:{node.master_port}",
        f"hosts       {', '.join(node.hosts)}",
        f"detected    {launch.detected.describe()}",
        f"backend     {launch.backend.name}",
        *(f"warning     {warning}" for warning in launch.warnings),
        f"paths       model {launch.paths.model}, checkpoints {launch.paths.checkpoints}, "
        f"failure {launch.paths.failure}",
        f"user        {launch.user}",
        f"command     {' '.join(launch.command)}",
        "environment",
        *(_line(row) for row in launch.env if not toolkit.is_toolkit(row)),
        *toolkit_lines,
    ]
    return "\n".join(lines) + "\n"


VERBOSE = "DOCKYARD_VERBOSE"
"""Set to 1 (in target.environment, say) for the whole explain table at the start of every node's log."""
EXPLAIN_WIDTH = 100
"""--explain shortens a toolkit value past this many characters (SM_TRAINING_ENV holds all the others)."""


def _line(row: EnvRow, width: int | None = None) -> str:
    value = row.value
    if width is not None and len(value) > width:
        value = f"{value[:width]}… ({len(row.value)} characters)"
    return f"  {row.name}={value}  # {row.reason}"


def child_environment(launch: Launch, environ: Mapping[str, str]) -> dict[str, str]:
    return {**environ, **{row.name: row.value for row in launch.env if row.set_here}}


def run(launch: Launch, env: dict[str, str]) -> int:
    """Start torchrun, pass its output through, and on failure write why to the failure file. SIGTERM and
    SIGINT go on to torchrun, which passes them to the workers; a job they end was stopped, not failed, and
    its log shows no traceback of the stop (`StopTracebacks`)."""
    command = [sys.executable if launch.command[0] == "python" else launch.command[0], *launch.command[1:]]
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    forwarded: list[int] = []

    def forward(number: int, _frame: object) -> None:
        forwarded.append(number)
        process.send_signal(number)

    for name in ("SIGTERM", "SIGINT"):
        signal.signal(getattr(signal, name), forward)
    failures, tracebacks = 0, StopTracebacks()
    for line in process.stdout:
        sys.stdout.writelines(tracebacks.passed(line, bool(forwarded)))
        sys.stdout.flush()
        tail.append(line.rstrip("\n"))
        if match := WORKER_FAILED.search(line):
            failures += 1
            if failures <= launch.plan.trainer.restarts:
                failure = worker_failure(launch.node, match, list(tail))
                note_failure(launch.paths, launch.node, failure)
                print(restart_line(launch, failures, failure), file=sys.stderr, flush=True)
    sys.stdout.writelines(tracebacks.left())
    status = process.wait()
    if status != 0 and forwarded:
        node = launch.node
        stopped = f"{failure_reason(status, list(tail))} (node {node.node_rank}, {node.current_host})"
        print(f"dockyard-entrypoint: training stopped: {stopped}", file=sys.stderr)
    elif status != 0:
        write_failure(launch, failure_reason(status, list(tail)), f"torchrun exit status {status}", list(tail))
    return status


def restart_line(launch: Launch, count: int, failure: dict) -> str:
    """The cause of an in-job restart, as the node whose worker died sees it."""
    return (
        f"dockyard-entrypoint: restart {count} of {launch.plan.trainer.restarts}: {failure['where']} failed: "
        f"{failure['cause']}; torchrun restarts the workers, which resume from the newest checkpoint"
    )


def write_failure(launch: Launch, reason: str, context: str, tail: list[str]) -> None:
    """The reason first (SageMaker shows the file's first 1,024 characters), then the log's last lines."""
    node = launch.node
    text = f"{reason}\nnode {node.node_rank} ({node.current_host}), {context}\n\n" + "\n".join(tail) + "\n"
    print(f"dockyard-entrypoint: training failed: {reason}", file=sys.stderr)
    launch.paths.failure.parent.mkdir(parents=True, exist_ok=True)
    launch.paths.failure.write_text(text)
    termination_message(reason)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="dockyard-entrypoint", description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", choices=["train"], help="SageMaker starts containers with 'train'")
    parser.add_argument("--plan", type=Path, help=f"the plan (default: $DOCKYARD_PLAN or {DEFAULT_PLAN})")
    parser.add_argument("--explain", action="store_true", help="print rank, master, environment; train nothing")
    parser.add_argument("-v", "--verbose", action="store_true", help=f"list the SM_* variables too (or {VERBOSE}=1)")
    parser.add_argument("--timeout", type=float, help="seconds to wait for hosts and for any collective (600)")
    parser.add_argument("--sagemaker-root", type=Path, default=SAGEMAKER_ROOT, help=argparse.SUPPRESS)
    parser.add_argument("--device-root", type=Path, default=Path("/"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(sys.argv[1:] if argv is None else argv)
    plan_path = args.plan or Path(os.environ.get("DOCKYARD_PLAN", str(DEFAULT_PLAN)))
    try:
        plan = Plan.from_json(read_plan(plan_path))
        # the plan's target.environment counts as the user's, also where the target did not pass it in
        environ = with_secrets({**plan.target.environment, **os.environ})
        timeout = args.timeout or float(environ.get("DOCKYARD_TIMEOUT", DEFAULT_TIMEOUT_S))
        detected = detect(args.device_root)
        machine = toolkit.Machine(
            cpus=toolkit.cpus_online(args.device_root),
            gpus=detected.gpus,
            smddprun=shutil.which("smddprun") is not None,
            smddpmprun=shutil.which("smddpmprun") is not None,
            affinity=len(os.sched_getaffinity(0)),
        )
        account = choose_account(environ) if os.getuid() == 0 else None
        launch = prepare(
            plan, plan_path, environ, detected, args.sagemaker_root, smddp_available(), timeout, machine, account
        )
    except (ConfigError, ClusterError, BackendError, PathError) as error:
        _exit(str(error))
    if args.explain:
        print(explain(launch), end="")
        return
    for warning in launch.warnings:
        print(f"dockyard-entrypoint: warning: {warning}", file=sys.stderr)
    try:
        if launch.account is not None:
            cache = (Path(plan.data.cache),) if plan.data.cache else ()
            hand_over(launch.paths, launch.channels, plan_path, launch.account, shared=cache)
        else:
            check_writable(launch.paths)
    except PathError as error:
        _exit(str(error))
    try:
        wait_for_hosts(launch.node.hosts, timeout)
    except ClusterError as error:
        write_failure(launch, str(error), "before training started", [])
        sys.exit(TRAINING_FAILED)
    print(explain(launch, toolkit_rows=args.verbose or environ.get(VERBOSE) == "1"), end="", flush=True)
    status = run(launch, child_environment(launch, environ))
    sys.exit(TRAINING_FAILED if status else 0)


def read_plan(path: Path) -> str:
    """The plan's text, or a PathError that names the path and what is wrong with it."""
    try:
        return path.read_text()
    except FileNotFoundError:
        raise PathError(f"no plan at {path}; pass --plan PATH or set DOCKYARD_PLAN") from None
    except PermissionError:
        raise PathError(f"cannot read the plan at {path} as uid {os.getuid()}: permission denied") from None
    except OSError as error:
        raise PathError(f"cannot read the plan at {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise PathError(f"the plan at {path} is not text; recompile it with `dockyard plan`") from None


def _exit(message: str) -> None:
    print(f"dockyard-entrypoint: error: {message}", file=sys.stderr)
    sys.exit(USER_ERROR)
