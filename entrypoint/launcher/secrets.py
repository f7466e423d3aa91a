"""Secrets on SageMaker: for each entry of `target.secrets` (and `target.hub_token_secret`, HF_TOKEN's) the
request's environment holds `DOCKYARD_SECRET_<NAME>=<Secrets Manager ARN>`; the entrypoint reads each secret
here with the job's role and the trainer gets it as NAME (a tracker's credentials, a Hugging Face token).
The values are never in the plan, the request or the logs; a NAME the user set already is kept."""

from collections.abc import Mapping

from compiler.spec.contract import SECRET_PREFIX
from compiler.spec.errors import ConfigError


def with_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` with each variable a `DOCKYARD_SECRET_<NAME>` names read from its secret."""
    wanted = {
        variable.removeprefix(SECRET_PREFIX): arn
        for variable, arn in environ.items()
        if variable.startswith(SECRET_PREFIX) and arn and not environ.get(variable.removeprefix(SECRET_PREFIX))
    }
    if not wanted:
        return dict(environ)
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    values = {}
    for name, arn in wanted.items():
        region = arn.split(":")[3] if arn.startswith("arn:") else environ.get("AWS_REGION")
        try:
            value = boto3.client("secretsmanager", region_name=region).get_secret_value(SecretId=arn)
        except (BotoCoreError, ClientError) as error:
            raise ConfigError(
                f"target.secrets.{name}",
                f"cannot be read with the job's role ({error})",
                "grant the role secretsmanager:GetSecretValue on it",
            ) from None
        values[name] = value["SecretString"].strip()
    return {**environ, **values}
