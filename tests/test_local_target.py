"""The local target: golden container specs, then real jobs on a real Docker engine — the smoke job on
two containers × two processes, a killed node failing the job quickly, and a retry resuming from the
last checkpoint."""

import contextlib
import dataclasses
import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from compiler.cli import runs as cli_runs
from compiler.images.build import build_image, ensure_base_image
from compiler.launch import runs
from compiler.spec.errors import ConfigError
from compiler.targets.host_user import HostUser
from compiler.targets.local import rules as local_rules
from compiler.targets.local import runner as local_runner
from compiler.targets.local import translate as local
from compiler.targets.logs import split_timestamp
from compiler.targets.records import RunRecord
from entrypoint.launcher.main import WARM_WORKERS
from tests.entrypoint_support import LLAMA_STYLE, RERUN_TOLERANCE
from tests.entrypoint_support import train as train_on_host
from tests.helpers import PRESETS, S3_TOKENS, plan_for
from tests.hf_support import assert_transformers_logits, trained_decoder

DOCKYARD = str(Path(sys.executable).parent / "dockyard")
USER = HostUser(1000, 1000)
"""The user who launches the golden requests (a launch by root sets no DOCKYARD_RUN_AS)."""
SHORT = [
    "experiment=smoke",
    "model.seq_len=128",
    "trainer.steps=20",
    "trainer.warmup_steps=2",
    "trainer.log_interval=2",
    "trainer.checkpoint_interval=10",
]
"""Half the smoke model's sequence length: a step costs half as much, and 20 steps still take the smoke job's loss
below 0.8 of the first (to 0.79, the same each run: the runs are seeded; at seq_len 64 only to 0.84)."""
ONE_PER_NODE = ["hardware.processes_per_node=1"]
"""For the jobs whose claim is about nodes (one killed, the job retried, its nodes stopped at the deadline): half
the ranks start on these 2 cores, and each step trains half the sequences. The containers share this machine's
cores, and the entrypoint gives each rank its share (DOCKYARD_NODES_PER_HOST): one thread here."""


@pytest.mark.parametrize("preset", PRESETS)
def test_local_request_matches_golden(preset, golden):
    plan = plan_for(f"experiment={preset}", "target=local")
    request = local.to_request(
        plan, "dockyard/golden:0123456789abcdef0123", run_id="golden-run", run_dir=Path("/runs/golden"), runs_as=USER
    )
    golden.check(f"local/{preset}.json", request.to_json())


def test_every_node_gets_its_own_contract_files():
    plan = plan_for("experiment=smoke")
    request = local.to_request(plan, "img", run_id="r", run_dir=Path("/runs/r"))
    assert [c.hostname for c in request.containers] == ["algo-1", "algo-2"]
    for container in request.containers:
        config = json.loads(container.contract_files["resourceconfig.json"])
        assert config["current_host"] == container.hostname
        assert config["hosts"] == ["algo-1", "algo-2"]
        mounts = {m.target: m for m in container.mounts}
        assert mounts["/opt/ml/input/data/plan"].read_only
        assert not mounts["/opt/ml/checkpoints"].read_only


def test_a_job_beside_others_counts_their_nodes_as_sharing_the_machine():
    request = local.to_request(plan_for("experiment=smoke"), "img", run_id="r", run_dir=Path("/runs/r"))
    assert {c.environment["DOCKYARD_NODES_PER_HOST"] for c in request.containers} == {"2"}
    beside = local.alongside(request, 3)  # a sweep's three jobs at a time, two nodes each
    assert {c.environment["DOCKYARD_NODES_PER_HOST"] for c in beside.containers} == {"6"}
    pairs = zip(beside.containers, request.containers, strict=True)
    assert [dataclasses.replace(new, environment=old.environment) for new, old in pairs] == list(request.containers)
    assert dataclasses.replace(beside, containers=request.containers) == request  # nothing else changes


