"""Ports on the host's loopback, opened to a run's containers: a server bound to 127.0.0.1 (an MLflow
tracking server started with `--host 127.0.0.1`) accepts no connection from a container, which reaches the
host only at its network's gateway address. A relay listens there, on the same port, and copies each
connection to 127.0.0.1 and back, for as long as the run's containers live.
"""

import socket
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress

BUFFER = 65536


@contextmanager
def relaying(address: str, ports: tuple[int, ...]) -> Iterator[None]:
    """Relay `address:port` to `127.0.0.1:port` for each port until the block ends."""
    with ExitStack() as stack:
        for port in ports:
            listener = socket.create_server((address, port))
            stack.callback(listener.close)
            threading.Thread(target=_accept, args=(listener, port), daemon=True).start()
        yield


def _accept(listener: socket.socket, port: int) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:  # closed at the end of the run
            return
        try:
            server = socket.create_connection(("127.0.0.1", port))
        except OSError:  # nothing listens there (a tracker that is down): the container sees a refusal
            client.close()
            continue
        for source, sink in ((client, server), (server, client)):
            threading.Thread(target=_copy, args=(source, sink), daemon=True).start()


def _copy(source: socket.socket, sink: socket.socket) -> None:
    """One direction of a connection; its end is passed on as a half-close, so the other direction finishes
    (the sockets close when both threads have let go of them)."""
    with suppress(OSError):
        while data := source.recv(BUFFER):
            sink.sendall(data)
    with suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
