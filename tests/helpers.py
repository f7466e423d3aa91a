"""Compose and compile in-process, as the CLI does."""

from compiler.config.compose import compose_config
from compiler.planner.compile import compile_plan
from compiler.spec import Plan

PRESETS = ("smoke", "gpt2-124m-p4d", "llama3-8b-p5x4", "llama3-70b-p5x16")


def plan_for(*overrides: str) -> Plan:
    return compile_plan(compose_config(overrides))
