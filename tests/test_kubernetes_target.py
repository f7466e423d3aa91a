"""The Kubernetes target's translator: golden manifests for every preset and each kind of job, each checked
against the schemas a cluster enforces (kubernetes-validate for core kinds, the published CRDs kept in
tests/data/crds for JobSet and PyTorchJob), the names the API server would refuse, and what each pod's
environment tells the entrypoint (through the controllers' part of `tests.kubelet_emulation`)."""

import copy
import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from compiler.spec.errors import ConfigError
from compiler.targets.kubernetes import rules, translate, validate
from entrypoint.launcher.cluster import discover
from tests.helpers import PRESETS, plan_for
from tests.kubelet_emulation import pods

KINDS = ("jobset", "pytorchjob", "indexed_job")
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/dockyard/golden:0123456789abcdef0123"


def request_for(*overrides: str, run_id: str = "golden-20261123-040715") -> translate.KubernetesRequest:
    return translate.to_request(plan_for(*overrides), IMAGE, run_id=run_id)


def check_schemas(request: translate.KubernetesRequest, crds: dict[str, dict]) -> None:
    for manifest in request.manifests:
        if validate.is_custom(manifest):
            validate.check_custom(manifest, crds[manifest["kind"]])
        else:
            validate.check_core(manifest)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("preset", PRESETS)
def test_manifests_match_golden_and_pass_the_schemas(preset, kind, golden, crds):
    request = request_for(f"experiment={preset}", "target=kubernetes", f"target.kind_of_job={kind}")
    golden.check(f"kubernetes/{preset}-{kind}.yaml", str(request))
    check_schemas(request, crds)
    assert list(yaml.safe_load_all(str(request))) == list(request.manifests)


def test_schema_checks_refuse_what_a_cluster_would(crds):
    request = request_for("experiment=smoke", "target=kubernetes")
    jobset = copy.deepcopy(request.job)
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["containers"][0]["resourcez"] = {}
    with pytest.raises(ConfigError, match="'resourcez' was unexpected"):
        validate.check_custom(jobset, crds["JobSet"])
    config_map = copy.deepcopy(request.manifests[0])
    config_map["data"]["plan.json"] = 1
    with pytest.raises(ConfigError, match="ConfigMap: data.plan.json"):
        validate.check_core(config_map)


