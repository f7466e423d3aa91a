"""`target.secrets` (and `target.hub_token_secret`, its HF_TOKEN entry) as every target that takes secrets
checks them: variable names, none also in `target.environment`, HF_TOKEN named once. Each target checks
the references themselves (a Secrets Manager ARN, a Kubernetes Secret)."""

import re

from compiler.spec.contract import HUB_TOKEN
from compiler.spec.errors import ConfigError
from compiler.spec.schema import KubernetesTargetConfig, SageMakerTargetConfig
from compiler.spec.schema.target import secret_references

VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_secret_names(target: SageMakerTargetConfig | KubernetesTargetConfig) -> dict[str, str]:
    """The checked references, variable name → reference."""
    if target.hub_token_secret and HUB_TOKEN in target.secrets:
        raise ConfigError(f"target.secrets.{HUB_TOKEN}", "repeats target.hub_token_secret", "set one of the two")
    for name in target.secrets:
        key = f"target.secrets.{name}"
        if not VARIABLE.fullmatch(name):
            raise ConfigError(key, "is not an environment variable name", "use letters, digits and _")
        if name in target.environment:
            raise ConfigError(key, "is also in target.environment", f"remove target.environment.{name}")
        if not target.secrets[name]:
            raise ConfigError(key, "names no secret", "give the secret's reference, or remove the entry")
    return secret_references(target)
