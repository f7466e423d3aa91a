"""`dockyard eval` on SageMaker, over moto's server: the dry run prints the evaluation's CreateTrainingJob
(the model folder uploaded as the `pretrained` channel, the job tagged with the evaluation plan's hash), and
that request, submitted, is a job SageMaker's API takes, whose plan (the `plan` channel) holds the tasks."""

import json

from compiler.config.compose import compose_config
from compiler.launch.plan import checked_plan, with_account_defaults
from compiler.spec import Plan
from compiler.targets.sagemaker import submit as sagemaker_submit
from compiler.targets.sagemaker import translate as sagemaker
from tests.eval_support import TASKS, tiny_model, write_tasks
from tests.hostile import invoke

ROLE = "target.role_arn=arn:aws:iam::123456789012:role/dockyard-training"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/dockyard/eval@sha256:" + "0" * 64
OUTPUT = "target.output_uri=s3://dockyard-jobs/eval"
"""A bucket the `aws` fixture makes: the account's default one, created at submit, would stay on moto's server
(shared by the worker's tests) where test_sagemaker_account proves that submit creates it."""


def test_the_dry_run_shows_the_evaluation_job_and_sagemaker_takes_it(aws, tmp_path, hf_tokenizer):
    model = tiny_model(tmp_path / "model", hf_tokenizer)
    tasks = write_tasks(tmp_path / "tasks")
    overrides = ["target=sagemaker", "hardware=ml.m5.xlarge", ROLE, "hardware.nodes=1", "model=hf", OUTPUT]
    overrides += [f"model.path={model}", f"eval.tasks=[{','.join(TASKS)}]", f"eval.include_path={tasks}"]
    outcome = invoke(["eval", "--dry-run", *overrides], tmp_path)
    assert outcome.status == 0, outcome.stderr
    shown = json.loads(outcome.stdout)
    job = shown["CreateTrainingJob"]
    plan = checked_plan(with_account_defaults(compose_config([*overrides, "job=evaluate"])))
    assert plan.eval is not None and plan.eval.tasks == TASKS
    assert {"Key": "dockyard:plan", "Value": plan.content_hash} in job["Tags"]
    assert job["ResourceConfig"]["InstanceCount"] == 1
    assert [c["ChannelName"] for c in job["InputDataConfig"]] == ["plan", "pretrained"]
    assert shown["uploads"] == {str(model): job["InputDataConfig"][1]["DataSource"]["S3DataSource"]["S3Uri"]}

    request = sagemaker.to_request(plan, IMAGE, run_id="dockyard-eval-1", job_prefix="s3://dockyard-jobs/eval-1")
    sagemaker_submit.submit(request, plan.to_json(), aws)
    described = aws.client("sagemaker").describe_training_job(TrainingJobName="dockyard-eval-1")
    assert described["AlgorithmSpecification"]["TrainingImage"] == IMAGE
    bucket, _, key = request.plan_uri.removeprefix("s3://").partition("/")
    uploaded = aws.client("s3").get_object(Bucket=bucket, Key=f"{key}plan.json")["Body"].read().decode()
    assert Plan.from_json(uploaded) == plan
