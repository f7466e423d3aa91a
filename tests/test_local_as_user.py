"""The local target launched by a user who is not root, as on a shared machine: a user of the docker group, made for
the test. What the user cannot read, or a run folder they cannot write in, is refused when planning (an `init` that
fails half-way takes back what it wrote); a checkpoint as `save_pretrained` leaves it (its weights 0600) fine-tunes
as it is, every file and folder of the run is that user's and none is world-writable, `--resume` goes on from the
run's checkpoint, and `dockyard stop` ends the resumed run as stopped in the launch, `status`, `runs` and the run
record."""

import grp
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compiler.launch import runs

DOCKYARD = str(Path(sys.executable).parent / "dockyard")
SOCKET = Path("/var/run/docker.sock")
STEPS = ("trainer.steps=2", "trainer.warmup_steps=1", "trainer.log_interval=1", "trainer.checkpoint_interval=2")
SMALL = ("hardware.processes_per_node=1", "model.seq_len=64")
"""Two container nodes of one process each, short sequences: ownership is per container, not per rank."""


@pytest.fixture
def host_user():
    """A new user who may use the Docker engine (its socket's group), removed with its home afterwards."""
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs the suite as root, which this test needs to create a user")
        pytest.skip("creating a host user needs root")
    name = f"dyuser{os.getpid()}"
    group = grp.getgrgid(SOCKET.stat().st_gid).gr_name
    subprocess.run(["useradd", "--create-home", "--groups", group, "--shell", "/bin/sh", name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", "--remove", name], check=False, capture_output=True)


def as_user(user: pwd.struct_passwd, *arguments: str, **options) -> subprocess.Popen:
    """`dockyard ARGUMENTS` run by `user` in its home, with its own runs index."""
    environment = {**os.environ, "HOME": user.pw_dir, "USER": user.pw_name, "LOGNAME": user.pw_name}
    environment["DOCKYARD_HOME"] = f"{user.pw_dir}/.dockyard"
    switch = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", "--"]
    return subprocess.Popen([*switch, DOCKYARD, *arguments], cwd=user.pw_dir, env=environment, text=True, **options)


def run(user: pwd.struct_passwd, *arguments: str) -> subprocess.CompletedProcess:
    process = as_user(user, *arguments, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = process.communicate(timeout=900)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def not_theirs(folder: Path, uid: int) -> list[str]:
    """Every path under `folder` that `uid` does not own or that others may write, with its owner and mode."""
    found = []
    for path in (folder, *folder.rglob("*")):
        status = path.lstat()
        if stat.S_ISLNK(status.st_mode):
            continue
        if status.st_uid != uid or status.st_mode & stat.S_IWOTH:
            found.append(f"{path} uid {status.st_uid} mode {stat.filemode(status.st_mode)}")
    return found


def saved_pretrained(checkpoint: Path, folder: Path, owner: pwd.struct_passwd | None = None) -> Path:
    """A copy of `checkpoint` in `folder` with its weights 0600, as transformers' `save_pretrained` writes them,
    given to `owner` (else root's)."""
    shutil.copytree(checkpoint, folder)
    (folder / "model.safetensors").chmod(0o600)
    if owner is not None:
        for path in (folder, *folder.iterdir()):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    return folder


def test_a_checkpoint_the_launching_user_cannot_read_is_refused_when_planning(host_user, hf_checkpoints):
    theirs = saved_pretrained(hf_checkpoints["llama"], Path(host_user.pw_dir) / "llama", owner=host_user)
    assert run(host_user, "plan", "experiment=smoke", "model=hf", f"model.path={theirs}").returncode == 0
    roots = saved_pretrained(hf_checkpoints["llama"], Path(host_user.pw_dir) / "root-only")
    refused = run(host_user, "plan", "experiment=smoke", "model=hf", f"model.path={roots}")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"dockyard: error: model.path: {roots}/model.safetensors cannot be read by uid {host_user.pw_uid}, who "
        "launches the run and trains in its containers; launch as a user who can read the checkpoint, or make it "
        f"readable: chmod -R a+rX {roots}"
    ]


def test_a_run_folder_the_user_cannot_write_is_refused_in_one_line(host_user):
    shared = Path(host_user.pw_dir) / "shared"  # root's: the user may read it, not write in it
    shared.mkdir(mode=0o755)
    refused = run(host_user, "plan", "experiment=smoke", f"hydra.run.dir={shared}/run")
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"dockyard: error: hydra.run.dir: cannot create '{shared}/run': Permission denied; name a folder you can write"
    ]
    assert not any(shared.iterdir())


def test_init_that_fails_half_way_takes_back_what_it_wrote(host_user):
    """The project's config folder is the user's, the project folder root's: the experiment is written, then
    `train.py` cannot be, and the experiment goes again."""
    project = Path(host_user.pw_dir) / "project"
    (project / "conf").mkdir(parents=True, mode=0o755)
    os.chown(project / "conf", host_user.pw_uid, host_user.pw_gid)
    refused = run(host_user, "init", str(project))
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"dockyard: error: init: cannot write '{project}/train.py': Permission denied; name a folder you can write"
    ]
    assert [str(p.relative_to(project)) for p in project.rglob("*")] == ["conf"]


@pytest.mark.torchrun
def test_a_user_fine_tunes_their_own_0600_checkpoint_owns_the_run_resumes_and_stops_it(
    engine, host_user, hf_checkpoints
):
    home, uid = Path(host_user.pw_dir), host_user.pw_uid
    checkpoint = saved_pretrained(hf_checkpoints["llama"], home / "llama", owner=host_user)
    model = ["experiment=smoke", "model=hf", f"model.path={checkpoint}"]
    launched = run(host_user, "launch", *model, *SMALL, *STEPS, "hydra.run.dir=run")
    assert launched.returncode == 0, launched.stdout[-3000:] + launched.stderr[-3000:]
    assert f"(uid {uid}, who launched the run (gid {host_user.pw_gid})), dropped to from root" in launched.stdout
    run_dir = home / "run"
    assert [row["step"] for row in runs.loss_curve(run_dir)][-1] == 2
    assert stat.S_IMODE((checkpoint / "model.safetensors").stat().st_mode) == 0o600, "the checkpoint is left as is"
    assert not_theirs(run_dir, uid) == []
    run_id = json.loads((run_dir / "run.json").read_text())["run_id"]

    resumed = as_user(host_user, "launch", "--resume", "run", "trainer.steps=100000", stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while max((row["step"] for row in runs.loss_curve(run_dir)), default=0) <= 2:
            assert resumed.poll() is None and time.monotonic() < deadline, "the resumed run trains on from step 2"
            time.sleep(1)
        stop = run(host_user, "stop", run_id)
        output, _ = resumed.communicate(timeout=120)
    finally:
        resumed.kill()
    assert stop.stdout.strip() == f"stopped   {run_id}", stop.stderr
    assert "steps             2 → 100000 (resumed)" in output
    assert "dockyard: the job was stopped by `dockyard stop`" in output, output[-3000:]
    assert f"run       {run_id} stopped" in output and "failed" not in output, output[-3000:]
    assert resumed.returncode != 0
    status = run(host_user, "status", run_id)
    assert "status    stopped: stopped by `dockyard stop`" in status.stdout, status.stdout + status.stderr
    listed = json.loads(run(host_user, "runs", "-o", "json").stdout)
    assert [(r["run_id"], r["status"]) for r in listed] == [(run_id, "stopped")]
    assert not_theirs(run_dir, uid) == []
