"""Joining a Ray cluster at the address a caller gave: only there, and an answer within seconds.

Left to itself, ``ray.init(address=...)`` does two things a caller does not
expect.  It replaces a loopback address (``127.0.0.1``, ``localhost``,
``::1``) with this machine's address on the interface that routes to a
public DNS server (so ``127.0.0.1:1`` was dialled as ``192.0.2.2:1``); and
when nothing answers it retries for many minutes, printing a warning every
~40 s (a SIGTERM waits for it: Ray's handler runs once the call returns).
So before Ray is called the address is parsed
(``host:port``, ``[v6]:port`` or ``ray://host[:port]``: anything else is an
:class:`~irflow.errors.InputError`) and one TCP connection is opened to it
(refused, unreachable or silent within ``CHECK_TIMEOUT_S``: a
:class:`~irflow.errors.RayConnectionError`); a cluster's ports speak gRPC,
so the check also sends the HTTP/2 greeting and expects the server's
(unless ``RAY_USE_TLS`` is on): a port where something else listens is
named as such at once.  Then ``ray.init`` runs in a thread the caller waits
for at most ``JOIN_TIMEOUT_S`` (the caller's ``init`` switches Ray's cluster
networking off for the call, so a loopback address stays loopback and no
interface is probed); past it the attempt is abandoned — disconnected if it
ever completes — and the caller gets the error.  Every error is one
paragraph: the address, what failed, and what to check.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
import re
import socket
import threading
import time
from typing import Callable, Iterator

import attrs

from irflow.errors import ArgumentError, InputError, RayConnectionError

__all__ = ["RayAddress", "parse_address", "same_cluster", "check_listening", "join_cluster", "refuse_while_pending",
           "CHECK_TIMEOUT_S", "JOIN_TIMEOUT_S"]

#: Longest wait for the TCP connection and the HTTP/2 greeting of the address's server.
CHECK_TIMEOUT_S = 3.0
#: Longest wait for the whole join (the check, then ``ray.init``): a cluster that answers joins in a few seconds.
JOIN_TIMEOUT_S = 12.0
#: Ray Client's port when a ``ray://`` address names none (Ray's own default).
CLIENT_PORT = 10001
#: What Ray itself dials for a loopback name (its address is replaced by this).
_LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1"})
#: The client's HTTP/2 connection preface and an empty SETTINGS frame (RFC 9113, 3.4 and 6.5).
_HTTP2_GREETING = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_SETTINGS_FRAME = 4
#: host:port, the host a name or an IPv4 address, or an IPv6 address in brackets; the port optional here.
_HOST_PORT = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^\s:/\[\]@]+))(?::(?P<port>\S*))?")

_pending_lock = threading.Lock()
_pending: "_Attempt | None" = None  # an abandoned ray.init still running


def _port(text: str, address: str) -> int:
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) < 65536:
        raise InputError(f"Ray address {address!r}: the port must be a number from 1 to 65535, got {text!r}; "
                         "give host:port, e.g. 127.0.0.1:6379 (the address `ray start --head` prints)")
    return int(text)


@attrs.frozen
class RayAddress:
    """A parsed Ray address: ``scheme`` is ``"ray"`` for a Ray Client address, else None (a cluster's GCS)."""

    host: str = attrs.field(validator=attrs.validators.min_len(1))
    port: int = attrs.field(validator=[attrs.validators.ge(1), attrs.validators.le(65535)])
    scheme: str | None = attrs.field(default=None, validator=attrs.validators.in_([None, "ray"]))

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme + '://' if self.scheme else ''}{host}:{self.port}"

    @property
    def dialled(self) -> tuple[str, int]:
        """The (host, port) Ray connects to: a loopback name is Ray's 127.0.0.1, anything else as given."""
        return ("127.0.0.1" if self.scheme is None and self.host in _LOOPBACK_NAMES else self.host), self.port


def parse_address(address: object) -> RayAddress:
    """``"host:port"``, ``"[::1]:port"`` or ``"ray://host[:port]"`` as a RayAddress, or an error saying what is valid."""
    if not isinstance(address, str):
        raise ArgumentError(f"a Ray address is a string ('auto', or host:port such as '127.0.0.1:6379'), "
                            f"got {type(address).__name__} {address!r}")
    text = address.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "", text
    elif scheme != "ray":
        raise InputError(f"Ray address {address!r}: the scheme {scheme + '://'!r} is not one irflow joins; give "
                         "host:port (a cluster's GCS, e.g. 127.0.0.1:6379) or ray://host:port (its Ray Client server)")
    match = _HOST_PORT.fullmatch(rest)
    host = (match.group("v6") or match.group("host")) if match else None
    port = match.group("port") if match else None
    if not host or (port is None and not scheme):
        raise InputError(f"Ray address {address!r} is not host:port; give the address of a running cluster's GCS, "
                         "e.g. 127.0.0.1:6379 (the address `ray start --head` prints), ray://host:10001 for "
                         "Ray Client, or 'auto' for a local cluster irflow starts")
    return RayAddress(host, CLIENT_PORT if port is None else _port(port, address), scheme or None)


def same_cluster(one: str, other: str) -> bool:
    """Whether two addresses name the same server (a loopback name is 127.0.0.1, as Ray dials it)."""
    try:
        a, b = parse_address(one), parse_address(other)
    except InputError:
        return one.strip() == other.strip()
    return (a.scheme, *a.dialled) == (b.scheme, *b.dialled)


