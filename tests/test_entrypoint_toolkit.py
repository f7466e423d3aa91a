"""The SageMaker training toolkit's SM_* variables: from SageMaker's contract files, from other clusters,
never over a value already set, and a golden --explain section. What a real script reads from them in a
container is checked by tests/test_estimator_script.py."""

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

from compiler.spec.contract import MAX_ARG_STRLEN
from entrypoint.launcher.cluster import Paths
from entrypoint.launcher.comm import Detected
from entrypoint.launcher.main import child_environment, explain, prepare
from entrypoint.launcher.toolkit import Machine, cpus_online
from tests.entrypoint_support import (
    CLUSTER_ENVIRONMENTS,
    REPO,
    entrypoint_env,
    sagemaker_tree,
    tiny_plan,
    write_plan,
)

MACHINE = Machine(cpus=96, gpus=0)
SCRIPT = ("trainer=script", "trainer.source_dir=src", "trainer.script=train.py", "hardware.nodes=2")


def variables(launch) -> dict[str, str]:
    return {row.name: row.value for row in launch.env if row.name.startswith("SM_")}


def sagemaker_job(tmp_path: Path, hyperparameters: dict[str, str]) -> Path:
    root = sagemaker_tree(tmp_path / "opt-ml", ["algo-1", "algo-2"], "algo-2")
    (root / "input/config/hyperparameters.json").write_text(json.dumps(hyperparameters))
    return root


def test_sagemaker_hyperparameters_are_decoded_and_split_as_the_toolkit_splits_them(tmp_path):
    root = sagemaker_job(
        tmp_path,
        {
            "epochs": "5",
            "name": "plain text",  # not JSON: kept as text, as the toolkit keeps it
            "layers": "[1, 2]",
            "sagemaker_region": '"us-east-1"',
            "sagemaker_container_log_level": "10",
            "sagemaker_distributed_dataparallel_enabled": "true",
        },
    )
    plan = tiny_plan(*SCRIPT, "+trainer.hyperparameters.epochs=1", "+trainer.hyperparameters.lr=0.1")
    launch = prepare(plan, Path("/p.json"), {}, Detected(), root, False, machine=MACHINE)
    env = variables(launch)
    assert json.loads(env["SM_HPS"]) == {"epochs": 5, "layers": [1, 2], "lr": 0.1, "name": "plain text"}
    assert (env["SM_HP_EPOCHS"], env["SM_HP_LAYERS"], env["SM_HP_NAME"]) == ("5", "[1,2]", "plain text")
    arguments = ["--epochs", "5", "--layers", "[1, 2]", "--lr", "0.1", "--name", "plain text"]
    assert json.loads(env["SM_USER_ARGS"]) == list(launch.command[-8:]) == arguments
    assert json.loads(env["SM_FRAMEWORK_PARAMS"]) == {"sagemaker_distributed_dataparallel_enabled": True}
    assert env["SM_LOG_LEVEL"] == "10"
    training = json.loads(env["SM_TRAINING_ENV"])
    assert training["distribution_instance_groups"] == ["homogeneousCluster"]
    assert training["distribution_hosts"] == ["algo-1", "algo-2"] and training["master_hostname"] == "algo-1"
    assert training["is_master"] is False and training["module_name"] == "train"
    assert (env["SM_HOST_COUNT"], env["SM_CURRENT_HOST_RANK"], env["SM_CURRENT_HOST"]) == ("2", "1", "algo-2")
    assert env["SM_CURRENT_INSTANCE_TYPE"] == "ml.p5.48xlarge"
    assert env["SM_CHANNELS"] == '["train"]' and env["SM_CHANNEL_TRAIN"] == str(root / "input/data/train")
    assert env["SM_MODULE_DIR"] == str(root / "code") and launch.command[-9] == str(root / "code/train.py")


