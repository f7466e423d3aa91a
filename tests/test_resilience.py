"""Health checks, stragglers and hangs: the pure parts (straggler windows and compute times, bandwidth
thresholds from the catalog, nvidia-smi's answers, the fault grammar), then real torchrun jobs of two
entrypoints standing in for two nodes (a rank that stops calling collectives, a failed health check), and
the local target's containers (one throttled by Docker, a failed health check on Slurm)."""

import contextlib
import io
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import docker
import psutil
import pytest
import torch
from torch import nn

from compiler.core.catalog import instance_type
from compiler.images.build import build_image, ensure_base_image
from compiler.launch import runs
from compiler.spec.contract import UNHEALTHY_FILE
from compiler.targets.base import FAILED
from compiler.targets.local import translate as local
from compiler.targets.local.runner import RUN_LABEL
from compiler.targets.slurm import TARGET as SLURM
from compiler.targets.slurm import jobs as slurm_jobs
from entrypoint.launcher import failures
from entrypoint.trainer.faults import Faults
from entrypoint.trainer.health import FAIL_BELOW, WARN_BELOW, bandwidth_finding, expected_gbps, parse_smi
from entrypoint.trainer.models import model_spec
from entrypoint.trainer.stragglers import ComputeClock, Detector, per_call, ratios, timed_modules
from tests.entrypoint_support import SHARED_CORES, entrypoint_env, free_port, start_entrypoint, tiny_plan, write_plan
from tests.helpers import plan_for

DOCKYARD = str(Path(sys.executable).parent / "dockyard")
TIMEOUT_S = 12
"""DOCKYARD_TIMEOUT of the hang test: what a collective may wait before it fails."""


def test_a_rank_is_named_after_enough_slow_windows_in_a_row():
    detector = Detector(factor=1.5, windows=3)
    assert detector.update([1.0, 1.0, 1.1, 3.0]) == {}
    assert detector.update([1.0, 1.0, 1.0, 3.0]) == {}
    assert detector.update([1.0, 1.2, 1.0, 2.4]) == {3: pytest.approx(2.4 / 1.1)}
    assert detector.update([1.0, 1.0, 1.0, 1.4]) == {}  # a fast window starts the count again
    assert detector.update([1.0, 1.0, 1.0, 9.0]) == {}


def test_ratios_are_to_the_median_of_all_ranks():
    assert ratios([1.0, 2.0, 3.0]) == [0.5, 1.0, 1.5]
    assert ratios([0.0, 0.0]) == [1.0, 1.0]  # no time measured: nobody is slow


def test_a_window_is_the_mean_time_of_one_timed_forward():
    assert per_call(0.6, 12) == pytest.approx(0.05)
    assert per_call(0.0, 0) == 0.0  # nothing ran (a window without a forward): not slow


class Sleeper(nn.Module):
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.seconds)
        return x


def test_the_clock_times_a_blocks_compute_and_not_the_gather_fsdp_waits_for_in_its_hooks():
    """FSDP2 registers its pre-forward hook (which waits for the block's all-gather) prepended and its
    post-forward hook (the reshard) appended; a waiting rank's wait must stay out of its time."""
    block = Sleeper(0.02)
    block.register_forward_pre_hook(lambda module, args: time.sleep(0.2), prepend=True)
    block.register_forward_hook(lambda module, args, output: time.sleep(0.2))
    clock = ComputeClock(torch.device("cpu"))
    clock.attach([block])
    for _ in range(2):
        block(torch.zeros(1))
    assert 0.02 <= clock.window() < 0.2
    assert clock.window() == 0.0  # a new window


def test_the_timed_modules_are_the_blocks_unless_the_model_is_compiled_whole():
    plan = plan_for("experiment=smoke")
    model = model_spec(plan.model).build(plan.model)
    assert timed_modules(plan, [model]) == list(model.blocks)
    assert timed_modules(plan_for("experiment=smoke", "trainer.compile=blocks"), [model]) == list(model.blocks)
    assert timed_modules(plan_for("experiment=smoke", "trainer.compile=model"), [model]) == [model]


def test_expected_bandwidth_comes_from_the_catalog_link_the_all_reduce_crosses():
    between_nodes = plan_for("experiment=llama3-8b-p5x4")
    within_one = plan_for("experiment=llama3-8b-p5x4", "hardware.nodes=1")
    p5 = instance_type(between_nodes.instance.name)
    assert expected_gbps(between_nodes) == p5.network_gbps == 3200
    assert expected_gbps(within_one) == p5.gpu_link_gbps == 3600
    assert expected_gbps(plan_for("experiment=smoke")) is None  # a CPU type has no figure
    assert expected_gbps(plan_for("experiment=smoke", "trainer.health_bandwidth_gbps=25")) == 25