def _failure(address: RayAddress, what: str) -> RayConnectionError:
    try:
        version = f"ray {importlib.metadata.version('ray')}"
    except importlib.metadata.PackageNotFoundError:
        version = "the installed ray"
    port = ("the cluster's Ray Client port (10001 unless `ray start --ray-client-server-port` set another)"
            if address.scheme else "the cluster's GCS port (6379 unless `ray start --port` set another)")
    return RayConnectionError(
        f"cannot join the Ray cluster at {address}: {what}. Check that a Ray cluster is running there "
        f"(`ray start --head` starts one and prints its address; 'auto' instead of an address runs on a local "
        f"cluster irflow starts), that the port is {port}, and that the cluster runs the Ray version installed "
        f"here ({version}, with the same Python).")


def check_listening(address: RayAddress, timeout: float = CHECK_TIMEOUT_S) -> None:
    """A RayConnectionError unless a server accepts a connection at ``address`` and greets in HTTP/2 (gRPC)."""
    host, port = address.dialled
    try:
        conn = socket.create_connection((host, port), timeout=timeout)
    except socket.gaierror as error:
        raise _failure(address, f"the host name {host!r} does not resolve ({error.strerror})") from None
    except ConnectionRefusedError:
        raise _failure(address, "nothing accepts connections there (connection refused)") from None
    except TimeoutError:
        raise _failure(address, f"no answer to a connection within {timeout:g} s (no machine there, or a "
                                "firewall drops the packets)") from None
    except OSError as error:
        raise _failure(address, f"the connection failed ({error.strerror or error})") from None
    with conn:
        if os.environ.get("RAY_USE_TLS", "").lower() in ("1", "true"):
            return  # a TLS cluster greets in TLS first: the TCP connection is all that can be checked here
        try:
            conn.sendall(_HTTP2_GREETING)
            reply = _receive(conn, 9, time.monotonic() + timeout)
        except OSError:
            reply = b""
    if len(reply) < 9 or reply[3] != _SETTINGS_FRAME:
        raise _failure(address, f"something listens there, but it did not answer in Ray's protocol (gRPC over "
                                f"HTTP/2) within {timeout:g} s: it is not a Ray cluster's port")


def _receive(conn: socket.socket, size: int, deadline: float) -> bytes:
    data = b""
    while len(data) < size and (left := deadline - time.monotonic()) > 0:
        conn.settimeout(left)
        chunk = conn.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


class _Attempt:
    """One ``init()`` in a daemon thread: its outcome, and whether the caller gave up waiting for it."""

    def __init__(self, address: RayAddress, init: Callable[[], None], undo: Callable[[], None]) -> None:
        self.address, self.init, self.undo = address, init, undo
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.abandoned = False
        self.thread = threading.Thread(target=self._run, name="irflow-ray-join", daemon=True)

    def _run(self) -> None:
        global _pending
        try:
            self.init()
        except BaseException as error:  # handed to the waiting caller, whatever it is
            self.error = error
        with _pending_lock:
            self.done.set()
            if not self.abandoned:
                return
            _pending = None
        if self.error is None:  # joined after the caller gave up: leave, the caller was told it failed
            with contextlib.suppress(Exception):
                self.undo()


def refuse_while_pending(wanted: str) -> None:
    """A RayConnectionError while an abandoned join of this process still runs: a second ``ray.init`` would race it."""
    with _pending_lock:
        if _pending is not None:
            raise RayConnectionError(
                f"cannot connect to Ray ({wanted}) yet: an earlier attempt of this process to join the cluster at "
                f"{_pending.address} ran out of time and is still being wound down; try again in a minute")


class _DropSigtermNotice(logging.Filter):
    """Ray notes that a ``ray.init`` outside the main thread leaves SIGTERM's handling alone; that is meant here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("SIGTERM handler is not set")


@contextlib.contextmanager
def _quiet_thread_notice() -> Iterator[None]:
    logger, dropper = logging.getLogger("ray._private.worker"), _DropSigtermNotice()
    logger.addFilter(dropper)
    try:
        yield
    finally:
        logger.removeFilter(dropper)


def join_cluster(address: str, init: Callable[[], None], undo: Callable[[], None], *,
                 timeout: float = JOIN_TIMEOUT_S) -> RayAddress:
    """Check ``address``, then run ``init()`` (the ``ray.init`` call) waiting at most ``timeout`` seconds in all.

    ``undo()`` disconnects an abandoned attempt that completes later.  An
    attempt still running from an earlier call is an error too: two
    ``ray.init`` calls at once would race.
    """
    global _pending
    parsed = parse_address(address)
    start = time.monotonic()
    refuse_while_pending(str(parsed))
    check_listening(parsed, min(CHECK_TIMEOUT_S, timeout))
    attempt = _Attempt(parsed, init, undo)
    try:
        with _quiet_thread_notice():
            attempt.thread.start()
            attempt.done.wait(max(0.0, timeout - (time.monotonic() - start)))
    finally:  # out of time, or interrupted (Ctrl-C): the attempt goes on alone, undone if it ever joins
        with _pending_lock:
            if not attempt.done.is_set():
                attempt.abandoned = True
                _pending = attempt
    if attempt.abandoned:
        raise _failure(parsed, f"the server answers, but Ray did not finish joining it within {timeout:g} s")
    if attempt.error is not None:
        if not isinstance(attempt.error, Exception):
            raise attempt.error
        said = " ".join(str(attempt.error).split()) or "no message"
        raise _failure(parsed, f"Ray could not join it ({type(attempt.error).__name__}: {said[:400]})") from None
    return parsed
