"""Where dockyard keeps what outlives one command: `$DOCKYARD_HOME` (default `~/.dockyard`). It holds the
runs index (`runs/`, `compiler.targets.index`) and the compose cache's files (`cache/compose/`,
`compiler.config.stored`)."""

import os
from pathlib import Path

VARIABLE = "DOCKYARD_HOME"


def home() -> Path:
    return Path(os.environ.get(VARIABLE) or Path.home() / ".dockyard")
