"""Where dockyard keeps what outlives one command: `$DOCKYARD_HOME` (default `~/.dockyard`). It holds the
runs index (`runs/`, `compiler.targets.index`) and caches (`cache/`): composed configs
(`compiler.config.stored`), large files' digests (`compiler.images.digests`) and dataclasses' compiled methods
(`compiler.core.dataclass_code`)."""

import os
from pathlib import Path

VARIABLE = "DOCKYARD_HOME"


def home() -> Path:
    return Path(os.environ.get(VARIABLE) or Path.home() / ".dockyard")


def cache(name: str) -> Path:
    """The folder of one of dockyard's caches (deleting it costs only time)."""
    return home() / "cache" / name


def write_whole(path: Path, content: bytes) -> None:
    """Write `content` through a rename, so another process reads all of it or none (folders made 0700)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_bytes(content)
    temporary.replace(path)


def keep_newest(folder: Path, pattern: str, count: int) -> None:
    """Remove all but the `count` most recently written files of `folder` that match `pattern`."""
    files = sorted(folder.glob(pattern), key=lambda path: path.stat().st_mtime_ns)
    for path in files[: max(0, len(files) - count)]:
        path.unlink(missing_ok=True)
