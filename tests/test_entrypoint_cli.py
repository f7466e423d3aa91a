"""`dockyard-entrypoint` as a user starts it: explain, errors before anything starts, a user's script."""

import json
import subprocess
import sys

import pytest

from entrypoint.launcher.cluster import Paths
from entrypoint.launcher.comm import Detected
from entrypoint.launcher.main import prepare
from tests.entrypoint_support import (
    REPO,
    device_tree,
    entrypoint_env,
    sagemaker_tree,
    start_entrypoint,
    tiny_plan,
    write_plan,
)

USER_SCRIPT = """
import json, os, sys
import torch
import torch.distributed as dist

dist.init_process_group(os.environ["DOCKYARD_BACKEND"])
total = torch.ones(())
dist.all_reduce(total)
if "--fail" in sys.argv:
    raise ValueError("the user's script gave up")
report = json.dumps({"argv": sys.argv[1:], "rank": dist.get_rank(), "sum": total.item()})
sys.stdout.write(f"SCRIPT {report}\\n")  # one write: the ranks share the log (unbuffered)
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # as `dockyard init`'s train.py ends: no interpreter shutdown under gloo's threads
"""


def entrypoint(*args, env):
    command = [sys.executable, "-m", "entrypoint", *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def test_explain_prints_the_launch_and_trains_nothing(tmp_path):
    plan = write_plan(tiny_plan(), tmp_path)
    result = entrypoint("--explain", f"--plan={plan}", env=entrypoint_env(tmp_path / "root"))
    assert result.returncode == 0, result.stderr
    assert "cluster     single: node 0 of 1" in result.stdout
    assert "backend     gloo" in result.stdout
    assert "-m entrypoint.trainer" in result.stdout
    assert not (tmp_path / "root").exists()


def test_missing_plan(tmp_path):
    result = entrypoint("train", env=entrypoint_env(tmp_path, DOCKYARD_PLAN=str(tmp_path / "absent.json")))
    assert result.returncode == 2
    assert "no plan at" in result.stderr and "absent.json" in result.stderr


def test_plan_of_an_unknown_schema_version(tmp_path):
    data = json.loads(tiny_plan().to_json())
    data["schema_version"] = 99
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    result = entrypoint("train", f"--plan={path}", env=entrypoint_env(tmp_path))
    assert result.returncode == 2
    assert "schema_version: plan schema version 99" in result.stderr


def test_plan_for_more_nodes_than_the_cluster_has(tmp_path):
    path = write_plan(tiny_plan("hardware.nodes=2"), tmp_path)
    result = entrypoint("train", f"--plan={path}", env=entrypoint_env(tmp_path))
    assert result.returncode == 2
    assert "the plan is for 2 nodes, but this single cluster has 1" in result.stderr


@pytest.mark.parametrize(
    ("file", "content", "says"),
    [
        ("resourceconfig.json", b"[1,2", "resourceconfig.json is not JSON: Expecting ',' delimiter"),
        ("resourceconfig.json", b'{"current_host": 5, "hosts": "x"}', "needs current_host, a string, and hosts"),
        ("resourceconfig.json", b"\xff\xfe", "resourceconfig.json is not JSON: 'utf-8' codec can't decode"),
        ("hyperparameters.json", b'{"epochs": ', "hyperparameters.json is not JSON: Expecting value"),
        ("hyperparameters.json", b'["a"]', 'hyperparameters.json holds ["a"], not a JSON object'),
        ("inputdataconfig.json", b"null", "inputdataconfig.json holds null, not a JSON object"),
    ],
)
def test_a_broken_contract_file_is_one_line(tmp_path, file, content, says):
    """SageMaker's files as a careless platform or a hand-made local run might write them: every node
    says what is wrong in one line and exits 2, as with a broken plan."""
    root = sagemaker_tree(tmp_path / "ml", ["algo-1"], "algo-1")
    (root / "input/config" / file).write_bytes(content)
    plan = write_plan(tiny_plan(), tmp_path)
    result = entrypoint("--explain", f"--plan={plan}", f"--sagemaker-root={root}", env=entrypoint_env(tmp_path / "r"))
    assert result.returncode == 2, result.stdout
    assert len(result.stderr.splitlines()) == 1 and says in result.stderr, result.stderr


def script_plan(tmp_path, *overrides):
    """The script lies where an image puts it: in the code folder under the entrypoint's root."""
    code = Paths(tmp_path / "root").code
    code.mkdir(parents=True)
    (code / "run.py").write_text(USER_SCRIPT)
    plan = tiny_plan("trainer=script", f"trainer.source_dir={code}", "trainer.script=run.py", *overrides)
    return write_plan(plan, tmp_path), entrypoint_env(tmp_path / "root")


@pytest.mark.torchrun
def test_user_script_gets_torchrun_and_its_hyperparameters(tmp_path):
    plan_path, env = script_plan(tmp_path, "+trainer.hyperparameters.epochs=2", "+trainer.hyperparameters.name=abc")
    process = start_entrypoint(plan_path, env)
    output, _ = process.communicate(timeout=90)
    assert process.returncode == 0, output[-3000:]
    reports = [json.loads(line.split("SCRIPT ", 1)[1]) for line in output.splitlines() if "SCRIPT " in line]
    assert sorted(r["rank"] for r in reports) == [0, 1]
    assert all(r["argv"] == ["--epochs", "2", "--name", "abc"] and r["sum"] == 2.0 for r in reports)
    assert "SageMaker training toolkit: " in output and "SM_HOSTS=" not in output  # listed only when verbose


@pytest.mark.torchrun
def test_user_script_failure_is_reported(tmp_path):
    plan_path, env = script_plan(tmp_path, "+trainer.hyperparameters.fail=true")
    process = start_entrypoint(plan_path, env)
    output, _ = process.communicate(timeout=90)
    assert process.returncode == 1
    reason = (tmp_path / "root/output/failure").read_text().splitlines()[0]
    assert reason == "ValueError: the user's script gave up"


def test_explain_counts_the_plans_environment_as_the_users(tmp_path):
    plan = tiny_plan("hardware.nodes=2", "+target.environment.GLOO_SOCKET_IFNAME=ens5")
    path = write_plan(plan, tmp_path)
    env = entrypoint_env(tmp_path, DOCKYARD_HOSTS="a,b", DOCKYARD_NODE_RANK="0")
    devices = device_tree(tmp_path / "devices", "cpu", None)  # eth0, no GPU, no EFA
    result = entrypoint("--explain", f"--plan={path}", f"--device-root={devices}", env=env)
    assert result.returncode == 0, result.stderr
    assert "GLOO_SOCKET_IFNAME=ens5" in result.stdout and "set by the user" in result.stdout


def test_script_arguments_merge_sagemaker_hyperparameters(tmp_path):
    root = sagemaker_tree(tmp_path, ["algo-1"], "algo-1")  # epochs=3, sagemaker_region
    plan = tiny_plan(
        "trainer=script", "trainer.source_dir=src", "trainer.script=run.py", "+trainer.hyperparameters.epochs=1"
    )
    launch = prepare(plan, tmp_path / "plan.json", {}, Detected(), root, False)
    assert launch.command[-3:] == (str(root / "code/run.py"), "--epochs", "3")
