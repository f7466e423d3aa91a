"""The Kubernetes target's I/O, through the official `kubernetes` client (kubeconfig, else in-cluster config).

`submit` checks the custom resource against the CRD the cluster serves (a missing CRD means the operator is
not installed), then creates the ConfigMap and the job and makes the job the ConfigMap's owner, so deleting
the job removes everything. `follow` prints pod phases and every pod's log lines prefixed by its host name,
until the job ends. `stop` deletes the job with foreground propagation (its Jobs and pods go first).
"""

import os
import threading
import time
from collections.abc import Callable
from typing import IO

from kubernetes import client as k8s
from kubernetes import config
from kubernetes.client.exceptions import ApiException

from compiler.spec.errors import ConfigError
from compiler.targets.base import CANCELLED, COMPLETED, FAILED, PENDING, RUNNING, STOPPED, JobState
from compiler.targets.kubernetes import validate
from compiler.targets.kubernetes.pod import RUN_LABEL
from compiler.targets.kubernetes.translate import KubernetesRequest
from compiler.targets.logs import LogLine, merged, split_timestamp

POLL_S = 5.0
NOT_FOUND = 404


def connect() -> k8s.ApiClient:
    """The user's kubeconfig (KUBECONFIG or ~/.kube/config), else the pod's service account in a cluster.
    KUBECONFIG is read now, not when the client was imported (the client's own default)."""
    try:
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
    except config.ConfigException:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            raise ConfigError(
                "target", "no Kubernetes cluster configured", "set KUBECONFIG or run `aws eks update-kubeconfig`"
            ) from None
    return k8s.ApiClient()


def handle_for(request: KubernetesRequest) -> dict:
    job = request.job
    group, _, version = job["apiVersion"].rpartition("/")
    return {
        "run_id": request.run_id,
        "namespace": request.namespace,
        "kind": job["kind"],
        "group": group,
        "version": version,
        "name": job["metadata"]["name"],
        "service": any(m["kind"] == "Service" for m in request.manifests),
    }


def submit(request: KubernetesRequest, api: k8s.ApiClient) -> dict:
    """Create the run's objects; returns the handle the other calls take (kept in the run record)."""
    handle = handle_for(request)
    if validate.is_custom(request.job):
        validate.check_custom(request.job, served_crd(api, handle))
    core, namespace = k8s.CoreV1Api(api), request.namespace
    created = None
    for manifest in request.manifests:
        if manifest["kind"] == "ConfigMap":
            core.create_namespaced_config_map(namespace, manifest)
        elif manifest["kind"] == "Service":
            core.create_namespaced_service(namespace, manifest)
        elif manifest["kind"] == "Job":
            created = api.sanitize_for_serialization(k8s.BatchV1Api(api).create_namespaced_job(namespace, manifest))
        else:
            created = k8s.CustomObjectsApi(api).create_namespaced_custom_object(
                handle["group"], handle["version"], namespace, _plural(handle), manifest
            )
    owner = {
        "apiVersion": request.job["apiVersion"],
        "kind": handle["kind"],
        "name": handle["name"],
        "uid": created["metadata"]["uid"],
    }
    for manifest in request.manifests[:-1]:  # the ConfigMap (and Service) go with the job
        patch = {"metadata": {"ownerReferences": [owner]}}
        name = manifest["metadata"]["name"]
        if manifest["kind"] == "ConfigMap":
            core.patch_namespaced_config_map(name, namespace, patch)
        else:
            core.patch_namespaced_service(name, namespace, patch)
    return handle


def served_crd(api: k8s.ApiClient, handle: dict) -> dict:
    name = f"{_plural(handle)}.{handle['group']}"
    try:
        crd = k8s.ApiextensionsV1Api(api).read_custom_resource_definition(name)
    except ApiException as error:
        if error.status != NOT_FOUND:
            raise
        operator = "JobSet" if handle["kind"] == "JobSet" else "Kubeflow's training-operator"
        raise ConfigError(
            "target.kind_of_job",
            f"the cluster has no {handle['kind']} resource ({name})",
            f"install {operator}, or use target.kind_of_job=indexed_job",
        ) from None
    return api.sanitize_for_serialization(crd)


def _plural(handle: dict) -> str:
    return handle["kind"].lower() + "s"


def read_job(api: k8s.ApiClient, handle: dict) -> dict | None:
    try:
        if handle["kind"] == "Job":
            job = k8s.BatchV1Api(api).read_namespaced_job(handle["name"], handle["namespace"])
            return api.sanitize_for_serialization(job)
        return k8s.CustomObjectsApi(api).get_namespaced_custom_object(
            handle["group"], handle["version"], handle["namespace"], _plural(handle), handle["name"]
        )
    except ApiException as error:
        if error.status == NOT_FOUND:
            return None
        raise


