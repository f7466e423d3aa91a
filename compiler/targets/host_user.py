"""Who trains in containers started on the user's own machines (the local target, Slurm's docker runtime).

Tools that run containers for a user run them as that user (`docker run --user`, dev containers, pyxis), so
the files a run writes on the host are the user's and a checkpoint only its owner can read (transformers'
`save_pretrained` writes 0600) trains as it is. The image still starts as root, prepares its paths, and then
drops to the user's numeric uid and gid. A launch by root keeps SageMaker's contract instead: training drops
to the image's own unprivileged user.
"""

import os
from dataclasses import dataclass


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