def test_bandwidth_warns_below_half_and_fails_below_a_tenth():
    assert (WARN_BELOW, FAIL_BELOW) == (0.5, 0.1)
    fine, low, broken = (bandwidth_finding(measured, 400.0) for measured in (380.0, 150.0, 30.0))
    assert (fine.warning, fine.failed) == (False, False)
    assert (low.warning, low.failed) == (True, False)
    assert (broken.warning, broken.failed) == (True, True)
    assert broken.text == "all-reduce bus bandwidth 30 Gbit/s, expected 400"
    unknown = bandwidth_finding(3.0, None)
    assert not unknown.failed and "no expected figure" in unknown.text


def test_nvidia_smi_errors_fail_and_cards_without_ecc_pass():
    assert [f.failed for f in parse_smi("0, 0, No\n1, [N/A], [N/A]\n")] == [False]
    failed = parse_smi("0, 0, No\n1, 3, No\n2, 0, Yes\n")
    assert [f.text for f in failed] == [
        "GPU 1 ecc.errors.uncorrected.volatile.total = 3",
        "GPU 2 remapped_rows.failure = Yes",
    ]


def test_fault_grammar():
    faults = Faults.parse("stall:1@3, unhealthy:n1")
    assert (faults.stalls, faults.unhealthy) == ({1: 3}, frozenset({"n1"}))
    with pytest.raises(ValueError, match="'hang:1' is not stall:RANK@STEP"):
        Faults.parse("hang:1")


def test_resilience_keys_are_checked_at_compile():
    from compiler.spec.errors import ConfigError

    with pytest.raises(ConfigError, match="trainer.straggler_factor"):
        plan_for("experiment=smoke", "trainer.straggler_factor=1")
    with pytest.raises(ConfigError, match="trainer.health_check_s"):
        plan_for("experiment=smoke", "trainer.health_check_s=0")


def test_the_failure_reason_becomes_the_termination_message(tmp_path):
    log = tmp_path / "termination-log"
    failures.termination_message("health check failed on node 1 (n2): gpus: 7 visible", log)
    assert not log.exists()  # only where Kubernetes made the file
    log.touch()
    failures.termination_message("health check failed on node 1 (n2): gpus: 7 visible", log)
    assert log.read_text() == "health check failed on node 1 (n2): gpus: 7 visible\n"


ABORTED_AT_EXIT = """\
step 20 loss 1.6000
terminate called without an active exception
W1128 07:41:00.994 7 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 9 closing signal SIGTERM
E1128 07:41:01.026 7 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -6) local_rank: 1
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
  exitcode  : -15 (pid: 9)  (SIGTERM)
  traceback : Signal 15 (SIGTERM) received by PID 9
  exitcode  : -6 (pid: 10)  (SIGABRT)
  traceback : Signal 6 (SIGABRT) received by PID 10
"""
"""The end of a node's log where a user's script on gloo aborted after its last step (torch's exit race; seen on
a local job of `dockyard init`'s first train.py; shortened: no time stamps, the traceback's middle left out)."""


def test_a_rank_aborted_in_cpp_is_named_so_with_what_to_do():
    reason = failures.failure_reason(1, ABORTED_AT_EXIT.splitlines())
    assert reason.startswith("terminate called without an active exception: a rank aborted in C++;"), reason
    assert "os._exit(0)" in reason
    signalled = [line for line in ABORTED_AT_EXIT.splitlines() if "terminate called" not in line]
    assert failures.failure_reason(1, signalled) == "Signal 6 (SIGABRT) received by PID 10"
    thrown = "terminate called after throwing an instance of 'gloo::EnforceNotMet'"
    assert failures.failure_reason(1, [*signalled, thrown]) == thrown  # another abort: its line, without a hint


def start_two_nodes(tmp_path: Path, *overrides: str, **env: str) -> list[subprocess.Popen]:
    plan = tiny_plan("hardware.nodes=2", "hardware.processes_per_node=1", *overrides)
    port = str(free_port())
    processes = []
    for rank in (0, 1):
        root = tmp_path / f"node{rank}"
        extra = dict(DOCKYARD_HOSTS="127.0.0.1,127.0.0.1", DOCKYARD_NODE_RANK=str(rank), DOCKYARD_MASTER_PORT=port)
        processes.append(start_entrypoint(write_plan(plan, root), entrypoint_env(root, **extra, **SHARED_CORES, **env)))
    return processes


