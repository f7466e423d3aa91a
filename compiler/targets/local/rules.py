"""The local target's own rules: what a container on this machine's Docker engine needs."""

from pathlib import Path

from compiler.spec import DataSource, Plan
from compiler.spec.errors import ConfigError


def check(plan: Plan) -> list[str]:
    """A host folder of token files is mounted into every node: it must be an absolute path that exists
    (a relative one would depend on where the job is started, and Docker would create a missing one)."""
    data = plan.data
    if data.source is DataSource.local:
        if not data.path or not Path(data.path).is_absolute():
            raise ConfigError(
                "data.path", f"'{data.path}' is not an absolute path", "give the host folder as /path/to/tokens"
            )
        if not Path(data.path).is_dir():
            raise ConfigError(
                "data.path", f"'{data.path}' is not a folder on this machine", "give the token files' folder"
            )
    return []
