"""The Kubernetes target's I/O (`compiler.targets.kubernetes.cluster`) through the official client, over HTTP,
against `tests.kube_api_server` (a stand-in for the API server speaking the paths the module uses, which
validates bodies and deletes asynchronously as the real one does; the test plays the controllers by writing
Jobs, pods, logs and job statuses, owned as the controllers own them): submit and its roll back, stop,
status, follow and logs. The same target reached through KUBECONFIG and dockyard's verbs:
`tests/test_kubernetes_verbs.py`."""

import dataclasses
import io
import threading
import time

import pytest
from kubernetes import client as k8s

from compiler.spec.errors import ConfigError, PlatformError
from compiler.targets.base import COMPLETED, FAILED, PENDING, RUNNING, STOPPED
from compiler.targets.kubernetes import cluster
from tests.kube_api_server import FakeApiServer
from tests.kubernetes_support import RUN, api_for, crd_names, pod, request_for


@pytest.fixture
def server(crds):
    with FakeApiServer(crd_names(crds)) as server:
        yield server


def eventually(condition, timeout_s: float = 5.0) -> bool:
    """Whether `condition()` holds within `timeout_s` (the stand-in's garbage collector works in rounds)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_submit_creates_the_plan_and_the_job_which_owns_it(server):
    handle = cluster.submit(request_for(), api_for(server))

    jobset = server.get("jobsets", "training", RUN)
    config_map = server.get("configmaps", "training", f"{RUN}-plan")
    assert '"name": "smoke"' in config_map["data"]["plan.json"]
    assert config_map["metadata"]["ownerReferences"] == [
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": RUN, "uid": jobset["metadata"]["uid"]}
    ]
    assert [method for method, _ in server.requests] == ["GET", "POST", "POST", "PATCH"]
    assert server.requests[0][1] == "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/jobsets.jobset.x-k8s.io"
    assert handle == {
        "run_id": RUN,
        "namespace": "training",
        "kind": "JobSet",
        "group": "jobset.x-k8s.io",
        "version": "v1alpha2",
        "name": RUN,
        "service": False,
    }


def test_a_cluster_without_the_operator_gets_nothing(crds):
    with FakeApiServer({}) as server, pytest.raises(ConfigError) as error:
        cluster.submit(request_for("target.kind_of_job=pytorchjob"), api_for(server))
    assert error.value.key == "target.kind_of_job"
    assert "training-operator" in error.value.fix
    assert [method for method, _ in server.requests] == ["GET"]


def test_an_indexed_job_brings_its_service_and_both_go_on_stop(server):
    api = api_for(server)
    handle = cluster.submit(request_for("target.kind_of_job=indexed_job"), api)
    assert server.get("services", "training", RUN)["spec"]["clusterIP"] == "None"
    assert server.get("jobs", "training", RUN)["spec"]["completionMode"] == "Indexed"

    cluster.stop(api, handle)

    assert server.get("jobs", "training", RUN) is None  # stop returns once the API server removed it
    assert ("DELETE", f"/apis/batch/v1/namespaces/training/jobs/{RUN}") in server.requests
    assert server.deletions == [{"propagationPolicy": "Foreground"}]  # a Job deleted without one keeps its pods
    assert eventually(lambda: server.objects == {})  # what it owned, collected after it


def test_stop_waits_until_the_foreground_deletion_is_done_and_status_then_says_stopped(server):
    api = api_for(server)
    handle = cluster.submit(request_for(), api)
    pod(server, 0, "Running")
    pod(server, 1, "Running")
    with server.collector_paused():  # the state the API server answers while the pods terminate
        job = cluster.Resource(api, "jobset.x-k8s.io/v1alpha2", "JobSet", "training")
        assert job.delete(RUN, cluster.FOREGROUND)
        deleting = cluster.read_job(api, handle)
        assert deleting["metadata"]["finalizers"] == ["foregroundDeletion"]
        assert cluster.status(api, handle).status == STOPPED  # from its deletionTimestamp: it will not run on
        assert len(cluster.run_pods(api, handle)) == 2

    cluster.stop(api, handle)  # asks again and waits

    assert server.objects == {}
    assert [plural for plural, _ in server.removed] == ["configmaps", "pods", "pods", "jobs", "jobsets"]
    assert server.deletions[-1]["propagationPolicy"] == "Foreground"
    assert cluster.status(api, handle).status == STOPPED
    cluster.stop(api, handle)  # a second stop finds nothing and says nothing


def test_a_stop_that_does_not_finish_in_time_says_so(server):
    api = api_for(server)
    handle = cluster.submit(request_for(), api)
    job = cluster.job_resource(api, handle)
    with server.collector_paused():
        job.delete(RUN, cluster.FOREGROUND)
        with pytest.raises(PlatformError, match=f"JobSet {RUN} in namespace training is still being deleted after"):
            job.wait_gone(RUN, timeout_s=0.2)


REFUSALS = [
    ("jobset", "jobsets", 403, "Forbidden", "target.namespace"),
    ("jobset", "jobsets", 422, "Invalid", "target"),
    ("jobset", "jobsets", 500, "InternalError", None),
    ("indexed_job", "jobs", 422, "Invalid", "target"),  # after the ConfigMap and the Service
    ("pytorchjob", "pytorchjobs", 403, "Forbidden", "target.namespace"),
]


@pytest.mark.parametrize(("kind", "plural", "code", "reason", "key"), REFUSALS)
def test_a_refused_job_is_one_line_and_leaves_nothing_behind(server, kind, plural, code, reason, key):
    message = f'{plural} "{RUN}" is refused by a test'
    server.refuse("POST", plural, code, reason, message)
    with pytest.raises(ConfigError if key else PlatformError) as error:
        cluster.submit(request_for(f"target.kind_of_job={kind}"), api_for(server))
    line = error.value.one_line()
    assert f"refused to create {'Job' if kind == 'indexed_job' else plural[:-1]}".lower() in line.lower()
    assert f"{message} ({reason}, HTTP {code})" in line
    assert getattr(error.value, "key", None) == key
    assert server.objects == {}  # the ConfigMap (and Service) it created first are gone again
    assert {"propagationPolicy": "Background"} in server.deletions


def test_a_missing_namespace_names_the_key(server):
    with pytest.raises(ConfigError) as error:
        cluster.submit(request_for("target.namespace=nowhere"), api_for(server))
    assert error.value.key == "target.namespace"
    assert 'create ConfigMap smoke-20261123-040715-plan in namespace nowhere: namespaces "nowhere" not found' in (
        error.value.message
    )
    assert server.objects == {}


def test_ctrl_c_part_way_through_a_submit_undoes_it(server, monkeypatch):
    create = cluster.Resource.create

    def interrupted_at_the_job(resource: cluster.Resource, body: dict) -> dict:
        if resource.kind == "JobSet":
            raise KeyboardInterrupt
        return create(resource, body)

    monkeypatch.setattr(cluster.Resource, "create", interrupted_at_the_job)
    with pytest.raises(KeyboardInterrupt):
        cluster.submit(request_for(), api_for(server))
    assert server.objects == {} and len(server.deletions) == 1


def test_what_a_failed_rollback_leaves_is_named(server):
    server.refuse("POST", "jobsets", 403, "Forbidden", "jobsets.jobset.x-k8s.io is forbidden")
    server.refuse("DELETE", "configmaps", 503, "ServiceUnavailable", "etcd is away")
    with pytest.raises(ConfigError) as error:
        cluster.submit(request_for(), api_for(server))
    assert f"; not removed: ConfigMap {RUN}-plan (the cluster refused to delete ConfigMap" in error.value.message
    assert "etcd is away (ServiceUnavailable, HTTP 503)" in error.value.message


def test_a_user_who_may_not_read_crds_leaves_the_check_to_the_api_server(server):
    server.refuse("GET", "customresourcedefinitions", 403, "Forbidden", "customresourcedefinitions is forbidden")
    cluster.submit(request_for(), api_for(server))
    assert server.get("jobsets", "training", RUN) is not None


def test_a_refused_owner_reference_removes_the_job_too(server):
    server.refuse("PATCH", "configmaps", 403, "Forbidden", 'configmaps "x" is forbidden: cannot patch')
    with pytest.raises(ConfigError, match="refused to make the job the owner of ConfigMap"):
        cluster.submit(request_for(), api_for(server))
    assert server.objects == {}


def test_a_second_submit_of_the_same_run_is_refused_and_the_first_run_stays(server):
    api = api_for(server)
    cluster.submit(request_for(), api)
    server.put("configmaps", "training", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}})
    before = {key: obj["metadata"]["uid"] for key, obj in server.objects.items()}
    with pytest.raises(ConfigError) as error:
        cluster.submit(request_for(), api)
    assert error.value.key == "name"
    assert f'configmaps "{RUN}-plan" already exists (AlreadyExists, HTTP 409)' in error.value.one_line()
    assert {key: obj["metadata"]["uid"] for key, obj in server.objects.items()} == before


def test_a_live_job_of_the_same_name_is_refused_and_what_came_before_it_is_undone(server):
    job = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": RUN}}
    uid = server.put("jobsets", "training", job)["metadata"]["uid"]
    with pytest.raises(ConfigError) as error:
        cluster.submit(request_for(), api_for(server))
    assert error.value.key == "name"
    assert f'jobsets.jobset.x-k8s.io "{RUN}" already exists (AlreadyExists, HTTP 409)' in error.value.one_line()
    assert list(server.objects) == [("jobsets", "training", RUN)]
    assert server.objects[("jobsets", "training", RUN)]["metadata"]["uid"] == uid


def test_a_resubmit_waits_for_the_run_being_deleted_under_its_name(server):
    api = api_for(server)
    handle = cluster.submit(request_for(), api)
    pod(server, 0, "Running")
    with server.collector_paused():
        cluster.job_resource(api, handle).delete(RUN, cluster.FOREGROUND)
        cluster.Resource(api, "v1", "ConfigMap", "training").delete(f"{RUN}-plan", cluster.FOREGROUND)
    cluster.submit(request_for(), api)
    jobset = server.get("jobsets", "training", RUN)
    assert not jobset["metadata"].get("deletionTimestamp")
    assert (
        server.get("configmaps", "training", f"{RUN}-plan")["metadata"]["ownerReferences"][0]["uid"]
        == (jobset["metadata"]["uid"])
    )


def test_a_name_freed_between_the_refusal_and_the_read_is_created(server):
    """The collector may remove the old run after the API server answered 409 and before the client reads it."""
    server.refuse("POST", "jobsets", 409, "AlreadyExists", f'jobsets.jobset.x-k8s.io "{RUN}" already exists')
    cluster.submit(request_for(), api_for(server))
    assert not server.get("jobsets", "training", RUN)["metadata"].get("deletionTimestamp")


def test_a_job_the_api_server_finds_invalid_is_one_line_and_undone(server):
    """The client asks for strict field validation, so an unknown field is refused, not dropped."""
    request = request_for("target.kind_of_job=indexed_job")
    service, job = request.manifests[1:]
    broken = dataclasses.replace(request, manifests=(request.manifests[0], service, {**job, "spec": {"nonsense": 1}}))
    with pytest.raises(ConfigError) as error:
        cluster.submit(broken, api_for(server))
    assert (
        f'refused to create Job {RUN} in namespace training: strict decoding error: unknown field "spec.nonsense"'
        in (error.value.one_line())
    )
    assert server.objects == {}


def test_an_unreachable_cluster_is_one_line():
    api = k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:9"))
    api.configuration.retries = 0
    handle = cluster.handle_for(request_for())
    with pytest.raises(PlatformError, match="could not read JobSet .* the API server did not answer"):
        cluster.status(api, handle)


def test_follow_prints_phases_and_every_pods_log_until_the_job_ends(server):
    api = api_for(server)
    handle = cluster.submit(request_for(), api)
    pod(server, 0, "Pending")
    pod(server, 1, "Pending")
    steps = iter(range(3))

    def controllers(_seconds: float) -> None:
        """What the cluster does between two polls."""
        step = next(steps)
        if step == 0:
            for index in (0, 1):
                pod(server, index, "Running")
                server.logs[f"{RUN}-node-0-{index}-x7k2p"] = f"world size 4\nstep 1 on node {index}\n"
        elif step == 1:
            jobset = server.get("jobsets", "training", RUN)
            jobset["status"] = {"conditions": [{"type": "Completed", "status": "True", "message": "jobset completed"}]}

    out = io.StringIO()
    state = cluster.follow(api, handle, out=out, interrupted=threading.Event(), poll_s=0, sleep=controllers)

    assert (state.status, state.detail, state.attempts) == (COMPLETED, "jobset completed", 1)
    lines = out.getvalue().splitlines()
    assert f"dockyard: pod {RUN}-node-0-0-x7k2p Pending" in lines
    assert f"dockyard: pod {RUN}-node-0-1-x7k2p Running" in lines
    assert f"{RUN}-node-0-1 | step 1 on node 1" in lines
    assert f"{RUN}-node-0-0 | world size 4" in lines


def test_follow_returns_none_when_interrupted(server):
    api = api_for(server)
    handle = cluster.submit(request_for(), api)
    interrupted = threading.Event()
    interrupted.set()
    assert cluster.follow(api, handle, out=io.StringIO(), interrupted=interrupted) is None
    assert server.get("jobsets", "training", RUN) is not None  # detaching leaves the job running


def test_logs_merges_the_pods_logs_in_the_kubelets_time_order(server):
    api = api_for(server)
    handle = cluster.submit(request_for(), api)
    pod(server, 0, "Succeeded")
    pod(server, 1, "Succeeded")
    server.logs[f"{RUN}-node-0-1-x7k2p"] = "first\nsecond\n"
    time.sleep(0.01)
    server.logs[f"{RUN}-node-0-0-x7k2p"] = "done\n"
    assert [str(line) for line in cluster.logs(api, handle)] == [
        f"{RUN}-node-0-1 | first",
        f"{RUN}-node-0-1 | second",
        f"{RUN}-node-0-0 | done",
    ]


def condition(kind: str, **status) -> dict:
    return {"status": {"conditions": [{"type": kind, "status": "True", "message": kind.lower()}], **status}}


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (condition("Completed", restarts=2), (COMPLETED, 3)),  # JobSet
        (condition("Failed", restarts=3), (FAILED, 4)),
        (condition("Complete"), (COMPLETED, 1)),  # Job
        (condition("Succeeded"), (COMPLETED, 1)),  # PyTorchJob
        (condition("Suspended"), (PENDING, 1)),  # waiting in Kueue
        ({"status": {}}, (RUNNING, 1)),
    ],
)
def test_job_states_map_to_the_shared_statuses(job, expected):
    running = k8s.V1Pod(status=k8s.V1PodStatus(phase="Running"))
    state = cluster.job_state(job, [running])
    assert (state.status, state.attempts) == expected


def test_a_job_with_pending_pods_is_pending():
    pending = k8s.V1Pod(status=k8s.V1PodStatus(phase="Pending"))
    assert cluster.job_state({"status": {}}, [pending]).status == PENDING
    assert cluster.job_state({"status": {}}, []).status == PENDING
