"""An EMULATION of a Kubernetes cluster's controllers and kubelet, for the end-to-end test of the Kubernetes
target. No API server or kubelet can run on these machines (no package exists; see DESIGN), so this reads
the manifests a `KubernetesRequest` would apply and does with Docker what a cluster would do with them:

- the controllers' part: a JobSet's replicated jobs, an Indexed Job's completions and a PyTorchJob's Master
  and Workers become pods, each named and annotated as the real controllers do it (JobSet: `<jobset>-<job>-
  <index>`, the Job controller: hostname `<job>-<index>`, the `batch.kubernetes.io/job-completion-index`
  annotation and JOB_COMPLETION_INDEX; Kubeflow's operator v1.9: `<job>-<type>-<index>`, a service per pod,
  and MASTER_*, PET_*, WORLD_SIZE and RANK, as in its `envvar.go`);
- the kubelet's part: each pod's container runs from the manifest's image with its command, args and
  environment (the downward API's `fieldRef` resolved from the pod's metadata), its volumes (ConfigMaps as
  read-only files, emptyDirs as fresh folders, memory-backed ones as tmpfs, PersistentVolumeClaims as host
  folders the test names, with `subPath`), on one Docker network where each pod answers at the DNS names the
  cluster would give it (`<hostname>.<subdomain>` through the headless service).

Not emulated: the API server and its admission, scheduling and resources (GPUs, EFA devices and hugepages are
not there), restarts and retries, probes. What runs is the image, unchanged, as a pod would run it.
"""

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import docker
from docker.types import Mount

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
LABEL = "dockyard.kubelet-emulation"
FIELD_PATH = re.compile(r"metadata\.(annotations|labels)\['([^']+)'\]|metadata\.(name|namespace)")
QUANTITY = re.compile(r"(\d+)(Ki|Mi|Gi)?")


@dataclass
class Pod:
    name: str
    namespace: str
    hostname: str
    dns_names: tuple[str, ...]
    """What other pods reach it by (the headless service's records, or the operator's per-pod service)."""
    annotations: dict[str, str]
    labels: dict[str, str]
    spec: dict
    added_env: list[dict] = field(default_factory=list)
    """Variables the controller adds to the container (JOB_COMPLETION_INDEX, Kubeflow's PET_*)."""

    @property
    def container(self) -> dict:
        (container,) = self.spec["containers"]
        return container

    def environment(self) -> dict[str, str]:
        """The container's environment as the kubelet sets it: values, and fieldRefs read from the pod."""
        env = {}
        for entry in [*self.container.get("env", []), *self.added_env]:
            if "value" in entry:
                env[entry["name"]] = entry["value"]
            else:
                env[entry["name"]] = self._field(entry["valueFrom"]["fieldRef"]["fieldPath"])
        return env

    def _field(self, path: str) -> str:
        match = FIELD_PATH.fullmatch(path)
        if match is None:
            raise NotImplementedError(f"the emulation does not resolve fieldPath {path}")
        if match[1]:
            return (self.annotations if match[1] == "annotations" else self.labels)[match[2]]
        return self.name if match[3] == "name" else self.namespace


def pods(manifests: tuple[dict, ...]) -> list[Pod]:
    """The pods the controllers would create for these manifests, in rank order."""
    result = []
    services = {m["metadata"]["name"] for m in manifests if m["kind"] == "Service" and _headless(m)}
    for manifest in manifests:
        meta, spec = manifest["metadata"], manifest.get("spec", {})
        if manifest["kind"] == "JobSet":
            subdomain = spec["network"].get("subdomain", meta["name"])  # JobSet creates this headless service
            for replicated in spec["replicatedJobs"]:
                for job_index in range(replicated.get("replicas", 1)):
                    job = f"{meta['name']}-{replicated['name']}-{job_index}"
                    result += _indexed(job, meta["namespace"], replicated["template"]["spec"], subdomain)
        elif manifest["kind"] == "Job":
            template = spec["template"]["spec"]
            subdomain = template.get("subdomain") if template.get("subdomain") in services else None
            result += _indexed(meta["name"], meta["namespace"], spec, subdomain)
        elif manifest["kind"] == "PyTorchJob":
            result += _pytorchjob(meta["name"], meta["namespace"], spec)
    return result


def _headless(service: dict) -> bool:
    return service["spec"].get("clusterIP") == "None"


def _indexed(job: str, namespace: str, spec: dict, subdomain: str | None) -> list[Pod]:
    assert spec.get("completionMode") == "Indexed", "the emulation runs Indexed Jobs only"
    template, pods = spec["template"], []
    for index in range(spec["completions"]):
        hostname = f"{job}-{index}"
        annotations = {**template["metadata"].get("annotations", {}), COMPLETION_INDEX: str(index)}
        pods.append(
            Pod(
                name=f"{hostname}-emulated",
                namespace=namespace,
                hostname=hostname,
                dns_names=(f"{hostname}.{subdomain}",) if subdomain else (),
                annotations=annotations,
                labels=dict(template["metadata"].get("labels", {})),
                spec=template["spec"],
                added_env=[{"name": "JOB_COMPLETION_INDEX", "value": str(index)}],
            )
        )
    return pods


