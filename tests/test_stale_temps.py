"""A writer killed mid-write leaves its temporary file; the next write of the same file removes it.

``irflow run --trace T`` killed while it writes leaves ``.T.<pid>.<hex>.tmp``
beside ``T`` (as large as the trace).  The next write of ``T`` removes the
temporary files of ``T`` whose writer process is gone — only names irflow
makes for ``T``, only regular files; a live writer's file stays.  The test
kills a real trace-writing process with SIGKILL in the middle of its write.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import engine_fakes  # noqa: F401  (maps irflow.stages / irflow.recipes in a bare checkout)
from irflow.cli.app import main
from irflow.engine.trace import Trace
from irflow.store.corpus import build
from irflow.util.fileio import remove_stale_temps, write_atomic
from search_reference import records

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process ids are asked after on POSIX only")

# Writes the trace of a real run to argv[2], stopping for good (to be killed) after a few lines are out.
WRITER = """
import pathlib, sys, time
import irflow.engine.trace as trace_module
from irflow.engine.recipe import load_recipe
from irflow.store.corpus import open_corpus

result = load_recipe("hybrid").run(open_corpus(sys.argv[1]), ["json parser", "http client"], trace=True)
real, lines = trace_module.json_line, []

def slow(record):
    lines.append(record)
    if len(lines) == 4:
        pathlib.Path(sys.argv[3]).write_text("writing")
        time.sleep(600)  # killed here, mid-write
    return real(record)

trace_module.json_line = slow
result.trace.dump(sys.argv[2])
"""


def temps_of(target: Path) -> list[Path]:
    return sorted(p for p in target.parent.iterdir() if p.name.startswith(f".{target.name}.") and p.name.endswith(".tmp"))


def dead_pid() -> int:
    """The id of a process that has ended (and was reaped)."""
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("stale") / "corpus"
    build(records(), embedder="hash", path=path)
    return path


def test_a_killed_trace_writer_leaves_nothing_after_the_next_write(corpus_dir, tmp_path):
    target = tmp_path / "run.jsonl"
    target.write_text("the previous trace\n")
    marker = tmp_path / "marker"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(corpus_dir), str(target), str(marker)],
                              cwd=Path(__file__).resolve().parent.parent)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert writer.poll() is None, "the writer ended before it was killed"
            assert time.monotonic() < deadline, "the writer never reached the middle of its write"
            time.sleep(0.05)
        left = temps_of(target)
        assert [p.name.split(".")[-3] for p in left] == [str(writer.pid)]  # .run.jsonl.<pid>.<hex>.tmp
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert temps_of(target) == left                                 # what the killed writer left
    assert target.read_text() == "the previous trace\n"             # and the old trace, whole

    live = tmp_path / f".run.jsonl.{os.getpid()}.0123abcd.tmp"     # a live writer's: stays
    live.write_text("still being written")
    other = tmp_path / f".other.jsonl.{writer.pid}.0123abcd.tmp"   # another file's: stays
    other.write_text("not run.jsonl's")
    result = CliRunner().invoke(main, ["run", "hybrid", "--corpus", str(corpus_dir), "-q", "json parser",
                                       "--trace", str(target)])
    assert result.exit_code == 0, result.output
    assert temps_of(target) == [live]
    assert other.exists()
    assert len(Trace.load(target)) > 0


def test_only_irflows_names_of_regular_files_of_gone_writers_are_removed(tmp_path):
    gone, alive = dead_pid(), os.getpid()
    target = tmp_path / "run.jsonl"
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("a user's file")
    removed = [f".run.jsonl.{gone}.0123abcd.tmp", f".run.jsonl.{gone}.ffffffff.tmp", ".run.jsonl.99999999999.0123abcd.tmp"]
    kept_files = [f".run.jsonl.{alive}.0123abcd.tmp",          # its writer runs
                  f".run.jsonl.{gone}.0123ABCD.tmp",           # not a name irflow makes
                  f".run.jsonl.{gone}.0123abc.tmp",
                  f".run.jsonl.{gone}.0123abcd.tmp.bak",
                  f"run.jsonl.{gone}.0123abcd.tmp",
                  f".run.jsonl.x{gone}.0123abcd.tmp",
                  f".run.jsonl.5.{gone}.0123abcd.tmp",          # run.jsonl.5's, not run.jsonl's
                  f".run.json.{gone}.0123abcd.tmp"]
    for name in removed + kept_files:
        (tmp_path / name).write_text("x")
    folder = tmp_path / f".run.jsonl.{gone}.00000000.tmp"      # a folder, not a file
    folder.mkdir()
    (folder / "inside").write_text("kept")
    link = tmp_path / f".run.jsonl.{gone}.11111111.tmp"        # a link, not a file
    link.symlink_to(outside)
    write_atomic(target, "new\n")
    names = {p.name for p in tmp_path.iterdir()}
    assert not names & set(removed)
    assert names >= set(kept_files) | {folder.name, link.name, "run.jsonl", "elsewhere.txt"}
    assert (folder / "inside").read_text() == "kept" and outside.read_text() == "a user's file"
    assert target.read_text() == "new\n"
    assert remove_stale_temps(target) == []  # nothing left to remove


def test_the_clean_up_of_a_missing_folder_finds_nothing(tmp_path):
    assert remove_stale_temps(tmp_path / "nowhere" / "run.jsonl") == []
