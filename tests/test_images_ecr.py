"""ECR's half of a push, against moto's ECR API served over HTTP: the repository and the login."""

import boto3

from compiler.core.grammar import ECR_REGISTRY
from compiler.images.push import ecr_login

ACCOUNT, REGION = "123456789012", "us-west-2"


def test_ecr_registry_names_are_recognised() -> None:
    match = ECR_REGISTRY.fullmatch(f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com")
    assert (match["account"], match["region"]) == (ACCOUNT, REGION)
    assert ECR_REGISTRY.match("127.0.0.1:5000") is None


def test_ecr_login_creates_the_repository_once_and_returns_the_token(aws_env: str) -> None:
    ecr = boto3.client("ecr", region_name=REGION)

    def repositories() -> dict[str, str]:  # moto's state is per process: other tests' repositories stay
        return {r["repositoryName"]: r["imageTagMutability"] for r in ecr.describe_repositories()["repositories"]}

    before = repositories()
    assert "dockyard/ecr-login" not in before
    auth = ecr_login("dockyard/ecr-login", ACCOUNT, REGION)
    assert auth["username"] == "AWS" and auth["password"]
    assert repositories() == before | {"dockyard/ecr-login": "IMMUTABLE"}
    assert ecr_login("dockyard/ecr-login", ACCOUNT, REGION)["username"] == "AWS"
    assert repositories() == before | {"dockyard/ecr-login": "IMMUTABLE"}
