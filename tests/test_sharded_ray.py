"""Sharded corpora on a real local Ray cluster: the same answers, faults, eval --ray, and a contained cluster.

One cluster for the whole session (starting one costs 10-15 s here): the
``cluster`` fixture starts it the way irflow does for ``ray="auto"`` and
every test reuses it.  Skipped cleanly when ray is not installed.  The
phase and merge logic is tested in-process (tests/test_sharded.py); here
the same answers must come back across process boundaries.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import engine_fakes  # noqa: F401  (maps irflow.stages / irflow.recipes in a bare checkout)
import irflow
from irflow.cli import main as cli
from irflow.store.corpus import build
from irflow.errors import CorpusError, RayConnectionError, ShardUnavailableError
from irflow.engine.recipe import builtin_recipes, load_recipe
from irflow.shard import ShardedCorpus, shard
from irflow.util import progress
from loopback_servers import closed_port, loopback_server
from shard_corpus import KINDS, assert_same_result, records

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

QUERIES = ["fast python parser", "graph network tool", "sql schema query", "http client json cache"]


@pytest.fixture(scope="module")
def cluster():
    """A contained local cluster started by irflow (IRFLOW_HOME and HOME are temporary folders)."""
    from irflow.shard import ray_backend

    if ray.is_initialized():
        ray.shutdown()
    saved = {key: os.environ.get(key) for key in ("IRFLOW_HOME", "HOME", "RAY_ADDRESS")}
    home = Path(tempfile.mkdtemp(prefix="irfh"))  # short: Ray's socket paths live under it
    user = Path(tempfile.mkdtemp(prefix="irfu"))  # the user's HOME: Ray must write nothing there
    os.environ["IRFLOW_HOME"], os.environ["HOME"] = str(home), str(user)
    ray_address = os.environ["RAY_ADDRESS"] = f"127.0.0.1:{closed_port()}"  # "auto" starts its own cluster all the same
    seen = {}
    real_init = ray.init

    def spy(*args, **kwargs):  # what irflow set while Ray started
        seen["env"] = {key: os.environ.get(key) for key in [*ray_backend.CONTAINED_ENV, "HOME"]}
        seen["kwargs"] = kwargs
        return real_init(*args, **kwargs)

    ray.init = spy
    try:
        ray_backend.connect("auto", num_cpus=2)
    finally:
        ray.init = real_init
        os.environ.pop("RAY_ADDRESS")
    yield {"home": home, "user": user, "seen": seen, "ray_address": ray_address}
    ray_backend.shutdown()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="module")
def corpora(cluster, tmp_path_factory):
    single = build(records(interleave=True), embedder="hash", name="toys")
    root = tmp_path_factory.mktemp("ray") / "toys.sharded"
    shard(single, 3, root).close()
    sharded = irflow.open_corpus(root, ray="auto")
    yield single, sharded, root
    sharded.close()


# -- contained and offline ----------------------------------------------------------------------------


def _ray_pids() -> list[int]:
    """This process's descendants (the cluster irflow started: gcs, raylet, workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            out.append(child)
            todo.append(child)
    return out


