"""The stand-in API server (`tests.kube_api_server`) behaves as the real one where dockyard depends on it:
bodies are validated (422 with an Invalid Status, 400 for unknown fields under strict field validation,
unknown fields dropped otherwise), deletion is asynchronous and follows `propagationPolicy`. And every
manifest dockyard makes is accepted by it."""

import json
import time
import urllib.error
import urllib.request

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from compiler.targets.kubernetes import cluster, translate
from tests.helpers import PRESETS, plan_for
from tests.kube_api_server import FakeApiServer
from tests.kubernetes_support import api_for, crd_names

NAMESPACE = "training"


@pytest.fixture
def server(crds):
    with FakeApiServer(crd_names(crds)) as server:
        yield server


def refusal(call) -> tuple[int, dict]:
    with pytest.raises(ApiException) as error:
        call()
    return error.value.status, json.loads(error.value.body)


def test_a_job_with_a_nonsense_spec_is_refused_like_the_real_server(server):
    batch = k8s.BatchV1Api(api_for(server))
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "nonsense"}, "spec": {"nonsense": 1}}

    code, status = refusal(lambda: batch.create_namespaced_job(NAMESPACE, job))
    assert code == 422
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "Invalid", 422)
    assert status["message"] == 'Job.batch "nonsense" is invalid: spec.template: Required value'
    assert status["details"]["causes"] == [
        {"reason": "FieldValueInvalid", "message": "Required value", "field": "spec.template"}
    ]

    code, status = refusal(lambda: batch.create_namespaced_job(NAMESPACE, job, field_validation="Strict"))
    assert (code, status["reason"]) == (400, "BadRequest")
    assert status["message"] == 'strict decoding error: unknown field "spec.nonsense"'
    assert server.objects == {}


def test_unknown_fields_are_dropped_unless_strict(server):
    core = k8s.CoreV1Api(api_for(server))
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plan"}, "data": {"a": "b"}, "extra": 1}
    core.create_namespaced_config_map(NAMESPACE, body)
    assert "extra" not in server.get("configmaps", NAMESPACE, "plan")
    assert server.get("configmaps", NAMESPACE, "plan")["data"] == {"a": "b"}


def test_a_custom_resource_is_checked_against_its_crd(server):
    custom = k8s.CustomObjectsApi(api_for(server))
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {"replicatedJobs": "not a list", "nonsense": 1},
    }
    call = lambda: custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets", jobset)  # noqa: E731
    code, status = refusal(call)
    assert (code, status["reason"]) == (422, "Invalid")
    assert status["message"].startswith('JobSet.jobset.x-k8s.io "js" is invalid: spec.replicatedJobs:')
    assert server.objects == {}


@pytest.mark.parametrize("kind", ["jobset", "pytorchjob", "indexed_job"])
@pytest.mark.parametrize("preset", PRESETS)
def test_every_manifest_dockyard_makes_is_accepted(server, preset, kind):
    plan = plan_for(f"experiment={preset}", "target=kubernetes", f"target.kind_of_job={kind}")
    request = translate.to_request(plan, "dockyard/golden:0123", run_id="golden-20261123-040715")
    cluster.submit(request, api_for(server))
    assert len(server.objects) == len(request.manifests)
    assert [method for method, _ in server.requests].count("DELETE") == 0


def tree(server: FakeApiServer) -> None:
    """A JobSet that owns a Job that owns two pods, and a ConfigMap the JobSet owns without blocking."""

    def put(plural: str, kind: str, name: str, owner: dict | None, block: bool = True) -> dict:
        meta: dict = {"name": name}
        if owner is not None:
            ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": owner["metadata"]["name"]}
            meta["ownerReferences"] = [ref | {"uid": owner["metadata"]["uid"], "blockOwnerDeletion": block}]
        return server.put(plural, NAMESPACE, {"apiVersion": "v1", "kind": kind, "metadata": meta})

    jobset = put("jobsets", "JobSet", "js", None)
    jobset["apiVersion"] = "jobset.x-k8s.io/v1alpha2"
    job = put("jobs", "Job", "js-node-0", jobset)
    job["apiVersion"] = "batch/v1"
    put("pods", "Pod", "js-node-0-0", job)
    put("pods", "Pod", "js-node-0-1", job)
    put("configmaps", "ConfigMap", "js-plan", jobset, block=False)


def settled(server: FakeApiServer, count: int) -> None:
    deadline = time.monotonic() + 5
    while len(server.objects) != count and time.monotonic() < deadline:
        time.sleep(0.01)


def delete_jobset(server: FakeApiServer, policy: str | None) -> None:
    body = k8s.V1DeleteOptions(propagation_policy=policy) if policy else None
    k8s.CustomObjectsApi(api_for(server)).delete_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets", "js", body=body
    )


def test_foreground_deletion_keeps_the_owner_until_its_dependents_are_gone(server):
    tree(server)
    with server.collector_paused():
        delete_jobset(server, "Foreground")
        jobset = server.get("jobsets", NAMESPACE, "js")
        assert jobset["metadata"]["deletionTimestamp"] and jobset["metadata"]["finalizers"] == ["foregroundDeletion"]
        assert len(server.objects) == 5  # nothing has gone yet: deletion is asynchronous
    settled(server, 0)
    order = [name for _, name in server.removed]
    assert order.index("js-node-0-0") < order.index("js-node-0") < order.index("js")


def test_background_deletion_removes_the_owner_first_and_collects_the_rest(server):
    tree(server)
    with server.collector_paused():
        delete_jobset(server, "Background")
        assert server.get("jobsets", NAMESPACE, "js") is None
        assert len(server.objects) == 4  # collected afterwards
    settled(server, 0)
    order = [name for _, name in server.removed]
    assert order[0] == "js" and order.index("js-node-0") < order.index("js-node-0-1")


def test_orphan_deletion_keeps_the_dependents(server):
    tree(server)
    delete_jobset(server, "Orphan")
    settled(server, 4)
    assert server.get("jobsets", NAMESPACE, "js") is None
    assert server.get("jobs", NAMESPACE, "js-node-0")["metadata"]["ownerReferences"] == []
    assert len(server.get("pods", NAMESPACE, "js-node-0-0")["metadata"]["ownerReferences"]) == 1


def test_a_job_deleted_without_a_policy_keeps_its_pods(server):
    """batch/v1's legacy default (orphan), which is why dockyard always names the policy."""
    tree(server)
    k8s.BatchV1Api(api_for(server)).delete_namespaced_job("js-node-0", NAMESPACE)
    settled(server, 4)
    assert server.get("jobs", NAMESPACE, "js-node-0") is None
    assert server.get("pods", NAMESPACE, "js-node-0-0") is not None


def test_patches_take_the_media_types_the_real_server_takes(server):
    """The client sends a strategic merge patch for core kinds and a merge patch for custom resources; a
    strategic merge patch of a custom resource is a 415, as on a cluster."""
    tree(server)
    api = api_for(server)
    labels = {"metadata": {"labels": {"a": "b"}}}
    k8s.CoreV1Api(api).patch_namespaced_config_map("js-plan", NAMESPACE, labels)
    k8s.CustomObjectsApi(api).patch_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", NAMESPACE, "jobsets", "js", labels
    )
    assert server.get("jobsets", NAMESPACE, "js")["metadata"]["labels"] == {"a": "b"}
    strategic = urllib.request.Request(
        f"{server.url}/apis/jobset.x-k8s.io/v1alpha2/namespaces/{NAMESPACE}/jobsets/js",
        data=json.dumps(labels).encode(),
        method="PATCH",
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(strategic)
    assert error.value.code == 415
