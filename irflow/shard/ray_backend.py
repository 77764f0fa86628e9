"""Shards in Ray actors, and the contained local Ray cluster irflow starts when asked to.

Ray is an extra (``pip install -e '.[ray]'``); this module is the only one
that imports it, and only when a caller asks for Ray (``ray="auto"`` or an
address).  Each shard is served by one actor that opens (memory-maps) it;
a call goes to every shard at once and waits for all of them.

**Faults.**  An actor whose process dies is restarted by Ray
(``max_restarts``) and reopens its shard; a call it was running, or that
was sent meanwhile, is retried on the restarted actor
(``max_task_retries``: every shard call only reads, so a retry is safe).
When the retries run out the call fails with :class:`ShardUnavailableError`
naming the shard — the other shards' answers are dropped, never merged
into a partial answer.  An error a shard raises on purpose (a damaged
file: :class:`~irflow.errors.CorpusError` naming the shard and the file)
is raised as itself.

**Contained and offline.**  ``address="auto"`` uses the cluster this
process is already connected to, or starts a local one with settings that
keep it on this machine: ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (no cluster
networking: the node address is 127.0.0.1, not an address learnt by
probing a public DNS server), ``RAY_USAGE_STATS_ENABLED=0`` (no usage
report), ``RAY_AUTH_MODE=disabled`` (no ``~/.ray/auth_token`` written),
``HOME`` pointing, during ``ray.init``, at a folder holding an empty
``ray_bootstrap_config.yaml`` (Ray then does not probe cloud metadata
addresses to learn where it runs), and Ray's session files and sockets
under ``$IRFLOW_HOME/ray`` (a short path: Unix socket paths are limited
to ~107 bytes; a long ``$IRFLOW_HOME`` falls back to a folder under the
system's temp directory).  ``num_cpus`` defaults to the CPUs this process
may run on.  ``ray.init`` is told ``address="local"``, so ``RAY_ADDRESS``
or a cluster ``ray start`` left behind is not joined instead.

**Joining.**  Any other address (``"127.0.0.1:6379"``, ``"ray://host:10001"``)
joins that cluster and no other (:mod:`irflow.shard.ray_join`): the address
is checked before Ray is called, Ray's cluster networking is off for the
``ray.init`` call (so a loopback address is dialled as given, not replaced
by this machine's address on its network), and a cluster that does not
answer is a :class:`~irflow.errors.RayConnectionError` within seconds.
irflow changes none of the cluster's settings.  A process already on a
cluster refuses to run on another address.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import attrs

from irflow.errors import IrflowError, RayConnectionError, ShardUnavailableError
from irflow.util.corpusmarks import refuse_inside_corpus
from irflow.util.extras import install_hint
from irflow.store.paths import irflow_home
from irflow.shard.backend import Call
from irflow.shard.manifest import ShardManifest
from irflow.shard.ray_join import join_cluster, parse_address, refuse_while_pending, same_cluster
from irflow.shard.worker import ShardWorker

__all__ = ["RayBackend", "connect", "shutdown", "map_on_actors", "CONTAINED_ENV", "ray_temp_dir", "require_ray"]

logger = logging.getLogger(__name__)

#: Ray's switch for cluster networking (off: the node is 127.0.0.1, nothing probed).
CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
#: What irflow sets while it starts a local cluster (see the module docstring).
CONTAINED_ENV: dict[str, str] = {
    CLUSTER_SWITCH: "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_AUTH_MODE": "disabled",
}
#: Restarts of a dead shard actor, and retries of a call it was running.
MAX_RESTARTS = 3
MAX_TASK_RETRIES = 3
#: Object store of a cluster irflow starts: shard answers are small (top-k lists, masks of a shard's rows).
OBJECT_STORE_BYTES = 256 << 20
#: Longest temp dir Ray's Unix socket paths leave room for (session_<date>_<pid>/sockets/plasma_store).
TEMP_DIR_LIMIT = 40

_state_lock = threading.Lock()
_started_here = False  # this process started the local cluster it is connected to
_joined: str | None = None  # the address this process joined (not "auto")


def require_ray() -> Any:
    """The ``ray`` module (its driver's messages routed to stderr), or an IrflowError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise IrflowError(f"Ray is not installed, and serving shards on Ray needs it: {install_hint('ray')} "
                          "(or serve the shards in this process: ray=None)") from None
    _driver_messages_to_stderr(ray)
    return ray