def _addresses(pids: list[int]) -> list[tuple[str, str, str]]:
    """(local, remote, state) of every TCP/UDP socket these processes hold, from /proc (hex decoded)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue

    def decode(value: str, v6: bool) -> str:
        address, _ = value.split(":")
        raw = bytes.fromhex(address)
        if not v6:
            return socket.inet_ntop(socket.AF_INET, raw[::-1])
        return socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))

    found = []
    for table in ("tcp", "tcp6", "udp", "udp6"):
        try:
            lines = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[9] in inodes:
                v6 = table.endswith("6")
                found.append((decode(fields[1], v6), decode(fields[2], v6), fields[3]))
    return found


def _loopback_or_unset(address: str) -> bool:
    return address in ("0.0.0.0", "::", "::1") or address.startswith(("127.", "::ffff:127."))


def test_the_cluster_irflow_starts_is_contained(cluster, corpora):
    seen = cluster["seen"]
    assert seen["env"] == {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
                           "RAY_AUTH_MODE": "disabled", "HOME": str(cluster["home"] / "ray" / "home")}
    assert (cluster["home"] / "ray" / "home" / "ray_bootstrap_config.yaml").read_text() == ""
    assert seen["kwargs"]["_temp_dir"] == str(cluster["home"] / "ray")
    assert seen["kwargs"]["num_cpus"] == 2 and seen["kwargs"]["_node_ip_address"] == "127.0.0.1"
    # a new cluster of its own, not the one RAY_ADDRESS names (which is closed: joining it would have failed)
    assert seen["kwargs"]["address"] == "local"
    assert ray.get_runtime_context().gcs_address != cluster["ray_address"]
    # the environment is restored for this process; Ray's sessions live under $IRFLOW_HOME/ray
    assert os.environ["HOME"] == str(cluster["user"]) and "RAY_AUTH_MODE" not in os.environ
    assert any(p.name.startswith("session_") for p in (cluster["home"] / "ray").iterdir())
    assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
    # no auth token written, neither in the user's HOME nor in the one Ray saw
    assert not (cluster["user"] / ".ray").exists()
    assert not (cluster["home"] / "ray" / "home" / ".ray" / "auth_token").exists()
    # every socket of every process of the cluster is bound to loopback, and talks to loopback only
    pids = _ray_pids()
    assert len(pids) >= 3  # gcs, raylet, a worker at least
    sockets = _addresses(pids)
    assert sockets and all(_loopback_or_unset(local) for local, _, _ in sockets), sockets
    assert all(_loopback_or_unset(remote) for _, remote, _ in sockets), sockets


# -- the same answers across processes ---------------------------------------------------------------


@pytest.mark.parametrize("name", builtin_recipes())
def test_every_builtin_recipe_on_ray(corpora, name):
    single, sharded, _ = corpora
    assert sharded.backend.description.startswith("ray")
    params = {"k": 4, "filter": {"lang": "py"}} if name != "dense" else {"k": 30}
    assert_same_result(load_recipe(name).run(single, QUERIES, trace=True, **params),
                       load_recipe(name).run(sharded, QUERIES, trace=True, **params))


def test_search_bm25_variants_and_surfaces_on_ray(corpora):
    single, sharded, _ = corpora
    for bm25 in ({"variant": "okapi"}, {"variant": "bm25l", "stats": "corpus"}, {"variant": "bm25plus"}):
        for surfaces in (None, ["readme_chunk", "deps"]):
            params = dict(mode="hybrid", bm25=bm25, surfaces=surfaces, k=12, filter={"owner": "bob"},
                          formulate=lambda q: [q, "python data"])
            a, b = irflow.search(single, "graph parser", **params), irflow.search(sharded, "graph parser", **params)
            assert [(h.record_id, h.score.hex()) for h in a] == [(h.record_id, h.score.hex()) for h in b]


# -- faults ---------------------------------------------------------------------------------------------


def test_a_shard_killed_mid_batch_is_restarted_and_the_batch_retried(corpora, tmp_path):
    single, sharded, _ = corpora
    actor = sharded.backend.actors[1]
    marker = tmp_path / "paused"
    pid, _ = ray.get(actor.call.remote("arm_pause", "dense", 60.0, str(marker)))
    out = {}
    runner = threading.Thread(target=lambda: out.setdefault("r", load_recipe("hybrid").run(sharded, QUERIES)))
    runner.start()
    deadline = time.monotonic() + 60
    while not marker.exists():
        assert time.monotonic() < deadline, "the shard never started the batch"
        time.sleep(0.05)
    assert int(marker.read_text()) == pid
    os.kill(pid, signal.SIGKILL)  # the shard's process dies in the middle of the batch
    runner.join(120)
    assert not runner.is_alive()
    assert_same_result(load_recipe("hybrid").run(single, QUERIES), out["r"])
    info, _ = ray.get(actor.call.remote("info"))
    assert info["pid"] != pid  # restarted (and reopened its shard)


def test_a_shard_that_stays_dead_gives_no_answer(corpora):
    _, _, root = corpora
    with irflow.open_corpus(root, ray="auto") as sharded:
        ray.kill(sharded.backend.actors[2], no_restart=True)
        with pytest.raises(ShardUnavailableError, match="shard 2 is unavailable"):
            irflow.search(sharded, "python", mode="hybrid")


def test_a_damaged_shard_on_ray_names_the_shard_and_the_file(cluster, tmp_path):
    root = tmp_path / "bad.sharded"
    shard(build(records(9), embedder="hash"), 3, root).close()
    (postings,) = root.glob("shard-001/gen-*/postings.post_rows.npy")
    intact = postings.read_bytes()
    postings.write_bytes(intact[:-1] + bytes([intact[-1] ^ 0xFF]))
    with pytest.raises(CorpusError, match=r"shard 1 \(.*shard-001\).*postings\.post_rows\.npy"):
        ShardedCorpus.open(root, ray="auto")
    postings.write_bytes(intact)
    # vectors are verified on their first dense use (mapped, not read at open): that search fails, naming them
    (vectors,) = root.glob("shard-002/gen-*/vectors.npy")
    data = bytearray(vectors.read_bytes())
    data[-3] ^= 0x55
    vectors.write_bytes(bytes(data))
    with ShardedCorpus.open(root, ray="auto") as sharded:
        assert irflow.search(sharded, "python", mode="lexical")  # the lexical files are intact
        with pytest.raises(CorpusError, match=r"shard 2 \(.*shard-002\).*vectors\.npy"):
            irflow.search(sharded, "python", mode="dense")


# -- the command line: run --ray, eval --ray ---------------------------------------------------------


def test_cli_shard_and_run_on_ray(corpora, tmp_path):
    single, _, _ = corpora
    plain = tmp_path / "plain"
    build(records(interleave=True), embedder="hash", name="toys", path=plain)
    runner = CliRunner()
    done = runner.invoke(cli, ["shard", str(plain), "--shards", "2", "--out", str(tmp_path / "s"), "--json"])
    assert done.exit_code == 0, done.output
    assert [s["dir"] for s in json.loads(done.output)["shards"]] == ["shard-000", "shard-001"]
    args = ["run", "hybrid", "-q", "sql parser", "-q", "graph tool", "--json", "--explain", "2"]
    here = runner.invoke(cli, [*args, "--corpus", str(plain)])
    there = runner.invoke(cli, [*args, "--corpus", str(tmp_path / "s"), "--ray", "auto"])
    assert here.exit_code == 0 and there.exit_code == 0, there.output
    assert json.loads(here.output)["queries"] == json.loads(there.output)["queries"]


def _collection(root: Path) -> Path:
    """A small BEIR-format collection: documents from the test records, judged queries."""
    root.mkdir()
    docs = records(20, seed=3)
    with open(root / "corpus.jsonl", "w") as out:
        for i, r in enumerate(docs):
            out.write(json.dumps({"_id": f"d{i}", "title": r["artifact_id"], "text": r["text"]}) + "\n")
    queries = {f"q{i}": q for i, q in enumerate(QUERIES + ["python data", "archive file", "vector index search"])}
    with open(root / "queries.jsonl", "w") as out:
        for qid, text in queries.items():
            out.write(json.dumps({"_id": qid, "text": text}) + "\n")
    (root / "qrels").mkdir()
    rng = np.random.default_rng(1)
    with open(root / "qrels" / "test.tsv", "w") as out:
        out.write("query-id\tcorpus-id\tscore\n")
        for qid in queries:
            for d in rng.choice(len(docs), size=4, replace=False).tolist():
                out.write(f"{qid}\td{d}\t{int(rng.integers(1, 3))}\n")
    return root


def test_eval_on_ray_gives_the_same_figures(cluster, tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "DELAY", 0.0)  # stderr is a log here: lines show only for "long" phases
    data = _collection(tmp_path / "mini")
    runner = CliRunner()
    args = ["eval", "lexical", "hybrid", "--dataset", str(data), "--embedder", "hash", "--batch-size", "2",
            "--sweep", "k=5,10", "--json"]
    here = runner.invoke(cli, args)
    there = runner.invoke(cli, [*args, "--ray", "auto", "--progress"])
    assert here.exit_code == 0, here.output
    assert there.exit_code == 0, there.output
    figures = json.loads(here.stdout)
    assert json.loads(there.stdout) == figures
    assert len(figures["systems"]) == 4
    assert "evaluating mini" in there.stderr and f"{4 * 7}/{4 * 7} queries (100%)" in there.stderr  # progress, every batch
    # the Python API: the same runs, query by query
    plain = irflow.evaluate(["lexical", "dense"], data, embedder="hash", batch_size=3)
    on_ray = irflow.evaluate(["lexical", "dense"], data, embedder="hash", batch_size=3, ray="auto")
    assert [s.run for s in plain.systems] == [s.run for s in on_ray.systems]
    assert plain.to_dict() == on_ray.to_dict()


def test_eval_of_a_given_corpus_on_ray_gives_the_same_figures(cluster, tmp_path):
    """--corpus (plain, or sharded: the actors open it by path) with --queries and --qrels, here and on Ray."""
    data = _collection(tmp_path / "mini")
    runner = CliRunner()
    built = runner.invoke(cli, ["index", str(data / "corpus.jsonl"), "--out", str(tmp_path / "c"), "--embedder", "hash"])
    assert built.exit_code == 0, built.output
    sharded = runner.invoke(cli, ["shard", str(tmp_path / "c"), "--shards", "2", "--out", str(tmp_path / "s")])
    assert sharded.exit_code == 0, sharded.output
    args = ["eval", "lexical", "hybrid", "--queries", str(data / "queries.jsonl"), "--qrels",
            str(data / "qrels" / "test.tsv"), "--batch-size", "3", "--json"]
    here = runner.invoke(cli, [*args, "--corpus", str(tmp_path / "c")])
    assert here.exit_code == 0, here.output
    for corpus in ("c", "s"):
        there = runner.invoke(cli, [*args, "--corpus", str(tmp_path / corpus), "--ray", "auto"])
        assert there.exit_code == 0, there.output
        assert json.loads(there.stdout)["systems"] == json.loads(here.stdout)["systems"]
        assert json.loads(there.stdout)["identical"] == json.loads(here.stdout)["identical"]


def test_a_registry_entry_the_actors_cannot_load_does_not_stop_the_pool(cluster, tmp_path, monkeypatch):
    """An entry whose module only the driver can import (a plugin from a folder the actors do not see) is left out there."""
    home = tmp_path / "only_here"
    home.mkdir()
    (home / "only_here_mod.py").write_text("def lonely(query):\n    return [query]\n")
    monkeypatch.syspath_prepend(str(home))
    module = importlib.import_module("only_here_mod")
    data = _collection(tmp_path / "mini")
    plain = irflow.evaluate(["lexical"], data, embedder="hash", batch_size=3)
    with irflow.registry.registered("only_here_lonely", module.lonely):
        on_ray = irflow.evaluate(["lexical"], data, embedder="hash", batch_size=3, ray="auto")
    assert plain.to_dict() == on_ray.to_dict()


KILLER = '''"""Imported in every actor of an evaluation: the first actor's process kills itself, once."""
import os
import signal
from pathlib import Path

