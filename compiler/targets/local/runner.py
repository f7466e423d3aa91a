"""Runs a `LocalRequest` on the Docker engine: the I/O half of the local target.

All nodes' logs stream live, each line prefixed by its node. The first node to fail stops the others and
its exit status is the job's; containers and the network are removed on every exit, Ctrl-C included (which stops
the nodes as `dockyard stop` does first).
`target.max_retries` starts a failed job again: it resumes from the checkpoints in the run folder. An
attempt still running after `target.max_run_hours` is stopped (SIGTERM first, so the trainer checkpoints)
and not retried, as Slurm ends a job at its time limit and Kubernetes at its deadline. `dockyard stop` stops the
nodes the same way; such a job ends stopped, not failed, and is not retried either.
"""

import contextlib
import os
import queue
import sys
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO

import docker
from docker.types import DeviceRequest

from compiler.spec.contract import TRACKER_CREDENTIALS
from compiler.spec.s3 import download_s3
from compiler.targets.host_user import make_run_folders
from compiler.targets.local.forward import relaying
from compiler.targets.local.translate import HOST_ALIAS, ContainerSpec, LocalRequest
from compiler.targets.logs import stamped

STOP_TIMEOUT_S = 10
"""From SIGTERM to SIGKILL when nodes are stopped: `docker stop`'s default."""
RUN_LABEL = "dockyard.run_id"  # what `dockyard stop` finds a run's containers by
SHM_SIZE = "1g"
"""torch's shared-memory tensors and data loader workers outgrow Docker's 64 MB default."""
POLL_S = 60.0
"""The longest one wait for a node's exit: the deadline is looked at in between."""
STOP_REQUEST = "stop-requested"
"""Written into the run folder by `dockyard stop` before it stops the nodes: the process running the job, and
`status` once none is left, then know the nodes were stopped rather than failed. It counts for the attempts
started before it was written (a resumed run's folder keeps an earlier attempt's)."""


@dataclass(frozen=True)
class Ending:
    """How a job ended: the exit status (the first failed node's), the attempts it took, and whether its
    nodes were stopped at `target.max_run_hours`."""

    status: int
    attempts: int = 1
    out_of_time: bool = False
    stopped: bool = False


def prepare_host_folders(request: LocalRequest, plan_json: str) -> None:
    """Write the plan channel and each node's contract files, download S3 channels (as SageMaker's File
    mode does before the container starts), and make the folders containers write to."""
    run_dir = Path(request.run_dir)
    for folder, uri in request.downloads.items():
        download_s3(uri, Path(folder))
    (run_dir / "plan").mkdir(parents=True, exist_ok=True)
    (run_dir / "plan" / "plan.json").write_text(plan_json)
    for spec in request.containers:
        config = run_dir / "nodes" / spec.hostname / "config"
        config.mkdir(parents=True, exist_ok=True)
        for name, text in spec.contract_files.items():
            (config / name).write_text(text)
    (run_dir / "logs").mkdir(exist_ok=True)
    make_run_folders(request.host_folders)


def run(request: LocalRequest, *, client=None, out: IO[str] = sys.stdout, interrupted=None) -> Ending:
    """Run the job to its end, restarting it after a failure up to `max_retries` times (never once
    `interrupted` is set, nor after it ran out of time, which it would again)."""
    client = client or docker.from_env()
    ending = Ending(status=1, attempts=0)
    for attempt in range(1, request.max_retries + 2):
        if attempt > 1:
            if interrupted is not None and interrupted.is_set():
                return ending
            print(f"dockyard: restarting the job (retry {attempt - 1} of {request.max_retries})", file=out)
        ending = replace(run_once(request, client, out), attempts=attempt)
        if ending.status == 0 or ending.out_of_time or ending.stopped:
            break
    return ending


def running(run_id: str, client=None) -> bool:
    client = client or docker.from_env()
    return bool(client.containers.list(filters={"label": f"{RUN_LABEL}={run_id}"}))


def stop_requested(run_dir: Path, since: float) -> bool:
    """Whether `dockyard stop` asked to stop the attempt started at `since` (a `time.time()`)."""
    marker = run_dir / STOP_REQUEST
    return marker.exists() and marker.stat().st_mtime >= since


def stop(run_id: str, run_dir: Path, client=None) -> None:
    """Stop a run's containers (`dockyard stop`), saying so in its folder first; the process running it
    removes them."""
    client = client or docker.from_env()
    (run_dir / STOP_REQUEST).touch()
    _stop(client.containers.list(filters={"label": f"{RUN_LABEL}={run_id}"}))


def run_once(request: LocalRequest, client, out: IO[str]) -> Ending:
    network = client.networks.create(request.network, driver="bridge")
    network.reload()
    gateway = network.attrs["IPAM"]["Config"][0]["Gateway"]
    containers = []
    try:
        with relaying(gateway, request.loopback_ports):
            return _run_containers(request, client, network, gateway, containers, out)
    except KeyboardInterrupt:  # Ctrl-C stops the nodes as `dockyard stop` does; a second one kills them
        print("dockyard: interrupted: stopping the nodes (Ctrl-C again kills them)", file=out, flush=True)
        _stop([container for _, container in containers])
        raise
    finally:
        for _, container in containers:
            container.remove(force=True)
        network.remove()