def _driver_messages_to_stderr(ray: Any) -> None:
    """Ray's driver prints what the cluster tells it on stdout; send it to stderr, where logs go.

    ``log_to_driver=False`` stops the workers' output, but not the error
    messages a driver always listens for (``(raylet) A worker died or was
    killed ...``) nor what it flushes on shutdown: Ray prints them with
    ``print_to_stdstream`` on stdout unless they are marked as errors.
    Marking all of them keeps stdout for the caller's output (``irflow eval
    --json``).  Ray has no setting for this, so its function is wrapped,
    once; another Ray layout is left as it is.
    """
    module = getattr(getattr(ray, "_private", None), "worker", None)
    original = getattr(module, "print_to_stdstream", None)
    if module is None or original is None or getattr(original, "irflow_to_stderr", False):
        return

    def to_stderr(data: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        return original({**data, "is_err": True}, *args, **kwargs)

    to_stderr.irflow_to_stderr = True  # type: ignore[attr-defined]
    module.print_to_stdstream = to_stderr


def ray_temp_dir() -> Path:
    """Where a cluster irflow starts keeps its sessions, logs and sockets: ``$IRFLOW_HOME/ray`` when short enough."""
    preferred = irflow_home() / "ray"
    if len(str(preferred.absolute())) <= TEMP_DIR_LIMIT:
        return preferred.absolute()
    fallback = Path(tempfile.gettempdir()) / f"irflow-ray-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    logger.info("$IRFLOW_HOME/ray (%s) is too long for Ray's socket paths; using %s", preferred, fallback)
    return fallback


@contextlib.contextmanager
def _contained_env(home: Path) -> Iterator[None]:
    """CONTAINED_ENV and HOME=home for the block (the processes Ray starts inherit them), then restored."""
    saved = {key: os.environ.get(key) for key in [*CONTAINED_ENV, "HOME"]}
    os.environ.update(CONTAINED_ENV)
    os.environ["HOME"] = str(home)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@contextlib.contextmanager
def _no_cluster_networking(user: str | None) -> Iterator[None]:
    """RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 in effect for this process's ``ray.init``, then as the user had it.

    Ray reads the switch once, when ``ray`` is first imported: if the caller
    imported it before, the environment variable comes too late, and Ray
    would learn the node's address by asking which interface reaches a
    public DNS server (turning even an explicit "127.0.0.1" into that
    address).  So its constant is set for the block; afterwards it is what
    the user's environment (``user``: their value of the variable) says,
    whoever imported ray.
    """
    users_choice = user.lower() in ("1", "true") if user is not None else sys.platform not in ("darwin", "win32")
    ray = require_ray()
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    if constants is None or not hasattr(constants, "ENABLE_RAY_CLUSTER"):  # another Ray layout: the env var only
        yield
        return
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = users_choice


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def start_local_cluster(*, num_cpus: int | None = None, object_store_memory: int | None = None) -> Any:
    """Start a contained local Ray cluster and connect this process to it (see the module docstring)."""
    global _started_here
    temp = ray_temp_dir()
    refuse_inside_corpus(temp, "Ray folder")  # sessions, logs and sockets: never inside a corpus ($IRFLOW_HOME there)
    home = temp / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "ray_bootstrap_config.yaml").touch()
    users_switch = os.environ.get(CLUSTER_SWITCH)
    with _contained_env(home), _no_cluster_networking(users_switch):  # ray first imported with the env set
        ray = require_ray()
        # address="local": a new cluster, whatever RAY_ADDRESS says (Ray would join that one for address=None)
        ray.init(address="local",
                 num_cpus=num_cpus or _available_cpus(), object_store_memory=object_store_memory or OBJECT_STORE_BYTES,
                 _temp_dir=str(temp), _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=False,
                 logging_level=logging.WARNING, configure_logging=False)
    _started_here = True
    atexit.register(shutdown)
    return ray


def connect(address: str = "auto", **options: Any) -> Any:
    """Connect this process to Ray: ``"auto"`` the connected cluster or a new contained one; else join ``address``."""
    local = address in ("auto", "local")
    if not local:
        parse_address(address)  # a malformed address is refused before Ray is imported
    ray = require_ray()
    with _state_lock:
        if ray.is_initialized():
            if not local:
                _refuse_another_cluster(ray, address)
            return ray
        if local:
            refuse_while_pending("a local cluster")
            return start_local_cluster(**options)
        if options:
            raise TypeError(f"options {sorted(options)} apply to a cluster irflow starts (ray='auto'), "
                            f"not to joining {address!r}")
        _join(ray, address)
        return ray


def _join(ray: Any, address: str) -> None:
    """Join the cluster at ``address`` and nowhere else, or fail within seconds (see :mod:`irflow.shard.ray_join`)."""
    global _joined
    users_switch = os.environ.get(CLUSTER_SWITCH)

    def init() -> None:
        with _no_cluster_networking(users_switch):  # Ray then dials a loopback address as given, probing nothing
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING, configure_logging=False)

    join_cluster(address, init, undo=ray.shutdown)
    _joined = address


def _refuse_another_cluster(ray: Any, address: str) -> None:
    """This process is connected already: fine for that cluster's address, an error for any other."""
    current = _joined
    if current is None:
        with contextlib.suppress(Exception):  # Ray Client connections, or another Ray layout: no address to compare
            current = ray.get_runtime_context().gcs_address
    if current is not None and not same_cluster(current, address):
        raise RayConnectionError(
            f"this process is already connected to the Ray cluster at {current}, so it cannot also join {address}: "
            "a process is on one cluster at a time. Ask for 'auto' to use the connected cluster, or disconnect "
            "first (ray.shutdown(), or shutdown() from irflow.shard.ray_backend) and ask again.")


