"""The rules every target shares: retries, run time and the environment a user passes to the nodes."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from compiler.core import grammar
from compiler.core.capabilities import TargetCapabilities
from compiler.spec import InstanceType, schema
from compiler.spec.contract import MAX_ARG_STRLEN, NODES_PER_HOST, node_count
from compiler.spec.errors import ConfigError

if TYPE_CHECKING:
    from compiler.spec import Layout

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SECRET_NAME = re.compile(
    r"SECRET|PASSW(?:O?R)?D|PASSPHRASE|TOKEN(?![A-Z])|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL", re.IGNORECASE
)
"""A name that says its value is a secret (`OPENAI_APIKEY`, `DB_PASSWD`, `HF_TOKEN`; not `TOKENIZERS_...`)."""
RESERVED_PREFIXES = ("DOCKYARD_", "SM_", "SLURM_")
"""Variables the requests and the platforms set for the entrypoint (the plan, the hosts, the job's id): on
Slurm a user's export would win, and the containers would read another plan or requeue another job."""
USER_SWITCHES = frozenset(
    ("DOCKYARD_DEBUG", "DOCKYARD_VERBOSE", "DOCKYARD_STOP_AT_STEP", "DOCKYARD_FAULT", NODES_PER_HOST)
)
"""The entrypoint's own switches, which the user sets (README: `DOCKYARD_VERBOSE=1`); the local target sets
`NODES_PER_HOST` itself and refuses it (`compiler.targets.local.rules`)."""
RESERVED_NAMES = frozenset(
    ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK")
)
"""torchrun's rendezvous, which the entrypoint sets for every process."""


def check_target(
    config: schema.Config, instance: InstanceType, layout: Layout, targets: TargetCapabilities
) -> Iterator[str]:
    target = config.target
    if target.max_retries < 0:
        raise ConfigError("target.max_retries", f"cannot be negative (got {target.max_retries})")
    if target.max_retries > grammar.INT32_MAX:
        raise ConfigError("target.max_retries", f"{target.max_retries} is past what any target stores (2^31-1)")
    if target.max_run_hours <= 0:
        raise ConfigError("target.max_run_hours", "must be positive")
    grammar.check_hours("target.max_run_hours", target.max_run_hours)
    for name, value in target.environment.items():
        _check_environment(name, value)
    yield from ()


def _check_environment(name: str, value: str) -> None:
    key = f"target.environment.{name}"
    if not ENV_NAME.fullmatch(name):
        raise ConfigError(
            key, "is not an environment variable name", "use letters, digits and _, not starting with a digit"
        )
    if SECRET_NAME.search(name):
        raise ConfigError(
            key,
            "looks like a secret, and plans are stored and shared",
            "pass secrets through the target's own mechanism (an IAM role, a Kubernetes secret)",
        )
    if (name.startswith(RESERVED_PREFIXES) and name not in USER_SWITCHES) or name in RESERVED_NAMES:
        raise ConfigError(key, "is set by dockyard or the platform for the entrypoint", "use another name")
    if name == NODES_PER_HOST and node_count(value) is None:
        raise ConfigError(
            key,
            f"{grammar.shown(value)} is not a number of nodes",
            "give how many of the job's nodes share each machine, a whole number such as 2",
        )
    if grammar.CONTROL.search(str(value)):
        raise ConfigError(key, f"{grammar.shown(value)} holds control characters", "give a value on one line")
    if len(f"{name}={value}".encode()) + 1 > MAX_ARG_STRLEN:
        raise ConfigError(
            key, f"is longer than Linux's {MAX_ARG_STRLEN // 1024} KiB for one variable", "pass it in a file"
        )
