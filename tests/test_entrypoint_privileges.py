"""Who trains, in a real container of the smoke image. Started as root (SageMaker's way), the entrypoint
makes root-owned 0700 folders usable and trains as its unprivileged user; started as another user
(`docker run -u`, a Kubernetes runAsUser), it trains as that user, and a path it cannot write or a plan it
cannot read is one line naming the path, exit status 2, no traceback."""

import stat
import sys
from pathlib import Path

import docker
import pytest

from compiler.images.build import BuiltImage, build_image, ensure_base_image
from compiler.spec.contract import PLAN_CHANNEL, PLAN_PATH, RUN_AS, RUN_AS_USER
from entrypoint.launcher.cluster import Paths
from entrypoint.launcher.main import USER_ERROR
from entrypoint.launcher.privileges import Account, PathError, choose_account, find_account, hand_over, register
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
    """The plan channel: readable by everyone, or only by root (as the SDK's local mode copies it). One process
    trains two steps: who trains, and who owns what it writes, are the same for every rank."""
    channel = folder(tmp_path / PLAN_CHANNEL, 0o755 if readable else 0o700)
    plan = tiny_plan("hardware.processes_per_node=1", "trainer.steps=2", "trainer.warmup_steps=0")
    write_plan(plan, channel).chmod(0o644 if readable else 0o600)
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


FULL_MAP = "         0          0 4294967295\n"


def test_the_launching_user_is_trained_as_where_root_can_become_it(tmp_path):
    """The local targets name the user who launched the run (DOCKYARD_RUN_AS): one the image does not know
    gets a name and a home of its own; where root is that user already (rootless Docker), training stays root."""
    uid_map = tmp_path / "uid_map"
    uid_map.write_text(FULL_MAP)
    account = choose_account({RUN_AS: "4321:4322"}, uid_map)
    assert (account.name, account.uid, account.gid, account.home) == ("uid4321", 4321, 4322, "/home/uid4321")
    assert str(account) == "uid4321 (uid 4321, who launched the run (gid 4322))"
    assert choose_account({}, uid_map) == find_account(RUN_AS_USER, uid_map)
    uid_map.write_text("         0       1000          1\n         1     100000      65536\n")
    assert choose_account({RUN_AS: "1000:1000"}, uid_map) is None
    with pytest.raises(PathError, match=r"^DOCKYARD_RUN_AS='me' is not a user as uid:gid"):
        choose_account({RUN_AS: "me"}, uid_map)


def test_a_launching_user_the_image_does_not_know_gets_a_passwd_entry_and_a_home(tmp_path):
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n")
    account = Account("uid4321", 4321, 4322, str(tmp_path / "home/uid4321"))
    register(account, passwd)
    assert passwd.read_text().splitlines()[-1] == f"uid4321:x:4321:4322:dockyard launcher:{account.home}:/bin/sh"
    home = Path(account.home).stat()
    assert (home.st_uid, home.st_gid, stat.S_IMODE(home.st_mode)) == (4321, 4322, 0o700)
    known = Account("root", 0, 0, "/root")
    register(known, passwd)
    assert len(passwd.read_text().splitlines()) == 2, "a user the image knows keeps its entry"


def test_a_launching_users_own_0600_inputs_are_left_as_they_are(tmp_path):
    """Mounted read-only, the user's own checkpoint could not be opened to others, and need not be."""
    paths = Paths(tmp_path / "ml")
    channel = paths.channel("pretrained")
    channel.mkdir(parents=True)
    weights = channel / "model.safetensors"
    weights.write_text("weights")
    weights.chmod(0o600)
    channel.chmod(0o700)
    plan = paths.channel("plan") / "plan.json"
    plan.parent.mkdir()
    plan.write_text("{}")
    plan.chmod(0o600)
    hand_over(paths, ("pretrained",), plan, Account("root", 0, 0, "/root"))
    assert stat.S_IMODE(channel.stat().st_mode) == 0o700 and stat.S_IMODE(plan.stat().st_mode) == 0o600
    passwd = tmp_path / "passwd"
    hand_over(paths, ("pretrained",), plan, Account("uid4321", 4321, 4321, str(tmp_path / "home")), passwd)
    assert stat.S_IMODE(channel.stat().st_mode) == 0o705, "another account is let in"
