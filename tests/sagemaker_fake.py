"""A stand-in for the SageMaker calls moto's server lacks (StopTrainingJob, UpdateTrainingJob, warm pools).

Every call's parameters are checked against botocore's model of the operation: what a real client checks
before sending them (unknown or missing members, types, minimums) and what the service checks on arrival
(maximums, enums, patterns), and a stopped job moves through the states
StopTrainingJob documents: InProgress, then Stopping, then Stopped once SageMaker has stopped it.
"""

import re

import botocore.session
from botocore.exceptions import ClientError, ParamValidationError
from botocore.validate import validate_parameters

MODEL = botocore.session.get_session().get_service_model("sagemaker")


def checked(operation: str, parameters: dict) -> dict:
    """`parameters` when botocore's model of `operation` accepts them; ParamValidationError otherwise."""
    shape = MODEL.operation_model(operation).input_shape
    validate_parameters(parameters, shape)
    _within_limits(parameters, shape, operation)
    return parameters


def _within_limits(value, shape, path: str) -> None:
    """The model's maximums, enums and patterns, which botocore leaves to the service."""
    if shape.type_name == "structure":
        for name, member in value.items():
            _within_limits(member, shape.members[name], f"{path}.{name}")
    elif shape.type_name == "list":
        for item in value:
            _within_limits(item, shape.member, f"{path}[]")
    elif shape.type_name == "map":
        for key, item in value.items():
            _within_limits(key, shape.key, f"{path} key")
            _within_limits(item, shape.value, f"{path}.{key}")
    else:
        size = len(value) if isinstance(value, str | list) else value
        high, pattern = shape.metadata.get("max"), shape.metadata.get("pattern")
        broken = (
            (getattr(shape, "enum", None) and value not in shape.enum)
            or (high is not None and isinstance(size, int | float) and size > high)
            or (pattern and isinstance(value, str) and not _matches(pattern, value))
        )
        if broken:
            raise ParamValidationError(report=f"{path}: {value!r} is outside the model's {shape.name}")


def _matches(pattern: str, value: str) -> bool:
    try:
        return re.fullmatch(pattern, value) is not None
    except re.error:  # a construct only Java's regexes know (\p{L}): left to the service
        return True


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
