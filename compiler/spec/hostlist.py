"""Slurm's compressed host lists, which the Slurm target reads from `squeue` on the host and the launcher
reads from SLURM_JOB_NODELIST (and DOCKYARD_HOSTS, the Kubernetes targets' compressed host list) in the
container."""

import re


class HostListError(ValueError):
    """A host list whose brackets do not hold numbers and ranges."""


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host list: 'gpu-[01-03,7],login' → gpu-01, gpu-02, gpu-03, gpu-7, login."""
    hosts: list[str] = []
    for item in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", text):
        match = re.search(r"\[([^\]]*)\]", item)
        if not match:
            hosts.append(item)
            continue
        prefix, suffix = item[: match.start()], item[match.end() :]
        for part in match[1].split(","):
            low, dash, high = part.partition("-")
            if not (low.isdigit() and (high.isdigit() or not dash)):
                raise HostListError(f"host list {text!r}: [{match[1]}] is not a list of numbers and ranges")
            for number in range(int(low), int(high or low) + 1):
                hosts += expand_hostlist(f"{prefix}{number:0{len(low)}d}{suffix}")
    return hosts