def _pytorchjob(job: str, namespace: str, spec: dict) -> list[Pod]:
    replicas = spec["pytorchReplicaSpecs"]
    total = sum(replica["replicas"] for replica in replicas.values())
    master = replicas["Master"]["template"]["spec"]["containers"][0]
    port = next(p["containerPort"] for p in master["ports"] if p["name"] == "pytorchjob-port")
    nproc = int(spec.get("nprocPerNode", "1"))
    pods = []
    for kind in ("Master", "Worker"):
        replica = replicas.get(kind)
        for index in range(replica["replicas"] if replica else 0):
            name = f"{job}-{kind.lower()}-{index}"
            rank = index + (kind == "Worker")
            added = {
                "PYTHONUNBUFFERED": "1",
                "MASTER_PORT": str(port),
                "PET_MASTER_PORT": str(port),
                "MASTER_ADDR": f"{job}-master-0",
                "PET_MASTER_ADDR": f"{job}-master-0",
                "WORLD_SIZE": str(total * nproc),
                "RANK": str(rank),
                "PET_NODE_RANK": str(rank),
                "PET_NPROC_PER_NODE": spec["nprocPerNode"],
                "PET_NNODES": str(total),
            }
            template = replica["template"]
            pods.append(
                Pod(
                    name=name,
                    namespace=namespace,
                    hostname=name,
                    dns_names=(name,),  # the operator's service for this pod
                    annotations=dict(template["metadata"].get("annotations", {})),
                    labels=dict(template["metadata"].get("labels", {})),
                    spec=template["spec"],
                    added_env=[{"name": key, "value": value} for key, value in added.items()],
                )
            )
    return pods


def _bytes(quantity: str) -> int:
    number, unit = QUANTITY.fullmatch(quantity).groups()
    return int(number) * {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}[unit]


class Emulation:
    """Runs the pods of one request on the Docker engine until every container has exited."""

    def __init__(self, manifests: tuple[dict, ...], workdir: Path, claims: dict[str, Path], client=None) -> None:
        self.manifests, self.workdir, self.claims = manifests, workdir, claims
        self.client = client or docker.from_env()
        self.config_maps = {m["metadata"]["name"]: m for m in manifests if m["kind"] == "ConfigMap"}
        self.pods = pods(manifests)
        self.run_id = next(m for m in manifests if m["kind"] != "ConfigMap")["metadata"]["name"]

    def run(self, out: IO[str]) -> dict[str, int]:
        """Exit status of each pod's container, by host name; all of its output is in `out`, prefixed."""
        network = self.client.networks.create(f"k8s-emulation-{self.run_id}", driver="bridge")
        containers = []
        try:
            for pod in self.pods:
                container = self._create(pod)
                network.connect(container, aliases=[pod.hostname, *pod.dns_names])
                containers.append((pod.hostname, container))
            threads = []
            for host, container in containers:
                container.start()
                thread = threading.Thread(target=_stream, args=(host, container, out), daemon=True)
                thread.start()
                threads.append(thread)
            statuses = {host: container.wait()["StatusCode"] for host, container in containers}
            for thread in threads:
                thread.join(timeout=10)
            return statuses
        finally:
            for _, container in containers:
                container.remove(force=True)
            network.remove()

    def _create(self, pod: Pod):
        container = pod.container
        mounts, shm_size = self._mounts(pod)
        return self.client.containers.create(
            container["image"],
            entrypoint=container.get("command"),
            command=container.get("args"),
            name=f"k8s-emulation-{pod.name}",
            hostname=pod.hostname,
            environment=pod.environment(),
            mounts=mounts,
            shm_size=shm_size,
            labels={LABEL: self.run_id},
        )

    def _mounts(self, pod: Pod) -> tuple[list[Mount], str | None]:
        volumes = {volume["name"]: volume for volume in pod.spec.get("volumes", [])}
        mounts, shm_size = [], None
        for mount in pod.container.get("volumeMounts", []):
            volume, target = volumes[mount["name"]], mount["mountPath"]
            read_only = mount.get("readOnly", False)
            if "configMap" in volume:
                source = self._config_map(pod, volume)
                mounts.append(Mount(target, str(source), type="bind", read_only=True))
            elif "emptyDir" in volume and volume["emptyDir"].get("medium") == "Memory":
                size = _bytes(volume["emptyDir"]["sizeLimit"])
                if target == "/dev/shm":
                    shm_size = size  # Docker mounts its own tmpfs there; size that one
                else:
                    mounts.append(Mount(target, None, type="tmpfs", tmpfs_size=size))
            elif "emptyDir" in volume:
                source = self._folder(self.workdir / "pods" / pod.name / "emptydir" / mount["name"])
                mounts.append(Mount(target, str(source), type="bind", read_only=read_only))
            elif "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]
                source = self.claims[claim["claimName"]] / mount.get("subPath", "")
                self._folder(source)  # the kubelet makes a missing subPath folder
                read_only = read_only or claim.get("readOnly", False)
                mounts.append(Mount(target, str(source), type="bind", read_only=read_only))
            else:
                raise NotImplementedError(f"the emulation does not mount volume {volume}")
        return mounts, shm_size

    def _config_map(self, pod: Pod, volume: dict) -> Path:
        folder = self._folder(self.workdir / "pods" / pod.name / "configmaps" / volume["name"])
        for key, text in self.config_maps[volume["configMap"]["name"]]["data"].items():
            (folder / key).write_text(text)
        return folder

    @staticmethod
    def _folder(path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o777)  # emptyDirs are world-writable; the image runs as its own non-root user
        return path


def _stream(host: str, container, out: IO[str]) -> None:
    pending = b""
    for chunk in container.logs(stream=True, follow=True):
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            out.write(f"{host} | {line.decode(errors='replace')}\n")
    if pending:
        out.write(f"{host} | {pending.decode(errors='replace')}\n")
