"""`dockyard tokenize`: a launch through the one pipeline whose nodes fill the token cache and end. Its plan shows
the workers, the expected time and the cost; SageMaker's dry run asks for CPU instances and sends the cache to S3;
a plan of several nodes without a shared cache folder warns what it costs and how to avoid it."""

import json

import pytest

from compiler.config.compose import compose_config
from compiler.launch.plan import checked_plan
from compiler.planner.tokenize_job import TOKENS_PER_CORE_S
from tests.hostile import invoke
from tests.test_text_data import text_overrides

ROLE = "target.role_arn=arn:aws:iam::123456789012:role/dockyard-training"
TOKENS = 10**10
SAGEMAKER_TOKENIZE = [
    "experiment=smoke", "target=sagemaker", "hardware=ml.c6i.4xlarge", "hardware.nodes=2", ROLE,
    "data=s3", "data.uri=s3://dockyard-data/documents", "data.format=text", "data.tokenizer=s3://dockyard-data/tok",
    "model.vocab=512", f"data.tokens={TOKENS}",
]  # fmt: skip


def test_the_sagemaker_dry_run_asks_for_cpu_instances_and_sends_the_cache_to_s3(aws_env, tmp_path):
    outcome = invoke(["tokenize", "--dry-run", *SAGEMAKER_TOKENIZE], tmp_path)
    assert outcome.status == 0, outcome.stderr
    job = json.loads(outcome.stdout)["CreateTrainingJob"]
    assert job["ResourceConfig"]["InstanceType"] == "ml.c6i.4xlarge"
    assert job["ResourceConfig"]["InstanceCount"] == 2
    assert "DOCKYARD_JOB" not in job.get("Environment", {})  # the job is the plan's own field (its summary below)
    assert job["CheckpointConfig"]["S3Uri"].startswith("s3://")  # /opt/ml/checkpoints/token-cache, synced
    sources = {
        channel["ChannelName"]: channel["DataSource"]["S3DataSource"]["S3Uri"] for channel in job["InputDataConfig"]
    }
    assert sources["train"] == "s3://dockyard-data/documents"
    assert "tokenize  2 workers, one per node (16 cores each), each a 1/2 share of the documents" in outcome.stderr
    hours = TOKENS / (TOKENS_PER_CORE_S * 16 * 2) / 3600
    assert f"expected {hours:,.2f} h for {TOKENS:,} tokens at {TOKENS_PER_CORE_S:,} tokens/s per core, $" in (
        outcome.stderr
    )


def test_token_files_have_nothing_to_tokenize(tmp_path):
    outcome = invoke(["tokenize", "--dry-run", "experiment=smoke"], tmp_path)
    assert outcome.status == 2
    assert outcome.stderr.startswith("dockyard: error: data.format: tokens: token files are read as they are")


def test_the_job_is_a_field_of_the_plan_with_known_values(tmp_path):
    outcome = invoke(["plan", "experiment=smoke", "job=tokenise"], tmp_path)
    assert outcome.status == 2 and outcome.error_keys == ["job"], outcome.stderr
    outcome = invoke(["plan", "experiment=smoke", "+target.environment.DOCKYARD_JOB=tokenize"], tmp_path)
    assert outcome.status == 2 and "target.environment.DOCKYARD_JOB: is set by dockyard" in outcome.stderr


@pytest.mark.parametrize("cache", [None, "/shared/token-cache"])
def test_nodes_without_a_shared_cache_folder_are_warned(tmp_path, hf_tokenizer, cache):
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("the cat sees a tree")
    overrides = [*text_overrides(data, hf_tokenizer), "experiment=smoke", "hardware.nodes=2"]
    plan = checked_plan(compose_config([*overrides, *([f"data.cache={cache}"] if cache else [])]))
    warned = [w for w in plan.warnings if "tokenizes the whole data set" in w]
    assert len(warned) == (cache is None)
    if warned:
        assert "each of the 2 nodes" in warned[0] and "set data.cache" in warned[0] and "dockyard tokenize" in warned[0]