def outputs(processes: list[subprocess.Popen], limit: float) -> list[str]:
    """Each node's output once node 0 has ended (node 1 is then ended too: a stalled rank never ends itself)."""
    try:
        first = processes[0].communicate(timeout=limit)[0]
    finally:
        for process in processes[1:]:
            if process.poll() is None:  # torchrun starts its workers in sessions of their own
                for child in psutil.Process(process.pid).children(recursive=True):
                    child.kill()
                process.kill()
    return [first, *(process.communicate()[0] for process in processes[1:])]


@pytest.mark.timed  # a 12 s collective timeout
@pytest.mark.torchrun
def test_a_rank_that_stops_calling_collectives_is_named_and_every_rank_dumps_its_stack(tmp_path):
    """Also a healthy start: the health check passes and says what it checked."""
    started = time.monotonic()
    processes = start_two_nodes(
        tmp_path, "trainer.steps=1000", DOCKYARD_TIMEOUT=str(TIMEOUT_S), DOCKYARD_FAULT="stall:1@3"
    )
    node0, node1 = outputs(processes, limit=120)
    assert processes[0].returncode != 0, node0[-3000:]
    reason, context, *_ = (tmp_path / "node0/output/failure").read_text().splitlines()
    expected = f"CollectiveTimeoutError: step 3's collectives timed out after {TIMEOUT_S} s: "
    assert reason == expected + "rank 1 (node 1, 127.0.0.1) last reached step 2", reason
    assert context == "node 0 (127.0.0.1), torchrun exit status 1"
    # both ranks printed every thread's stack before the timeout: the waiting one in its collective, the
    # stalled one where it stopped
    assert "the stacks of rank 0:" in node0 and "Thread 0x" in node0
    assert "the stacks of rank 1:" in node1 and 'faults.py", line' in node1.split("the stacks of rank 1:")[1]
    assert "health check      passed in " in node0
    assert "node 0 (127.0.0.1): gpus: skipped: a CPU plan (ok)" in node0
    assert "node 1 (127.0.0.1): shm: /dev/shm has " in node0
    assert "all nodes: bandwidth: all-reduce bus bandwidth " in node0
    assert time.monotonic() - started < 100


@pytest.mark.torchrun
def test_a_failed_health_check_is_one_line_naming_node_and_check_before_any_step(tmp_path):
    processes = start_two_nodes(tmp_path, "trainer.steps=5", DOCKYARD_FAULT="unhealthy:127.0.0.1")
    node0, _ = outputs(processes, limit=120)
    assert processes[0].returncode != 0
    reason = (tmp_path / "node0/output/failure").read_text().splitlines()[0]
    assert reason == "HealthCheckError: health check failed on node 0 (127.0.0.1): gpus: 0 visible, the plan expects 1"
    assert not (tmp_path / "node0/output/data/metrics.jsonl").exists()
    assert (tmp_path / "node0/output" / UNHEALTHY_FILE).read_text() == "127.0.0.1\n"


@pytest.mark.torchrun
def test_an_all_reduce_far_below_the_expected_bandwidth_fails_every_node(tmp_path):
    processes = start_two_nodes(tmp_path, "trainer.steps=5", "trainer.health_bandwidth_gbps=1e9")
    node0, _ = outputs(processes, limit=120)
    assert processes[0].returncode != 0
    reason = (tmp_path / "node0/output/failure").read_text().splitlines()[0]
    assert reason.startswith("HealthCheckError: health check failed on all nodes: bandwidth: all-reduce bus bandwidth ")
    assert reason.endswith(" Gbit/s, expected 1e+09")
    assert not (tmp_path / "node0/output" / UNHEALTHY_FILE).exists()  # no one node is to blame


@pytest.fixture(scope="module")
def smoke_image(engine) -> str:
    plan = plan_for("experiment=smoke")
    ensure_base_image(engine, plan.image, sys.stdout)
    return build_image(plan, engine, cwd=Path.cwd()).reference


THROTTLED_CPUS = 0.1
"""The second node's share of a core once training runs, as `docker update --cpus 0.1` sets it."""


def throttle_while_training(
    engine, run_id: str, run_dir: Path, host: str, steps: int, finished: threading.Event
) -> None:
    """Once rank 0 has printed the run's layout, just before the first step (a throttle from the start would
    slow the node's imports tenfold), limit `host`'s container to THROTTLED_CPUS (a CFS quota); once rank 0 has
    logged the last step (its straggler windows all measured), lift it, or the node's exit (its torchrun's
    teardown) takes ten times as long too."""
    found: list = []
    while not found and not finished.wait(0.2):
        containers = engine.containers.list(filters={"label": f"{RUN_LABEL}={run_id}"})
        found = [container for container in containers if container.attrs["Config"]["Hostname"] == host]
    log, throttled = run_dir / "logs/algo-1.log", False
    while not finished.wait(0.05):
        text = log.read_text() if log.exists() else ""
        if not throttled and "world size " in text:
            found[0].update(cpu_period=100_000, cpu_quota=int(THROTTLED_CPUS * 100_000))
            throttled = True
        elif throttled and f'{{"step": {steps}, "loss": ' in text:
            with contextlib.suppress(docker.errors.APIError):  # the node may have ended, and been removed
                found[0].update(cpu_quota=-1)  # no quota
            return