def test_a_value_already_set_is_kept(tmp_path):
    root = sagemaker_job(tmp_path, {})
    environ = {"SM_MODEL_DIR": "/mnt/model", "SM_NUM_GPUS": "4"}
    launch = prepare(tiny_plan(*SCRIPT), Path("/p.json"), environ, Detected(), root, False, machine=MACHINE)
    rows = {row.name: row for row in launch.env}
    assert (rows["SM_MODEL_DIR"].value, rows["SM_MODEL_DIR"].set_here) == ("/mnt/model", False)
    assert rows["SM_MODEL_DIR"].reason == f"set by the user (dockyard: {root / 'model'})"
    assert (rows["SM_NUM_GPUS"].value, rows["SM_NUM_GPUS"].set_here) == ("4", False)
    assert rows["SM_OUTPUT_DIR"].set_here


def test_other_clusters_get_the_same_shapes(tmp_path):
    """Slurm has no contract files: the resource config is built from the node list and the plan, and the
    channels are the folders under input/data."""
    root = tmp_path / "root"
    (root / "input/data/train").mkdir(parents=True)
    environ = {**CLUSTER_ENVIRONMENTS["slurm"], "DOCKYARD_ROOT": str(root)}
    launch = prepare(tiny_plan(*SCRIPT), Path("/p.json"), environ, Detected(), tmp_path / "none", False)
    env = variables(launch)
    assert json.loads(env["SM_HOSTS"]) == ["p5-st-1", "p5-st-2"] and env["SM_CURRENT_HOST"] == "p5-st-2"
    resources = json.loads(env["SM_RESOURCE_CONFIG"])
    assert resources["instance_groups"][0]["hosts"] == ["p5-st-1", "p5-st-2"]
    assert resources["current_instance_type"] == env["SM_CURRENT_INSTANCE_TYPE"] == "cpu"
    assert json.loads(env["SM_INPUT_DATA_CONFIG"]) == {"train": {"TrainingInputMode": "File"}}
    assert env["SM_CHANNEL_TRAIN"] == str(Paths(root).channel("train"))


def test_a_scheduler_that_names_only_the_master(tmp_path):
    environ = dict(CLUSTER_ENVIRONMENTS["kubeflow"])
    launch = prepare(tiny_plan(*SCRIPT), Path("/p.json"), environ, Detected(), tmp_path, False)
    env = variables(launch)
    assert json.loads(env["SM_HOSTS"]) == ["node-0", "node-1"] and env["SM_CURRENT_HOST"] == "node-1"
    assert env["SM_MASTER_ADDR"] == "llama-master-0" and env["SM_MASTER_PORT"] == "23456"


TOOLKIT_KEYS = (
    "hosts",
    "network_interface_name",
    "hps",
    "user_entry_point",
    "framework_params",
    "resource_config",
    "input_data_config",
    "output_data_dir",
    "channels",
    "current_host",
    "current_instance_type",
    "current_instance_group",
    "current_instance_group_hosts",
    "instance_groups",
    "instance_groups_dict",
    "distribution_instance_groups",
    "is_hetero",
    "module_name",
    "log_level",
    "framework_module",
    "input_dir",
    "input_config_dir",
    "output_dir",
    "num_cpus",
    "num_gpus",
    "num_neurons",
    "model_dir",
    "module_dir",
    "training_env",
    "user_args",
    "output_intermediate_dir",
)
"""The keys of the training toolkit's `Environment.to_env_vars`, each set as SM_<KEY> on every job (`topology`
only on GB200 UltraServers). No copy of the toolkit can be installed offline to read them from, so they were
compared by hand with aws/sagemaker-training-toolkit's src/sagemaker_training/environment.py at commit
02f62b379b05: its 30 keys are all here; `num_neurons` is set by releases after that commit."""


def test_every_variable_the_toolkit_sets_is_set_on_a_cluster_of_one_group(tmp_path):
    """A script written for SageMaker may read any of them; SageMaker names even a one-type cluster's group."""
    environ = dict(CLUSTER_ENVIRONMENTS["slurm"])
    launch = prepare(tiny_plan(*SCRIPT), Path("/p.json"), environ, Detected(), tmp_path, False, machine=MACHINE)
    env = variables(launch)
    assert {f"SM_{key.upper()}" for key in TOOLKIT_KEYS} <= set(env)
    assert (env["SM_CURRENT_INSTANCE_GROUP"], env["SM_IS_HETERO"], env["SM_NUM_NEURONS"]) == (
        "homogeneousCluster",
        "false",
        "0",
    )
    assert json.loads(env["SM_INSTANCE_GROUPS"]) == ["homogeneousCluster"]
    assert json.loads(env["SM_CURRENT_INSTANCE_GROUP_HOSTS"]) == json.loads(env["SM_HOSTS"]) == ["p5-st-1", "p5-st-2"]
    assert (env["SM_MODULE_NAME"], env["SM_FRAMEWORK_MODULE"]) == ("train", "")


