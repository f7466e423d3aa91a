"""The Kubernetes target's translator: plan + image → the manifests a user could `kubectl apply -f`.

Pure: the run id names everything, nothing is read from the environment or a cluster. The request holds
the ConfigMap with plan.json (mounted where DOCKYARD_PLAN points, as the local and SageMaker targets
deliver the plan) and the job, in one of three kinds (`target.kind_of_job`):

- `jobset` (default): a JobSet with one replicated job of `nodes` indexed pods. JobSet creates the
  headless service named by `spec.network.subdomain`, so pod i answers at `<run>-node-0-<i>.<run>`.
- `pytorchjob`: Kubeflow's PyTorchJob, a Master and `nodes - 1` Workers; the operator creates a service
  per pod and hands each its rank in PET_* variables, which the entrypoint reads.
- `indexed_job`: a plain Indexed Job and the headless Service its pods name as their subdomain (pod i is
  `<run>-<i>.<run>`), for clusters with neither operator.

For JobSet and the Indexed Job, the manifest itself tells the entrypoint the cluster: DOCKYARD_HOSTS names
every pod in index order as one Slurm-style host list (`<run>-node-0-[0-3].<run>`), and
DOCKYARD_NODE_RANK is the pod's completion index, which the Job controller writes into the pod's
annotations (read through the downward API).

`str(request)` is the multi-document YAML that is applied; `to_json()` the same objects as a List.
"""

import json
import math
from dataclasses import dataclass

import yaml

from compiler.spec import JobKind, Plan
from compiler.spec.errors import ConfigError
from compiler.targets.kubernetes import rules, validate
from compiler.targets.kubernetes.pod import (
    MASTER_PORT,
    RUN_LABEL,
    metadata,
    object_metadata,
    plan_config_map,
    pod_template,
)

REPLICATED_JOB = "node"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOBSET_API, PYTORCHJOB_API = "jobset.x-k8s.io/v1alpha2", "kubeflow.org/v1"


@dataclass(frozen=True)
class KubernetesRequest:
    run_id: str
    image: str
    namespace: str
    kind_of_job: str
    manifests: tuple[dict, ...]
    """In the order they are created: the ConfigMap first, the job last (a JobSet or PyTorchJob, or the
    headless Service and then the Job)."""

    @property
    def job(self) -> dict:
        return self.manifests[-1]

    def to_json(self) -> str:
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(self.manifests)}, indent=2) + "\n"

    def __str__(self) -> str:
        return yaml.dump_all(self.manifests, Dumper=_Dumper, sort_keys=False, width=120)


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (plan.json), so the manifests stay readable, and every object
    written out in full (the PyTorchJob's Master and Worker share one pod template, but no YAML anchors)."""

    def ignore_aliases(self, data) -> bool:
        return True


_Dumper.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None),
)


def to_request(plan: Plan, image: str, *, run_id: str) -> KubernetesRequest:
    """Raises ConfigError naming the key for what the cluster would refuse; warnings are `rules.check`'s."""
    target = plan.target
    rules.check(plan)
    validate.check_names(plan, run_id, hostnames(plan, run_id))
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": object_metadata(plan, run_id, plan_config_map(run_id)),
        "data": {"plan.json": plan.to_json(indent=2) + "\n"},
    }
    job = JOBS[target.kind_of_job](plan, image, run_id)
    manifests = (config_map, *job)
    for manifest in manifests:
        validate.check_core(manifest)
    return KubernetesRequest(
        run_id=run_id,
        image=image,
        namespace=target.namespace,
        kind_of_job=target.kind_of_job.value,
        manifests=manifests,
    )


def _indexed_host(kind: JobKind, run_id: str, index: str) -> str:
    """The DNS name of an indexed pod: `index` is its completion index, or a Slurm-style range of them."""
    if kind is JobKind.jobset:
        return f"{run_id}-{REPLICATED_JOB}-0-{index}.{run_id}"
    return f"{run_id}-{index}.{run_id}"


def hostnames(plan: Plan, run_id: str) -> tuple[str, ...]:
    """Every pod's DNS name in its namespace, in rank order."""
    kind, nodes = plan.target.kind_of_job, plan.layout.nodes
    if kind is JobKind.pytorchjob:
        return (f"{run_id}-master-0", *(f"{run_id}-worker-{i}" for i in range(nodes - 1)))
    return tuple(_indexed_host(kind, run_id, str(i)) for i in range(nodes))


