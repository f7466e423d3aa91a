"""A stand-in for the SageMaker calls moto's server lacks (StopTrainingJob, UpdateTrainingJob, warm pools).

Every call's parameters are checked against botocore's model of the operation (unknown or missing members,
types, minimums), as a real client would before sending them, and a stopped job moves through the states
StopTrainingJob documents: InProgress, then Stopping, then Stopped once SageMaker has stopped it.
"""

import botocore.session
from botocore.exceptions import ClientError
from botocore.validate import validate_parameters

MODEL = botocore.session.get_session().get_service_model("sagemaker")


def checked(operation: str, parameters: dict) -> dict:
    """`parameters` when botocore's model of `operation` accepts them; ParamValidationError otherwise."""
    validate_parameters(parameters, MODEL.operation_model(operation).input_shape)
    return parameters


class FakeSageMaker:
    """Training jobs kept in memory (DescribeTrainingJob's answers), served to the calls dockyard makes."""

    def __init__(self, *jobs: dict) -> None:
        self.jobs = {job["TrainingJobName"]: job for job in jobs}
        self.updates: list[dict] = []
        self.operation = ""

    def client(self, service: str):  # also the session that hands it out
        assert service == "sagemaker"
        return self

    def get_paginator(self, operation: str):
        self.operation = MODEL.operation_model("".join(w.title() for w in operation.split("_"))).name
        assert self.operation == "ListTrainingJobs"
        return self

    def paginate(self, **parameters):
        checked(self.operation, parameters)
        wanted = {"StatusEquals": "TrainingJobStatus", "WarmPoolStatusEquals": "WarmPoolStatus"}
        names = [
            name
            for name, job in self.jobs.items()
            if all(_status(job, field) == parameters[key] for key, field in wanted.items() if key in parameters)
        ]
        yield {"TrainingJobSummaries": [{"TrainingJobName": name} for name in names]}

    def describe_training_job(self, **parameters) -> dict:
        job = self._job(checked("DescribeTrainingJob", parameters))
        answer = dict(job)
        if job["TrainingJobStatus"] == "Stopping":  # SageMaker stops the containers, then says so
            job["TrainingJobStatus"], job["SecondaryStatus"] = "Stopped", "Stopped"
        return answer

    def update_training_job(self, **parameters) -> None:
        self._job(checked("UpdateTrainingJob", parameters))
        self.updates.append(parameters)

    def stop_training_job(self, **parameters) -> None:
        job = self._job(checked("StopTrainingJob", parameters))
        if job["TrainingJobStatus"] != "InProgress":
            raise ClientError(
                {"Error": {"Code": "ValidationException", "Message": f"job is {job['TrainingJobStatus']}"}},
                "StopTrainingJob",
            )
        job["TrainingJobStatus"], job["SecondaryStatus"] = "Stopping", "Stopping"

    def _job(self, parameters: dict) -> dict:
        name = parameters["TrainingJobName"]
        if name not in self.jobs:
            raise ClientError({"Error": {"Code": "ResourceNotFound", "Message": f"{name} not found"}}, "Describe")
        return self.jobs[name]


def _status(job: dict, field: str) -> str:
    value = job.get(field, "")
    return value["Status"] if isinstance(value, dict) else value
