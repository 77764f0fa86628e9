"""Joining a Ray cluster at an address: only that address, and one clear paragraph within seconds when no cluster is there.

No cluster is started here: the addresses are a loopback port where nothing
listens and loopback servers that are not Ray (tests/loopback_servers.py).
What a real join does (a loopback address dialled as given, the answers the
same) is tested on the session's cluster in tests/test_sharded_ray.py.
Every entry point that takes an address is covered: ``open_corpus`` /
``ShardedCorpus.open`` (``irflow run --ray``), ``evaluate`` (``irflow eval
--ray``), from Python and from the command line in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import irflow
from irflow.errors import ArgumentError, InputError, RayConnectionError
from irflow.shard import ShardedCorpus, ray_join, shard
from irflow.shard.ray_backend import connect
from irflow.store.corpus import build
from loopback_servers import closed_port, loopback_server
from shard_corpus import records

ray = pytest.importorskip("ray")

#: The brief's bound for a failed join (Python) and for the whole command (a subprocess that imports ray first).
FAST_S = 15.0
COMMAND_S = 20.0


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("join") / "toys.sharded"
    shard(build(records(6), embedder="hash", name="toys"), 2, root).close()
    return root


@pytest.fixture(scope="module")
def collection(tmp_path_factory) -> Path:
    """A BEIR-format collection of two documents and one judged query."""
    root = tmp_path_factory.mktemp("join") / "mini"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n"
                                               for i, text in enumerate(["sql parser", "graph tool"])))
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q0", "text": "sql"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq0\td0\t1\n")
    return root


@pytest.fixture
def no_ray_init(monkeypatch):
    """ray.init replaced by a recorder: the tests below must fail before Ray dials anything."""
    calls: list[dict] = []
    monkeypatch.setattr(ray, "init", lambda *args, **kwargs: calls.append(kwargs))
    assert not ray.is_initialized()
    yield calls
    assert calls == []


def _ips(text: str) -> set[str]:
    return set(re.findall(r"\b\d{1,3}(?:\.\d{1,3}){3}\b", text))


def _says_what_to_check(message: str, address: str) -> None:
    assert f"cannot join the Ray cluster at {address}:" in message
    assert "`ray start --head`" in message and "GCS port" in message
    assert f"ray {ray.__version__}" in message
    assert _ips(message) == {"127.0.0.1"}  # the address given, and no other (not this machine's)


def _entry_points(sharded: Path, collection: Path, cache: Path):
    return {
        "open_corpus": lambda address: irflow.open_corpus(sharded, ray=address),
        "ShardedCorpus.open": lambda address: ShardedCorpus.open(sharded, ray=address),
        "evaluate": lambda address: irflow.evaluate("lexical", collection, embedder="hash", ray=address,
                                                    cache_dir=cache),
    }


@pytest.mark.parametrize("entry", ["open_corpus", "ShardedCorpus.open", "evaluate"])
def test_a_closed_loopback_port_fails_at_once_naming_it(sharded, collection, tmp_path, no_ray_init, entry):
    address = f"127.0.0.1:{closed_port()}"
    start = time.monotonic()
    with pytest.raises(RayConnectionError) as caught:
        _entry_points(sharded, collection, tmp_path / "cache")[entry](address)
    assert time.monotonic() - start < FAST_S
    _says_what_to_check(str(caught.value), address)
    assert "connection refused" in str(caught.value)
    assert isinstance(caught.value, ConnectionError)
    assert not (tmp_path / "cache").exists()  # evaluate checked the address before building the corpus


@pytest.mark.parametrize("kind", ["silent", "http1"])
def test_a_port_where_something_else_listens_fails_at_once(sharded, collection, tmp_path, no_ray_init, monkeypatch,
                                                           kind):
    monkeypatch.setattr(ray_join, "CHECK_TIMEOUT_S", 0.5)  # the silent one is waited for (3 s in the CLI test below)
    with loopback_server(kind) as address:
        for entry, call in _entry_points(sharded, collection, tmp_path / "cache").items():
            start = time.monotonic()
            with pytest.raises(RayConnectionError) as caught:
                call(address)
            assert time.monotonic() - start < 2.5, entry
            _says_what_to_check(str(caught.value), address)
            assert "did not answer in Ray's protocol" in str(caught.value), entry


@pytest.mark.parametrize("address, fault", [
    ("localhost", "is not host:port"), ("127.0.0.1", "is not host:port"), ("127.0.0.1:0", "port must be"),
    ("127.0.0.1:65536", "port must be"), ("127.0.0.1:http", "port must be"), ("::1:6379", "is not host:port"),
    ("http://127.0.0.1:6379", "scheme 'http://'"), ("", "is not host:port"),
])
def test_a_malformed_address_is_one_error_before_ray_is_called(no_ray_init, address, fault):
    with pytest.raises(InputError, match=re.escape(fault)) as caught:
        connect(address)
    assert repr(address) in str(caught.value) and "e.g. 127.0.0.1:6379" in str(caught.value)


def test_an_address_that_is_not_a_string_is_an_argument_error(sharded, no_ray_init):
    with pytest.raises(ArgumentError, match="a Ray address is a string"):
        irflow.open_corpus(sharded, ray=6379)


@given(st.sampled_from(["127.0.0.1", "10.0.0.7", "head-node.example", "::1", "fd00::2"]),
       st.integers(1, 65535), st.booleans())
def test_an_address_parses_back_to_itself(host, port, client):
    def written(port: int) -> str:
        return f"{'ray://' if client else ''}{f'[{host}]' if ':' in host else host}:{port}"

    parsed = ray_join.parse_address(written(port))
    assert (parsed.host, parsed.port, parsed.scheme) == (host, port, "ray" if client else None)
    assert str(parsed) == written(port)
    assert ray_join.same_cluster(written(port), f" {parsed} ")
    assert not ray_join.same_cluster(written(port), written(port % 65535 + 1))


def test_loopback_names_are_the_address_ray_dials():
    assert ray_join.same_cluster("localhost:6379", "127.0.0.1:6379") and ray_join.same_cluster("[::1]:1", "127.0.0.1:1")
    assert not ray_join.same_cluster("127.0.0.1:6379", "ray://127.0.0.1:6379")
    assert ray_join.parse_address("ray://head").port == ray_join.CLIENT_PORT


# -- the bound on ray.init itself -----------------------------------------------------------------------------


def test_a_join_that_does_not_finish_is_abandoned_and_undone():
    """ray.init past the bound: the caller is told at once, a second join waits its turn, a late join is undone."""
    release, undone = threading.Event(), []
    with loopback_server("grpc") as address:
        try:
            _abandon_then_release(address, release, undone)
        finally:
            release.set()  # never leave a pending join behind for the tests that follow


def _abandon_then_release(address: str, release: threading.Event, undone: list[bool]) -> None:
    start = time.monotonic()
    with pytest.raises(RayConnectionError, match=re.escape("did not finish joining it within 0.5 s")) as caught:
        ray_join.join_cluster(address, release.wait, undo=lambda: undone.append(True), timeout=0.5)
    assert time.monotonic() - start < 2.0
    _says_what_to_check(str(caught.value), address)
    with pytest.raises(RayConnectionError, match=f"attempt of this process to join the cluster at {address}"):
        ray_join.join_cluster(address, lambda: None, undo=lambda: None)
    release.set()  # the abandoned ray.init completes after all: it is disconnected, and the next join may run
    deadline = time.monotonic() + 5
    while not undone and time.monotonic() < deadline:
        time.sleep(0.01)
    assert undone == [True]
    assert ray_join.join_cluster(address, lambda: None, undo=lambda: None) == ray_join.parse_address(address)


def test_an_error_of_ray_init_is_one_paragraph_naming_the_address():
    def refuse() -> None:
        raise RuntimeError("Version mismatch: The cluster was started with:\n    Ray: 9.9.9\n    Python: 3.99")

    with loopback_server("grpc") as address:
        with pytest.raises(RayConnectionError) as caught:
            ray_join.join_cluster(address, refuse, undo=lambda: None)
    message = str(caught.value)
    assert "\n" not in message
    assert "Ray could not join it (RuntimeError: Version mismatch: The cluster was started with: Ray: 9.9.9" in message
    assert f"the Ray version installed here (ray {ray.__version__}" in message


# -- the command line ------------------------------------------------------------------------------------------


def _irflow(args: list[str], home: Path, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "HOME": str(home), "IRFLOW_HOME": str(home / "irflow")}
    env.pop("RAY_ADDRESS", None)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "irflow", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=Path(__file__).resolve().parent.parent)
    return done, time.monotonic() - start


def _one_paragraph(done: subprocess.CompletedProcess, address: str) -> str:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()  # one paragraph, nothing of Ray's around it
    assert line.startswith("Error: ")
    _says_what_to_check(line, address)
    return line


def test_cli_run_and_eval_on_a_closed_port_fail_within_seconds(sharded, collection, tmp_path):
    address = f"127.0.0.1:{closed_port()}"
    for args in (["run", "lexical", "--corpus", str(sharded), "-q", "sql", "--ray", address],
                 ["eval", "lexical", "--dataset", str(collection), "--ray", address]):
        done, seconds = _irflow(args, tmp_path, timeout=COMMAND_S * 2)
        assert seconds < COMMAND_S, args
        assert "connection refused" in _one_paragraph(done, address)


def test_cli_on_a_port_where_something_else_listens_fails_within_seconds(sharded, tmp_path):
    with loopback_server("silent") as address:
        done, seconds = _irflow(["run", "lexical", "--corpus", str(sharded), "-q", "sql", "--ray", address], tmp_path,
                                timeout=COMMAND_S * 2)
    assert seconds < COMMAND_S
    assert "did not answer in Ray's protocol" in _one_paragraph(done, address)


@pytest.mark.slow
def test_cli_ray_init_that_never_finishes_is_cut_off(sharded, tmp_path):
    """A server that greets like gRPC and then says nothing: Ray's own join would wait for minutes."""
    with loopback_server("grpc") as address:
        done, seconds = _irflow(["run", "lexical", "--corpus", str(sharded), "-q", "sql", "--ray", address], tmp_path,
                                timeout=COMMAND_S * 3)
    assert seconds < COMMAND_S
    assert f"did not finish joining it within {ray_join.JOIN_TIMEOUT_S:g} s" in _one_paragraph(done, address)
