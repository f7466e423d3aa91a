"""Real servers the tests talk to over HTTP on 127.0.0.1 (a registry, moto), started and stopped here."""

import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def serving(
    command: Sequence[str], port: int, timeout: float = 15.0, env: Mapping[str, str] | None = None
) -> Iterator[None]:
    """Run `command` (in `env`, else this process's environment) until the block ends; enter once it accepts
    connections on `port`."""
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        deadline = time.monotonic() + timeout
        while True:
            with socket.socket() as client:
                if client.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{command[0]} did not start on port {port}")
            time.sleep(0.1)
        yield
    finally:
        server.terminate()
        server.wait()
