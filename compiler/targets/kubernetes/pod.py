"""The pod every kind of job runs on each node: image, environment, resources, volumes and placement.

Pure, like the translator that wraps it. Sizes come from the catalog: the instance's GPUs and EFA devices
as extended resources, nine tenths of its vCPUs and memory as requests (the rest is what the kubelet,
the system daemons and the device plugins keep), so exactly one pod fits a node; an anti-affinity on the
run's label says the same to the scheduler for instance types a pod would not fill.
"""

from compiler.spec import DataSource, InstanceType, Plan
from compiler.spec.contract import CONTAINER_ROOT, PLAN_CHANNEL, PLAN_PATH, TERMINATION_LOG
from compiler.spec.schema.target import secret_references

CONTAINER = "pytorch"
"""The container's name: Kubeflow's operator finds the PyTorchJob's container by it; every kind uses it."""
PORT_NAME, MASTER_PORT = "pytorchjob-port", 29500
"""The rendezvous port, named as Kubeflow's operator looks it up (it passes it on as PET_MASTER_PORT)."""
RUN_LABEL = "dockyard/run-id"
PLAN_ANNOTATION = "dockyard/plan"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
HOST_SHARE = 0.9
"""Of the node's vCPUs and memory, what the pod requests; the rest stays allocatable to the node's daemons."""
HUGEPAGES = "5120Mi"
"""2 MiB huge pages for libfabric's EFA provider (the figure AWS's EKS EFA examples request)."""
SHM_GIB_PER_GPU, SHM_GIB_PER_CPU_PROCESS = 8, 1
"""/dev/shm: NCCL's shared-memory transport between a node's GPUs and the data loaders' workers; Docker's
64 MB default (and a disk-backed folder) is too small or too slow."""
CPU_MEMORY_GIB_PER_PROCESS = 2
"""Memory requested per training process on CPU-only nodes (the catalog knows no host there)."""
GPU_TAINTS = ("nvidia.com/gpu",)
EFA_TAINTS = ("vpc.amazonaws.com/efa",)


def plan_config_map(run_id: str) -> str:
    return f"{run_id}-plan"


def resources(instance: InstanceType, processes: int) -> dict:
    if not instance.has_gpus:
        memory = f"{CPU_MEMORY_GIB_PER_PROCESS * processes}Gi"
        return {"requests": {"cpu": str(processes), "memory": memory}, "limits": {"memory": memory}}
    memory = f"{int(instance.memory_gib * HOST_SHARE)}Gi"
    limits = {"memory": memory, "nvidia.com/gpu": instance.gpus}
    if instance.efa_devices:
        limits |= {"vpc.amazonaws.com/efa": instance.efa_devices, "hugepages-2Mi": HUGEPAGES}
    return {"requests": {"cpu": str(int(instance.vcpus * HOST_SHARE)), "memory": memory}, "limits": limits}


def shm_size(instance: InstanceType, processes: int) -> str:
    return f"{SHM_GIB_PER_GPU * instance.gpus if instance.has_gpus else SHM_GIB_PER_CPU_PROCESS * processes}Gi"


