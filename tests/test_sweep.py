"""`dockyard launch -m hydra/launcher=dockyard` without running a job: invalid points stop the sweep
before anything runs, and a dry run lists every job and its request and submits nothing (no container
on the engine, no training job in SageMaker's API, served by moto over HTTP)."""

import contextlib
import csv
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from compiler.images.build import planned_reference
from compiler.targets.local.runner import RUN_LABEL
from tests.helpers import plan_for

DOCKYARD = str(Path(sys.executable).parent / "dockyard")
SWEEP = ["launch", "-m", "hydra/launcher=dockyard", "hydra.sweep.dir=sweep"]
ROLE = "arn:aws:iam::123456789012:role/dockyard-training"


def dockyard(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([DOCKYARD, *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=300)


def summary_rows(sweep_dir: Path) -> list[dict]:
    with (sweep_dir / "summary.csv").open() as file:
        return list(csv.DictReader(file))


def test_one_invalid_point_stops_the_sweep_and_every_invalid_point_is_listed(tmp_path):
    result = dockyard(tmp_path, *SWEEP, "parallelism.tp=1,3", "hardware.nodes=1,2")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0] == (
        "dockyard: error: sweep: 2 of 4 points are invalid, nothing was launched; "
        "fix them, or set hydra.launcher.skip_invalid=true to run the others"
    )
    assert lines[1].startswith("dockyard: error: [job 2: parallelism.tp=3 hardware.nodes=1] parallelism.tp: ")
    assert lines[2].startswith("dockyard: error: [job 3: parallelism.tp=3 hardware.nodes=2] parallelism.tp: ")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "sweep").exists()


def test_a_point_whose_folder_cannot_be_made_is_invalid_and_nothing_is_written(tmp_path):
    subdir = "hydra.sweep.subdir=/etc/passwd/${hydra.job.num}"  # through a file
    result = dockyard(tmp_path, "launch", "--dry-run", "-m", "hydra/launcher=dockyard", subdir, "trainer.steps=60,61")
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines()[1:] == [
        f"dockyard: error: [job {n}: trainer.steps={60 + n}] hydra.sweep.subdir: cannot create '/etc/passwd/{n}': "
        "'/etc/passwd' is a file; name a folder you can write"
        for n in (0, 1)
    ]
    assert list(tmp_path.iterdir()) == []


def test_skip_invalid_goes_on_with_the_valid_points(tmp_path):
    dry = ["hydra.launcher.dry_run=true", "hydra.launcher.skip_invalid=true"]
    result = dockyard(tmp_path, *SWEEP, *dry, "parallelism.tp=1,3", "model=tiny,nope")
    assert result.returncode == 1  # a point that did not run is not a completed point
    assert "job 1 (parallelism.tp=1 model=nope): model: unknown model option 'nope'" in result.stderr
    rows = summary_rows(tmp_path / "sweep")
    assert [r["status"] for r in rows] == ["dry-run", "invalid", "invalid", "invalid"]


def test_local_dry_run_lists_every_request_and_starts_nothing(tmp_path, engine):
    result = dockyard(tmp_path, *SWEEP, "hydra.launcher.dry_run=true", "trainer.lr=0.001,0.003", "parallelism=ddp,fsdp")
    assert result.returncode == 0, result.stderr
    sweep = tmp_path / "sweep"
    rows = summary_rows(sweep)
    assert [r["overrides"] for r in rows] == [
        "trainer.lr=0.001 parallelism=ddp",
        "trainer.lr=0.001 parallelism=fsdp",
        "trainer.lr=0.003 parallelism=ddp",
        "trainer.lr=0.003 parallelism=fsdp",
    ]
    assert {r["status"] for r in rows} == {"dry-run"}
    for num in range(4):
        request = json.loads((sweep / str(num) / "request.json").read_text())
        assert f"request {sweep / str(num) / 'request.json'}" in result.stdout
        assert request["run_dir"] == str(sweep / str(num))
        shared = {container["environment"]["DOCKYARD_NODES_PER_HOST"] for container in request["containers"]}
        assert shared == {"8"}  # 2 nodes a job, 4 jobs at a time on this machine
        assert not engine.containers.list(all=True, filters={"label": f"{RUN_LABEL}={request['run_id']}"})
        assert not (sweep / str(num) / "nodes").exists()
    assert "image     " not in result.stdout  # nothing built either


