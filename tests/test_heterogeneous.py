"""Heterogeneous clusters (`hardware.groups`): the plan's checks, SageMaker's InstanceGroups request, and
the entrypoint on each group's node from the resourceconfig.json SageMaker writes there."""

import json
from pathlib import Path

import pytest

from compiler.spec import Plan
from compiler.spec.errors import ConfigError
from compiler.targets.sagemaker import translate as sagemaker
from entrypoint.comm import Detected
from entrypoint.main import prepare
from tests.entrypoint_support import hetero_tree
from tests.helpers import plan_for

ROLE = "target.role_arn=arn:aws:iam::123456789012:role/dockyard-training"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/dockyard/job@sha256:" + "0" * 64
GROUPS = [
    "experiment=smoke",
    "target=sagemaker",
    ROLE,
    "hardware=ml.m5.xlarge",
    "++hardware.groups={prep: {instance_type: ml.c5.xlarge, count: 1}}",
    "+trainer.group_commands.prep='python -c \"print(1)\"'",
    "data=s3",
    "data.uri=s3://dockyard-example-data/tokens",
    "data.groups=[prep]",
]


def test_the_request_has_instance_groups_and_a_channel_per_group(golden):
    plan = plan_for(*GROUPS)
    request = sagemaker.to_request(plan, IMAGE, run_id="hetero", job_prefix="s3://dockyard-jobs/hetero")
    golden.check("sagemaker/heterogeneous.json", request.to_json())
    job = request.create_training_job
    assert job["ResourceConfig"]["InstanceGroups"] == [
        {"InstanceGroupName": "train", "InstanceType": "ml.m5.xlarge", "InstanceCount": 2},
        {"InstanceGroupName": "prep", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1},
    ]
    assert "InstanceType" not in job["ResourceConfig"]
    sources = {c["ChannelName"]: c["DataSource"]["S3DataSource"] for c in job["InputDataConfig"]}
    assert sources["train"]["InstanceGroupNames"] == ["prep"] and "InstanceGroupNames" not in sources["plan"]
    assert plan.layout.nodes == 2  # only the training group trains
    assert Plan.from_json(plan.to_json()) == plan


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["~trainer.group_commands.prep"], "trainer.group_commands.prep"),
        (["++hardware.groups={a_b: {instance_type: m5.large}}", "+trainer.group_commands.a_b=x"], "hardware.groups"),
        (
            ["++hardware.groups={train: {instance_type: m5.large}}", "+trainer.group_commands.train=x"],
            "hardware.groups.train",
        ),
        (["++hardware.groups={prep: {instance_type: c9.xlarge}}"], "hardware.groups.prep.instance_type"),
        (["++hardware.groups={prep: {instance_type: c5.xlarge, count: 0}}"], "hardware.groups.prep.count"),
        (["data.groups=[gpu]"], "hardware.groups"),
    ],
)
def test_each_mistake_names_its_key(overrides, key):
    with pytest.raises(ConfigError) as error:
        plan_for(*GROUPS, *overrides)
    assert error.value.key == key, error.value.one_line()


def test_a_target_of_one_group_refuses_groups():
    with pytest.raises(ConfigError, match="hardware.groups: target=local runs one group of instances"):
        plan_for(
            "experiment=smoke", "++hardware.groups={prep: {instance_type: c5.xlarge}}", "+trainer.group_commands.prep=x"
        )


def test_group_settings_without_groups_are_refused():
    with pytest.raises(ConfigError, match="trainer.group_commands: is set, but hardware.groups is empty"):
        plan_for("experiment=smoke", "+trainer.group_commands.prep=x")


def launch_on(host: str, tmp_path: Path):
    plan = plan_for(*GROUPS)
    return prepare(plan, Path("/p.json"), {}, Detected(), hetero_tree(tmp_path, host), False)


def test_a_training_node_trains_with_its_group_only(tmp_path):
    launch = launch_on("algo-3", tmp_path)
    assert (launch.node.hosts, launch.node.node_rank, launch.node.master_addr) == (("algo-2", "algo-3"), 1, "algo-2")
    assert "torch.distributed.run" in launch.command and "--nnodes=2" in launch.command
    env = {row.name: row.value for row in launch.env}
    assert env["SM_CURRENT_INSTANCE_GROUP"] == "train" and env["SM_IS_HETERO"] == "true"
    assert json.loads(env["SM_CURRENT_INSTANCE_GROUP_HOSTS"]) == ["algo-2", "algo-3"]


def test_another_groups_node_runs_its_command(tmp_path):
    launch = launch_on("algo-1", tmp_path)
    assert launch.command[-3:] == ("python", "-c", "print(1)")
    assert launch.node.hosts == ("algo-1",)
    env = {row.name: row.value for row in launch.env}
    assert env["SM_CURRENT_INSTANCE_GROUP"] == "prep"
    assert json.loads(env["SM_INSTANCE_GROUPS"]) == ["prep", "train"]
