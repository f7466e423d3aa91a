"""What the caller's AWS account decides when the config leaves it unset, as SageMaker's Python SDK does:
the image goes to the account's ECR in the job's region, and the job's files to the bucket
`sagemaker-<region>-<account>` (created at submit when missing, as the SDK's `default_bucket()` does).
The role stays explicit: which role a job may assume is a decision, not a default.
"""

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from compiler.spec.errors import ConfigError
from compiler.spec.schema import Config

OUTPUT_PREFIX = "dockyard"


def default_bucket(region: str, account: str) -> str:
    return f"sagemaker-{region}-{account}"


EXAMPLES = {
    "image.registry": "image.registry=<account>.dkr.ecr.<region>.amazonaws.com",
    "target.output_uri": "target.output_uri=s3://<bucket>/<prefix>",
}
"""What each key the account would default looks like when the config sets it instead."""


def account_id(session: boto3.Session, unset: tuple[str, ...]) -> str:
    """The caller's account, read because the keys `unset` need it; an error names the first of them."""
    try:
        return session.client("sts").get_caller_identity()["Account"]
    except (BotoCoreError, ClientError) as error:
        raise ConfigError(
            unset[0],
            f"is unset, and the caller's AWS account cannot be read to default it ({error})",
            f"configure AWS credentials, or set {' and '.join(EXAMPLES[key] for key in unset)}",
        ) from None


def defaults(config: Config, session: boto3.Session) -> dict[str, object]:
    """The dotted keys to set: only those the config leaves unset, and nothing asked when none is."""
    target, image = config.target, config.image
    given = {"image.registry": image.registry, "target.output_uri": target.output_uri}
    unset = tuple(key for key, value in given.items() if value is None)
    if not unset:
        return {}
    account = account_id(session, unset)
    wanted: dict[str, object] = {}
    if image.registry is None:
        wanted |= {"image.registry": f"{account}.dkr.ecr.{target.region}.amazonaws.com", "image.push": True}
    if target.output_uri is None:
        wanted["target.output_uri"] = f"s3://{default_bucket(target.region, account)}/{OUTPUT_PREFIX}"
    return wanted


def is_default_bucket(bucket: str, region: str, session: boto3.Session) -> bool:
    """Whether `bucket` is the caller's default bucket in `region` (the account is asked only for a name
    that could be it)."""
    if not bucket.startswith(default_bucket(region, "")):
        return False
    return bucket == default_bucket(region, account_id(session, ("target.output_uri",)))


def create_default_bucket(bucket: str, region: str, session: boto3.Session) -> bool:
    """Create the account's default bucket when it is the one the job writes to and it does not exist yet;
    True when it was created. Any other bucket is the user's to create (`check_resources` says so)."""
    if not is_default_bucket(bucket, region, session):
        return False
    s3 = session.client("s3")
    try:
        s3.head_bucket(Bucket=bucket)
        return False
    except ClientError:
        location = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
        s3.create_bucket(Bucket=bucket, **location)
        return True
