"""A Hugging Face token for a gated Hub model on SageMaker: the target names a Secrets Manager secret
(`target.hub_token_secret`, in DOCKYARD_HF_TOKEN_SECRET), the entrypoint reads it here with the job's role,
and the trainer gets it as HF_TOKEN. The token is never in the plan, the request or the logs."""

from collections.abc import Mapping

from compiler.spec.contract import HUB_TOKEN_SECRET
from compiler.spec.errors import ConfigError

HUB_TOKEN = "HF_TOKEN"


def with_hub_token(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with HF_TOKEN read from the named secret, when one is named and HF_TOKEN is not set."""
    secret = environ.get(HUB_TOKEN_SECRET)
    if not secret or environ.get(HUB_TOKEN):
        return dict(environ)
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    region = secret.split(":")[3] if secret.startswith("arn:") else environ.get("AWS_REGION")
    try:
        value = boto3.client("secretsmanager", region_name=region).get_secret_value(SecretId=secret)
    except (BotoCoreError, ClientError) as error:
        raise ConfigError(
            "target.hub_token_secret", f"cannot be read with the job's role ({error})", "grant GetSecretValue"
        ) from None
    return {**environ, HUB_TOKEN: value["SecretString"].strip()}