def test_a_variable_too_long_to_pass_is_left_unset_and_the_script_still_starts(tmp_path):
    """Past about 900 hosts the host lists in SM_TRAINING_ENV and SM_RESOURCE_CONFIG are over Linux's 128 KiB
    limit on one variable: execve would fail with E2BIG and no node would train."""
    plan = tiny_plan(*SCRIPT, "target=kubernetes", "hardware.nodes=3000", "parallelism.global_batch=24000")
    environ = {"DOCKYARD_HOSTS": "r-node-0-[0-2999].r", "DOCKYARD_NODE_RANK": "2999", "DOCKYARD_ROOT": str(tmp_path)}
    launch = prepare(plan, Path("/p.json"), environ, Detected(), tmp_path / "none", False, machine=MACHINE)
    rows = {row.name: row for row in launch.env}
    assert {name for name, row in rows.items() if not row.set_here} == {"SM_TRAINING_ENV"}
    assert max(len(f"{row.name}={row.value}") for row in launch.env) < MAX_ARG_STRLEN
    why = re.fullmatch(
        r"left unset: ([\d,]+) bytes for 3000 hosts is over Linux's 131,072-byte limit .*",
        rows["SM_TRAINING_ENV"].reason,
    )
    assert why and int(why[1].replace(",", "")) > MAX_ARG_STRLEN  # the size holds this machine's paths and CPUs
    assert len(json.loads(rows["SM_HOSTS"].value)) == 3000
    names = ("SM_HOST_COUNT", "SM_CURRENT_HOST_RANK", "SM_TRAINING_ENV")
    show = f"import os; print(*(os.environ.get(name) for name in {names}))"
    started = subprocess.run(
        [sys.executable, "-c", show], env=child_environment(launch, {}), capture_output=True, text=True, check=True
    )
    assert started.stdout.split() == ["3000", "2999", "None"]


def test_explain_golden(tmp_path, golden):
    root = sagemaker_job(tmp_path, {"epochs": "5", "sagemaker_program": '"train.py"'})
    launch = prepare(tiny_plan(*SCRIPT), Path("/p.json"), {}, Detected(), root, False, machine=MACHINE)
    at_opt_ml = tuple(dataclasses.replace(row, value=row.value.replace(str(root), "/opt/ml")) for row in launch.env)
    table = explain(dataclasses.replace(launch, env=at_opt_ml))
    golden.check("explain/toolkit.txt", table.split("SageMaker training toolkit\n")[1])


def test_cpus_online(tmp_path):
    online = tmp_path / "sys/devices/system/cpu/online"
    online.parent.mkdir(parents=True)
    online.write_text("0-3,8-11,16\n")
    assert cpus_online(tmp_path) == 9
    assert cpus_online(tmp_path / "elsewhere") == 0


PER_NODE_SCRIPT = """
import json, os, sys
print("SCRIPT", json.dumps({"rank": os.environ.get("RANK"), "node": os.environ["SM_CURRENT_HOST_RANK"],
                            "argv": sys.argv[1:]}))
"""


def test_per_node_launcher_starts_the_script_once_without_torchrun(tmp_path):
    code = Paths(tmp_path / "root").code
    code.mkdir(parents=True)
    (code / "train.py").write_text(PER_NODE_SCRIPT)
    plan = tiny_plan(
        "trainer=script", f"trainer.source_dir={code}", "trainer.script=train.py", "trainer.launcher=per_node"
    )
    plan_path = write_plan(plan, tmp_path)
    command = [sys.executable, "-m", "entrypoint", "train", f"--plan={plan_path}"]
    env = entrypoint_env(tmp_path / "root")
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    reports = [json.loads(line.split("SCRIPT ", 1)[1]) for line in result.stdout.splitlines() if "SCRIPT " in line]
    assert reports == [{"rank": None, "node": "0", "argv": []}]
