"""dockyard's image under the SageMaker Python SDK v3 (`sagemaker.train.ModelTrainer`, local container mode,
two instances), beside the v2 Estimator test in tests/test_estimator_script.py. v3 cannot share a
virtualenv with v2, so the SDK (pinned in tests/sdk_v3/requirements.txt) gets one of its own under build/,
made once and kept while the pin is unchanged, and tests/sdk_v3/driver.py runs there. The plan reaches
the containers as dockyard's SageMaker request passes it: the `plan` channel and DOCKYARD_PLAN. v3 writes
`"network_interface_name": "ethwe"` into resourceconfig.json on containers that have only eth0; no
environment works around it here."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import uuid
import venv
from pathlib import Path

import pytest

from compiler.spec.contract import PLAN_CHANNEL, PLAN_PATH
from tests.test_estimator_script import (
    PLAN_HYPERPARAMETERS,
    SAGEMAKER_LOCAL_MODE,
    check_run,
    compose_available,
    dockyard,
    overrides,
    points,  # noqa: F401 (a fixture)
    remove_compose_containers,
    reports,
)

pytestmark = [pytest.mark.torchrun, SAGEMAKER_LOCAL_MODE]

HERE = Path(__file__).resolve().parent / "sdk_v3"
REQUIREMENTS = HERE / "requirements.txt"
VENVS = Path(__file__).resolve().parent.parent / "build" / "sdk-v3"


@pytest.fixture(scope="session")
def sdk_v3_python() -> Path:
    """The Python of a virtualenv with the pinned SDK v3, named by the requirements' hash: made on first use,
    then found. dockyard's own pip installs into it (`--python`), so the virtualenv needs no pip of its own;
    every package is pinned, so `--no-deps` skips resolving, and `--no-compile` leaves bytecode to the first
    import (12 s with pip's cache, against 2 minutes for a resolving, compiling install). Made in a temporary
    folder and renamed into place, so an interrupted install is never taken for a finished one."""
    key = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()[:12]
    home = VENVS / key
    python = home / "bin" / "python"
    if not python.is_file():
        started = time.monotonic()
        partial = VENVS / f"{key}.partial-{os.getpid()}"
        shutil.rmtree(partial, ignore_errors=True)
        venv.create(partial, with_pip=False)
        pip = [sys.executable, "-m", "pip", "--python", partial / "bin/python"]
        result = subprocess.run(
            [*pip, "install", "-q", "--no-deps", "--no-compile", "-r", REQUIREMENTS],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert result.returncode == 0, f"pip could not install {REQUIREMENTS}:\n{result.stderr[-3000:]}"
        try:
            partial.rename(home)  # the scripts name the old folder; only bin/python is used, which moves
        except OSError:
            shutil.rmtree(partial, ignore_errors=True)  # another session finished first
        print(f"SageMaker SDK v3 virtualenv: {time.monotonic() - started:.1f} s")
    return python


def train(engine, python: Path, tmp_path: Path, image: str, channels: dict[str, Path], hyperparameters: dict) -> Path:
    """ModelTrainer on two local containers; the path of the model.tar.gz it leaves."""
    # docker-compose names the project after this folder: unique, so that runs sharing the engine never
    # take over each other's containers
    container_root = tmp_path / f"sdk{uuid.uuid4().hex[:12]}"
    container_root.mkdir()
    request = {
        "image": image,
        "instance_count": 2,
        "container_root": str(container_root),
        "channels": {name: str(folder) for name, folder in channels.items()},
        "environment": {"DOCKYARD_PLAN": PLAN_PATH},
        "hyperparameters": hyperparameters,
    }
    (tmp_path / "request.json").write_text(json.dumps(request))
    environment = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1"}
    environment.pop("PYTHONPATH", None)  # the SDK's own virtualenv, without dockyard's
    started = time.monotonic()
    try:
        result = subprocess.run(
            [python, HERE / "driver.py", tmp_path / "request.json"],
            capture_output=True, text=True, timeout=600, env=environment,
        )  # fmt: skip
    finally:
        remove_compose_containers(engine, tmp_path)
    print(f"SageMaker SDK v3 local mode: {time.monotonic() - started:.1f} s")
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-6000:]
    assert "Unable to find address" not in log
    return Path(result.stdout.strip().splitlines()[-1])


def built(tmp_path: Path, *options: str) -> tuple[str, dict[str, Path]]:
    """The image and the `plan` channel, as `dockyard build` leaves them."""
    dockyard("build", *options, "hydra.run.dir=build", cwd=tmp_path)
    image = json.loads((tmp_path / "build/image.json").read_text())["reference"]
    plan_channel = tmp_path / PLAN_CHANNEL
    plan_channel.mkdir()
    shutil.copy(tmp_path / "build/plan.json", plan_channel / Path(PLAN_PATH).name)
    return image, {PLAN_CHANNEL: plan_channel}


def test_builtin_trainer_on_two_instances_under_sdk_v3(engine, tmp_path, sdk_v3_python):
    compose_available()
    # the claim is about instances: one process each, at a quarter of the smoke model's sequence length
    small = ("hardware.processes_per_node=1", "model.seq_len=64", "trainer.steps=6", "trainer.checkpoint_interval=0")
    image, channels = built(tmp_path, "experiment=smoke", *small)
    model = train(engine, sdk_v3_python, tmp_path, image, channels, {})
    with tarfile.open(model) as archive:
        assert {"model.safetensors", "config.json", "generation_config.json"} <= set(archive.getnames())


def test_estimator_script_on_two_instances_under_sdk_v3(engine, tmp_path, points, sdk_v3_python):  # noqa: F811
    """v3 writes hyperparameters as plain strings ({"epochs": "60"}); the script gets them as v2's would."""
    compose_available()
    image, channels = built(tmp_path, *overrides(points))
    job_hyperparameters = {"epochs": 60}
    model_archive = train(engine, sdk_v3_python, tmp_path, image, {**channels, "train": points}, job_hyperparameters)
    with tarfile.open(model_archive) as archive:
        archive.extractall(tmp_path / "model", filter="data")
    with tarfile.open(model_archive.with_name("output.tar.gz")) as archive:
        archive.extractall(tmp_path / "output", filter="data")
    found = reports([tmp_path / "output/data"])
    model = json.loads((tmp_path / "model/model.json").read_text())
    hosts = json.loads(found[0]["env"]["SM_HOSTS"])
    assert hosts == ["algo-1", "algo-2"]
    check_run(found, model, hosts, {**PLAN_HYPERPARAMETERS, **job_hyperparameters}, "local_cpu")
