"""The Slurm target: golden sbatch scripts per container runtime, the values a script cannot hold, and
(with the cluster fixture) real jobs on the two-node Slurm cluster that scripts/ensure-slurm starts."""

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from compiler.images.build import build_image, ensure_base_image
from compiler.launch import runs
from compiler.spec.errors import ConfigError
from compiler.targets.base import COMPLETED, FAILED, PENDING, RUNNING, STOPPED, JobState
from compiler.targets.host_user import HostUser
from compiler.targets.slurm import TARGET, translate
from tests.helpers import S3_TOKENS, plan_for

DOCKYARD = str(Path(sys.executable).with_name("dockyard"))

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/dockyard/golden:0123456789abcdef0123"
RUN_DIR = Path("/fsx/runs/golden")
USER = HostUser(1000, 1000)
"""The user who submits the golden scripts: docker's containers drop to it (pyxis and apptainer start as it)."""


def script(*overrides: str, image: str = IMAGE, run_dir: Path = RUN_DIR) -> str:
    request = translate.to_request(plan_for(*overrides), image, run_id="golden-run", run_dir=run_dir, runs_as=USER)
    return str(request)


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("smoke-docker", ["experiment=smoke", "target=slurm"]),
        ("llama3-8b-p5x4-pyxis", ["experiment=llama3-8b-p5x4", "target=slurm"]),
        (
            "llama3-8b-p5x4-docker",
            [
                "experiment=llama3-8b-p5x4",
                "target=slurm",
                "target.container_runtime=docker",
                "target.partition=p5",
                "target.account=ml-research",
                "target.max_retries=2",
                "target.max_run_hours=72.5",
                "+target.environment.NCCL_DEBUG=INFO",
            ],
        ),
        (
            "llama3-8b-p5x4-apptainer",
            ["experiment=llama3-8b-p5x4", "target=slurm", "target.container_runtime=apptainer"],
        ),
    ],
)
def test_sbatch_script_matches_golden(name, overrides, golden):
    golden.check(f"slurm/{name}.sh", script(*overrides))


def test_tracker_credentials_pass_from_the_jobs_environment_by_name_only(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "token-that-stays-in-the-shell")
    tracked = script(
        "experiment=smoke",
        "target=slurm",
        "trainer.trackers=[mlflow]",
        "trainer.mlflow.tracking_uri=http://mlflow:5000",
    )
    assert "--env MLFLOW_TRACKING_TOKEN \\" in tracked and "token-that-stays-in-the-shell" not in tracked
    assert "MLFLOW_TRACKING_TOKEN" not in script("experiment=smoke", "target=slurm")  # no tracker, nothing passed