@pytest.mark.timed
@pytest.mark.torchrun
def test_a_throttled_container_node_is_named_a_straggler_and_status_shows_it(engine, smoke_image, tmp_path):
    """The second node's container is throttled as training starts (`docker update --cpus`): its rank's blocks
    compute slower, while the first rank, which then waits for it in every all-gather, is not named. The
    throttle lands within the first steps, so of four windows the last two are throttled whole: at the smoke
    model's seq_len a step takes about a second before it (at seq_len 64, 0.6 s on an idle machine, the whole
    run could end before the throttle landed, and two runs in three named no straggler)."""
    overrides = (
        "hardware.processes_per_node=1",
        "parallelism=fsdp",
        "trainer.steps=8",
        "trainer.log_interval=2",
        "trainer.straggler_every=2",
        "trainer.straggler_windows=2",
        "trainer.straggler_factor=1.3",
    )
    plan = plan_for("experiment=smoke", *overrides)
    run_dir, run_id = tmp_path / "run", f"straggler-test-{tmp_path.parent.name}"
    run_dir.mkdir()
    request = local.to_request(plan, smoke_image, run_id=run_id, run_dir=run_dir)
    finished = threading.Event()
    throttle = (engine, run_id, run_dir, "algo-2", plan.trainer.steps, finished)
    threading.Thread(target=throttle_while_training, args=throttle).start()
    try:
        with open(tmp_path / "launch.out", "w") as out:
            record = runs.execute(runs.new_record(plan, request, run_dir, request.image), plan, request, out=out)
    finally:
        finished.set()
    assert record.exit_status == 0, (tmp_path / "launch.out").read_text()[-3000:]
    rows = [row for row in runs.loss_curve(run_dir) if "stragglers" in row]
    assert rows and rows[0]["step"] in (4, 6, 8), rows
    assert [[(s["node"], s["host"], s["rank"]) for s in row["stragglers"]] for row in rows] == [[(1, "algo-2", 1)]]
    assert rows[0]["stragglers"][0]["ratio"] > 1.3
    status = subprocess.run([DOCKYARD, "status", str(run_dir)], capture_output=True, text=True)
    ratio = rows[0]["stragglers"][0]["ratio"]
    assert f"straggler node 1 (algo-2) rank 1, {ratio}× the median" in status.stdout, status.stdout
    assert status.stdout.count("straggler ") == 1, status.stdout
    log = (run_dir / "logs/algo-1.log").read_text()
    assert "(windows of 2 steps): node 1 (algo-2) rank 1, " in log


@pytest.mark.torchrun
def test_slurms_retry_leaves_out_the_node_that_failed_its_health_check(smoke_image, slurm_cluster, tmp_path):
    """Both nodes are made to fail (`unhealthy:n1,unhealthy:n2`), so the test does not depend on where Slurm
    puts the first attempt: that node is excluded from the retry, which runs on the other one. A node of one
    process is enough: its first rank makes the node's checks."""
    fault = "+target.environment.DOCKYARD_FAULT='unhealthy:n1,unhealthy:n2'"
    one_node = ("hardware.nodes=1", "hardware.processes_per_node=1")
    plan = plan_for("experiment=smoke", "target=slurm", *one_node, "target.max_retries=1", fault)
    run_dir = tmp_path / "run"
    request = SLURM.to_request(plan, smoke_image, run_id="slurm-health-test", run_dir=run_dir)
    handle = SLURM.submit(request, plan.to_json(), out=io.StringIO())
    out, interrupted = io.StringIO(), threading.Event()
    timer = threading.Timer(300, interrupted.set)
    timer.start()
    try:
        state = SLURM.follow(None, handle, out=out, interrupted=interrupted)
    finally:
        timer.cancel()
    output = out.getvalue()
    assert state is not None and (state.status, state.attempts) == (FAILED, 2), output[-3000:]
    first, second = re.findall(r"attempt \d of 2, on (n\d)", output)
    assert first != second
    assert f"dockyard: attempt 1 failed the health check on {first}; requeued without those nodes" in output
    assert f"health check failed on node 0 ({first}): gpus: 0 visible, the plan expects 1" in output
    assert (slurm_jobs.job_fields(handle["job_id"]) or {}).get("ExcNodeList") == first
    assert (run_dir / "output" / UNHEALTHY_FILE).read_text().split() == [first, second]
