"""Who trains, in a real container of the smoke image. Started as root (SageMaker's way), the entrypoint
makes root-owned 0700 folders usable and trains as its unprivileged user; started as another user
(`docker run -u`, a Kubernetes runAsUser), it trains as that user, and a path it cannot write or a plan it
cannot read is one line naming the path, exit status 2, no traceback."""

import sys
from pathlib import Path

import docker
import pytest

from compiler.images.build import BuiltImage, build_image, ensure_base_image
from compiler.spec.contract import PLAN_CHANNEL, PLAN_PATH
from entrypoint.launcher.main import USER_ERROR
from entrypoint.launcher.privileges import find_account
from tests.entrypoint_support import tiny_plan, write_plan

STRANGER = "4321:4321"
"""A user the image does not know, as a Kubernetes runAsUser would be."""


@pytest.fixture(scope="module")
def image(engine: docker.DockerClient, tmp_path_factory) -> BuiltImage:
    plan = tiny_plan()
    ensure_base_image(engine, plan.image, sys.stdout)
    return build_image(plan, engine, cwd=tmp_path_factory.mktemp("project"))


def folder(path: Path, mode: int) -> Path:
    """A host folder owned by root (the tests run as root, as the SDK's local mode does)."""
    path.mkdir(parents=True)
    path.chmod(mode)
    return path


def start(engine, image: BuiltImage, volumes: dict[Path, str], user: str | None = None) -> tuple[int, str]:
    container = engine.containers.run(
        image.reference,
        ["train"],
        user=user,
        environment={"DOCKYARD_PLAN": PLAN_PATH},
        volumes={str(host): {"bind": target, "mode": "rw"} for host, target in volumes.items()},
        network_mode="none",
        detach=True,
    )
    try:
        status = container.wait(timeout=300)["StatusCode"]
        return status, container.logs().decode()
    finally:
        container.remove(force=True)


def plan_channel(tmp_path: Path, readable: bool) -> Path:
    """The plan channel: readable by everyone, or only by root (as the SDK's local mode copies it)."""
    channel = folder(tmp_path / PLAN_CHANNEL, 0o755 if readable else 0o700)
    write_plan(tiny_plan("trainer.steps=2", "trainer.warmup_steps=0"), channel).chmod(0o644 if readable else 0o600)
    return channel


@pytest.mark.torchrun
def test_root_start_trains_as_the_user_in_root_owned_0700_folders(engine, image, tmp_path):
    volumes = {
        plan_channel(tmp_path, readable=False): "/opt/ml/input/data/plan",
        folder(tmp_path / "model", 0o700): "/opt/ml/model",
        folder(tmp_path / "output", 0o700): "/opt/ml/output",
    }
    status, log = start(engine, image, volumes)
    assert status == 0, log[-3000:]
    assert "user        dockyard (uid 1000, the image's user), dropped to from root" in log
    model = tmp_path / "model/model.safetensors"
    assert model.stat().st_uid == 1000, "written by the unprivileged user"
    assert (tmp_path / "output/data/metrics.jsonl").stat().st_uid == 1000


def test_a_stranger_cannot_write_the_model_folder(engine, image, tmp_path):
    volumes = {
        plan_channel(tmp_path, readable=True): "/opt/ml/input/data/plan",
        folder(tmp_path / "model", 0o755): "/opt/ml/model",
    }
    status, log = start(engine, image, volumes, user=STRANGER)
    assert status == USER_ERROR
    assert log == "dockyard-entrypoint: error: /opt/ml/model is not writable by uid 4321: training writes there\n"


def test_a_stranger_cannot_read_the_plan(engine, image, tmp_path):
    volumes = {plan_channel(tmp_path, readable=False): "/opt/ml/input/data/plan"}
    status, log = start(engine, image, volumes, user=STRANGER)
    assert status == USER_ERROR
    assert log == f"dockyard-entrypoint: error: cannot read the plan at {PLAN_PATH} as uid 4321: permission denied\n"


@pytest.mark.torchrun
def test_a_stranger_trains_as_itself_where_it_may_write(engine, image, tmp_path):
    volumes = {
        plan_channel(tmp_path, readable=True): "/opt/ml/input/data/plan",
        folder(tmp_path / "ml", 0o777): "/opt/ml/model",
    }
    for name in ("checkpoints", "output"):
        volumes[folder(tmp_path / name, 0o777)] = f"/opt/ml/{name}"
    status, log = start(engine, image, volumes, user=STRANGER)
    assert status == 0, log[-3000:]
    assert "user        uid 4321, as started" in log
    assert (tmp_path / "ml/model.safetensors").stat().st_uid == 4321


def test_root_of_a_user_namespace_keeps_root(tmp_path):
    """Where root is the only user mapped (enroot's remapped root, rootless Docker), there is no one to drop
    to: training stays root there rather than fail on chown."""
    uid_map = tmp_path / "uid_map"
    uid_map.write_text("         0       1000          1\n")
    assert find_account("nobody", uid_map) is None
    uid_map.write_text("         0          0 4294967295\n")
    assert find_account("nobody", uid_map).uid == 65534
    assert find_account("no-such-user", uid_map) is None