def test_dry_run_prints_the_sbatch_script_for_4_nodes_of_8_gpus(tmp_path):
    result = subprocess.run(
        [DOCKYARD, "launch", "experiment=llama3-8b-p5x4", "target=slurm", "--dry-run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("#!/bin/bash\n")
    assert "#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=8\n" in result.stdout
    assert "--container-image=dockyard/llama3-8b-p5x4:" in result.stdout
    assert not any(tmp_path.iterdir())


def test_gpu_plans_default_to_pyxis_and_cpu_plans_to_docker():
    assert translate.runtime(plan_for("experiment=llama3-8b-p5x4", "target=slurm")).value == "pyxis"
    assert translate.runtime(plan_for("experiment=smoke", "target=slurm")).value == "docker"


@pytest.mark.parametrize(
    ("reference", "pyxis"),
    [
        (IMAGE, "123456789012.dkr.ecr.us-east-1.amazonaws.com#dockyard/golden:0123456789abcdef0123"),
        ("localhost:5000/dockyard/x:1", "localhost:5000#dockyard/x:1"),
        ("dockyard/smoke:abc", "dockyard/smoke:abc"),
    ],
)
def test_pyxis_names_the_registry_with_a_hash(reference, pyxis):
    assert translate.runtime_image(translate.ContainerRuntime.pyxis, reference) == pyxis


@pytest.mark.parametrize(("hours", "limit"), [(24, "1-00:00:00"), (0.5, "0-00:30:00"), (72.51, "3-00:31:00")])
def test_time_limit_rounds_up_to_the_minute(hours, limit):
    assert translate.time_limit(hours) == limit


def test_the_longest_time_limit_is_the_one_slurm_keeps(slurm_cluster, tmp_path):
    """Slurm holds a time limit as seconds in a signed 32-bit integer: a minute past 24855-03:13:00 it silently
    keeps another limit (a month, or UNLIMITED), so that is refused before sbatch."""
    longest = translate.time_limit(translate.MAX_TIME_MINUTES / 60)
    submit = ["sbatch", "--parsable", "--hold", f"--time={longest}", "--wrap=true"]
    job = subprocess.run(submit, cwd=tmp_path, capture_output=True, text=True, check=True).stdout.strip()
    try:
        shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, check=True).stdout
    finally:
        subprocess.run(["scancel", job], check=True)
    assert f"TimeLimit={longest} " in shown
    with pytest.raises(ConfigError) as error:
        translate.time_limit((translate.MAX_TIME_MINUTES + 1) / 60)
    assert error.value.key == "target.max_run_hours"


@pytest.mark.parametrize(
    ("overrides", "run_dir", "key"),
    [
        (["target.partition=gpu p5"], RUN_DIR, "target.partition"),
        (["target.account=team/ml"], RUN_DIR, "target.account"),
        (["+target.environment.BAD-NAME=1"], RUN_DIR, "target.environment.BAD-NAME"),
        ([], Path("/runs/with space"), "hydra.run.dir"),
        ([], Path("/runs/a:b"), "hydra.run.dir"),
        (["data=local", "data.path='/data/tokens,extra'"], RUN_DIR, "data.path"),
    ],
)
def test_values_an_sbatch_script_cannot_hold_are_config_errors(overrides, run_dir, key):
    with pytest.raises(ConfigError) as error:
        script("experiment=smoke", "target=slurm", *overrides, run_dir=run_dir)
    assert error.value.key == key


def test_shell_values_are_quoted():
    text = script("experiment=smoke", "target=slurm", '+target.environment.GREETING="it\'s $(reboot)"')
    assert "export GREETING='it'\"'\"'s $(reboot)'\n" in text


# --- real jobs on the two-node cluster of scripts/ensure-slurm -------------------------------------------

SHORT = [
    "experiment=smoke",
    "target=slurm",
    "model.seq_len=128",
    "trainer.steps=20",
    "trainer.warmup_steps=2",
    "trainer.log_interval=2",
    "trainer.checkpoint_interval=10",
]
"""The local target tests' shape (tests/test_local_target.py's SHORT): at half the smoke model's sequence length,
20 steps still take the loss below 0.8 of the first."""
ONE_PER_NODE = ["hardware.processes_per_node=1", "++target.environment.DOCKYARD_NODES_PER_HOST=2"]
"""For the jobs whose claim is about nodes (one killed, the job retried, a channel every node reads): half the
ranks start on these 2 cores, and each step trains half the sequences. The test cluster's two nodes share this
machine, which the plan tells the entrypoint as a user whose nodes share machines would, so each rank computes on
its share of the cores (one thread here) instead of all of them: two ranks of all the cores each take about eight
times as long per step here."""


def test_tasks_find_their_rank_and_master_from_slurms_variables(slurm_cluster):
    """What srun sets for one task per node is what the entrypoint's discovery reads."""
    code = (
        "import os; from entrypoint.launcher.cluster import discover; n = discover(os.environ); "
        "print(n.source, n.node_rank, n.nnodes, n.master_addr, ','.join(n.hosts))"
    )
    result = subprocess.run(
        ["srun", "--nodes=2", "--ntasks-per-node=1", "--label", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["0: slurm 0 2 n1 n1,n2", "1: slurm 1 2 n1 n1,n2"]


@pytest.fixture(scope="module")
def slurm_image(engine, slurm_cluster) -> str:
    plan = plan_for(*SHORT)
    ensure_base_image(engine, plan.image, sys.stdout)
    return build_image(plan, engine, cwd=Path.cwd()).reference


def submit(plan, image: str, run_dir: Path, run_id: str) -> dict:
    request = TARGET.to_request(plan, image, run_id=run_id, run_dir=run_dir)
    return TARGET.submit(request, plan.to_json(), out=io.StringIO())


def follow(handle: dict, timeout: float) -> tuple[JobState, str]:
    """Follow the job to its end (or fail the test after `timeout` seconds): its final state and output."""
    out, interrupted = io.StringIO(), threading.Event()
    timer = threading.Timer(timeout, interrupted.set)
    timer.start()
    try:
        state = TARGET.follow(None, handle, out=out, interrupted=interrupted)
    finally:
        timer.cancel()
    assert state is not None, f"the job did not end within {timeout} s:\n{out.getvalue()[-3000:]}"
    return state, out.getvalue()


metrics = runs.loss_curve


def containers(engine, handle: dict) -> list:
    return engine.containers.list(all=True, filters={"name": f"dockyard-{handle['job_id']}-"})


def wait_for_checkpoint(run_dir: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not any((run_dir / "checkpoints").glob("step-*/dockyard.json")):
        assert time.monotonic() < deadline, "no checkpoint was written"
        time.sleep(0.1)  # the tests kill a node as soon as it is there, while the job still has steps to run


@pytest.mark.torchrun
def test_smoke_job_trains_through_sbatch_on_two_nodes(engine, slurm_cluster, tmp_path):
    """The done criterion: `dockyard launch experiment=smoke target=slurm` (20 of its 60 steps), then status and
    logs by run id."""
    result = subprocess.run(
        [DOCKYARD, "launch", *SHORT, "hydra.run.dir=run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = tmp_path / "run"
    record = json.loads((run_dir / "run.json").read_text())
    assert (record["status"], record["exit_status"], record["attempts"]) == ("completed", 0, 1)
    assert record["final"]["step"] == 20
    losses = [row["loss"] for row in metrics(run_dir)]
    assert losses[-1] < losses[0] * 0.8
    assert (run_dir / "model/model.safetensors").exists()
    assert "n1 | cluster     slurm: node 0 of 2 (n1)" in result.stdout
    assert "n2 | cluster     slurm: node 1 of 2 (n2)" in result.stdout
    assert f"metrics     {run_dir.resolve()}/output/data/metrics.jsonl" in result.stdout
    assert containers(engine, record["handle"]) == []

    status = subprocess.run([DOCKYARD, "status", record["run_id"]], cwd=tmp_path, capture_output=True, text=True)
    assert "status    completed: COMPLETED after 1 attempt(s), exit status 0" in status.stdout, status.stdout
    logs = subprocess.run([DOCKYARD, "logs", "run"], cwd=tmp_path, capture_output=True, text=True)
    assert logs.stdout.startswith(f"dockyard: job {record['handle']['job_id']}, attempt 1 of 1, on n[1-2]\n")
    assert '"step": 20' in logs.stdout and "n2 | plan        smoke" in logs.stdout
    node = [DOCKYARD, "logs", record["run_id"], "--node", "n2", "--tail", "1"]
    last = subprocess.run(node, cwd=run_dir / "output", capture_output=True, text=True).stdout.splitlines()
    assert last == [line for line in logs.stdout.splitlines() if line.startswith("n2 | ")][-1:]


@pytest.mark.torchrun
def test_failed_node_fails_the_job(engine, slurm_image, tmp_path):
    run_dir = tmp_path / "run"
    plan = plan_for(*SHORT, *ONE_PER_NODE, "trainer.steps=400", "trainer.checkpoint_interval=5")
    handle = submit(plan, slurm_image, run_dir, "slurm-fault-test")
    wait_for_checkpoint(run_dir)
    engine.containers.get(f"dockyard-{handle['job_id']}-n2").kill()
    killed = time.monotonic()
    state, output = follow(handle, timeout=120)
    assert time.monotonic() - killed < 60
    assert state.status == FAILED and state.exit_status != 0, output[-3000:]
    assert "n2: task 1: Exited with exit code 137" in output
    assert containers(engine, handle) == []


@pytest.mark.torchrun
def test_retry_requeues_the_job_and_resumes_from_the_last_checkpoint(engine, slurm_image, tmp_path):
    run_dir = tmp_path / "run"
    plan = plan_for(*SHORT, *ONE_PER_NODE, "trainer.steps=20", "trainer.checkpoint_interval=5", "target.max_retries=1")
    handle = submit(plan, slurm_image, run_dir, "slurm-retry-test")
    wait_for_checkpoint(run_dir)
    engine.containers.get(f"dockyard-{handle['job_id']}-n2").kill()
    state, output = follow(handle, timeout=400)
    assert (state.status, state.attempts) == (COMPLETED, 2), output[-3000:]
    assert "dockyard: attempt 1 failed with exit status 1" in output and "; requeued, to resume" in output
    assert f"dockyard: job {handle['job_id']}, attempt 2 of 2" in output
    assert "(resumed)" in output
    cores = len(os.sched_getaffinity(0))
    assert f"OMP_NUM_THREADS={max(1, cores // 2)}  # {cores} CPUs split among the training processes" in output
    assert metrics(run_dir)[-1]["step"] == 20


@pytest.mark.torchrun
def test_stop_cancels_the_job_and_leaves_no_container(engine, slurm_image, tmp_path):
    launch = subprocess.Popen(
        [DOCKYARD, "launch", *SHORT, "trainer.steps=400", "hydra.run.dir=run"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not (tmp_path / "run/run.json").exists() or "handle" not in (tmp_path / "run/run.json").read_text():
            assert time.monotonic() < deadline and launch.poll() is None, "the job was not submitted"
            time.sleep(0.5)
        handle = json.loads((tmp_path / "run/run.json").read_text())["handle"]
        while len(containers(engine, handle)) < 2:
            assert time.monotonic() < deadline, "the containers did not start"
            time.sleep(0.5)
        stop = subprocess.run([DOCKYARD, "stop", "run"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert stop.returncode == 0, stop.stderr
        assert TARGET.status(handle).status == STOPPED
        assert containers(engine, handle) == []
        output, _ = launch.communicate(timeout=60)
        assert "run       " in output and " stopped" in output, output[-2000:]
    finally:
        launch.kill()


@pytest.mark.torchrun
def test_s3_channel_is_copied_to_the_shared_run_folder_and_read_by_every_node(engine, slurm_image, s3_tokens, tmp_path):
    plan = plan_for(*SHORT, *ONE_PER_NODE, "trainer.steps=4", "trainer.checkpoint_interval=0", *S3_TOKENS)
    run_dir = tmp_path / "run"
    state, output = follow(submit(plan, slurm_image, run_dir, "slurm-s3-test"), timeout=300)
    assert state.status == COMPLETED, output[-3000:]
    assert (run_dir / "data/train/part-000.bin").read_bytes() == s3_tokens
    assert metrics(run_dir)[-1]["step"] == 4


def test_a_partition_the_cluster_lacks_is_one_line_naming_the_key(slurm_image, tmp_path):
    result = subprocess.run(
        [DOCKYARD, "launch", *SHORT, "target.partition=nosuch", "hydra.run.dir=run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert result.stderr == (
        "dockyard: error: target.partition: sbatch refused the job: invalid partition specified: nosuch; "
        "see what the cluster has with `sinfo`\n"
    )
    assert not (tmp_path / "run").exists()


def test_pending_job_shows_slurms_reason(slurm_image, tmp_path):
    blocker = subprocess.run(
        ["sbatch", "--parsable", "--nodes=2", "--exclusive", "--output=/dev/null", "--wrap=sleep 300"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        handle = submit(plan_for(*SHORT), slurm_image, tmp_path / "run", "slurm-pending-test")
        out, interrupted = io.StringIO(), threading.Event()
        threading.Timer(3, interrupted.set).start()
        assert TARGET.follow(None, handle, out=out, interrupted=interrupted) is None
        state = TARGET.status(handle)
        assert (state.status, state.detail) == (PENDING, "PENDING: Resources")
        assert f"slurm     job {handle['job_id']} pending (PENDING: Resources)\n" in out.getvalue()
        TARGET.stop(handle)
        assert TARGET.status(handle).status not in (PENDING, RUNNING)
    finally:
        subprocess.run(["scancel", blocker], check=True)