def run_pods(api: k8s.ApiClient, handle: dict) -> list[k8s.V1Pod]:
    pods = k8s.CoreV1Api(api).list_namespaced_pod(handle["namespace"], label_selector=f"{RUN_LABEL}={handle['run_id']}")
    return sorted(pods.items, key=lambda pod: pod.metadata.name)


def job_state(job: dict | None, pods: list[k8s.V1Pod]) -> JobState:
    """The shared status of a JobSet, Job or PyTorchJob from its status, and from its pods while it runs."""
    if job is None:
        return JobState(status=STOPPED, detail="the job no longer exists")
    status = job.get("status") or {}
    conditions = {c["type"]: c for c in status.get("conditions") or [] if c.get("status") == "True"}
    attempts = 1 + status.get("restarts", 0) + status.get("restartCount", 0)
    for done, shared in (("Completed", COMPLETED), ("Complete", COMPLETED), ("Succeeded", COMPLETED)):
        if done in conditions:
            return JobState(status=shared, detail=conditions[done].get("message", ""), attempts=attempts)
    if "Failed" in conditions:
        return JobState(status=FAILED, detail=conditions["Failed"].get("message", ""), attempts=attempts)
    if "Suspended" in conditions or job.get("spec", {}).get("suspend"):
        return JobState(status=PENDING, detail="suspended (waiting in its queue)", attempts=attempts)
    phases = [pod.status.phase for pod in pods]
    running = phases and all(phase in ("Running", "Succeeded") for phase in phases)
    return JobState(status=RUNNING if running else PENDING, detail=", ".join(phases), attempts=attempts)


def status(api: k8s.ApiClient, handle: dict) -> JobState:
    return job_state(read_job(api, handle), run_pods(api, handle))


def host(pod: k8s.V1Pod) -> str:
    return pod.spec.hostname or pod.metadata.name


def logs(api: k8s.ApiClient, handle: dict) -> list[LogLine]:
    """Each pod's log with the kubelet's timestamps, merged in time order."""
    core = k8s.CoreV1Api(api)
    streams = []
    for pod in run_pods(api, handle):
        text = core.read_namespaced_pod_log(pod.metadata.name, handle["namespace"], timestamps=True)
        lines = (split_timestamp(line) for line in text.splitlines())
        streams.append([LogLine(host(pod), text, time) for time, text in lines])
    return merged(streams)


def follow(
    api: k8s.ApiClient,
    handle: dict,
    *,
    out: IO[str],
    interrupted: threading.Event | None,
    poll_s: float = POLL_S,
    sleep: Callable[[float], None] = time.sleep,
) -> JobState | None:
    """Print phase changes and stream each pod's log as it starts; the job's final state, or None when
    `interrupted` is set (the job goes on in the cluster; `launch` passes none and detaches on Ctrl-C)."""
    interrupted = interrupted or threading.Event()
    phases: dict[str, str] = {}
    streams: dict[str, threading.Thread] = {}
    while not interrupted.is_set():
        pods = run_pods(api, handle)
        for pod in pods:
            name, phase = pod.metadata.name, pod.status.phase
            if phases.get(name) != phase:
                print(f"dockyard: pod {name} {phase}", file=out, flush=True)
                phases[name] = phase
            if phase != "Pending" and name not in streams:
                streams[name] = threading.Thread(target=_stream, args=(api, handle, pod, out), daemon=True)
                streams[name].start()
        state = job_state(read_job(api, handle), pods)
        if state.status in (COMPLETED, FAILED, STOPPED, CANCELLED):
            for stream in streams.values():
                stream.join(timeout=poll_s)
            return state
        sleep(poll_s)
    return None


def _stream(api: k8s.ApiClient, handle: dict, pod: k8s.V1Pod, out: IO[str]) -> None:
    response = k8s.CoreV1Api(api).read_namespaced_pod_log(
        pod.metadata.name, handle["namespace"], follow=True, _preload_content=False
    )
    pending = b""
    for chunk in response.stream():
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            print(f"{host(pod)} | {line.decode(errors='replace')}", file=out, flush=True)
    if pending:
        print(f"{host(pod)} | {pending.decode(errors='replace')}", file=out, flush=True)


def stop(api: k8s.ApiClient, handle: dict) -> None:
    """Delete the job, its Jobs and pods first (foreground); what it owns (ConfigMap, Service) follows."""
    options = k8s.V1DeleteOptions(propagation_policy="Foreground")
    try:
        if handle["kind"] == "Job":
            k8s.BatchV1Api(api).delete_namespaced_job(handle["name"], handle["namespace"], body=options)
        else:
            k8s.CustomObjectsApi(api).delete_namespaced_custom_object(
                handle["group"], handle["version"], handle["namespace"], _plural(handle), handle["name"], body=options
            )
    except ApiException as error:
        if error.status != NOT_FOUND:
            raise
