"""A script written for a SageMaker estimator (tests/estimator/train.py) runs unchanged in dockyard's image:
on two local container nodes and on two Slurm nodes through `dockyard launch`, on two emulated Kubernetes
pods, and under the SageMaker Python SDK's local mode with instance_count=2 — the real external client of
SageMaker's container contract, which mounts /opt/ml from root-owned 0700 folders. Every run checks each
SM_* variable each of its processes read against what the training toolkit would have given it, and the model
it wrote where SageMaker uploads it from."""

import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from compiler.spec.contract import PLAN_CHANNEL, PLAN_PATH

pytestmark = pytest.mark.torchrun

SAGEMAKER_LOCAL_MODE = pytest.mark.xdist_group("sagemaker-local-mode")
"""The SDK's local mode (v2 and v3) puts every job's containers on one Docker network, `sagemaker-local`, under
the same host names, algo-1 and algo-2: during two jobs at once Docker's DNS answers either job's algo-1, and a
node joins the other job's rendezvous and waits there for good (seen as a hang of the v3 test). `make test`
runs these tests on one worker, one after the other."""

DOCKYARD = str(Path(sys.executable).parent / "dockyard")
SCRIPT_DIR = Path(__file__).resolve().parent / "estimator"
PLAN_HYPERPARAMETERS = {"epochs": 40, "lr": 0.5}
PROCESSES_PER_NODE = 2
"""On the local target's two nodes, so that every process of a node is checked against its node's variables.
One per node on the other targets: the entrypoint starts a node's processes the same way on every target, and
each further process is another import of torch in a container."""
TOOLKIT_PROPERTIES = {
    "additional_framework_parameters", "channel_input_dirs", "current_host", "current_instance_group",
    "current_instance_group_hosts", "current_instance_type", "distribution_hosts", "distribution_instance_groups",
    "framework_module", "hosts", "hyperparameters", "input_config_dir", "input_data_config", "input_dir",
    "instance_groups", "instance_groups_dict", "is_hetero", "is_master", "is_modelparallel_enabled",
    "is_smddpmprun_installed", "is_smddprun_installed", "job_name", "log_level", "master_hostname", "model_dir",
    "module_dir", "module_name", "network_interface_name", "num_cpus", "num_gpus", "num_neurons", "output_data_dir",
    "output_dir", "output_intermediate_dir", "resource_config", "topology", "user_entry_point",
}  # fmt: skip
"""The properties of the training toolkit's `Environment`, which SM_TRAINING_ENV holds by name."""


@pytest.fixture(scope="module")
def points(tmp_path_factory) -> Path:
    """The `train` channel: points on y = 3x + 1 with a little noise."""
    folder = tmp_path_factory.mktemp("train")
    rng = random.Random(0)
    rows = [(x, 3 * x + 1 + rng.gauss(0, 0.01)) for x in (rng.uniform(-1, 1) for _ in range(64))]
    (folder / "points.csv").write_text("".join(f"{x},{y}\n" for x, y in rows))
    folder.chmod(0o755)  # pytest makes it 0700; a read-only mount of it stays so (see test_entrypoint_privileges)
    return folder


def overrides(points: Path, per_node: int = 1) -> list[str]:
    return [
        "experiment=smoke",
        f"hardware.processes_per_node={per_node}",
        "trainer=script",
        f"trainer.source_dir={SCRIPT_DIR}",
        "trainer.script=train.py",
        "data.source=local",
        f"data.path={points}",
        *(f"+trainer.hyperparameters.{key}={value}" for key, value in PLAN_HYPERPARAMETERS.items()),
    ]