def test_points_that_need_other_layers_get_other_images(tmp_path):
    """A tracker's client and the compiler's toolchain are layers of the image: each point runs the image its
    own plan builds (they were once given the first point's, which lacks them)."""
    axes = {"trainer.trackers": ["[]", "[tensorboard]"], "trainer.compile": ["false", "blocks"]}
    sweep_axes = [f"{key}={','.join(values)}" for key, values in axes.items()]
    result = dockyard(tmp_path, *SWEEP, "hydra.launcher.dry_run=true", "experiment=smoke", *sweep_axes)
    assert result.returncode == 0, result.stderr
    references = {}
    for num, row in enumerate(summary_rows(tmp_path / "sweep")):
        request = json.loads((tmp_path / "sweep" / str(num) / "request.json").read_text())
        overrides = ["experiment=smoke", *row["overrides"].split()]
        references[row["overrides"]] = {container["image"] for container in request["containers"]}
        assert references[row["overrides"]] == {planned_reference(plan_for(*overrides), cwd=tmp_path)}
    assert len({reference for found in references.values() for reference in found}) == 4


@pytest.fixture
def moto_env(tmp_path):
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "testing"}
    env |= {"AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    yield env
    server.stop()


def objects(session: boto3.Session, bucket: str) -> set[str]:
    return {item["Key"] for item in session.client("s3").list_objects_v2(Bucket=bucket).get("Contents", [])}


def test_sagemaker_dry_run_creates_no_job(tmp_path, moto_env, monkeypatch):
    for name, value in moto_env.items():
        monkeypatch.setenv(name, value)
    session = boto3.Session(region_name="us-east-1")
    session.client("s3").create_bucket(Bucket="dockyard-jobs")
    stored = objects(session, "dockyard-jobs")  # moto's state is per process: earlier tests' objects stay
    result = dockyard(
        tmp_path,
        *SWEEP,
        "hydra.launcher.dry_run=true",
        "experiment=gpt2-124m-p4d",
        f"target.role_arn={ROLE}",
        "target.output_uri=s3://dockyard-jobs/sweep",
        "image.push=true",
        "image.registry=123456789012.dkr.ecr.us-east-1.amazonaws.com",
        "trainer.lr=0.0001,0.0003",
        env={**os.environ, **moto_env},
    )
    assert result.returncode == 0, result.stderr
    requests = [json.loads((tmp_path / "sweep" / str(n) / "request.json").read_text()) for n in range(2)]
    names = [r["CreateTrainingJob"]["TrainingJobName"] for r in requests]
    assert [name[-2:] for name in names] == ["-0", "-1"]
    assert [r["CreateTrainingJob"]["HyperParameters"] for r in requests] == [{}, {}]
    jobs = session.client("sagemaker").list_training_jobs()["TrainingJobSummaries"]  # moto's state is per process
    assert not {job["TrainingJobName"] for job in jobs} & set(names)
    assert objects(session, "dockyard-jobs") == stored


def test_sagemaker_sweep_without_waiting_then_status_collects_the_states(
    tmp_path,
    moto_env,
    engine,
    registry,  # noqa: F811  (the fixture imported above)
    monkeypatch,
):
    """Submits for real (to moto over HTTP) with wait=false, then `dockyard status SWEEP_DIR`. The CUDA
    image cannot be built here, so a small stand-in is tagged with the reference the build would make:
    the launcher finds it built, pushes it to a loopback registry and submits its digest."""
    env = {**os.environ, **moto_env}
    session = boto3.Session(region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")
    iam = session.client("iam", endpoint_url=moto_env["AWS_ENDPOINT_URL"])
    trust = {"Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole", "Principal": {"Service": "sagemaker"}}]}
    with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):  # moto's state is per process
        iam.create_role(RoleName="dockyard-training", AssumeRolePolicyDocument=json.dumps(trust))
    s3 = session.client("s3", endpoint_url=moto_env["AWS_ENDPOINT_URL"])
    for bucket in ("dockyard-jobs", "dockyard-example-data"):
        s3.create_bucket(Bucket=bucket)
    point = [
        "experiment=gpt2-124m-p4d",
        f"target.role_arn={ROLE}",
        "target.output_uri=s3://dockyard-jobs/sweep",
        "image.push=true",
        f"image.registry={registry}",
    ]
    stand_in = io.BytesIO()
    with tarfile.open(fileobj=stand_in, mode="w") as tar:
        tar.addfile(tarfile.TarInfo("stand-in"), io.BytesIO(b""))
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_env["AWS_ENDPOINT_URL"])  # a loopback registry is moto's to pull from
    base = plan_for(*point).image.base  # the DLC base cannot be pulled here either: a stand-in, for the tag
    engine.api.import_image_from_data(stand_in.getvalue(), *base.rsplit(":", 1))
    reference = planned_reference(plan_for(*point), cwd=tmp_path)
    engine.api.import_image_from_data(stand_in.getvalue(), *reference.rsplit(":", 1))
    try:
        result = dockyard(tmp_path, *SWEEP, "hydra.launcher.wait=false", *point, "trainer.lr=0.0001,0.0003", env=env)
    finally:
        for stand_in_reference in (base, reference):
            engine.images.remove(stand_in_reference, force=True)
    assert result.returncode == 0, result.stderr
    assert f"image     {reference}  (already built" in result.stdout
    assert [r["status"] for r in summary_rows(tmp_path / "sweep")] == ["pending", "pending"]
    sagemaker = session.client("sagemaker", endpoint_url=moto_env["AWS_ENDPOINT_URL"])
    for num in range(2):
        name = json.loads((tmp_path / "sweep" / str(num) / "run.json").read_text())["run_id"]
        job = sagemaker.describe_training_job(TrainingJobName=name)
        assert job["AlgorithmSpecification"]["TrainingImage"].startswith(f"{registry}/dockyard/gpt2-124m-p4d@sha256:")

    status = dockyard(tmp_path, "status", "sweep", env=env)
    assert status.returncode == 0, status.stderr
    assert "2 points: 2 completed" in status.stdout  # moto's jobs complete at once
    assert [r["status"] for r in summary_rows(tmp_path / "sweep")] == ["completed", "completed"]


