"""The Kubernetes target's I/O, through the official `kubernetes` client (kubeconfig, else in-cluster config).

`submit` checks the custom resource against the CRD the cluster serves (a missing CRD means the operator is
not installed), then creates the ConfigMap and the job and makes the job the ConfigMap's owner, so deleting
the job removes everything. Should the cluster refuse any step, what this submit created is deleted again
and the refusal is one line naming the object and the server's reason (`answers`). `follow` prints pod
phases and every pod's log lines prefixed by its host name, until the job ends. `stop` deletes the job with
foreground propagation (its Jobs and pods go first) and waits until the API server has removed it:
deletion is asynchronous, the object stays with a `deletionTimestamp` while its dependents go.
"""

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

import urllib3
from kubernetes import client as k8s
from kubernetes import config
from kubernetes.client.exceptions import ApiException

from compiler.spec.errors import ConfigError, PlatformError
from compiler.targets.base import CANCELLED, COMPLETED, FAILED, PENDING, RUNNING, STOPPED, JobState
from compiler.targets.kubernetes import validate
from compiler.targets.kubernetes.pod import RUN_LABEL
from compiler.targets.kubernetes.translate import KubernetesRequest
from compiler.targets.logs import LogLine, merged, split_timestamp

POLL_S = 5.0
FORBIDDEN, NOT_FOUND, CONFLICT = 403, 404, 409
DELETE_WAIT_S = 120.0
"""How long `stop`, a rollback and a resubmit wait for the API server to remove a deleted object: its
pods' grace period (30 s unless set) and the garbage collector's rounds, with room to spare."""
FOREGROUND, BACKGROUND = "Foreground", "Background"
USER_FIXES = {
    400: ("target", "change what it names"),
    401: ("target", "the kubeconfig's credentials were refused: renew them (`aws eks update-kubeconfig`)"),
    403: ("target.namespace", "ask the cluster's admin for that permission, or use a namespace where you have it"),
    404: ("target.namespace", "create the namespace, or set target.namespace to one that exists"),
    409: ("name", "stop the run of that name (`dockyard stop RUN`) or launch again, which gives a new run id"),
    422: ("target", "change the value it names"),
}
"""Refusals a user fixes (exit status 2), by HTTP status: the key to change and how. A 404 reaches here
only from a create, where it means the namespace does not exist."""


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


@contextmanager
def answers(action: str, kind: str, name: str, namespace: str) -> Iterator[None]:
    """The API server's refusals of `action` on one object as one line naming the object and the reason:
    a ConfigError where the user fixes it, else a PlatformError."""
    what = f"{action} {kind} {name} in namespace {namespace}"
    try:
        yield
    except ApiException as error:
        status = _status(error)
        reason = status.get("message") or error.reason or "no reason given"
        line = f"the cluster refused to {what}: {reason} ({status.get('reason') or error.reason}, HTTP {error.status})"
        if error.status not in USER_FIXES:
            raise PlatformError(line) from None
        key, fix = USER_FIXES[error.status]
        raise ConfigError(key, line, fix) from None
    except urllib3.exceptions.HTTPError as error:
        raise PlatformError(f"could not {what}: the API server did not answer ({error})") from None


