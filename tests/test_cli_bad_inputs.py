"""Every CLI subcommand over a corpus of bad inputs: exit status != 0, one paragraph, never a traceback.

The commands are read from the click group, so a new command without bad-input
cases here fails ``test_every_command_has_bad_input_cases``.  The bad inputs are
generated in a temporary folder: non-UTF-8 and binary files, empty files, huge
integers, nesting 100,000 deep, a YAML alias bomb, directories / FIFOs /
sockets / ``/dev/zero`` where files are expected, unreadable files, read-only
targets, paths under a file, bad JSON in ``--filter`` / ``--set`` / ``--sweep``
and malformed traces (a dtype of 16 GB, wrong field types, huge rows).

Commands run in-process through click's CliRunner (fast); a few run through the
real entry point in a subprocess, with real argv bytes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner

import irflow.cli.quickstart
from irflow.cli import main
from irflow.store.corpus import build

WORDS = ["parser", "http", "client", "graph", "sql", "async", "python", "fast", "json", "tool"]
ROOT = os.name == "posix" and os.geteuid() == 0


def leaf_commands(group: click.Group = main, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command of the CLI, as the words that invoke it (``("trace", "show")``)."""
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from leaf_commands(command, prefix + (name,))
        else:
            yield prefix + (name,)


# -- the bad inputs ------------------------------------------------------------------------------------


def _records(path: Path) -> None:
    rng = np.random.default_rng(3)
    with path.open("w", encoding="utf-8") as out:
        for i in range(8):
            words = rng.choice(WORDS, size=4)
            for kind, text in (("name", f"pkg{i} {words[0]}"), ("description", " ".join(words))):
                out.write(json.dumps({"artifact_id": f"pkg{i}", "surface_kind": kind, "text": text,
                                      "metadata": {"owner": "me" if i % 2 else "you"}}) + "\n")