def test_a_sweep_the_platform_refuses_builds_and_creates_nothing(tmp_path, moto_env):
    """A missing role is found for every point before any image is built or pushed (the engine named here
    cannot be reached, so a build attempted first would fail otherwise)."""
    env = {**os.environ, **moto_env, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    session = boto3.Session(region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")
    ecr = session.client("ecr", endpoint_url=moto_env["AWS_ENDPOINT_URL"])
    repositories = ecr.describe_repositories()["repositories"]  # moto's state is per process
    result = dockyard(
        tmp_path,
        *SWEEP,
        "experiment=gpt2-124m-p4d",
        "target.role_arn=arn:aws:iam::123456789012:role/missing",
        "target.output_uri=s3://dockyard-jobs/sweep",
        "image.push=true",
        "image.registry=123456789012.dkr.ecr.us-east-1.amazonaws.com",
        "trainer.lr=0.0001,0.0003",
        env=env,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("dockyard: error: sweep: 2 of 2 points are invalid, nothing was launched")
    refusal = "target.role_arn: role arn:aws:iam::123456789012:role/missing cannot be used"
    assert len(lines) == 3 and all(refusal in line for line in lines[1:])
    assert ecr.describe_repositories()["repositories"] == repositories
    assert not (tmp_path / "sweep").exists()
