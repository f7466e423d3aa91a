"""Compose and compile in-process, as the CLI does."""

from compiler.config.compose import compose_config
from compiler.launch.plan import checked_plan
from compiler.spec import Plan

S3_TOKENS = ("data=s3", "data.uri=s3://dockyard-example-data/tokens/")
"""Overrides that read the token file the `s3_tokens` fixture puts in moto's S3."""
PRESETS = ("smoke", "gpt2-124m-p4d", "llama3-8b-p5x4", "llama3-70b-p5x16")


def plan_for(*overrides: str) -> Plan:
    return checked_plan(compose_config(overrides))