def test_the_local_target_starts_at_most_its_containers_and_processes():
    """Each container carries the whole host list, so a request grows with the square of the nodes: the
    limits hold at the boundary and are one ConfigError past it, before anything is rendered."""
    limit = local_rules.MAX_CONTAINERS
    plan = plan_for("experiment=smoke", f"hardware.nodes={limit}", "hardware.processes_per_node=1")
    assert len(local.to_request(plan, "img", run_id="r", run_dir=Path("/runs/r")).containers) == limit
    with pytest.raises(ConfigError, match=f"^hardware.nodes: asks for {limit + 1} containers"):
        plan_for("experiment=smoke", f"hardware.nodes={limit + 1}", "hardware.processes_per_node=1")
    per_node = local_rules.MAX_PROCESSES // 2 + 1
    with pytest.raises(ConfigError, match=f"^hardware.processes_per_node: 2 nodes × {per_node} processes"):
        plan_for("experiment=smoke", f"hardware.processes_per_node={per_node}")


metrics = runs.loss_curve


def leftovers(engine, run_id: str) -> list:
    label = f"{local_runner.RUN_LABEL}={run_id}"
    networks = [n for n in engine.networks.list() if n.name == f"dockyard-{run_id}"]
    return engine.containers.list(all=True, filters={"label": label}) + networks