def shutdown() -> None:
    """Disconnect from Ray; a local cluster irflow started is stopped (its processes end)."""
    global _started_here, _joined
    try:
        import ray
    except ImportError:
        return
    with _state_lock:
        if ray.is_initialized():
            ray.shutdown()
        _started_here = False
        _joined = None


def map_on_actors(server: type, init_args: tuple[Any, ...], method: str, items: Sequence[tuple[Any, ...]], *,
                  address: str = "auto", n_actors: int | None = None,
                  on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
    """``server(*init_args).method(*item)`` for every item, spread over a pool of actors; results in item order.

    One actor per CPU of the cluster (``n_actors`` to choose), each holding
    ``server`` for the whole map (it opens what it needs once); at most two
    items in flight per actor, so a slow item does not hold back the rest.
    ``on_done(index, result)`` is called as each item finishes (progress).
    A dead actor is restarted and its item retried; an error an item
    raises is raised as itself, and the actors are ended either way.
    """
    ray = connect(address)
    if not items:
        return []
    count = n_actors or max(1, int(ray.cluster_resources().get("CPU", 1)))
    remote = ray.remote(server).options(num_cpus=1, max_restarts=MAX_RESTARTS, max_task_retries=MAX_TASK_RETRIES)
    actors = [remote.remote(*init_args) for _ in range(min(count, len(items)))]
    results: list[Any] = [None] * len(items)
    pending: dict[Any, tuple[int, int]] = {}  # ref -> (item, actor)
    queue = list(range(len(items)))
    load = [0] * len(actors)
    try:
        while queue or pending:
            for a in range(len(actors)):
                while queue and load[a] < 2:
                    i = queue.pop(0)
                    pending[getattr(actors[a], method).remote(*items[i])] = (i, a)
                    load[a] += 1
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            i, a = pending.pop(ref)
            load[a] -= 1
            try:
                results[i] = ray.get(ref)
            except ray.exceptions.RayTaskError as error:
                cause = getattr(error, "cause", None)
                raise (cause if isinstance(cause, Exception) else error) from None
            except ray.exceptions.RayActorError as error:
                raise ShardUnavailableError(f"a Ray actor of the pool died and was not brought back after "
                                            f"{MAX_RESTARTS} restarts ({str(error).splitlines()[0][:200]}); "
                                            "no partial result is returned") from None
            if on_done is not None:
                on_done(i, results[i])
    finally:
        for actor in actors:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
    return results


class _ShardServer:
    """The actor body: opens its shard on first call, so an open error reaches the caller as itself.

    (An error raised in an actor's constructor kills the actor and arrives
    as Ray's ActorDiedError with the message in text; a restarted actor
    runs the constructor again, so opening lazily also reopens the shard.)
    """

    def __init__(self, *args: Any) -> None:
        self.args = args
        self.worker: Any = None

    def call(self, method: str, *args: Any) -> Any:
        if self.worker is None:
            self.worker = ShardWorker(*self.args)
        return self.worker.call(method, *args)


class RayBackend:
    """One Ray actor per shard (see the module docstring); calls go to all of them at once."""

    def __init__(self, root: Path, manifest: ShardManifest, *, address: str = "auto", verify: bool = True,
                 **options: Any) -> None:
        ray = connect(address, **options)
        self._ray = ray
        self.address = address
        server = ray.remote(_ShardServer).options(
            num_cpus=0, scheduling_strategy="SPREAD", max_restarts=MAX_RESTARTS, max_task_retries=MAX_TASK_RETRIES)
        self.actors = [server.remote(str(root), attrs.asdict(entry), manifest.name, dict(manifest.analyzer),
                                     None if manifest.embedder is None else dict(manifest.embedder), verify)
                       for entry in manifest.shards]
        self.n_shards = len(self.actors)
        self.description = f"ray ({'local' if _started_here else address})"

    def run(self, method: str, calls: Sequence[Call]) -> list[tuple[Any, list[tuple[type, str]]]]:
        if not self.actors:
            raise ShardUnavailableError("the sharded corpus is closed; open it again")
        refs = [(shard, self.actors[shard].call.remote(method, *args)) for shard, args in calls]
        answers = []
        failure: BaseException | None = None
        for shard, ref in refs:  # wait for every shard even after a failure: no call is left running unseen
            try:
                answers.append(self._ray.get(ref))
            except self._ray.exceptions.RayTaskError as error:
                cause = getattr(error, "cause", None)
                failure = failure or (cause if isinstance(cause, Exception) else error)
            except self._ray.exceptions.RayActorError as error:
                failure = failure or ShardUnavailableError(
                    f"shard {shard} is unavailable: its Ray actor died and was not brought back after "
                    f"{MAX_RESTARTS} restarts ({str(error).splitlines()[0][:200]}); no answer is given from the "
                    "other shards alone — check the shard's node and try again")
        if failure is not None:
            raise failure
        return answers

    def close(self) -> None:
        for actor in self.actors:
            with contextlib.suppress(Exception):
                self._ray.kill(actor, no_restart=True)
        self.actors = []