def _beir(root: Path, corpus: Callable[[Path], None] | None = None, queries: Callable[[Path], None] | None = None,
          qrels: Callable[[Path], None] | None = None) -> Path:
    (root / "qrels").mkdir(parents=True)
    (corpus or (lambda p: p.write_text("".join(
        json.dumps({"_id": f"d{i}", "title": "t", "text": f"doc {i} {WORDS[i]}"}) + "\n" for i in range(6)))))(
        root / "corpus.jsonl")
    (queries or (lambda p: p.write_text(json.dumps({"_id": "q1", "text": "parser"}) + "\n")))(root / "queries.jsonl")
    (qrels or (lambda p: p.write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\n")))(root / "qrels" / "test.tsv")
    return root


def _bomb() -> str:
    # "billion laughs": 9 ** 8 strings from a few hundred bytes
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    lines.append("recipe: {name: bomb, output: x}\nstages: {x: {kind: collapse, params: {k: *a8}}}")
    return "\n".join(lines) + "\n"


def _deep_json(n: int = 100_000) -> str:
    return "[" * n + "]" * n


class Env:
    """Paths of the good and bad inputs, made once per module."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.records = root / "records.jsonl"
        _records(self.records)
        self.corpus = root / "corpus"
        build([json.loads(line) for line in self.records.read_text().splitlines()], embedder="hash",
              path=self.corpus)
        self.trace = root / "run.jsonl"
        result = CliRunner().invoke(main, ["run", "hybrid", "--corpus", str(self.corpus), "-q", "python parser",
                                           "-q", "sql tool", "--set", "k=3", "--trace", str(self.trace)])
        assert result.exit_code == 0, result.output
        self.dataset = _beir(root / "beir")
        self.afile = root / "afile"
        self.afile.write_text("not a folder\n")
        self.bad = root / "bad"
        self.bad.mkdir()
        self.files = self._bad_files()
        self.traces = self._bad_traces()
        self.datasets = self._bad_datasets()
        self.readonly = self._readonly_dir()

    def _bad_files(self) -> dict[str, Path]:
        """Generic bad files, in each suffix a command may want (``.toml``/``.yaml`` for recipes)."""
        bad = self.bad
        files: dict[str, Path] = {}

        def put(name: str, data: bytes | str) -> None:
            for suffix in (".toml", ".yaml", ".jsonl"):
                path = bad / f"{name}{suffix}"
                path.write_bytes(data if isinstance(data, bytes) else data.encode())
                files[f"{name}{suffix}"] = path

        put("non-utf8", b'{"artifact_id": "caf\xe9"}\n[recipe]\nname = "\xff\xfe"\n')
        put("binary", bytes(range(256)) * 8)
        put("empty", b"")
        put("huge-int", '{"artifact_id": "a", "surface_kind": "name", "text": "x", "surface_index": '
                        + "9" * 5000 + "}\n")
        files["huge-int-toml.toml"] = bad / "huge-int-toml.toml"
        files["huge-int-toml.toml"].write_text("[params]\nk = " + "9" * 5000 + "\n")
        files["huge-int-yaml.yaml"] = bad / "huge-int-yaml.yaml"
        files["huge-int-yaml.yaml"].write_text("params:\n  k: " + "9" * 5000 + "\n")
        put("deep", _deep_json())
        files["deep-toml.toml"] = bad / "deep-toml.toml"
        files["deep-toml.toml"].write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
        files["deep-yaml.yaml"] = bad / "deep-yaml.yaml"
        files["deep-yaml.yaml"].write_text("x: " + "[" * 5000 + "]" * 5000 + "\n")
        files["bomb.yaml"] = bad / "bomb.yaml"
        files["bomb.yaml"].write_text(_bomb())
        for suffix in (".toml", ".yaml", ".jsonl"):
            (bad / f"directory{suffix}").mkdir()
            files[f"directory{suffix}"] = bad / f"directory{suffix}"
            files[f"missing{suffix}"] = bad / f"missing{suffix}"
            files[f"under-a-file{suffix}"] = self.afile / f"x{suffix}"
            if hasattr(os, "mkfifo"):
                os.mkfifo(bad / f"fifo{suffix}")
                files[f"fifo{suffix}"] = bad / f"fifo{suffix}"
            if Path("/dev/zero").exists():
                (bad / f"dev-zero{suffix}").symlink_to("/dev/zero")
                files[f"dev-zero{suffix}"] = bad / f"dev-zero{suffix}"
            if hasattr(socket, "AF_UNIX") and len(str(bad / f"socket{suffix}")) < 100:
                sock = socket.socket(socket.AF_UNIX)
                sock.bind(str(bad / f"socket{suffix}"))  # a file no one can open for reading, root included
                sock.close()
                files[f"socket{suffix}"] = bad / f"socket{suffix}"
            unreadable = bad / f"unreadable{suffix}"
            unreadable.write_text("[recipe]\n")
            unreadable.chmod(0)
            if not os.access(unreadable, os.R_OK):  # root reads anything: the socket case stands in for it
                files[f"unreadable{suffix}"] = unreadable
        return files

    def _bad_traces(self) -> dict[str, Path]:
        """Trace files a hostile user could hand to ``irflow trace``: each one field wrong."""
        lines = [json.loads(line) for line in self.trace.read_text(encoding="utf-8").splitlines()]
        out: dict[str, Path] = {}

        def mutate(name: str, change: Callable[[list[dict]], None]) -> None:
            copy = json.loads(json.dumps(lines))
            change(copy)
            path = self.bad / f"trace-{name}.jsonl"
            path.write_text("\n".join(json.dumps(line) for line in copy) + "\n", encoding="utf-8")
            out[name] = path

        def first_columns(copy: list[dict]) -> dict:
            return next(line["columns"] for line in copy[1:] if line.get("columns"))

        mutate("dtype-16GB-str", lambda c: first_columns(c).update({next(iter(first_columns(c))): "<U5000000"}))
        mutate("dtype-20MB-bytes", lambda c: first_columns(c).update({next(iter(first_columns(c))): "S20000000"}))
        mutate("dtype-void", lambda c: first_columns(c).update({next(iter(first_columns(c))): "|V8"}))
        mutate("row-huge", lambda c: [x.update(row=10 ** 30) for line in c[1:] for x in line["candidates"]])
        mutate("rank-str", lambda c: [x.update(rank="1") for line in c[1:] for x in line["candidates"]])
        mutate("inputs-list", lambda c: [line.update(inputs=[1]) for line in c[1:]])
        mutate("candidates-str", lambda c: [line.update(candidates="abc") for line in c[1:]])
        mutate("provenance-int", lambda c: [x.update(provenance=3) for line in c[1:] for x in line["candidates"]])
        mutate("queries-int", lambda c: c[0].update(queries=5))
        mutate("params-list", lambda c: c[0].update(params=[1]))
        mutate("query-index-str", lambda c: [line.update(query_index="0") for line in c[1:]])
        mutate("elapsed-str", lambda c: [line.update(elapsed_ms="fast") for line in c[1:]])
        mutate("scale-unknown", lambda c: [line.update(scale="bogus") for line in c[1:] if line.get("scale")])
        mutate("missing-query-line", lambda c: c.pop())
        mutate("not-a-trace", lambda c: c[0].update(format="something-else"))
        return out

    def _bad_datasets(self) -> dict[str, Path]:
        root = self.bad / "beir"
        return {
            "corpus-is-a-directory": _beir(root / "a", corpus=lambda p: p.mkdir()),
            "corpus-non-utf8": _beir(root / "b", corpus=lambda p: p.write_bytes(b'{"_id": "\xff", "text": "x"}\n')),
            "corpus-deep": _beir(root / "c", corpus=lambda p: p.write_text(_deep_json())),
            "corpus-huge-int": _beir(root / "d", corpus=lambda p: p.write_text('{"_id": ' + "9" * 5000 + "}\n")),
            "corpus-binary": _beir(root / "e", corpus=lambda p: p.write_bytes(bytes(range(256)) * 8)),
            "queries-fifo": _beir(root / "f", queries=(lambda p: os.mkfifo(p)) if hasattr(os, "mkfifo")
                                  else (lambda p: p.mkdir())),
            "qrels-directory": _beir(root / "g", qrels=lambda p: p.mkdir()),
            "qrels-huge-grade": _beir(root / "h", qrels=lambda p: p.write_text("q1\td0\t" + "9" * 5000 + "\n")),
            "qrels-grade-10e30": _beir(root / "i", qrels=lambda p: p.write_text("q1\td0\t1" + "0" * 30 + "\n")),
            "qrels-grade-nan": _beir(root / "j", qrels=lambda p: p.write_text("q1\td0\tnan\n")),
            "dataset-is-a-file": self.afile,
            "dataset-missing": root / "missing",
        }

    def broken_corpus(self) -> Path:
        """A copy of the corpus whose manifest.json was replaced by a directory."""
        import shutil

        copy = self.root / "broken-corpus"
        if not copy.exists():
            shutil.copytree(self.corpus, copy)
            for manifest in copy.glob("*/manifest.json"):
                manifest.unlink()
                manifest.mkdir()
        return copy

    def _readonly_dir(self) -> Path | None:
        """A folder no file can be created in, for this user (root included), or None."""
        folder = self.root / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        for candidate in (folder, Path("/sys"), Path("/proc")):
            try:
                fd = os.open(candidate / ".irflow-write-probe", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except OSError:
                return candidate
            os.close(fd)
            os.unlink(candidate / ".irflow-write-probe")
        return None


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    made = Env(tmp_path_factory.mktemp("bad-inputs"))
    yield made
    (made.root / "read-only").chmod(0o755)


@pytest.fixture(autouse=True)
def small_demo(monkeypatch: pytest.MonkeyPatch) -> None:
    # the demo's corpus of installed packages takes seconds to build; a tiny one behaves the same here
    tiny = [{"artifact_id": f"pkg{i}", "surface_kind": "name", "text": f"pkg{i} {w}"} for i, w in enumerate(WORDS)]
    monkeypatch.setattr(irflow.cli.quickstart, "installed_corpus", lambda **_: build(tiny, embedder="hash",
                                                                                  name="installed"))


# -- the cases: (command, id, args) --------------------------------------------------------------------

Case = tuple[tuple[str, ...], str, Callable[[Env], list[str] | None]]

FILE_KINDS = ("non-utf8", "binary", "empty", "huge-int", "deep", "directory", "missing", "under-a-file", "fifo",
              "dev-zero", "socket", "unreadable")
TRACE_KINDS = ("dtype-16GB-str", "dtype-20MB-bytes", "dtype-void", "row-huge", "rank-str", "inputs-list",
               "candidates-str", "provenance-int", "queries-int", "params-list", "query-index-str", "elapsed-str",
               "scale-unknown", "missing-query-line", "not-a-trace")
DATASET_KINDS = ("corpus-is-a-directory", "corpus-non-utf8", "corpus-deep", "corpus-huge-int", "corpus-binary",
                 "queries-fifo", "qrels-directory", "qrels-huge-grade", "qrels-grade-10e30", "qrels-grade-nan",
                 "dataset-is-a-file", "dataset-missing")
DEEP = _deep_json(200)
DEEP_FILTER = '{"a": ' * 200 + "1" + "}" * 200
HUGE = "9" * 5000


def _file(env: Env, name: str) -> str | None:
    path = env.files.get(name)
    return None if path is None else str(path)


def _with_file(name: str, make: Callable[[Env, str], list[str]]) -> Callable[[Env], list[str] | None]:
    def build_args(env: Env) -> list[str] | None:
        path = _file(env, name)
        return None if path is None else make(env, path)
    return build_args


def _readonly(make: Callable[[Env, Path], list[str]]) -> Callable[[Env], list[str] | None]:
    return lambda env: None if env.readonly is None else make(env, env.readonly)


def _cases() -> list[Case]:
    cases: list[Case] = []
    recipe_files = [f"{kind}{suffix}" for kind in FILE_KINDS for suffix in (".toml", ".yaml")
                    if kind not in ("empty",) or suffix == ".toml"]
    recipe_files += ["huge-int-toml.toml", "huge-int-yaml.yaml", "deep-toml.toml", "deep-yaml.yaml", "bomb.yaml",
                     "empty.yaml"]
    for name in recipe_files:
        cases.append((("validate",), name, _with_file(name, lambda env, p: ["validate", p])))
        cases.append((("graph",), name, _with_file(name, lambda env, p: ["graph", p])))
        cases.append((("run",), name, _with_file(name, lambda env, p: ["run", p, "--corpus", str(env.corpus),
                                                                        "-q", "x"])))
        cases.append((("eval",), name, _with_file(name, lambda env, p: ["eval", p, "--dataset", str(env.dataset),
                                                                         "--no-cache"])))
    for name in [f"{kind}.jsonl" for kind in FILE_KINDS]:
        cases.append((("index",), name, _with_file(name, lambda env, p: ["index", p, "--out",
                                                                          str(env.root / "out-index")])))
        cases.append((("add",), name, _with_file(name, lambda env, p: ["add", str(env.corpus), p])))
        cases.append((("delete",), name, _with_file(name, lambda env, p: ["delete", str(env.corpus), "--ids-from", p])))
        for command in (("trace", "show"), ("trace", "explain")):
            extra = ["pkg1"] if command[1] == "explain" else []
            cases.append((command, name, _with_file(name, lambda env, p, c=command, e=extra: [*c, p, *e])))
        cases.append((("trace", "diff"), name, _with_file(
            name, lambda env, p: ["trace", "diff", p, str(env.trace), "--stage", "fuse"])))
        cases.append((("report",), name, _with_file(name, lambda env, p: ["report", p, "-o",
                                                                           str(env.root / "r.html")])))
    for kind in TRACE_KINDS:
        cases.append((("trace", "show"), f"trace-{kind}", lambda env, k=kind: ["trace", "show", str(env.traces[k])]))
        cases.append((("trace", "show"), f"trace-{kind}-json",
                      lambda env, k=kind: ["trace", "show", str(env.traces[k]), "--json"]))
        cases.append((("trace", "explain"), f"trace-{kind}",
                      lambda env, k=kind: ["trace", "explain", str(env.traces[k]), "pkg1"]))
        cases.append((("trace", "diff"), f"trace-{kind}",
                      lambda env, k=kind: ["trace", "diff", str(env.trace), str(env.traces[k]), "--stage", "fuse"]))
        cases.append((("report",), f"trace-{kind}",
                      lambda env, k=kind: ["report", str(env.traces[k]), "-o", str(env.root / "r.html")]))
    for kind in DATASET_KINDS:
        cases.append((("eval",), f"dataset-{kind}",
                      lambda env, k=kind: ["eval", "lexical", "--dataset", str(env.datasets[k]), "--no-cache"]))
    # outputs: a path under a file, a directory where a file goes, a read-only folder
    cases += [
        (("index",), "out-under-a-file", lambda env: ["index", str(env.records), "--out", str(env.afile / "c")]),
        (("index",), "out-is-a-file", lambda env: ["index", str(env.records), "--out", str(env.afile)]),
        (("index",), "out-read-only", _readonly(lambda env, ro: ["index", str(env.records), "--out",
                                                                   str(ro / "corpus")])),
        (("run",), "trace-under-a-file", lambda env: ["run", "hybrid", "--corpus", str(env.corpus), "-q", "x",
                                                      "--trace", str(env.afile / "t.jsonl")]),
        (("run",), "trace-is-a-directory", lambda env: ["run", "hybrid", "--corpus", str(env.corpus), "-q", "x",
                                                        "--trace", str(env.bad / "directory.jsonl")]),
        (("run",), "trace-read-only", _readonly(lambda env, ro: ["run", "hybrid", "--corpus", str(env.corpus),
                                                                  "-q", "x", "--trace", str(ro / "t.jsonl")])),
        (("run",), "corpus-manifest-is-a-directory", lambda env: ["run", "hybrid", "--corpus",
                                                                  str(env.broken_corpus()), "-q", "x"]),
        (("run",), "corpus-is-a-file", lambda env: ["run", "hybrid", "--corpus", str(env.afile), "-q", "x"]),
        (("run",), "corpus-missing", lambda env: ["run", "hybrid", "--corpus", str(env.bad / "nowhere"), "-q", "x"]),
        (("eval",), "runs-under-a-file", lambda env: ["eval", "lexical", "--dataset", str(env.dataset), "--no-cache",
                                                      "--runs", str(env.afile / "runs")]),
        (("eval",), "runs-read-only", _readonly(lambda env, ro: ["eval", "lexical", "--dataset", str(env.dataset),
                                                                  "--no-cache", "--runs", str(ro / "runs")])),
        (("demo",), "trace-under-a-file", lambda env: ["demo", "parser", "--trace", str(env.afile / "t.jsonl")]),
        (("demo",), "trace-is-a-directory", lambda env: ["demo", "parser", "--trace",
                                                         str(env.bad / "directory.jsonl")]),
        (("demo",), "trace-read-only", _readonly(lambda env, ro: ["demo", "parser", "--trace", str(ro / "t.jsonl")])),
    ]
    # JSON options: bad JSON, nesting, integers Python will not read, values out of range
    run = lambda *extra: (lambda env: ["run", "hybrid", "--corpus", str(env.corpus), "-q", "x", *extra])  # noqa: E731
    evaluate = lambda *extra: (lambda env: ["eval", "hybrid", "--dataset", str(env.dataset),  # noqa: E731
                                            "--no-cache", *extra])
    cases += [
        (("run",), "set-deep", run("--set", f"x={DEEP}")),
        (("run",), "set-deep-filter", run("--set", f"filter={DEEP_FILTER}")),
        (("run",), "set-huge-int", run("--set", f"k={HUGE}")),
        (("run",), "set-rrf_k-beyond-float", run("--set", "rrf_k=" + "9" * 400)),
        (("run",), "set-filter-not-json", run("--set", "filter={bad json")),
        (("run",), "set-not-name-value", run("--set", "k")),
        (("eval",), "set-deep", evaluate("--set", f"x={DEEP}")),
        (("eval",), "set-huge-int", evaluate("--set", f"k={HUGE}")),
        (("eval",), "sweep-huge-int", evaluate("--sweep", f"rrf_k=10,{HUGE}")),
        (("eval",), "sweep-deep", evaluate("--sweep", f"rrf_k=10,{DEEP}")),
        (("eval",), "ray-not-an-address", evaluate("--ray", "localhost")),
        (("eval",), "ray-nothing-there", evaluate("--ray", "127.0.0.1:1")),
        (("demo",), "filter-deep", lambda env: ["demo", "parser", "--filter", DEEP_FILTER]),
        (("demo",), "filter-huge-int", lambda env: ["demo", "parser", "--filter", '{"n": ' + HUGE + "}"]),
        (("demo",), "filter-not-json", lambda env: ["demo", "parser", "--filter", "{bad json"]),
        (("demo",), "filter-not-an-object", lambda env: ["demo", "parser", "--filter", "[1, 2]"]),
        (("demo",), "filter-unknown-operator", lambda env: ["demo", "parser", "--filter", '{"n": {"$regex": "x"}}']),
        (("eval",), "metrics-huge-cutoff", evaluate("--metrics", f"ndcg@{HUGE}")),
        (("eval",), "metrics-unknown", evaluate("--metrics", "ndgc@10")),
        (("eval",), "embedder-huge-dim", evaluate("--embedder", f"hash:{HUGE}")),
        (("eval",), "holdout-seed-huge", evaluate("--holdout", "tune", "--holdout-seed", HUGE)),
        (("eval",), "holdout-seed-negative", evaluate("--holdout", "tune", "--holdout-seed", "-1")),
        (("eval",), "depth-a-float", evaluate("--depth", "1e3")),
        (("index",), "embedder-huge-dim", lambda env: ["index", str(env.records), "--out", str(env.root / "o-e"),
                                                       "--embedder", f"hash:{HUGE}"]),
        (("index",), "analyzer-unknown", lambda env: ["index", str(env.records), "--out", str(env.root / "o-a"),
                                                      "--analyzer", "bogus"]),
        (("trace", "show"), "query-huge", lambda env: ["trace", "show", str(env.trace), "--query", HUGE]),
        (("trace", "show"), "query-beyond-int64", lambda env: ["trace", "show", str(env.trace), "--query", "9" * 20]),
        (("trace", "show"), "stage-unknown", lambda env: ["trace", "show", str(env.trace), "--stage", "fusion"]),
        (("trace", "explain"), "record-unknown", lambda env: ["trace", "explain", str(env.trace), "nope"]),
        (("trace", "diff"), "stage-unknown", lambda env: ["trace", "diff", str(env.trace), "--stages", "dense", "x"]),
        (("report",), "queries-beyond", lambda env: ["report", str(env.trace), "-o", str(env.root / "r.html"),
                                                     "--queries", "9" * 20 + ":"]),
        (("report",), "queries-garbage", lambda env: ["report", str(env.trace), "-o", str(env.root / "r.html"),
                                                      "--queries", "1:2:3"]),
        (("report",), "diff-one-file", lambda env: ["report", "--diff", str(env.trace), "-o", str(env.root / "r.html")]),
        (("report",), "diff-stage-unknown", lambda env: ["report", "--diff", str(env.trace), str(env.trace), "-o",
                                                         str(env.root / "r.html"), "--stage", "fusion"]),
        (("report",), "out-in-a-corpus", lambda env: ["report", str(env.trace), "-o", str(env.corpus / "r.html")]),
        (("report",), "out-is-a-directory", lambda env: ["report", str(env.trace), "-o", str(env.root)]),
        (("report",), "top-zero", lambda env: ["report", str(env.trace), "-o", str(env.root / "r.html"), "--top", "0"]),
        (("shard",), "corpus-missing", lambda env: ["shard", str(env.root / "no-corpus"), "--shards", "2", "--out",
                                                    str(env.root / "s-m")]),
        (("shard",), "shards-zero", lambda env: ["shard", str(env.corpus), "--shards", "0", "--out",
                                                 str(env.root / "s-0")]),
        (("shard",), "shards-more-than-artifacts", lambda env: ["shard", str(env.corpus), "--shards", "100000",
                                                                "--out", str(env.root / "s-many")]),
        (("shard",), "out-is-a-file", lambda env: ["shard", str(env.corpus), "--shards", "2", "--out",
                                                   str(env.afile)]),
        (("shard",), "out-not-empty", lambda env: ["shard", str(env.corpus), "--shards", "2", "--out",
                                                   str(env.corpus)]),
        (("shard",), "out-read-only", _readonly(lambda env, ro: ["shard", str(env.corpus), "--shards", "2", "--out",
                                                                 str(ro / "s")])),
        (("run",), "ray-on-a-plain-corpus", lambda env: ["run", "lexical", "--corpus", str(env.corpus), "-q", "x",
                                                         "--ray", "auto"]),
        (("add",), "corpus-missing", lambda env: ["add", str(env.root / "no-corpus"), str(env.records)]),
        (("add",), "corpus-is-a-file", lambda env: ["add", str(env.afile), str(env.records)]),
        (("add",), "ids-live", lambda env: ["add", str(env.corpus), str(env.records)]),
        (("add",), "upsert-and-artifacts", lambda env: ["add", str(env.corpus), str(env.records), "--upsert",
                                                        "--artifacts"]),
        (("add",), "embedder-not-custom", lambda env: ["add", str(env.corpus), str(env.records), "--upsert",
                                                       "--embedder", "hash:8"]),
        (("add",), "file-of-the-corpus", lambda env: ["add", str(env.corpus), str(env.corpus / "CURRENT")]),
        (("delete",), "nothing", lambda env: ["delete", str(env.corpus)]),
        (("delete",), "unknown-id", lambda env: ["delete", str(env.corpus), "--id", "no-such-record"]),
        (("delete",), "unknown-artifact", lambda env: ["delete", str(env.corpus), "--artifact", "no-such-artifact"]),
        (("delete",), "missing-bogus", lambda env: ["delete", str(env.corpus), "--id", "x", "--missing", "maybe"]),
        (("delete",), "corpus-missing", lambda env: ["delete", str(env.root / "no-corpus"), "--id", "x"]),
        (("compact",), "corpus-missing", lambda env: ["compact", str(env.root / "no-corpus")]),
        (("compact",), "corpus-foreign", lambda env: ["compact", str(env.bad)]),
        (("compact",), "unexpected-argument", lambda env: ["compact", str(env.corpus), "extra"]),
        (("recipes",), "unexpected-argument", lambda env: ["recipes", "extra"]),
        (("recipes",), "unknown-option", lambda env: ["recipes", "--bogus"]),
    ]
    return cases


CASES = _cases()


def test_every_command_has_bad_input_cases() -> None:
    commands = set(leaf_commands())
    covered = {command for command, _, _ in CASES}
    assert commands <= covered, f"commands without bad-input cases: {sorted(commands - covered)}"
    assert {("index",), ("run",), ("validate",), ("graph",), ("recipes",), ("eval",), ("demo",), ("shard",),
            ("add",), ("delete",), ("compact",), ("trace", "show"), ("trace", "diff"), ("trace", "explain"), ("report",)} <= commands


def _error_paragraph(text: str) -> str:
    """The error of a failed command: the last paragraph (click puts its usage lines before a usage error)."""
    text = text.strip()
    if text.startswith("Usage:"):
        head, _, text = text.rpartition("\n\n")
        assert "Error" not in head, text
    return text


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command, name, make", CASES, ids=[f"{' '.join(c)}:{n}" for c, n, _ in CASES])
def test_bad_input_fails_with_one_paragraph(env: Env, command: tuple[str, ...], name: str,
                                            make: Callable[[Env], list[str] | None]) -> None:
    args = make(env)
    if args is None:
        pytest.skip("this kind of bad input cannot be made here (no FIFO, no read-only folder, or running as root)")
    result = CliRunner().invoke(main, args)
    assert result.exit_code != 0, result.output
    # a bug surfaces as an exception other than click's exit (CliRunner catches it)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}")
    assert "Traceback" not in result.output and "Traceback" not in result.stderr
    # validate lists the problems it found as its output; everything else speaks on stderr
    message = _error_paragraph(result.stderr or (result.stdout if command == ("validate",) else ""))
    assert message, f"no message for {args}"
    assert "\n\n" not in message, message
    # short: it may quote what was typed on the command line, never pages of a file's content
    assert len(message) < 1500 + sum(len(a) for a in args), message


@pytest.mark.parametrize("kind", ["non-utf8", "binary", "huge-int", "deep", "directory", "fifo", "dev-zero"])
def test_messages_name_the_file(env: Env, kind: str) -> None:
    path = env.files.get(f"{kind}.jsonl")
    if path is None:
        pytest.skip(f"no {kind} file here")
    for args in (["index", str(path), "--out", str(env.root / "o")], ["trace", "show", str(path)],
                 ["validate", str(env.files[f"{kind}.toml"])]):
        result = CliRunner().invoke(main, args)
        text = result.stderr + result.stdout
        assert result.exit_code != 0 and path.stem in text, text


def test_messages_say_what_is_wrong_and_the_limit(env: Env) -> None:
    def error(*args: str) -> str:
        result = CliRunner().invoke(main, list(args))
        assert result.exit_code != 0
        return result.stderr + result.stdout

    assert "UTF-8" in error("index", str(env.files["non-utf8.jsonl"]), "--out", str(env.root / "o"))
    assert "the limit is 64" in error("index", str(env.files["deep.jsonl"]), "--out", str(env.root / "o"))
    assert "4300 digits" in error("index", str(env.files["huge-int.jsonl"]), "--out", str(env.root / "o"))
    assert "anchors and aliases" in error("validate", str(env.files["bomb.yaml"]))
    assert "64 levels" in error("validate", str(env.files["deep-yaml.yaml"]))
    assert "nested too deeply" in error("validate", str(env.files["deep-toml.toml"]))
    assert "5000000 characters, over the limit of 1024" in error("trace", "show", str(env.traces["dtype-16GB-str"]))
    assert "a directory" in error("eval", "lexical", "--dataset", str(env.datasets["corpus-is-a-directory"]))
    grade = env.datasets["qrels-grade-10e30"] / "qrels" / "test.tsv"
    assert f"{grade} line 1: relevance grade '1{'0' * 30}' is out of range" in error(
        "eval", "lexical", "--dataset", str(grade.parents[1]), "--no-cache")
    assert "not a directory" in error("run", "hybrid", "--corpus", str(env.corpus), "-q", "x", "--trace",
                                      str(env.afile / "t.jsonl"))
    assert "--set x" in error("run", "hybrid", "--corpus", str(env.corpus), "-q", "x", "--set", f"x={DEEP}")


def test_a_failed_trace_write_keeps_the_previous_trace(env: Env, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import irflow.engine.trace

    target = tmp_path / "run.jsonl"
    target.write_bytes(env.trace.read_bytes())
    real, written = irflow.engine.trace.json_line, []

    def disk_full_after_two_lines(record):  # the disk fills up in the middle of the dump
        if len(written) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written.append(record)
        return real(record)

    monkeypatch.setattr(irflow.engine.trace, "json_line", disk_full_after_two_lines)
    result = CliRunner().invoke(main, ["run", "hybrid", "--corpus", str(env.corpus), "-q", "other query",
                                       "--trace", str(target)])
    assert result.exit_code == 1 and "no space left" in result.stderr, result.stderr
    assert "\n\n" not in result.stderr.strip() and str(target) in result.stderr
    assert target.read_bytes() == env.trace.read_bytes()  # the previous trace, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.jsonl"]  # no temporary file left behind


# -- the real entry point -----------------------------------------------------------------------------


def _irflow() -> list[str]:
    script = Path(sys.executable).parent / "irflow"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from irflow.cli.app import main; sys.exit(main())"]


def _real(args: list[str | bytes], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(_irflow() + args, cwd=cwd, capture_output=True, timeout=120)


@pytest.mark.skipif(os.name != "posix", reason="argv bytes that are not UTF-8 are a POSIX thing")
def test_real_entry_point_undecodable_argv_is_refused_naming_the_option(env: Env, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    done = _real(["run", "hybrid", "--corpus", str(env.corpus), "-q", b"caf\xe9 parser", "--trace", str(trace)],
                 tmp_path)
    err = done.stderr.decode("utf-8")  # the message itself is UTF-8: the byte is shown escaped
    assert done.returncode == 2 and b"Traceback" not in done.stderr + done.stdout, err
    message = _error_paragraph(err)
    assert "\n\n" not in message and "'--query' / '-q'" in message and "byte 0xe9 at offset 3" in message, err
    assert not trace.exists()


def test_real_entry_point_bad_inputs(env: Env, tmp_path: Path) -> None:
    cases = [["validate", str(env.files["bomb.yaml"])], ["trace", "show", str(env.traces["dtype-16GB-str"])],
             ["index", str(env.files["non-utf8.jsonl"]), "--out", str(tmp_path / "o")]]
    if "fifo.jsonl" in env.files:
        cases.append(["trace", "show", str(env.files["fifo.jsonl"])])  # must not hang waiting for a writer
    for args in cases:
        done = _real(args, tmp_path)
        # validate lists the problems as its output; everything else speaks on stderr
        err = (done.stdout if args[0] == "validate" else done.stderr).decode("utf-8", "replace")
        assert done.returncode != 0 and b"Traceback" not in done.stderr + done.stdout, err
        assert err.strip() and "\n\n" not in err.strip(), err
        assert args[0] == "validate" or err.startswith("Error: "), err
