"""What the tests against the stand-in API server (`tests.kube_api_server`) share: the CRDs it installs and a
client of it; for those of the Kubernetes target's I/O (`tests/test_kubernetes_cluster.py`,
`tests/test_kubernetes_verbs.py`), a run's request and the Job and pods the JobSet's controllers would write."""

from kubernetes import client as k8s

from compiler.targets.kubernetes import translate
from tests.helpers import plan_for
from tests.kube_api_server import FakeApiServer

RUN = "smoke-20261123-040715"


def crd_names(crds: dict[str, dict]) -> dict[str, dict]:
    return {crd["metadata"]["name"]: crd for crd in crds.values()}


def api_for(server: FakeApiServer) -> k8s.ApiClient:
    return k8s.ApiClient(k8s.Configuration(host=server.url))


def request_for(*overrides: str) -> translate.KubernetesRequest:
    plan = plan_for("experiment=smoke", "target=kubernetes", "target.namespace=training", *overrides)
    return translate.to_request(plan, "dockyard/smoke:0123", run_id=RUN)


def owned_by(owner: dict) -> list[dict]:
    """The owner reference a controller gives what it creates (the foreground deletion waits for it)."""
    meta = owner["metadata"]
    reference = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"]}
    return [reference | {"controller": True, "blockOwnerDeletion": True}]


def pod(server: FakeApiServer, index: int, phase: str) -> None:
    """A pod of the JobSet's Job, which the JobSet controller creates first (as the controllers would)."""
    job_name = f"{RUN}-node-0"
    job = server.get("jobs", "training", job_name) or server.put(
        "jobs",
        "training",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": job_name, "ownerReferences": owned_by(server.get("jobsets", "training", RUN))},
            "spec": {},
        },
    )
    name = f"{RUN}-node-0-{index}"
    server.put(
        "pods",
        "training",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-x7k2p",
                "namespace": "training",
                "labels": {"dockyard/run-id": RUN},
                "ownerReferences": owned_by(job),
            },
            "spec": {"hostname": name, "containers": [{"name": "pytorch", "image": "dockyard/smoke:0123"}]},
            "status": {"phase": phase},
        },
    )
