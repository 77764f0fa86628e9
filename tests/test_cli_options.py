"""The ``irflow`` group's options: -v / -vv / -q / --log-level (stderr, loggers, progress) and --threads.

The library configures no logging (one NullHandler on ``irflow``); the
command line sends irflow's records to stderr at the level asked, for one
command.  ``--threads`` reaches BLAS and the ONNX embedder, and changes no
answer.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from threadpoolctl import threadpool_info

import irflow
import irflow.cli.app
import irflow.cli.quickstart
from irflow.cli import main
from irflow.kernels.onnx_embedder import onnx_threads, pinned_model_available
from irflow.util import progress
from irflow.util.threads import limit_threads, requested_threads

ROOT = Path(__file__).resolve().parents[1]
RECORDS = [{"artifact_id": "unbox", "surface_kind": "description", "text": "Unpack any archive: zip, tar, 7z."},
           {"artifact_id": "rank-bm25", "surface_kind": "description", "text": "Okapi BM25 ranking functions."},
           {"artifact_id": "tqdm", "surface_kind": "description", "text": "A fast progress bar for loops."}]


def invoke(*args: object):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def records(tmp_path) -> Path:
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS) + "{not json\n", encoding="utf-8")
    return path


# -- logging -------------------------------------------------------------------------------------------


def test_the_library_configures_no_logging():
    code = ("import logging, irflow\n"
            "logger = logging.getLogger('irflow')\n"
            "assert [type(h).__name__ for h in logger.handlers] == ['NullHandler'], logger.handlers\n"
            "assert logger.level == logging.NOTSET and not logging.getLogger().handlers\n"
            "logging.getLogger('irflow.store.generations').warning('to nobody')\n")  # no last-resort line
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_verbosity_sets_what_reaches_stderr(records, tmp_path):
    args = ("index", records, "--skip-bad", "--embedder", "none", "--no-progress")
    plain = invoke(*args, "--out", tmp_path / "a")
    assert plain.exit_code == 0, plain.output
    assert "line 4" in plain.stderr and "INFO" not in plain.stderr  # a note, no log record (WARNING by default)
    info = invoke("-v", *args, "--out", tmp_path / "b")
    assert re.search(r"^INFO irflow\.store\.generations: committed .*b: generation gen-\d+ \(\d+ files\)$",
                     info.stderr, flags=re.M), info.stderr
    assert "DEBUG" not in info.stderr
    assert invoke("--log-level", "info", *args, "--out", tmp_path / "c").stderr.count("INFO irflow.") \
        == info.stderr.count("INFO irflow.")
    debug = invoke("-vv", *args, "--out", tmp_path / "b")  # a rebuild: the replaced generation is removed
    assert re.search(r"^DEBUG irflow\.store\.generations: removed .*gen-\d+: a newer generation replaced it$",
                     debug.stderr, flags=re.M), debug.stderr
    quiet = invoke("-q", *args, "--out", tmp_path / "d")
    assert quiet.exit_code == 0 and quiet.stderr == ""  # errors only: not even the skipped line's note
    assert invoke("-q", "index", tmp_path / "missing.jsonl", "--out", tmp_path / "e").exit_code == 2  # errors stay


def test_errors_still_show_under_quiet(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n", encoding="utf-8")
    result = invoke("-q", "index", bad, "--out", tmp_path / "c")
    assert result.exit_code == 1 and "line 1" in result.stderr


def test_a_command_leaves_logging_as_it_found_it(records, tmp_path):
    logger = logging.getLogger("irflow")
    before = (list(logger.handlers), logger.level)
    assert invoke("-vv", "index", records, "--skip-bad", "--embedder", "none", "--out", tmp_path / "a").exit_code == 0
    assert (list(logger.handlers), logger.level) == before


def test_verbosity_options_are_given_once():
    for args in (["-v", "-q"], ["-q", "--log-level", "debug"], ["-v", "--log-level", "error"]):
        result = invoke(*args, "recipes")
        assert result.exit_code == 2 and "both set how much irflow says; give one of them" in result.stderr
    result = invoke("--log-level", "loud", "recipes")
    assert result.exit_code == 2 and "debug" in result.stderr.lower()  # click lists the levels


def test_quiet_silences_warnings_but_not_the_output(tmp_path):
    corpus = tmp_path / "c"
    irflow.build([irflow.Record(r["artifact_id"], r["surface_kind"], r["text"], {"license": "MIT"}) for r in RECORDS],
                 path=corpus)
    args = ("run", "search", "--corpus", corpus, "-q", "zip", "--set", 'filter={"licence": "MIT"}')
    loud = invoke(*args)
    assert loud.exit_code == 0 and "Warning: " in loud.stderr and "licence" in loud.stderr
    quiet = invoke("-q", *args)
    assert quiet.exit_code == 0 and quiet.stderr == "" and quiet.stdout == loud.stdout


# -- progress ------------------------------------------------------------------------------------------


def test_a_log_gets_progress_lines_from_every_phase_of_eval(tmp_path, monkeypatch):
    from test_eval_output import _collection

    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(progress, "DELAY", 0.0)  # every phase is "long": its lines show at once
    data = _collection(tmp_path / "tiny")
    result = invoke("eval", "hybrid", "--dataset", data, "--embedder", "hash", "--metrics", "ndcg@10")
    assert result.exit_code == 0, result.output
    for line in ("tokenizing: 4/4 records (100%) in", "postings: done in", "embedding: 4/4 records (100%) in",
                 "writing: done in", "evaluating tiny: 3/3 queries (100%) in"):
        assert line in result.stderr, line
    assert "\r" not in result.stderr  # plain lines, not a bar
    # -q: none of it
    quiet = CliRunner().invoke(main, ["-q", "eval", "hybrid", "--dataset", str(data), "--embedder", "hash",
                                      "--metrics", "ndcg@10", "--no-cache"])
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_the_demo_shows_its_first_embedding_in_a_log_too(monkeypatch):
    calls = []
    monkeypatch.setattr(irflow.cli.quickstart, "run_demo", lambda queries, **kwargs: calls.append(kwargs))
    assert invoke("demo", "zip").exit_code == 0  # stderr is not a terminal here: plain lines
    assert invoke("-q", "demo", "zip").exit_code == 0
    assert [kwargs["progress"] for kwargs in calls] == [True, False]


# -- threads -------------------------------------------------------------------------------------------


def _blas_threads() -> list[int]:
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_limit_threads_reaches_blas_and_the_onnx_session(monkeypatch):
    monkeypatch.setenv("IRFLOW_ONNX_THREADS", "3")
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    before = _blas_threads()
    assert onnx_threads() == 3 and requested_threads() is None
    with limit_threads(1):
        assert _blas_threads() == [1] * len(before)
        assert onnx_threads() == 1  # the option beats the environment variable
        assert os.environ["RAYON_NUM_THREADS"] == "1"  # the tokenizer's pool, when it starts in the block
    assert _blas_threads() == before and onnx_threads() == 3 and "RAYON_NUM_THREADS" not in os.environ
    with pytest.raises(irflow.errors.ArgumentError, match="threads must be a positive integer, got 0"):
        with limit_threads(0):
            pass


def _corpus(path: Path, embedder: str, n: int) -> None:
    rng = np.random.default_rng(11)
    words = [f"w{i}" for i in range(300)]
    irflow.build([irflow.Record(f"a{i // 2}", "description" if i % 2 else "name",
                                " ".join(rng.choice(words, size=8))) for i in range(n)], embedder=embedder, path=path)


def _run_json(corpus: Path, threads: int) -> tuple[str, str]:
    queries = [arg for q in ("w1 w2", "w3 w40 w7", "w100", "w5 w6 w7 w8", "w299 w12") for arg in ("-q", q)]
    done = subprocess.run([sys.executable, "-m", "irflow", "-v", "--threads", str(threads), "run", "hybrid",
                           "--corpus", str(corpus), *queries, "--set", "k=20", "--json"],
                          capture_output=True, text=True, timeout=280, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout, done.stderr


@pytest.mark.slow
def test_answers_are_the_same_at_one_and_two_threads(tmp_path):
    _corpus(tmp_path / "blas", "hash:256", 3000)  # BLAS ranks 5 x 3000 x 256 (threaded when allowed)
    one, said = _run_json(tmp_path / "blas", 1)
    assert re.search(r"INFO irflow\.util\.threads: threads: 1 for the ONNX embedder and BLAS \(\w+ 1\)", said), said
    two, said = _run_json(tmp_path / "blas", 2)
    assert re.search(r"threads: 2 for the ONNX embedder and BLAS \(\w+ 2\)", said), said
    assert one == two and len(json.loads(one)["queries"][0]["hits"]) == 20


@pytest.mark.slow
def test_onnx_answers_are_the_same_at_one_and_two_threads(tmp_path):
    if not pinned_model_available():
        pytest.skip("the models extra is not installed")
    _corpus(tmp_path / "onnx", "onnx:all-MiniLM-L6-v2", 24)
    one, said = _run_json(tmp_path / "onnx", 1)
    assert re.search(r"INFO irflow\.kernels\.onnx_embedder: loaded .*model\.onnx on onnxruntime: 1 intra-op "
                     r"threads", said), said
    two, said = _run_json(tmp_path / "onnx", 2)
    assert "onnxruntime: 2 intra-op threads" in said
    assert one == two
