"""Managed spot: what SageMaker trained and billed reaches the run record, `dockyard status`, the sweep
summary and the cost. DescribeTrainingJob's billing fields come from a described job as SageMaker returns
it at the end (moto's server keeps the spot request but reports no billed time)."""

import contextlib
import io

from compiler.cli import runs as cli_runs
from compiler.launch import summary
from compiler.targets import records
from compiler.targets.sagemaker import job_billing
from compiler.targets.sagemaker import submit as sagemaker_submit
from compiler.targets.sagemaker import translate as sagemaker
from tests.helpers import plan_for

ROLE = "target.role_arn=arn:aws:iam::123456789012:role/dockyard-training"
ENDED_SPOT_JOB = {"TrainingJobStatus": "Completed", "TrainingTimeInSeconds": 3600, "BillableTimeInSeconds": 1080}


def test_a_spot_job_reports_trained_and_billed_seconds():
    assert job_billing(ENDED_SPOT_JOB) == {"training_s": 3600, "billable_s": 1080}
    assert job_billing({"TrainingJobStatus": "InProgress"}) is None


def test_the_record_costs_the_billed_seconds_and_status_says_the_saving(tmp_path):
    record = records.save(
        records.RunRecord(run_dir=str(tmp_path), run_id="spot-1", status="completed", price_per_hour=36.0,
                          started=0.0, ended=4000.0, **job_billing(ENDED_SPOT_JOB))
    )  # fmt: skip
    assert record.spot_saving == 0.7
    assert record.cost_usd == 36.0 * 1080 / 3600
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        cli_runs.status(record)
    assert "billing   trained 3600 s, billed 1080 s, 70% saved by spot" in printed.getvalue()
    row = summary.row(records.load(tmp_path))
    assert (row["billable_s"], row["spot_saving"], row["cost_usd"]) == ("1080", "70%", "10.80")


def test_the_spot_request_reaches_sagemaker(aws):
    plan = plan_for("experiment=gpt2-124m-p4d", ROLE, "target.spot=true", "target.max_wait_hours=48")
    request = sagemaker.to_request(plan, "img", run_id="spot-moto-1", job_prefix="s3://dockyard-jobs/spot-moto-1")
    sagemaker_submit.submit(request, plan.to_json(), aws)
    job = sagemaker_submit.describe("spot-moto-1", aws)
    assert job["EnableManagedSpotTraining"] is True
    assert job["StoppingCondition"] == {"MaxRuntimeInSeconds": 86400, "MaxWaitTimeInSeconds": 172800}