@pytest.mark.torchrun
def test_smoke_job_trains_on_two_container_nodes(engine, tmp_path):
    result = subprocess.run(
        [DOCKYARD, "launch", *SHORT, "hydra.run.dir=run"], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = tmp_path / "run"
    losses = [row["loss"] for row in metrics(run_dir)]
    assert metrics(run_dir)[-1]["step"] == 20
    assert losses[-1] < losses[0] * 0.8
    model = run_dir / "model"
    assert_transformers_logits(trained_decoder(model, plan_for(*SHORT).model), model)
    assert (run_dir / "checkpoints/step-00000010/dockyard.json").exists()
    assert "algo-1 | " in result.stdout and "algo-2 | " in result.stdout
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "completed"
    assert f"results   {run_dir.resolve()}" in result.stdout
    assert leftovers(engine, record["run_id"]) == []

    elsewhere = tmp_path / "elsewhere"  # a run is found by its id from any folder
    elsewhere.mkdir()
    status = subprocess.run([DOCKYARD, "status", record["run_id"]], cwd=elsewhere, capture_output=True, text=True)
    assert "status    completed after 1 attempt(s), exit status 0" in status.stdout
    assert f"progress  step 20/20, loss {losses[-1]:.4g}, " in status.stdout
    assert "time      ran " in status.stdout
    listed = subprocess.run([DOCKYARD, "runs", "-o", "json"], cwd=elsewhere, capture_output=True, text=True)
    assert [(r["run_id"], r["step"], r["steps"]) for r in json.loads(listed.stdout)] == [(record["run_id"], 20, 20)]
    stop = subprocess.run([DOCKYARD, "stop", record["run_id"]], cwd=elsewhere, capture_output=True, text=True)
    assert "had already ended (completed); nothing to stop" in stop.stdout
    assert json.loads((run_dir / "run.json").read_text())["status"] == "completed"
    logs = subprocess.run([DOCKYARD, "logs", "run"], cwd=tmp_path, capture_output=True, text=True)
    assert '"step": 20' in logs.stdout and logs.stdout.startswith("algo-1 | ")
    stamped = [split_timestamp(line) for node in (1, 2) for line in (run_dir / f"logs/algo-{node}.log").open()]
    assert len(logs.stdout.splitlines()) == len(stamped) and None not in {t for t, _ in stamped}
    node_log = (run_dir / "logs/algo-2.log").read_text().splitlines()
    tail = [DOCKYARD, "logs", record["run_id"], "--node", "algo-2", "--tail", "2"]
    last = subprocess.run(tail, cwd=elsewhere, capture_output=True, text=True).stdout.splitlines()
    assert last == [f"algo-2 | {split_timestamp(line)[1]}" for line in node_log[-2:]]
    missing = subprocess.run([DOCKYARD, "status", "no-such-run"], cwd=tmp_path, capture_output=True, text=True)
    assert missing.returncode == 2 and "dockyard: error: run: no run 'no-such-run' in " in missing.stderr


@pytest.mark.torchrun
def test_a_pipelined_job_trains_one_stage_per_container_node(engine, tmp_path):
    """pp=2 over two nodes of two processes: each node holds one stage, and the loss falls as without pp."""
    pipelined = ["parallelism.pp=2", "parallelism.dp=-1"]
    command = [DOCKYARD, "launch", *SHORT, *pipelined, "hydra.run.dir=run"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    plan = json.loads((tmp_path / "run/plan.json").read_text())
    assert (plan["layout"]["pp"], plan["layout"]["dp"], plan["layout"]["nodes"]) == (2, 2, 2)
    losses = [row["loss"] for row in metrics(tmp_path / "run")]
    assert metrics(tmp_path / "run")[-1]["step"] == 20
    assert losses[-1] < losses[0] * 0.8


TENSOR_PARALLEL_TOLERANCE = 1e-5
"""dp 2 × tp 2 over two containers against dp 2 on the host, fp32: the same sequences per step, the sums split by
sequence and vocabulary in another order. Observed: the losses equal to the 6 decimals metrics.jsonl keeps, the
gradient norms within 7e-7 relative."""


@pytest.mark.torchrun
def test_sequence_and_loss_parallel_tp_trains_on_two_container_nodes_to_the_tp1_losses(engine, smoke_image, tmp_path):
    """parallelism.tp=2 with FSDP over two container nodes of two processes: each node is one tensor-parallel group
    (its residual stream split by sequence, the untied head and the loss by vocabulary), FSDP shards across the
    nodes, and the Llama-shaped model trains to the losses and gradient norms of tp=1 (FSDP over 2 ranks on the
    host, the same micro batches)."""
    shape = (*LLAMA_STYLE, "parallelism=fsdp", "parallelism.micro_batch=8", "model.seq_len=64", "trainer.steps=4")
    shape += ("trainer.log_interval=1", "trainer.checkpoint_interval=0")
    plan = plan_for(*SHORT, *shape, "parallelism.tp=2")
    assert (plan.layout.nodes, plan.layout.dp, plan.layout.tp) == (2, 2, 2)
    run_dir = tmp_path / "run"
    request = local.to_request(plan, smoke_image, run_id=own_run_id("dockyard-tp-test"), run_dir=run_dir)
    output = io.StringIO()
    assert run_locally(plan, request, run_dir, output).exit_status == 0, output.getvalue()[-3000:]
    one_node = plan_for(*SHORT, *shape, "hardware.nodes=1", "hardware.processes_per_node=2")
    reference = {row["step"]: row for row in train_on_host(one_node, tmp_path / "reference")}
    split = {row["step"]: row for row in metrics(run_dir)}
    assert split.keys() == reference.keys() == {1, 2, 3, 4}
    for step, row in reference.items():
        assert split[step]["loss"] == pytest.approx(row["loss"], abs=TENSOR_PARALLEL_TOLERANCE), step
        assert split[step]["grad_norm"] == pytest.approx(row["grad_norm"], rel=TENSOR_PARALLEL_TOLERANCE), step
    assert split[4]["loss"] < split[1]["loss"] - 0.1


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["experiment=smoke"], '"hostname": "algo-2"'),
        (
            [
                "experiment=gpt2-124m-p4d",
                "target.role_arn=arn:aws:iam::123456789012:role/r",
                "image.push=true",
                "image.registry=123456789012.dkr.ecr.us-east-1.amazonaws.com",
                "target.output_uri=s3://dockyard-jobs/runs",
            ],
            '"InstanceType": "ml.p4d.24xlarge"',
        ),
    ],
)
def test_dry_run_prints_the_request_and_touches_nothing(engine, tmp_path, overrides, expected):
    ours = {"label": local_runner.RUN_LABEL}
    before = engine.containers.list(all=True, filters=ours)
    result = subprocess.run(
        [DOCKYARD, "launch", "--dry-run", *overrides], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    json.loads(result.stdout)
    assert expected in result.stdout
    assert list(tmp_path.iterdir()) == []
    assert engine.containers.list(all=True, filters=ours) == before


def test_dry_run_names_the_image_the_build_makes(smoke_image, tmp_path):
    result = subprocess.run([DOCKYARD, "launch", "--dry-run", *SHORT], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert {c["image"] for c in json.loads(result.stdout)["containers"]} == {smoke_image}


@pytest.fixture(scope="module")
def smoke_image(engine):
    plan = plan_for(*SHORT)
    ensure_base_image(engine, plan.image, sys.stdout)
    return build_image(plan, engine, cwd=Path.cwd()).reference


def own_run_id(name: str) -> str:
    """`name` and a nonce: a killed test run's containers and network, left on the shared engine, must not meet
    the next run's."""
    return f"{name}-{time.time_ns() % 10**9}"


def start_job(plan, image: str, run_dir: Path, name: str) -> tuple[threading.Thread, list, str]:
    """The job in a thread, under a run id of its own (`own_run_id`); the thread, its record-to-be, the id."""
    run_id = own_run_id(name)
    request = local.to_request(plan, image, run_id=run_id, run_dir=run_dir)
    result = []
    log = open(run_dir.parent / f"{run_id}.out", "w")  # noqa: SIM115 - closed with the thread's output
    thread = threading.Thread(target=lambda: result.append(run_locally(plan, request, run_dir, log)))
    thread.start()
    return thread, result, run_id


def run_locally(plan, request, run_dir: Path, out) -> RunRecord:
    """The path `dockyard launch` takes after the build: record, submit, follow."""
    return runs.execute(runs.new_record(plan, request, run_dir, request.image), plan, request, out=out)


def wait_for_checkpoint(run_dir: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not any((run_dir / "checkpoints").glob("step-*/dockyard.json")):
        assert time.monotonic() < deadline, "no checkpoint was written"
        time.sleep(0.1)  # the tests kill a node as soon as it is there, while the job still has steps to run


@pytest.mark.torchrun
def test_zero_trains_in_the_cpu_image_which_has_no_compiler_on_an_s3_channel(engine, smoke_image, s3_tokens, tmp_path):
    """DeepSpeed compiled an extension when its communication started on CPU; the image has no compiler, so
    every ZeRO job on the local target failed (`c++: not found`) until the engine skipped that op. The same short
    job reads its tokens from an S3 channel, which the launch downloads into the run folder first."""
    short = ("trainer.steps=4", "trainer.checkpoint_interval=0")
    plan = plan_for(*SHORT, *ONE_PER_NODE, "parallelism=zero3", *short, *S3_TOKENS)
    run_dir = tmp_path / "run"
    request = local.to_request(plan, smoke_image, run_id=own_run_id("dockyard-zero-test"), run_dir=run_dir)
    output = io.StringIO()
    assert run_locally(plan, request, run_dir, output).exit_status == 0, output.getvalue()[-3000:]
    assert "deepspeed_shm_comm" not in output.getvalue()
    assert (run_dir / "data/train/part-000.bin").read_bytes() == s3_tokens
    assert [row["step"] for row in metrics(run_dir)] == [1, 2, 4]
    assert (run_dir / "model/model.safetensors").exists()


@pytest.mark.torchrun
def test_killed_node_fails_the_job_within_a_minute(engine, smoke_image, tmp_path):
    plan = plan_for(*SHORT, *ONE_PER_NODE, "trainer.steps=400", "trainer.checkpoint_interval=2")
    run_dir = tmp_path / "run"
    thread, result, run_id = start_job(plan, smoke_image, run_dir, "dockyard-fault-test")
    wait_for_checkpoint(run_dir)
    engine.containers.get(f"dockyard-{run_id}-algo-2").kill()
    killed = time.monotonic()
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert time.monotonic() - killed < 60
    assert result[0].exit_status != 0
    assert "algo-2 failed with exit status 137" in (tmp_path / f"{run_id}.out").read_text()
    assert leftovers(engine, run_id) == []


@pytest.mark.timed
@pytest.mark.torchrun
def test_a_job_past_max_run_hours_is_stopped_with_a_checkpoint_and_not_retried(engine, smoke_image, tmp_path):
    """At the deadline the nodes get SIGTERM, so the trainer saves where it is; a retry would run out of
    time again, as a Slurm job ends at its time limit and a Kubernetes job at its deadline."""
    limit_s = 15  # the workers install their SIGTERM handler within 8 s of the start on a loaded machine, 4 s idle
    overrides = (f"target.max_run_hours={limit_s / 3600}", "target.max_retries=2", "trainer.checkpoint_interval=0")
    # the smoke model's own seq_len: the deadline, not the steps, sets how long this job runs
    plan = plan_for(*SHORT, *ONE_PER_NODE, "model.seq_len=256", "trainer.steps=100000", *overrides)
    run_dir = tmp_path / "run"
    started = time.monotonic()
    thread, result, run_id = start_job(plan, smoke_image, run_dir, "dockyard-deadline-test")
    thread.join(timeout=limit_s + 120)
    assert not thread.is_alive()
    assert limit_s <= time.monotonic() - started < limit_s + local_runner.STOP_TIMEOUT_S + 30
    record = result[0]
    assert (record.status, record.attempts, record.detail) == ("failed", 1, "ran past target.max_run_hours")
    output = (tmp_path / f"{run_id}.out").read_text()
    assert "the job ran past target.max_run_hours (0.00416667); stopping its nodes" in output
    assert "restarting the job" not in output
    assert any((run_dir / "checkpoints").glob("step-*/dockyard.json")), "no checkpoint was saved at SIGTERM"
    assert leftovers(engine, run_id) == []


@pytest.mark.torchrun
def test_retry_resumes_from_the_last_checkpoint(engine, smoke_image, tmp_path):
    # killed after the checkpoint at step 3, with 9 steps left to run: the kill lands long before the job ends
    plan = plan_for(*SHORT, *ONE_PER_NODE, "trainer.steps=12", "trainer.checkpoint_interval=3", "target.max_retries=1")
    run_dir = tmp_path / "run"
    thread, result, run_id = start_job(plan, smoke_image, run_dir, "dockyard-retry-test")
    wait_for_checkpoint(run_dir)
    engine.containers.get(f"dockyard-{run_id}-algo-2").kill()
    thread.join(timeout=400)
    assert [record.exit_status for record in result] == [0]
    output = (tmp_path / f"{run_id}.out").read_text()
    assert "restarting the job (retry 1 of 1)" in output
    assert "(resumed)" in output
    cores = len(os.sched_getaffinity(0))
    assert f"OMP_NUM_THREADS={max(1, cores // 2)}  # {cores} CPUs split among the training processes" in output
    assert metrics(run_dir)[-1]["step"] == 12
    assert json.loads((run_dir / "run.json").read_text())["attempts"] == 2


KILL_A_RANK = (
    "import os, signal\n"
    "def parent(pid):\n"
    "    return open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1]\n"
    "def workers(pid):\n"
    f"    return b'{WARM_WORKERS}' in open(f'/proc/{{pid}}/cmdline', 'rb').read()\n"
    "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
    "    try:\n"
    "        forked = workers(pid) and workers(parent(pid)) and workers(parent(parent(pid)))\n"
    "    except OSError:\n"
    "        continue\n"
    "    if forked:\n"
    "        os.kill(int(pid), signal.SIGKILL)\n"
    "        print(pid)\n"
    "        break\n"
)
"""SIGKILL one trainer process inside a node's container: one forked from the forkserver that torchrun's agent
forked, all three running `entrypoint.trainer.workers` (which starts every built-in training's ranks)."""


def wait_for_step(run_dir: Path, step: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not (metrics_file := runs.metrics_file(run_dir)) or all(
        row["step"] < step for row in map(json.loads, metrics_file.read_text().splitlines())
    ):
        assert time.monotonic() < deadline, f"no step {step} was logged"
        time.sleep(0.2)


@pytest.mark.torchrun
def test_a_killed_rank_recovers_inside_the_job(engine, smoke_image, tmp_path):
    """trainer.restarts=1: torchrun restarts the workers of both container nodes, which resume from the
    checkpoint; the steps run again give the losses they gave before, and the job is not retried. The rank is
    killed once step 6 is logged (after the checkpoint at 5), four steps before the next checkpoint at 10: one
    process a node, at the smoke model's own seq_len, so that those four steps outlast the kill."""
    shape = (*ONE_PER_NODE, "model.seq_len=256", "trainer.steps=10", "trainer.checkpoint_interval=5")
    plan = plan_for(*SHORT, *shape, "trainer.restarts=1")
    run_dir = tmp_path / "run"
    thread, result, run_id = start_job(plan, smoke_image, run_dir, "dockyard-restart-test")
    wait_for_step(run_dir, 6)
    killed = engine.containers.get(f"dockyard-{run_id}-algo-2").exec_run(["python3", "-c", KILL_A_RANK])
    assert killed.output.strip(), killed.output
    thread.join(timeout=400)
    output = (tmp_path / f"{run_id}.out").read_text()
    assert [record.exit_status for record in result] == [0], output[-3000:]
    assert (result[0].restarts, result[0].attempts) == (1, 1)
    assert "restart 1 of 1: local rank" in output and "killed by SIGKILL" in output
    (written,) = run_dir.glob("nodes/*/output/data/restarts.jsonl")  # by the node of rank 0
    events = [json.loads(line) for line in written.read_text().splitlines()]
    assert [event["resumed_step"] for event in events] == [5]
    (event,) = events
    assert event["cause"].startswith("local rank ") and event["cause"].endswith("(algo-2): killed by SIGKILL")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        cli_runs.status(result[0])
    lost = event["steps_lost"]
    assert f"restart   1 of 1: {event['cause']}; resumed from step 5, {lost} steps lost" in printed.getvalue()
    rows = metrics(run_dir)
    twice = {row["step"] for row in rows if [r["step"] for r in rows].count(row["step"]) == 2}
    assert twice, "no step ran before and after the restart"
    for step in twice:  # each step's own loss: `loss`, the logging window's mean, starts afresh at the restart
        first, second = (row["step_loss"] for row in rows if row["step"] == step)
        assert first == pytest.approx(second, abs=RERUN_TOLERANCE), step
    assert rows[-1]["step"] == 10


RESHARD_TOLERANCE = 1e-4
"""Resumed at dp 1 × accum 2 instead of dp 2: the same sequences per step, summed in another order."""


@pytest.mark.torchrun
def test_resume_continues_a_stopped_run_at_another_data_parallel_degree(engine, smoke_image, tmp_path):
    """A run stopped after its checkpoint at step 3 (two nodes of one rank) goes on with `launch --resume` at half
    the ranks, on one node, and its losses follow the uninterrupted run's; what its checkpoint cannot become is
    refused first."""
    steps = ("trainer.steps=6", "trainer.checkpoint_interval=3", "trainer.log_interval=1", "model.seq_len=64")
    first = [*SHORT, *steps, *ONE_PER_NODE, "++target.environment.DOCKYARD_STOP_AT_STEP=3", "hydra.run.dir=run"]
    result = subprocess.run([DOCKYARD, "launch", *first], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = tmp_path / "run"
    assert [row["step"] for row in metrics(run_dir)][-1] == 3
    refused = subprocess.run(
        [DOCKYARD, "launch", "--resume", "run", "model.layers=3"], cwd=tmp_path, capture_output=True, text=True
    )
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "dockyard: error: model.layers: differs from the run being resumed: its checkpoint holds another model; "
        "resume with the run's model (change steps, lr, nodes or dp only)"
    ]
    assert not (run_dir / "attempts").exists()
    half = ["hardware.nodes=1", "parallelism.grad_accum=2"]  # dp 1, the same sequences per step
    half.append("++target.environment.DOCKYARD_STOP_AT_STEP=6")
    result = subprocess.run(
        [DOCKYARD, "launch", "--resume", "run", *half], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "steps             3 → 6 (resumed)" in result.stdout
    record = json.loads((run_dir / "run.json").read_text())
    previous = json.loads((run_dir / "attempts/1/run.json").read_text())
    assert (record["run_id"], record["resumed"], record["status"]) == (previous["run_id"], 1, "completed")
    assert record["handle"] != previous["handle"]
    resumed = {row["step"]: row["loss"] for row in metrics(run_dir)}
    one_node = plan_for(*SHORT, *steps, "hardware.nodes=1", "hardware.processes_per_node=2")  # the same 2 ranks
    uninterrupted = {row["step"]: row["loss"] for row in train_on_host(one_node, tmp_path / "reference")}
    for step in range(4, 7):
        assert resumed[step] == pytest.approx(uninterrupted[step], abs=RESHARD_TOLERANCE), step