def storage(plan: Plan, run_id: str) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts): the plan, /dev/shm, the SageMaker-style folders under /opt/ml, and the data."""
    processes = plan.layout.processes_per_node
    volumes = [
        {"name": "plan", "configMap": {"name": plan_config_map(run_id)}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size(plan.instance, processes)}},
        {"name": "output", "emptyDir": {}},
    ]
    mounts = [
        {"name": "plan", "mountPath": f"{CONTAINER_ROOT}/input/data/{PLAN_CHANNEL}", "readOnly": True},
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "output", "mountPath": f"{CONTAINER_ROOT}/output"},
    ]
    claim = plan.target.claim
    if claim is None:
        volumes += [{"name": "model", "emptyDir": {}}, {"name": "checkpoints", "emptyDir": {}}]
        mounts += [{"name": name, "mountPath": f"{CONTAINER_ROOT}/{name}"} for name in ("model", "checkpoints")]
    else:
        volumes.append({"name": "runs", "persistentVolumeClaim": {"claimName": claim}})
        mounts += [
            {"name": "runs", "mountPath": f"{CONTAINER_ROOT}/{name}", "subPath": f"{run_id}/{name}"}
            for name in ("model", "checkpoints")
        ]
    data, channel = plan.data, f"{CONTAINER_ROOT}/input/data/{plan.data.channel}"
    if data.source is DataSource.s3:  # the trainer downloads the prefix here when it finds the folder empty
        volumes.append({"name": "data", "emptyDir": {}})
        mounts.append({"name": "data", "mountPath": channel})
    elif data.source in (DataSource.fsx, DataSource.efs):
        volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": data.claim, "readOnly": True}})
        inside = data.path.strip("/")
        mounts.append(
            {"name": "data", "mountPath": channel, "readOnly": True, **({"subPath": inside} if inside else {})}
        )
    return volumes, mounts


def placement(plan: Plan, run_id: str) -> dict:
    """Node selector, tolerations, one pod per node, and the optional scheduler and priority."""
    instance, target = plan.instance, plan.target
    spec: dict = {}
    if instance.has_gpus:
        spec["nodeSelector"] = {INSTANCE_TYPE_LABEL: instance.name}
        taints = GPU_TAINTS + (EFA_TAINTS if instance.efa_devices else ())
        spec["tolerations"] = [{"key": key, "operator": "Exists", "effect": "NoSchedule"} for key in taints]
    spec["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {RUN_LABEL: run_id}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    if target.scheduler_name:
        spec["schedulerName"] = target.scheduler_name
    if target.priority_class:
        spec["priorityClassName"] = target.priority_class
    return spec


def metadata(plan: Plan, run_id: str) -> dict:
    """Labels and annotations of every object and pod of the run: the user's, and the run's (which select
    the run's pods, so a user's label of the same name does not replace them)."""
    target = plan.target
    return {
        "labels": {**target.labels, RUN_LABEL: run_id},
        "annotations": {**target.annotations, PLAN_ANNOTATION: plan.content_hash},
    }


def object_metadata(plan: Plan, run_id: str, name: str) -> dict:
    return {"name": name, "namespace": plan.target.namespace, **metadata(plan, run_id)}


def pod_template(plan: Plan, image: str, run_id: str, *, env: list[dict], restart_policy: str, **spec) -> dict:
    """The pod of one node; `env` is what the kind of job adds for the entrypoint's discovery, `spec` extra
    pod fields (a subdomain)."""
    target = plan.target
    volumes, mounts = storage(plan, run_id)
    environment = [{"name": key, "value": value} for key, value in target.environment.items()]
    environment += [
        {"name": "DOCKYARD_PLAN", "value": PLAN_PATH},
        {"name": "DOCKYARD_RUN_ID", "value": run_id},
        *env,
    ]
    for name, secret in secret_references(target).items():
        secret_name, _, key = secret.partition("/")
        reference = {"name": secret_name, "key": key or name}
        environment.append({"name": name, "valueFrom": {"secretKeyRef": reference}})
    container = {
        "name": CONTAINER,
        "image": image,
        "args": ["train"],  # the image's entrypoint is dockyard-entrypoint; `train` as SageMaker passes it
        "env": environment,
        "ports": [{"name": PORT_NAME, "containerPort": MASTER_PORT}],
        "resources": resources(plan.instance, plan.layout.processes_per_node),
        "volumeMounts": mounts,
        # the entrypoint writes why training failed (a node's failed health check, say) to this file
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod: dict = {"restartPolicy": restart_policy, **spec, "containers": [container], "volumes": volumes}
    pod |= placement(plan, run_id)
    if target.service_account:
        pod["serviceAccountName"] = target.service_account
    if target.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": name} for name in target.image_pull_secrets]
    return {"metadata": metadata(plan, run_id), "spec": pod}