def _run_containers(request: LocalRequest, client, network, gateway: str, containers: list, out: IO[str]) -> Ending:
    """Start every node on `network` (filling `containers`, which the caller removes) and wait for them."""
    for spec in request.containers:
        container = _create(client, spec, request.run_id, gateway)
        network.connect(container, aliases=[spec.hostname])
        containers.append((spec.hostname, container))
    exits: queue.Queue[tuple[str, int]] = queue.Queue()
    for host, container in containers:
        container.start()
        log_file = Path(request.run_dir) / "logs" / f"{host}.log"
        threading.Thread(target=_stream, args=(host, container, out, log_file), daemon=True).start()
        threading.Thread(target=lambda h=host, c=container: exits.put((h, c.wait()["StatusCode"])), daemon=True).start()
    return _wait_for_all(request, containers, exits, out)


def at_host_address(environment: dict[str, str], gateway: str) -> dict[str, str]:
    """`environment` with URLs to `HOST_ALIAS` pointing at the host's address on the run's network: MLflow's
    server refuses other Host headers than loopback and private addresses (its DNS-rebinding protection), and
    the address is known only once the network exists."""
    alias = f"://{HOST_ALIAS}:"
    return {name: value.replace(alias, f"://{gateway}:") for name, value in environment.items()}


def credentials(environ: Mapping[str, str]) -> dict[str, str]:
    """The trackers' credentials of the submitting shell, for the containers: never in the request."""
    return {name: environ[name] for name in TRACKER_CREDENTIALS if name in environ}


def _create(client, spec: ContainerSpec, run_id: str, gateway: str):
    # one bind per mount, not a map keyed by the host folder: one folder may be two channels (a checkpoint
    # that is also the tokenizer of chat data)
    volumes = [f"{m.source}:{m.target}:{'ro' if m.read_only else 'rw'}" for m in spec.mounts]
    gpus = [DeviceRequest(count=-1, capabilities=[["gpu"]])] if spec.gpus else None
    return client.containers.create(
        spec.image,
        command=list(spec.command),
        name=spec.name,
        hostname=spec.hostname,
        environment={**at_host_address(spec.environment, gateway), **credentials(os.environ)},
        extra_hosts={HOST_ALIAS: gateway},
        volumes=volumes,
        device_requests=gpus,
        shm_size=SHM_SIZE,
        labels={RUN_LABEL: run_id},
    )


def _wait_for_all(request: LocalRequest, containers: list, exits: queue.Queue, out: IO[str]) -> Ending:
    """Wait until every node exits 0, or until the first failure or the deadline, which stop the rest."""
    deadline = time.monotonic() + request.max_run_seconds
    started = time.time()
    running = {host for host, _ in containers}
    ending: Ending | None = None
    while running and ending is None:
        left = deadline - time.monotonic()
        if left <= 0:
            hours = request.max_run_seconds / 3600
            print(f"dockyard: the job ran past target.max_run_hours ({hours:g}); stopping its nodes", file=out)
            ending = Ending(status=1, out_of_time=True)
            continue
        try:
            host, status = exits.get(timeout=min(left, POLL_S))
        except queue.Empty:
            continue
        running.discard(host)
        if status != 0 and stop_requested(Path(request.run_dir), started):
            print("dockyard: the job was stopped by `dockyard stop`", file=out)
            ending = Ending(status=status, stopped=True)
        elif status != 0:
            reason = _failure_reason(Path(request.run_dir), host)
            print(f"dockyard: {host} failed with exit status {status}{reason}; stopping the other nodes", file=out)
            ending = Ending(status=status)
    _stop([container for host, container in containers if host in running])
    return ending or Ending(status=0)


def _stop(containers: list) -> None:
    """SIGTERM to every node at once (the trainer saves a checkpoint and ends its trackers' runs), SIGKILL to
    those still running STOP_TIMEOUT_S later, as SageMaker, Kubernetes and Slurm stop a job's nodes."""
    if containers:
        with ThreadPoolExecutor(max_workers=len(containers)) as pool:
            list(pool.map(_stop_container, containers))


def _stop_container(container) -> None:
    with contextlib.suppress(docker.errors.NotFound):  # removed meanwhile by the process running the job
        container.stop(timeout=STOP_TIMEOUT_S)


def _failure_reason(run_dir: Path, host: str) -> str:
    failure = run_dir / "nodes" / host / "output" / "failure"
    if failure.exists() and failure.read_text().strip():
        return f" ({failure.read_text().strip().splitlines()[0]})"
    return ""


def _stream(host: str, container, out: IO[str], log_file: Path) -> None:
    """Print the container's output line by line, prefixed by its node, as it comes; keep it in the run's
    logs/<node>.log (appended, so a retried job's log holds every attempt), each line after the time it
    came as `docker logs --timestamps` writes it (`dockyard logs` interleaves the nodes by it)."""
    pending = b""
    with log_file.open("a") as log:
        for chunk in container.logs(stream=True, follow=True):
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                _emit(host, line, out, log)
        if pending:
            _emit(host, pending, out, log)


def _emit(host: str, line: bytes, out: IO[str], log: IO[str]) -> None:
    text = line.decode(errors="replace")
    out.write(f"{host} | {text}\n")
    out.flush()
    log.write(stamped(text, time.time()) + "\n")
    log.flush()