def test_llama_on_p5_asks_for_every_gpu_and_efa_device_of_four_nodes(crds):
    request = request_for("experiment=llama3-8b-p5x4", "target=kubernetes")
    check_schemas(request, crds)
    job = request.job["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (job["completions"], job["parallelism"]) == (4, 4)
    pod = job["template"]["spec"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == 8 and limits["vpc.amazonaws.com/efa"] == 32
    assert limits["hugepages-2Mi"] == "5120Mi"
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    assert {t["key"] for t in pod["tolerations"]} == {"nvidia.com/gpu", "vpc.amazonaws.com/efa"}
    shm = next(v for v in pod["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}


@pytest.mark.parametrize("kind", KINDS)
def test_each_pod_finds_its_rank_and_the_master(kind):
    plan = plan_for("experiment=llama3-8b-p5x4", "target=kubernetes", f"target.kind_of_job={kind}")
    request = translate.to_request(plan, IMAGE, run_id="llama-1")
    nodes = [discover(pod.environment(), Path("/nonexistent")) for pod in pods(request.manifests)]
    assert [node.node_rank for node in nodes] == [0, 1, 2, 3]
    assert {(node.nnodes, node.master_addr, node.master_port) for node in nodes} == {
        (4, translate.hostnames(plan, "llama-1")[0], 29500)
    }


def request_at_scale(kind: str, nodes: int) -> translate.KubernetesRequest:
    overrides = (f"hardware.nodes={nodes}", f"parallelism.global_batch={nodes * 8}")
    return request_for("experiment=llama3-8b-p5x4", "target=kubernetes", f"target.kind_of_job={kind}", *overrides)


@pytest.mark.parametrize("kind", ["jobset", "indexed_job"])
def test_the_pods_environment_does_not_grow_with_the_nodes(kind):
    """Linux starts no process with an environment string over 128 KiB (MAX_ARG_STRLEN); every pod's name
    spelled out in DOCKYARD_HOSTS passed that at about 2,000 nodes, and the manifest grew with the nodes."""
    small, large = request_at_scale(kind, 4), request_at_scale(kind, 5000)
    assert len(str(large)) - len(str(small)) < 100
    last = pods(large.manifests)[-1]
    assert max(len(f"{name}={value}") for name, value in last.environment().items()) < 200
    node = discover(last.environment(), Path("/nonexistent"))
    assert (node.nnodes, node.node_rank, node.current_host) == (5000, 4999, last.dns_names[0])
    assert node.master_addr == pods(large.manifests)[0].dns_names[0]


@pytest.mark.parametrize("kind", KINDS)
def test_more_pods_than_a_job_may_have_is_a_config_error(kind):
    """A billion nodes once spelled out a billion host names before anything said no (MemoryError)."""
    assert len(str(request_at_scale(kind, rules.MAX_PODS))) < 20_000
    with pytest.raises(ConfigError) as error:
        request_at_scale(kind, rules.MAX_PODS + 1)
    assert error.value.key == "hardware.nodes"


def test_options_reach_the_manifests(crds):
    request = request_for(
        "experiment=llama3-8b-p5x4",
        "target=kubernetes",
        "target.namespace=training",
        "target.service_account=trainer",
        "target.queue=team-a",
        "target.scheduler_name=volcano",
        "target.priority_class=high",
        "target.max_retries=3",
        "target.claim=runs",
        "+target.labels={team: ml}",
        "+target.annotations={owner: someone@example.com}",
        "target.image_pull_secrets=[ecr]",
    )
    check_schemas(request, crds)
    jobset = request.job
    assert jobset["metadata"]["namespace"] == "training"
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert jobset["spec"]["failurePolicy"] == {"maxRestarts": 3}
    template = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert template["metadata"]["labels"]["team"] == "ml"
    assert template["metadata"]["annotations"]["owner"] == "someone@example.com"
    pod = template["spec"]
    assert (pod["serviceAccountName"], pod["schedulerName"], pod["priorityClassName"]) == ("trainer", "volcano", "high")
    assert pod["imagePullSecrets"] == [{"name": "ecr"}]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/opt/ml/checkpoints"]["subPath"] == "golden-20261123-040715/checkpoints"


def test_file_systems_mount_through_their_claim(crds):
    fsx = (
        "target=kubernetes",
        "data=fsx",
        "data.file_system_id=fs-0123456789abcdef0",
        "data.path=/fsx/tokens",
        "data.input_mode=File",
    )
    with pytest.raises(ConfigError) as error:
        request_for("experiment=llama3-8b-p5x4", *fsx)
    assert error.value.key == "data.claim"
    request = request_for("experiment=llama3-8b-p5x4", *fsx, "data.claim=fsx-tokens")
    check_schemas(request, crds)
    pod = request.job["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    data = next(v for v in pod["volumes"] if v["name"] == "data")
    assert data["persistentVolumeClaim"] == {"claimName": "fsx-tokens", "readOnly": True}
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "data")
    assert (mount["mountPath"], mount["subPath"], mount["readOnly"]) == ("/opt/ml/input/data/train", "fsx/tokens", True)


@pytest.mark.parametrize(
    ("overrides", "run_id", "key"),
    [
        ((), "Smoke-1", "name"),
        ((), "1smoke", "name"),
        ((), "s" * 56 + "-20261123-040715", "name"),
        (("target.namespace=Training",), "smoke-1", "target.namespace"),
        (("target.namespace=" + "n" * 64,), "smoke-1", "target.namespace"),  # a label: 63 at most
        (("target.service_account=trainer_1",), "smoke-1", "target.service_account"),
        (("target.queue=a/b",), "smoke-1", "target.queue"),
        (("+target.labels={team: 'a b'}",), "smoke-1", "target.labels.team"),
        (("target.image_pull_secrets=[Ecr]",), "smoke-1", "target.image_pull_secrets[0]"),
        (("target.claim=runs/x",), "smoke-1", "target.claim"),
    ],
)
def test_names_kubernetes_would_refuse_are_config_errors(overrides, run_id, key):
    with pytest.raises(ConfigError) as error:
        request_for("experiment=smoke", "target=kubernetes", *overrides, run_id=run_id)
    assert error.value.key == key


@pytest.mark.parametrize("kind", KINDS)
def test_the_deadline_is_rounded_up_and_at_most_an_int64(kind):
    """A run of a second's fraction once got activeDeadlineSeconds 0, which ends a job at once."""
    request = request_for(
        "experiment=smoke", "target=kubernetes", f"target.kind_of_job={kind}", "target.max_run_hours=1e-4"
    )
    assert re.findall(r'"activeDeadlineSeconds": (\d+)', request.to_json()) == ["1"]
    with pytest.raises(ConfigError) as error:
        request_for("experiment=smoke", "target=kubernetes", f"target.kind_of_job={kind}", "target.max_run_hours=3e15")
    assert error.value.key == "target.max_run_hours"


def test_the_longest_names_kubernetes_takes_are_accepted():
    request = request_for("experiment=smoke", "target=kubernetes", "target.namespace=" + "n" * 63, run_id="smoke-1")
    assert {manifest["metadata"]["namespace"] for manifest in request.manifests} == {"n" * 63}


@pytest.mark.parametrize(
    ("field", "value", "key"),
    [
        ("labels", {"-team": "a"}, "target.labels.-team"),
        ("labels", {"team": "x" * 64}, "target.labels.team"),
        ("annotations", {"a/b/c": "x"}, "target.annotations.a/b/c"),
        ("annotations", {"Example.com/x": "x"}, "target.annotations.Example.com/x"),
        ("annotations", {"a" * 254 + "/x": "x"}, "target.annotations." + "a" * 254 + "/x"),
        ("environment", {"1=2": "x"}, "target.environment.1=2"),
    ],
)
def test_keys_and_values_kubernetes_would_refuse_are_config_errors(field, value, key):
    plan = plan_for("experiment=smoke", "target=kubernetes")
    plan = dataclasses.replace(plan, target=dataclasses.replace(plan.target, **{field: value}))
    with pytest.raises(ConfigError) as error:
        translate.to_request(plan, IMAGE, run_id="smoke-1")
    assert error.value.key == key


def test_warnings_say_what_is_lost_without_a_claim():
    warnings = rules.check(plan_for("experiment=smoke", "target=kubernetes"))
    assert any("target.claim" in warning for warning in warnings)
    assert not any(
        "target.claim" in w for w in rules.check(plan_for("experiment=smoke", "target=kubernetes", "target.claim=r"))
    )