import ray

if ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None:
    try:
        fd = os.open(Path(__file__).with_suffix(".killed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        pass
    else:
        os.close(fd)
        os.kill(os.getpid(), signal.SIGKILL)
'''


def test_eval_json_on_ray_is_alone_on_stdout_when_a_worker_dies(cluster, tmp_path):
    """Ray's driver prints '(raylet) A worker died ...' when an actor's process dies: on stderr, not in the JSON.

    A real process (its stdout whole, Ray's shutdown included) joins this session's cluster; a plugin
    kills the first actor, Ray restarts it and the evaluation completes.
    """
    data = _collection(tmp_path / "mini")
    killer = tmp_path / "killer.py"
    killer.write_text(KILLER)
    # the joining driver takes its node address from the cluster's switch as irflow's own cluster has it
    env = {**os.environ, "IRFLOW_HOME": str(tmp_path / "home"), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    args = ["eval", "lexical", "--dataset", str(data), "--embedder", "none", "--batch-size", "1", "--json"]
    done = subprocess.run([sys.executable, "-m", "irflow", *args, "--ray", ray.get_runtime_context().gcs_address,
                           "--plugin", str(killer)], capture_output=True, text=True, timeout=240, env=env,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout)  # the JSON and nothing else
    assert killer.with_suffix(".killed").exists() and "A worker died" in done.stderr  # it happened, and said so
    assert figures == json.loads(CliRunner().invoke(cli, args).stdout)  # the figures without Ray


def test_ray_driver_messages_go_to_stderr(cluster, capsys):
    from irflow.shard import ray_backend

    ray_backend.require_ray()  # how irflow imports Ray
    line = f"(raylet) a message for the driver {time.time_ns()}"  # unique: Ray prints repeats later, deduplicated
    ray._private.worker.print_to_stdstream({"lines": [line], "pid": "raylet", "is_err": False}, ignore_prefix=False)
    out, err = capsys.readouterr()
    assert line in err and line not in out


def test_an_address_joins_that_cluster_untouched_and_as_given(cluster, monkeypatch):
    """The address reaches ray.init as given, and Ray dials it as given (its own rewrite of a loopback one is off)."""
    from ray._private import ray_constants, services

    from irflow.shard import ray_backend

    calls = []

    def spy(**kwargs):
        switch, dialled = ray_constants.ENABLE_RAY_CLUSTER, None
        if switch is False:  # what Ray dials when no node of this process answers for it (nothing is probed: off)
            with monkeypatch.context() as scope:
                scope.setattr(ray._private.worker, "_global_node", None)
                dialled = services.canonicalize_bootstrap_address(kwargs["address"])
        calls.append((kwargs, dict(os.environ), switch, dialled))

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", spy)
    monkeypatch.setattr(ray_backend, "_joined", None, raising=False)  # what this process joined: nothing yet
    before, users_switch = dict(os.environ), ray_constants.ENABLE_RAY_CLUSTER
    with loopback_server("grpc") as address:
        ray_backend.connect(address)
        with pytest.raises(TypeError, match="apply to a cluster irflow starts"):
            ray_backend.connect(address, num_cpus=2)
    ((kwargs, env, switch, dialled),) = calls
    assert kwargs["address"] == address and "_temp_dir" not in kwargs and "num_cpus" not in kwargs
    assert dialled == address  # not this machine's address on its network interface
    assert switch is False and ray_constants.ENABLE_RAY_CLUSTER == users_switch  # as the user had it afterwards
    assert env == before  # no setting of irflow's: the cluster's own apply


def test_a_process_on_a_cluster_runs_on_no_other(corpora):
    from irflow.shard import ray_backend

    _, _, root = corpora
    here = ray.get_runtime_context().gcs_address
    assert ray_backend.connect(here) is ray and ray_backend.connect(here.replace("127.0.0.1", "localhost")) is ray
    other = f"127.0.0.1:{closed_port()}"
    with pytest.raises(RayConnectionError, match=f"already connected to the Ray cluster at {here}, so it cannot "
                                                 f"also join {other}"):
        irflow.open_corpus(root, ray=other)


def test_cli_joins_a_running_cluster_at_its_loopback_address(corpora, tmp_path):
    """Another process joins the session's cluster by the address it was given (127.0.0.1, not rewritten)."""
    _, _, root = corpora
    address = ray.get_runtime_context().gcs_address
    assert address.startswith("127.0.0.1:")
    args = ["run", "hybrid", "-q", "sql parser", "-q", "graph tool", "--json", "--corpus", str(root)]
    env = {**os.environ, "HOME": str(tmp_path)}
    joined = subprocess.run([sys.executable, "-m", "irflow", *args, "--ray", address], capture_output=True, text=True,
                            env=env, timeout=120, cwd=Path(__file__).resolve().parent.parent)
    assert joined.returncode == 0, joined.stderr
    here = CliRunner().invoke(cli, args)
    assert here.exit_code == 0, here.output
    assert json.loads(joined.stdout)["queries"] == json.loads(here.output)["queries"]


# -- updates ------------------------------------------------------------------------------------------


def test_updates_through_a_ray_served_sharded_corpus_answer_as_the_single_corpus(cluster, tmp_path):
    """Updates are made on disk by this process; the Ray actors then serve the committed sharding."""
    from test_sharded_updates import _dicts, _new, assert_sharded_answers

    single = build(records(12), embedder="hash", path=tmp_path / "single")
    shard(single, 2, tmp_path / "sharded").close()
    sharded = irflow.open_corpus(tmp_path / "sharded", ray="auto")
    try:
        steps = [("add", (_new("zz-ray", 2) + [{"artifact_id": "pkg01", "surface_kind": "deps", "text": "pkg01 sql"}],)),
                 ("delete", ([r.id for r in list(single)[3:30:7]],)),
                 ("put_artifact", ("pkg04", _new("pkg04", 2, "graph network"))),
                 ("delete_artifact", ("pkg05",)),
                 ("compact", ())]
        for method, args in steps:
            getattr(single, method)(*args)
            getattr(sharded, method)(*args)
            assert _dicts(sharded) == _dicts(single), method
        assert "ray" in sharded.backend.description
        assert_sharded_answers(sharded, single)
        with pytest.raises(CorpusError):
            sharded.add([list(single)[0].to_dict()])  # refused: nothing changes
        assert _dicts(sharded) == _dicts(single)
    finally:
        sharded.close()


def test_the_shards_on_ray_tell_whether_each_artifact_is_one_record(cluster, tmp_path):
    """A lexical or dense search fetches k rows where every artifact is one record (each actor asked): the
    single corpus's hits and depth, and the seed's depth again once an artifact holds two records."""
    single = build([r for r in records() if r["surface_kind"] == KINDS[0]], embedder="hash", name="names")
    shard(single, 2, tmp_path / "names").close()
    sharded = irflow.open_corpus(tmp_path / "names", ray="auto")
    try:
        assert single.one_record_per_artifact() is sharded.one_record_per_artifact() is True
        for mode in ("lexical", "dense"):
            one = load_recipe(mode).run(single, QUERIES, k=3, trace=True)
            many = load_recipe(mode).run(sharded, QUERIES, k=3, trace=True)
            assert_same_result(one, many)
            assert len(many.outputs[mode]) == len(one.outputs[mode]) <= 3 * len(QUERIES)
        artifact = single.artifact_ids_of([0])[0]
        for corpus in (single, sharded):
            corpus.add([{"id": "second", "artifact_id": artifact, "surface_kind": KINDS[1], "text": "python"}])
        assert single.one_record_per_artifact() is sharded.one_record_per_artifact() is False
    finally:
        sharded.close()
