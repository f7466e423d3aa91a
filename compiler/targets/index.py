"""The runs index under `$DOCKYARD_HOME` (default `~/.dockyard`): every launched run leaves one small file,
`runs/<run id>`, that holds its folder, so `dockyard status|logs|stop RUN` find a run by its id from any
folder and `dockyard runs` lists them all without searching the file system.

One file per run (not one shared file) lets a sweep's points register from parallel threads, and other
dockyard processes at the same time, without a lock. The run's record stays in its own folder
(`compiler.targets.records`); an entry whose folder was removed is passed over, not deleted.
"""

from pathlib import Path

from compiler.core.home import home, write_whole

RUNS = "runs"
NAME_MAX = 255
"""The longest file name; a longer id is no run's (run ids are at most 63 characters)."""


def register(run_id: str, run_dir: Path) -> None:
    """Point `run_id` at `run_dir` (written once; atomically, so a reader never sees half a path)."""
    entry = home() / RUNS / run_id
    folder = str(run_dir.resolve())
    if entry.is_file() and entry.read_text() == folder:
        return
    write_whole(entry, folder.encode())


def folder_of(run_id: str) -> Path | None:
    """The folder registered for `run_id`, or None (a name that cannot be an entry is none either)."""
    if not run_id or "/" in run_id or run_id.startswith(".") or len(run_id) > NAME_MAX:
        return None
    entry = home() / RUNS / run_id
    return Path(entry.read_text()) if entry.is_file() else None


def folders() -> list[Path]:
    """Every registered run's folder."""
    entries = home() / RUNS
    if not entries.is_dir():
        return []
    return [Path(entry.read_text()) for entry in sorted(entries.iterdir()) if not entry.name.startswith(".")]