def _indexed_env(plan: Plan, run_id: str) -> list[dict]:
    """What the entrypoint's `from_dockyard` discovery reads: the hosts, and this pod's index as its rank.

    The hosts go as one compressed host list (`<run>-node-0-[0-4999].<run>`), not spelled out: Linux
    refuses to start a process with an environment string over 128 KiB, which a list of every pod's name
    passes at about 2,000 nodes, and the manifest stays the same size whatever the node count."""
    index = {"fieldRef": {"fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}
    every_index = f"[0-{plan.layout.nodes - 1}]"
    return [
        {"name": "DOCKYARD_HOSTS", "value": _indexed_host(plan.target.kind_of_job, run_id, every_index)},
        {"name": "DOCKYARD_NODE_RANK", "valueFrom": index},
        {"name": "DOCKYARD_MASTER_PORT", "value": str(MASTER_PORT)},
    ]


MAX_DEADLINE_SECONDS = 2**63 - 1
"""activeDeadlineSeconds is an int64 in the Job and the PyTorchJob's run policy."""


def deadline_seconds(hours: float) -> int:
    """`target.max_run_hours` as activeDeadlineSeconds, rounded up: a deadline of 0 would end the job at once."""
    seconds = math.ceil(hours * 3600)
    if seconds > MAX_DEADLINE_SECONDS:
        raise ConfigError(
            "target.max_run_hours",
            f"{hours:.7g} hours is past the longest deadline a Kubernetes job takes (2^63-1 seconds)",
            "ask for fewer hours",
        )
    return seconds


def _indexed_job_spec(plan: Plan, image: str, run_id: str, *, backoff_limit: int, **pod_fields) -> dict:
    nodes = plan.layout.nodes
    pod = pod_template(plan, image, run_id, env=_indexed_env(plan, run_id), restart_policy="Never", **pod_fields)
    return {
        "completionMode": "Indexed",
        "completions": nodes,
        "parallelism": nodes,
        "backoffLimit": backoff_limit,
        "activeDeadlineSeconds": deadline_seconds(plan.target.max_run_hours),
        "template": pod,
    }


def _job_metadata(plan: Plan, run_id: str) -> dict:
    meta = object_metadata(plan, run_id, run_id)
    if plan.target.queue:
        meta["labels"] = {**meta["labels"], QUEUE_LABEL: plan.target.queue}
    return meta


def jobset(plan: Plan, image: str, run_id: str) -> tuple[dict, ...]:
    """A failed pod fails its Job (no pod retries), and the JobSet restarts every Job `max_retries` times:
    the whole group starts again and resumes from the checkpoint."""
    job = {"metadata": metadata(plan, run_id), "spec": _indexed_job_spec(plan, image, run_id, backoff_limit=0)}
    return (
        {
            "apiVersion": JOBSET_API,
            "kind": "JobSet",
            "metadata": _job_metadata(plan, run_id),
            "spec": {
                "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True, "subdomain": run_id},
                "failurePolicy": {"maxRestarts": plan.target.max_retries},
                "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1, "template": job}],
            },
        },
    )


def indexed_job(plan: Plan, image: str, run_id: str) -> tuple[dict, ...]:
    """A plain Job replaces failed pods one by one; the others fail when their collectives time out and are
    replaced too, so a group restart costs `nodes` of the backoff limit."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": object_metadata(plan, run_id, run_id),
        "spec": {"clusterIP": "None", "selector": {RUN_LABEL: run_id}, "publishNotReadyAddresses": True},
    }
    spec = _indexed_job_spec(
        plan, image, run_id, backoff_limit=plan.target.max_retries * plan.layout.nodes, subdomain=run_id
    )
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": _job_metadata(plan, run_id), "spec": spec}
    return service, job


def pytorchjob(plan: Plan, image: str, run_id: str) -> tuple[dict, ...]:
    """Pods restart in place on failure (`OnFailure`), at most `max_retries` times in all."""
    target, nodes = plan.target, plan.layout.nodes
    policy = "OnFailure" if target.max_retries else "Never"
    pod = pod_template(plan, image, run_id, env=[], restart_policy=policy)
    replicas = {"Master": {"replicas": 1, "restartPolicy": policy, "template": pod}}
    if nodes > 1:
        replicas["Worker"] = {"replicas": nodes - 1, "restartPolicy": policy, "template": pod}
    spec = {
        "nprocPerNode": str(plan.layout.processes_per_node),
        "runPolicy": {
            "backoffLimit": target.max_retries,
            "activeDeadlineSeconds": deadline_seconds(target.max_run_hours),
        },
        "pytorchReplicaSpecs": replicas,
    }
    return (
        {"apiVersion": PYTORCHJOB_API, "kind": "PyTorchJob", "metadata": _job_metadata(plan, run_id), "spec": spec},
    )


JOBS = {JobKind.jobset: jobset, JobKind.pytorchjob: pytorchjob, JobKind.indexed_job: indexed_job}
