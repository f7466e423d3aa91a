"""Who trains in containers started on the user's own machines (the local target, Slurm's docker runtime).

Tools that run containers for a user run them as that user (`docker run --user`, dev containers, pyxis), so
the files a run writes on the host are the user's and a checkpoint only its owner can read (transformers'
`save_pretrained` writes 0600) trains as it is. The image still starts as root, prepares its paths, and then
drops to the user's numeric uid and gid. A launch by root keeps SageMaker's contract instead: training drops
to the image's own unprivileged user.
"""

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HostUser:
    uid: int
    gid: int

    def __str__(self) -> str:
        return f"{self.uid}:{self.gid}"


def invoking_user() -> HostUser | None:
    """The user running dockyard, or None for root (whose runs drop to the image's user): the I/O side of the
    local targets reads it and hands it to their pure translators."""
    uid = os.getuid()
    return None if uid == 0 else HostUser(uid, os.getgid())


def make_run_folders(folders: list[str] | tuple[str, ...]) -> None:
    """The folders training writes on the host, never world-writable: 0700 for a launching user, who trains in
    them; 0755 after a launch by root, whose image user another root launch must be able to read them as (a
    model exported by one run fine-tuned by the next: `check_checkpoint_readable`)."""
    mode = 0o755 if invoking_user() is None else 0o700
    for folder in folders:
        Path(folder).mkdir(mode=mode, parents=True, exist_ok=True)