def _status(error: ApiException) -> dict:
    """The Status object the API server answers an error with (empty when the body is not one)."""
    try:
        body = json.loads(error.body or "")
    except (TypeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


@dataclass(frozen=True)
class Resource:
    """One kind of object in one namespace, through the client's typed API for it (custom kinds through
    `CustomObjectsApi`); objects come back as dicts, as the API server sends them."""

    api: k8s.ApiClient
    api_version: str
    kind: str
    namespace: str

    TYPED = {
        "ConfigMap": ("CoreV1Api", "config_map"),
        "Service": ("CoreV1Api", "service"),
        "Job": ("BatchV1Api", "job"),
    }

    def _typed(self, verb: str) -> Callable | None:
        if self.kind not in self.TYPED:
            return None
        group_api, name = self.TYPED[self.kind]
        return getattr(getattr(k8s, group_api)(self.api), f"{verb}_namespaced_{name}")

    def _custom(self) -> tuple:
        group, _, version = self.api_version.rpartition("/")
        return group, version, self.namespace, self.kind.lower() + "s"

    def create(self, body: dict) -> dict:
        """Unknown fields are refused, not dropped (`kubectl apply --validate=strict`)."""
        if typed := self._typed("create"):
            return self.api.sanitize_for_serialization(typed(self.namespace, body, field_validation="Strict"))
        return k8s.CustomObjectsApi(self.api).create_namespaced_custom_object(
            *self._custom(), body, field_validation="Strict"
        )

    def read(self, name: str) -> dict | None:
        try:
            if typed := self._typed("read"):
                return self.api.sanitize_for_serialization(typed(name, self.namespace))
            return k8s.CustomObjectsApi(self.api).get_namespaced_custom_object(*self._custom(), name)
        except ApiException as error:
            if error.status == NOT_FOUND:
                return None
            raise

    def patch(self, name: str, body: dict) -> None:
        if typed := self._typed("patch"):
            typed(name, self.namespace, body)
        else:
            k8s.CustomObjectsApi(self.api).patch_namespaced_custom_object(*self._custom(), name, body)

    def delete(self, name: str, propagation: str) -> bool:
        """Ask for the deletion (the server removes the object later); False when it was already gone."""
        options = k8s.V1DeleteOptions(propagation_policy=propagation)
        try:
            if typed := self._typed("delete"):
                typed(name, self.namespace, body=options)
            else:
                k8s.CustomObjectsApi(self.api).delete_namespaced_custom_object(*self._custom(), name, body=options)
        except ApiException as error:
            if error.status == NOT_FOUND:
                return False
            raise
        return True

    def wait_gone(self, name: str, timeout_s: float = DELETE_WAIT_S) -> None:
        """Until the API server has removed the object; a PlatformError after `timeout_s`."""
        deadline, pause = time.monotonic() + timeout_s, 0.05
        while self.read(name) is not None:
            if time.monotonic() > deadline:
                raise PlatformError(
                    f"{self.kind} {name} in namespace {self.namespace} is still being deleted after "
                    f"{timeout_s:.0f} s (its pods are terminating or a finalizer holds it); the cluster goes on "
                    f"deleting it: `kubectl get {self.kind.lower()} {name} -n {self.namespace}` shows when it is gone"
                )
            time.sleep(pause)
            pause = min(pause * 2, 2.0)


def resource_of(api: k8s.ApiClient, manifest: dict, namespace: str) -> Resource:
    return Resource(api, manifest["apiVersion"], manifest["kind"], namespace)


def job_resource(api: k8s.ApiClient, handle: dict) -> Resource:
    api_version = f"{handle['group']}/{handle['version']}" if handle["group"] else handle["version"]
    return Resource(api, api_version, handle["kind"], handle["namespace"])


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
    """Create the run's objects; returns the handle the other calls take (kept in the run record). When the
    cluster refuses a step, the objects created before it are deleted again before the error goes on."""
    handle = handle_for(request)
    if validate.is_custom(request.job) and (crd := served_crd(api, handle)) is not None:
        validate.check_custom(request.job, crd)
    created: list[tuple[Resource, str]] = []
    try:
        for manifest in request.manifests:
            resource, name = resource_of(api, manifest, request.namespace), manifest["metadata"]["name"]
            with answers("create", manifest["kind"], name, request.namespace):
                job = create(resource, manifest)
            created.append((resource, name))
        owner = {
            "apiVersion": request.job["apiVersion"],
            "kind": handle["kind"],
            "name": handle["name"],
            "uid": job["metadata"]["uid"],
        }
        for resource, name in created[:-1]:  # the ConfigMap (and Service) go with the job
            with answers("make the job the owner of", resource.kind, name, request.namespace):
                resource.patch(name, {"metadata": {"ownerReferences": [owner]}})
    except (ConfigError, PlatformError, KeyboardInterrupt) as error:  # Ctrl-C part way undoes it too
        left = roll_back(created)
        if left and not isinstance(error, KeyboardInterrupt):
            note = f"; not removed: {left} (delete it with kubectl)"
            if isinstance(error, ConfigError):
                raise ConfigError(error.key, error.message + note, error.fix) from None
            raise PlatformError(f"{error}{note}") from None
        raise
    return handle


def create(resource: Resource, manifest: dict) -> dict:
    """Create the object; one of the same name that is being deleted (a run stopped a moment ago) is waited
    for first, as the API server refuses the name until it is gone (which may be between the refusal and
    the read that follows it)."""
    try:
        return resource.create(manifest)
    except ApiException as error:
        if error.status != CONFLICT:
            raise
        existing = resource.read(manifest["metadata"]["name"])
        if existing is not None and not existing["metadata"].get("deletionTimestamp"):
            raise
    resource.wait_gone(manifest["metadata"]["name"])
    return resource.create(manifest)


def roll_back(created: list[tuple[Resource, str]]) -> str:
    """Delete what a failed submit created, newest first, and wait until it is gone; what could not be
    removed, in words ('' when all went). Background propagation: a Job keeps its pods otherwise."""
    left = []
    for resource, name in reversed(created):
        try:
            with answers("delete", resource.kind, name, resource.namespace):
                if resource.delete(name, BACKGROUND):
                    resource.wait_gone(name)
        except (ConfigError, PlatformError) as error:
            left.append(f"{resource.kind} {name} ({error})")
    return ", ".join(left)


def served_crd(api: k8s.ApiClient, handle: dict) -> dict | None:
    """The CRD the cluster serves for the handle's kind; None where the user may not read CRDs (they are
    cluster-wide; the API server then checks the object against it when it is created)."""
    name = f"{handle['kind'].lower()}s.{handle['group']}"
    try:
        crd = k8s.ApiextensionsV1Api(api).read_custom_resource_definition(name)
    except ApiException as error:
        if error.status == FORBIDDEN:
            return None
        if error.status != NOT_FOUND:
            with answers("read", "CustomResourceDefinition", name, "(cluster-wide)"):
                raise
        operator = "JobSet" if handle["kind"] == "JobSet" else "Kubeflow's training-operator"
        raise ConfigError(
            "target.kind_of_job",
            f"the cluster has no {handle['kind']} resource ({name})",
            f"install {operator}, or use target.kind_of_job=indexed_job",
        ) from None
    return api.sanitize_for_serialization(crd)


def read_job(api: k8s.ApiClient, handle: dict) -> dict | None:
    with answers("read", handle["kind"], handle["name"], handle["namespace"]):
        return job_resource(api, handle).read(handle["name"])


def run_pods(api: k8s.ApiClient, handle: dict) -> list[k8s.V1Pod]:
    with answers("list the pods of", handle["kind"], handle["name"], handle["namespace"]):
        pods = k8s.CoreV1Api(api).list_namespaced_pod(
            handle["namespace"], label_selector=f"{RUN_LABEL}={handle['run_id']}"
        )
    return sorted(pods.items, key=lambda pod: pod.metadata.name)


def job_state(job: dict | None, pods: list[k8s.V1Pod]) -> JobState:
    """The shared status of a JobSet, Job or PyTorchJob from its status, and from its pods while it runs."""
    if job is None:
        return JobState(status=STOPPED, detail="the job no longer exists")
    status = job.get("status") or {}
    deleted = job.get("metadata", {}).get("deletionTimestamp")
    conditions = {c["type"]: c for c in status.get("conditions") or [] if c.get("status") == "True"}
    attempts = 1 + status.get("restarts", 0) + status.get("restartCount", 0)
    for done, shared in (("Completed", COMPLETED), ("Complete", COMPLETED), ("Succeeded", COMPLETED)):
        if done in conditions:
            return JobState(status=shared, detail=conditions[done].get("message", ""), attempts=attempts)
    if "Failed" in conditions:
        return JobState(status=FAILED, detail=conditions["Failed"].get("message", ""), attempts=attempts)
    if deleted:  # stopped: the API server keeps it only until its pods are gone
        return JobState(status=STOPPED, detail=f"deleted at {deleted}, its pods are going", attempts=attempts)
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
        with answers("read the log of", "pod", pod.metadata.name, handle["namespace"]):
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

    def stream_started(pods: list[k8s.V1Pod]) -> None:
        for pod in pods:
            name = pod.metadata.name
            if pod.status.phase != "Pending" and name not in streams:
                streams[name] = threading.Thread(target=_stream, args=(api, handle, pod, out), daemon=True)
                streams[name].start()

    while not interrupted.is_set():
        pods = run_pods(api, handle)
        for pod in pods:
            name, phase = pod.metadata.name, pod.status.phase
            if phases.get(name) != phase:
                print(f"dockyard: pod {name} {phase}", file=out, flush=True)
                phases[name] = phase
        stream_started(pods)
        state = job_state(read_job(api, handle), pods)
        if state.status in (COMPLETED, FAILED, STOPPED, CANCELLED):
            stream_started(run_pods(api, handle))  # pods that started after this poll's listing: their logs too
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
    """Delete the job, its Jobs and pods first (foreground), and wait until the API server has removed it;
    what it owns (ConfigMap, Service) follows."""
    job = job_resource(api, handle)
    with answers("delete", handle["kind"], handle["name"], handle["namespace"]):
        if job.delete(handle["name"], FOREGROUND):
            job.wait_gone(handle["name"])