def dockyard(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run([DOCKYARD, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def reports(output_data: list[Path]) -> list[dict]:
    found = [json.loads(path.read_text()) for folder in output_data for path in sorted(folder.glob("report-*.json"))]
    return sorted(found, key=lambda report: report["rank"])


def check_run(
    found: list[dict],
    model: dict,
    hosts: list[str],
    hyperparameters: dict,
    instance_type: str = "local",
    interface: str | None = "eth0",
    per_node: int = 1,
) -> None:
    """What each process read is what the training toolkit gives a script on SageMaker, and it trained.
    `interface` None: the host's own network (Slurm's containers), whatever it names its interface."""
    arguments = [part for key, value in sorted(hyperparameters.items()) for part in (f"--{key}", str(value))]
    assert [report["rank"] for report in found] == list(range(len(hosts) * per_node))
    for report in found:
        env = report["env"]
        node_rank = report["rank"] // per_node
        assert report["uid"] != 0, "training runs as the unprivileged user"
        assert json.loads(env["SM_HOSTS"]) == hosts
        assert env["SM_CURRENT_HOST"] == hosts[node_rank]
        assert env["SM_CURRENT_HOST_RANK"] == str(node_rank)
        assert env["SM_HOST_COUNT"] == str(len(hosts))
        assert env["SM_MASTER_ADDR"] == hosts[0] and int(env["SM_MASTER_PORT"]) > 0
        assert env["SM_CURRENT_INSTANCE_TYPE"] == instance_type
        assert env["SM_NETWORK_INTERFACE_NAME"] == (interface or env["SM_NETWORK_INTERFACE_NAME"] or "(none)")
        assert env["SM_NUM_GPUS"] == "0" and int(env["SM_NUM_CPUS"]) >= 1
        assert (env["SM_MODEL_DIR"], env["SM_INPUT_DIR"], env["SM_INPUT_CONFIG_DIR"]) == (
            "/opt/ml/model",
            "/opt/ml/input",
            "/opt/ml/input/config",
        )
        assert (env["SM_OUTPUT_DIR"], env["SM_OUTPUT_DATA_DIR"]) == ("/opt/ml/output", "/opt/ml/output/data")
        assert json.loads(env["SM_CHANNELS"]) == ["plan", "train"]
        assert env["SM_CHANNEL_TRAIN"] == "/opt/ml/input/data/train"
        assert env["SM_CHANNEL_PLAN"] == "/opt/ml/input/data/plan"
        assert json.loads(env["SM_HPS"]) == hyperparameters
        assert {key: json.loads(env[f"SM_HP_{key.upper()}"]) for key in hyperparameters} == hyperparameters
        assert json.loads(env["SM_USER_ARGS"]) == report["argv"] == arguments
        assert json.loads(env["SM_FRAMEWORK_PARAMS"]) == {}
        assert env["SM_LOG_LEVEL"] == "20"
        assert (env["SM_MODULE_DIR"], env["SM_USER_ENTRY_POINT"]) == ("/opt/ml/code", "train.py")
        resources = json.loads(env["SM_RESOURCE_CONFIG"])
        assert (resources["hosts"], resources["current_host"]) == (hosts, hosts[node_rank])
        assert sorted(json.loads(env["SM_INPUT_DATA_CONFIG"])) == ["plan", "train"]
        training = json.loads(env["SM_TRAINING_ENV"])
        assert set(training) == TOOLKIT_PROPERTIES
        assert training["hyperparameters"] == hyperparameters and training["hosts"] == hosts
        assert training["channel_input_dirs"]["train"] == env["SM_CHANNEL_TRAIN"]
        assert training["resource_config"] == resources and training["is_master"] == (node_rank == 0)
        assert report["losses"][-1] < report["losses"][0] / 100
    assert model["hosts"] == hosts
    assert model["w"] == pytest.approx(3, abs=0.05) and model["b"] == pytest.approx(1, abs=0.05)


def test_estimator_script_trains_on_two_local_container_nodes(engine, tmp_path, points):
    dockyard("launch", *overrides(points, PROCESSES_PER_NODE), "hydra.run.dir=run", cwd=tmp_path)
    run = tmp_path / "run"
    found = reports([run / "nodes" / host / "output/data" for host in ("algo-1", "algo-2")])
    model = json.loads((run / "model/model.json").read_text())
    check_run(found, model, ["algo-1", "algo-2"], PLAN_HYPERPARAMETERS, per_node=PROCESSES_PER_NODE)


def test_estimator_script_trains_on_two_slurm_nodes(engine, slurm_cluster, tmp_path, points):
    """Slurm has no contract files: the hosts are its node list, the channels the folders under input/data,
    and the instance type the plan's."""
    dockyard("launch", *overrides(points), "target=slurm", "hydra.run.dir=run", cwd=tmp_path)
    run = tmp_path / "run"
    model = json.loads((run / "model/model.json").read_text())
    check_run(reports([run / "output/data"]), model, ["n1", "n2"], PLAN_HYPERPARAMETERS, "cpu", interface=None)


def test_estimator_script_trains_on_two_emulated_kubernetes_pods(engine, tmp_path, points):
    """The JobSet's pods, started as local containers by tests.kubelet_emulation (no API server or kubelet
    can run here): the data arrives as a claim, the hosts are the pods' DNS names."""
    from compiler.images.build import build_image, ensure_base_image
    from compiler.targets.kubernetes import translate
    from tests.helpers import plan_for
    from tests.kubelet_emulation import Emulation

    script = [o for o in overrides(points) if not o.startswith("data.")]
    data = ["data.source=efs", "data.file_system_id=fs-0123456789abcdef0", "data.claim=points", "data.path=/"]
    plan = plan_for(*script, *data, "target=kubernetes", "target.claim=runs")
    ensure_base_image(engine, plan.image, sys.stdout)
    image = build_image(plan, engine, cwd=Path.cwd()).reference
    request = translate.to_request(plan, image, run_id="estimator-script")
    out = io.StringIO()
    claims = {"runs": tmp_path / "claim", "points": points}
    statuses = Emulation(request.manifests, tmp_path / "kubelet", claims, client=engine).run(out)
    assert set(statuses.values()) == {0}, out.getvalue()[-4000:]
    found = reports(sorted((tmp_path / "kubelet/pods").glob("*/emptydir/output/data")))  # each pod's emptyDir
    model = json.loads((tmp_path / "claim/estimator-script/model/model.json").read_text())
    hosts = list(translate.hostnames(plan, "estimator-script"))
    check_run(found, model, hosts, PLAN_HYPERPARAMETERS, "cpu")


def compose_available() -> None:
    if shutil.which("docker-compose") is None:
        message = "the SageMaker SDK's local mode needs docker-compose (scripts/ensure-docker installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def remove_compose_containers(engine, container_root: Path) -> None:
    """The SDK's local mode trains with `docker-compose up` and leaves the stopped containers behind (it takes
    down only serving containers), two per run on the shared engine: remove those of this container root."""
    for container in engine.containers.list(all=True, filters={"label": "com.docker.compose.project"}):
        if container.labels.get("com.docker.compose.project.working_dir", "").startswith(f"{container_root}/"):
            container.remove(force=True)


@SAGEMAKER_LOCAL_MODE
def test_estimator_script_trains_under_the_sagemaker_sdks_local_mode(engine, tmp_path, points, monkeypatch):
    """The plan reaches the containers as dockyard's SageMaker request passes it: the `plan` channel and
    DOCKYARD_PLAN. The job's own hyperparameters win over the plan's, as on SageMaker."""
    compose_available()
    monkeypatch.setenv("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    import boto3
    from sagemaker.estimator import Estimator
    from sagemaker.local import LocalSession

    dockyard("build", *overrides(points), "hydra.run.dir=build", cwd=tmp_path)
    image = json.loads((tmp_path / "build/image.json").read_text())["reference"]
    plan_channel = tmp_path / PLAN_CHANNEL
    plan_channel.mkdir()
    shutil.copy(tmp_path / "build/plan.json", plan_channel / Path(PLAN_PATH).name)

    session = LocalSession(
        boto_session=boto3.Session(region_name="us-east-1"),
        sagemaker_config={"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}},
    )
    session.config = {"local": {"local_code": True, "container_root": str(tmp_path / "sdk")}}
    (tmp_path / "sdk").mkdir()
    job_hyperparameters = {"epochs": 60}
    estimator = Estimator(
        image_uri=image,
        role="arn:aws:iam::123456789012:role/dockyard-local",
        instance_count=2,
        instance_type="local",
        output_path=f"file://{tmp_path / 'out'}",
        sagemaker_session=session,
        environment={"DOCKYARD_PLAN": PLAN_PATH},
        hyperparameters=job_hyperparameters,
    )
    started = time.monotonic()
    try:
        estimator.fit({PLAN_CHANNEL: f"file://{plan_channel}", "train": f"file://{points}"}, wait=True, logs="None")
    finally:
        remove_compose_containers(engine, tmp_path / "sdk")
    print(f"SageMaker SDK local mode: {time.monotonic() - started:.1f} s")

    with tarfile.open(tmp_path / "out/model.tar.gz") as archive:
        archive.extractall(tmp_path / "model", filter="data")
    with tarfile.open(tmp_path / "out/output.tar.gz") as archive:
        archive.extractall(tmp_path / "output", filter="data")
    found = reports([tmp_path / "output/data"])
    model = json.loads((tmp_path / "model/model.json").read_text())
    hosts = json.loads(found[0]["env"]["SM_HOSTS"])
    assert [host.rsplit("-", 1)[0] for host in hosts] == ["algo-1", "algo-2"]  # the SDK adds a random suffix
    check_run(found, model, hosts, {**PLAN_HYPERPARAMETERS, **job_hyperparameters})
