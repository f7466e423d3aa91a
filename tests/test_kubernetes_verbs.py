"""The Kubernetes target as dockyard's commands reach it, against `tests.kube_api_server`: the cluster named
by KUBECONFIG, the registry's target, a launch's follow (`runs.execute`), and the `dockyard` verbs (launch,
status, logs, stop) in a process of their own. The I/O module called directly:
`tests/test_kubernetes_cluster.py`."""

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from compiler.launch import runs
from compiler.spec.errors import ConfigError
from compiler.targets import records, registry
from compiler.targets.base import COMPLETED, PENDING, RUNNING
from compiler.targets.kubernetes import cluster, translate
from compiler.targets.records import RunRecord
from tests.helpers import plan_for
from tests.kube_api_server import FakeApiServer
from tests.kubernetes_support import RUN, api_for, crd_names, pod, request_for

DOCKYARD = str(Path(sys.executable).with_name("dockyard"))


@pytest.fixture
def server(crds):
    with FakeApiServer(crd_names(crds)) as server:
        yield server


def test_a_follow_the_cluster_refuses_detaches_and_keeps_the_record(server, tmp_path, monkeypatch):
    """A user who may create the job but not list its pods: the job runs on, so its record stays."""
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_for(server, tmp_path)))
    plan = plan_for("experiment=smoke", "target=kubernetes", "target.namespace=training")
    request = translate.to_request(plan, "dockyard/smoke:0123", run_id=RUN)
    record = runs.new_record(plan, request, tmp_path, request.image)
    server.refuse("GET", "pods", 403, "Forbidden", 'pods is forbidden: User "ci" cannot list resource "pods"')
    out = io.StringIO()
    record = runs.execute(record, plan, request, out=out)
    assert record.status == PENDING and record.handle["name"] == RUN
    assert records.load(tmp_path).status == PENDING
    assert f"detached from {RUN}: target.namespace: the cluster refused to list the pods of JobSet {RUN}" in (
        out.getvalue()
    )
    assert server.get("jobsets", "training", RUN) is not None


def test_the_target_reaches_the_cluster_named_by_kubeconfig(server, tmp_path, monkeypatch):
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server.url}}],
        "users": [{"name": "test", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "current-context": "test",
    }
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    target = registry.get("kubernetes")
    out = io.StringIO()
    handle = target.submit(request_for(), "", out=out)
    assert out.getvalue() == f"created JobSet {RUN} in namespace training\n"
    assert target.status(handle).status == PENDING
    target.stop(handle)
    assert server.get("jobsets", "training", RUN) is None


def test_no_cluster_configured_is_a_config_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError) as error:
        cluster.connect()
    assert error.value.key == "target"


def kubeconfig_for(server: FakeApiServer, folder: Path) -> Path:
    kubeconfig = folder / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": {"server": server.url}}],
                "users": [{"name": "test", "user": {}}],
                "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test", "namespace": "x"}}],
                "current-context": "test",
            }
        )
    )
    return kubeconfig


def test_logs_follow_one_nodes_lines_until_the_job_ends(server, tmp_path):
    """`dockyard logs RUN -f --node NAME` on a running job: the node's lines as the pods write them, then
    it returns once the job has ended."""
    handle = cluster.submit(request_for(), api_for(server))
    records.save(
        RunRecord(run_dir=str(tmp_path / "run"), run_id=RUN, target="kubernetes", status=RUNNING, handle=handle)
    )
    pod(server, 0, "Running")
    pod(server, 1, "Running")
    server.logs[f"{RUN}-node-0-1-x7k2p"] = "world size 4\n"
    env = {**os.environ, "KUBECONFIG": str(kubeconfig_for(server, tmp_path))}
    command = [DOCKYARD, "logs", RUN, "-f", "--node", f"{RUN}-node-0-1"]
    follow = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    threading.Timer(60, follow.kill).start()  # a follow that never ends fails the test instead of hanging it
    assert follow.stdout.readline() == f"{RUN}-node-0-1 | world size 4\n"
    server.logs[f"{RUN}-node-0-0-x7k2p"] = "step 1 on node 0\n"
    server.logs[f"{RUN}-node-0-1-x7k2p"] = "world size 4\nstep 1 on node 1\n"
    assert follow.stdout.readline() == f"{RUN}-node-0-1 | step 1 on node 1\n"
    assert follow.poll() is None  # the job still runs
    server.get("jobsets", "training", RUN)["status"] = {"conditions": [{"type": "Completed", "status": "True"}]}
    assert follow.wait(timeout=30) == 0, follow.stderr.read()
    assert follow.stdout.read() == ""
    assert records.load(tmp_path / "run").status == COMPLETED


