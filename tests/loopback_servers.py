"""Servers on the loopback interface that are not Ray clusters, and a loopback port where nothing listens.

For the tests of joining a Ray cluster at an address: every address they
give is 127.0.0.1, so nothing leaves the machine.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Iterator

#: An empty HTTP/2 SETTINGS frame: what a gRPC server (a Ray cluster's ports) sends first.
SETTINGS = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
#: How each kind of server answers a connection (None: it says nothing and keeps the connection open).
REPLIES = {"silent": None, "http1": b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", "grpc": SETTINGS}


def closed_port() -> int:
    """A loopback TCP port where nothing listens (bound for a moment to find a free one, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def loopback_server(kind: str) -> Iterator[str]:
    """A server on 127.0.0.1 answering as ``kind`` (see REPLIES); yields its ``host:port``.

    "grpc" greets like a gRPC server and then says nothing more: it passes
    a check of the protocol, and a Ray client talking to it waits forever.
    """
    reply = REPLIES[kind]
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.1)  # accept() wakes up to see the end of the test
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:  # closed: the test is over
                return
            accepted.append(conn)
            if reply is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(reply)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        server.close()
        for conn in accepted:
            conn.close()
