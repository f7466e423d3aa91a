"""Push a built image to `image.registry` and return the digest reference launches are pinned by.

For Amazon ECR the repository is created when missing and the login is the authorization token boto3
gets with the caller's own AWS credentials; the token is handed to the engine for this push only and is
never written down. Other registries use the engine's own login (`docker login`), or none.
"""

import base64
import sys
from typing import IO

import docker

from compiler.core.grammar import ECR_REGISTRY
from compiler.images.build import BuildError, BuiltImage
from compiler.spec import schema


def push_image(
    client: docker.DockerClient, built: BuiltImage, image: schema.ImageConfig, out: IO[str] = sys.stdout
) -> str:
    """`registry/name@sha256:...` of `built`, pushed unless the engine already knows that digest."""
    repository = f"{image.registry}/{image.name}"
    tag = built.reference.rsplit(":", 1)[1]
    local = client.images.get(built.reference)
    known = [d for d in local.attrs.get("RepoDigests", []) if d.startswith(f"{repository}@")]
    if known:
        return known[0]
    local.tag(repository, tag)
    match = ECR_REGISTRY.fullmatch(image.registry or "")
    auth = ecr_login(image.name, match["account"], match["region"]) if match else None
    digest = None
    for chunk in client.api.push(repository, tag, stream=True, decode=True, auth_config=auth):
        if "error" in chunk:
            raise BuildError("image.registry", f"pushing {repository}:{tag} failed: {chunk['error']}")
        if chunk.get("status") in ("Pushed", "Layer already exists"):
            print(f"push      {chunk['id']}: {chunk['status']}", file=out)
        digest = chunk.get("aux", {}).get("Digest", digest)
    if digest is None:
        raise BuildError("image.registry", f"the registry returned no digest for {repository}:{tag}")
    return f"{repository}@{digest}"


def ecr_login(repository: str, account: str, region: str) -> dict[str, str]:
    """Create the ECR repository if it is missing; the engine's credentials for one push."""
    import boto3  # only ECR pushes need it
    from botocore.exceptions import BotoCoreError, ClientError

    ecr = boto3.client("ecr", region_name=region)
    try:
        try:
            ecr.describe_repositories(registryId=account, repositoryNames=[repository])
        except ecr.exceptions.RepositoryNotFoundException:
            # Tags are content hashes, so a tag never needs to move to other content.
            ecr.create_repository(registryId=account, repositoryName=repository, imageTagMutability="IMMUTABLE")
        token = ecr.get_authorization_token(registryIds=[account])["authorizationData"][0]["authorizationToken"]
    except (BotoCoreError, ClientError) as exc:
        raise BuildError("image.registry", f"ECR in {region}: {exc}", "check the AWS credentials and region") from None
    username, password = base64.b64decode(token).decode().split(":", 1)
    return {"username": username, "password": password}