def test_launch_status_logs_and_stop_through_the_cli(engine, server, tmp_path):
    """`dockyard launch target=kubernetes` builds, creates the objects, follows the pods (here written by the
    test, as the JobSet controller and kubelet would) to the end; then status, logs and stop reach the run."""
    kubeconfig = kubeconfig_for(server, tmp_path)

    def cluster_side() -> None:
        while not (jobsets := [key for key in list(server.objects) if key[0] == "jobsets"]):
            time.sleep(0.1)
        _, namespace, name = jobsets[0]
        for index in (0, 1):
            pod_name = f"{name}-node-0-{index}-abcde"
            server.put(
                "pods",
                namespace,
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": pod_name, "namespace": namespace, "labels": {"dockyard/run-id": name}},
                    "spec": {"hostname": f"{name}-node-0-{index}", "containers": [{"name": "pytorch", "image": "i"}]},
                    "status": {"phase": "Running"},
                },
            )
            server.logs[pod_name] = f"trained on node {index}\n"
        server.get("jobsets", namespace, name)["status"] = {"conditions": [{"type": "Completed", "status": "True"}]}

    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}

    def launch_into(folder: str) -> subprocess.CompletedProcess:
        command = [DOCKYARD, "launch", "experiment=smoke", "target=kubernetes", f"hydra.run.dir={folder}"]
        return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)

    server.refuse("POST", "jobsets", 403, "Forbidden", 'jobsets.jobset.x-k8s.io is forbidden: User "ci" cannot create')
    refused = launch_into("refused")  # the ConfigMap was created first: it goes again, and so does the folder
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert refused.stderr.startswith("dockyard: error: target.namespace: the cluster refused to create JobSet ")
    assert len(refused.stderr.splitlines()) == 1
    assert server.objects == {} and not (tmp_path / "refused").exists()
    assert server.deletions == [{"propagationPolicy": "Background"}]  # the ConfigMap's

    threading.Thread(target=cluster_side, daemon=True).start()
    launch = launch_into("run")
    assert launch.returncode == 0, launch.stdout[-3000:] + launch.stderr[-3000:]
    run_id = json.loads((tmp_path / "run" / "run.json").read_text())["run_id"]
    assert f"created JobSet {run_id} in namespace default" in launch.stdout
    assert f"{run_id}-node-0-1 | trained on node 1" in launch.stdout
    assert f"run       {run_id} completed" in launch.stdout

    def verb(*args: str) -> str:
        result = subprocess.run([DOCKYARD, *args, run_id], cwd=tmp_path, capture_output=True, text=True, env=env)
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert f"{run_id}-node-0-0 | trained on node 0" in verb("logs")
    assert verb("logs", "--node", f"{run_id}-node-0-1") == f"{run_id}-node-0-1 | trained on node 1\n"
    assert "completed" in verb("status")
    assert verb("stop") == f"{run_id} had already ended (completed); nothing to stop\n"
    assert server.get("jobsets", "default", run_id) is not None and len(server.deletions) == 1


@pytest.mark.parametrize(("code", "reason", "exit_status"), [(403, "Forbidden", 2), (503, "ServiceUnavailable", 1)])
def test_a_refused_stop_through_the_cli_is_one_line(server, tmp_path, code, reason, exit_status):
    handle = cluster.submit(request_for(), api_for(server))
    records.save(
        RunRecord(run_dir=str(tmp_path / "run"), run_id=RUN, target="kubernetes", status=RUNNING, handle=handle)
    )
    server.refuse("DELETE", "jobsets", code, reason, f'jobsets.jobset.x-k8s.io "{RUN}" is refused by a test')
    env = {**os.environ, "KUBECONFIG": str(kubeconfig_for(server, tmp_path))}
    stop = subprocess.run([DOCKYARD, "stop", RUN], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert stop.returncode == exit_status
    assert stop.stderr.startswith(f"dockyard: error: {'target.namespace: ' if exit_status == 2 else ''}the cluster")
    assert f"refused to delete JobSet {RUN} in namespace training" in stop.stderr
    assert len(stop.stderr.splitlines()) == 1, stop.stderr
    assert records.load(tmp_path / "run").status in records.OPEN_STATUSES  # not recorded as stopped
