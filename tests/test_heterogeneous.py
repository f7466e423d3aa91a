"""Heterogeneous clusters (`hardware.groups`): the plan's checks, SageMaker's InstanceGroups request, and
the entrypoint on each group's node from the resourceconfig.json SageMaker writes there."""

import io
import json
from pathlib import Path

import pytest

from compiler.spec import Plan
from compiler.spec.errors import ConfigError
from compiler.targets.sagemaker import translate as sagemaker
from entrypoint.launcher.comm import Detected
from entrypoint.launcher.main import WARM_WORKERS, prepare
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
    """A GPU group that trains and a CPU group that prepares its data."""
    plan = plan_for(*[("hardware=ml.g5.xlarge" if o == "hardware=ml.m5.xlarge" else o) for o in GROUPS])
    request = sagemaker.to_request(plan, IMAGE, run_id="hetero", job_prefix="s3://dockyard-jobs/hetero")
    golden.check("sagemaker/heterogeneous.json", request.to_json())
    job = request.create_training_job
    assert job["ResourceConfig"]["InstanceGroups"] == [
        {"InstanceGroupName": "train", "InstanceType": "ml.g5.xlarge", "InstanceCount": 2},
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
    with pytest.raises(ConfigError, match="hardware.groups: target=kubernetes runs one group of instances"):
        plan_for(
            "experiment=smoke",
            "target=kubernetes",
            "++hardware.groups={prep: {instance_type: c5.xlarge}}",
            "+trainer.group_commands.prep=x",
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
    assert WARM_WORKERS in launch.command and "--nnodes=2" in launch.command
    env = {row.name: row.value for row in launch.env}
    assert env["SM_CURRENT_INSTANCE_GROUP"] == "train" and env["SM_IS_HETERO"] == "true"
    assert json.loads(env["SM_CURRENT_INSTANCE_GROUP_HOSTS"]) == ["algo-2", "algo-3"]


def test_another_groups_node_runs_its_command(tmp_path):
    launch = launch_on("algo-1", tmp_path)
    assert launch.command[-3:] == ("python", "-c", "print(1)")
    assert launch.node.hosts == ("algo-1",)
    env = {row.name: row.value for row in launch.env}
    assert env["SM_CURRENT_INSTANCE_GROUP"] == "prep"
    assert json.loads(env["SM_INSTANCE_GROUPS"]) == ["train", "prep"]  # resourceconfig.json's order, as the toolkit


TRAIN_SCRIPT = '''
"""The training group: waits for what the prep group wrote into the shared channel, then fits it."""
import json, os, pathlib, sys, time
import torch, torch.distributed as dist

data = pathlib.Path(os.environ["SM_CHANNEL_TRAIN"])
deadline = time.monotonic() + 120
while not (data / "done").exists():
    assert time.monotonic() < deadline, "the prep group wrote nothing"
    time.sleep(0.2)
target = torch.tensor(json.loads((data / "numbers.json").read_text()), dtype=torch.float32)
dist.init_process_group("gloo")
weight = torch.zeros_like(target, requires_grad=True)
optimizer = torch.optim.SGD([weight], lr=0.1)
losses = []
for _ in range(30):
    loss = (weight - target).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    dist.all_reduce(weight.grad)
    weight.grad /= dist.get_world_size()
    optimizer.step()
    losses.append(loss.item())
if dist.get_rank() == 0:
    result = {"world": dist.get_world_size(), "group": os.environ["SM_CURRENT_INSTANCE_GROUP"], "losses": losses}
    pathlib.Path("/opt/ml/model/result.json").write_text(json.dumps(result))
dist.barrier()
dist.destroy_process_group()
sys.stdout.flush()
os._exit(0)  # as `dockyard init`'s train.py ends: no interpreter shutdown under gloo's threads
'''
PREP_SCRIPT = """
import os, pathlib
shared = pathlib.Path(os.environ["SM_CHANNEL_TRAIN"])
(shared / "numbers.json").write_text("[1.0, 2.0, 3.0]")
(shared / "done").write_text(os.environ["SM_CURRENT_INSTANCE_GROUP"])
"""


@pytest.mark.torchrun
def test_a_cpu_prep_group_feeds_the_training_group_on_local_containers(engine, tmp_path):
    """The local target emulates the groups: one container per host, SageMaker's resourceconfig.json in
    each, and the data folder shared by the groups it reaches (writable by the one that prepares it)."""
    from compiler.images.build import build_image, ensure_base_image
    from compiler.launch import runs
    from compiler.targets.local import translate as local

    (tmp_path / "src").mkdir()
    (tmp_path / "src/train.py").write_text(TRAIN_SCRIPT)
    (tmp_path / "src/prep.py").write_text(PREP_SCRIPT)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # the containers write as their own user
    plan = plan_for(
        "experiment=smoke",
        "trainer=script",
        "trainer.source_dir=src",
        "trainer.script=train.py",
        "++hardware.groups={prep: {instance_type: cpu, count: 1}}",
        "+trainer.group_commands.prep=python /opt/ml/code/prep.py",
        "data=local",
        f"data.path={shared}",
    )
    ensure_base_image(engine, plan.image, io.StringIO())
    image = build_image(plan, engine, cwd=tmp_path).reference
    run_dir = tmp_path / "run"
    request = local.to_request(plan, image, run_id="dockyard-groups-test", run_dir=run_dir)
    assert [c.hostname for c in request.containers] == ["algo-1", "algo-2", "algo-3"]
    printed = io.StringIO()
    record = runs.execute(runs.new_record(plan, request, run_dir, image), plan, request, out=printed)
    assert record.exit_status == 0, printed.getvalue()[-3000:]
    result = json.loads((run_dir / "model/result.json").read_text())
    assert (result["world"], result["group"]) == (4, "train")  # 2 nodes × 2 processes: prep is outside
    assert result["losses"][-1] < result["losses"][0] * 0.1
    assert (shared / "done").read_text() == "prep"
    assert "torch.distributed.run" not in (run_dir / "logs/algo-3.log").read_text()
