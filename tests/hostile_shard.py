"""Kill ``irflow shard`` at random moments, again and again, with readers reopening the corpus all along.

Not collected by pytest (a long run; ``test_sharded_commit.py`` holds the
quick version).  Run it from the repository's root::

    python tests/hostile_shard.py --kills 60

Each round starts ``irflow shard SOURCE --shards N --out S`` in a child
process — SOURCE and N drawn from (A, 3), (B, 2), (A, 2), (B, 4); now and
then S is removed first, so the round is a first sharding — and SIGKILLs it
after a random delay (up to a little longer than a whole run, so some rounds finish).
Meanwhile reader processes reopen S and search it in a loop.  After each
kill, S must open as exactly the sharding it held before the round or the
one the round was writing (its answers equal, to the bit, to the unsharded
SOURCE's, with that many shards), or — only when no sharding was ever
committed — say that an interrupted sharding is there.  Readers must never
fail and always see one of the committed states.  At the end one more run
must finish and leave a clean directory.  Exit status 1 on any violation.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import irflow  # noqa: E402
from irflow.errors import CorpusError  # noqa: E402
from irflow.shard import ShardedCorpus  # noqa: E402
from shard_states import answers, answers_of, assert_clean, build_sources, spawn_shard  # noqa: E402

CHOICES = (("A", 3), ("B", 2), ("A", 2), ("B", 4))


def state_of(root: Path, expected: dict[str, dict]) -> tuple[str, int] | str:
    """("A" or "B", shards) of the sharding at *root*, or "interrupted"; raises AssertionError on anything else."""
    if not root.exists():  # a first sharding killed before it made the directory
        return "interrupted"
    try:
        got = answers_of(root)
    except CorpusError as error:
        if "interrupted sharding" in str(error):
            return "interrupted"
        raise AssertionError(f"S does not open: {error}") from None
    names = [name for name, value in expected.items() if value == got]
    if len(names) != 1:
        raise AssertionError("S answers as neither A nor B")
    with ShardedCorpus.open(root) as sharded:
        return names[0], sharded.n_shards


def read_loop(work: Path) -> None:
    """A reader process: while ``work/active`` exists, reopen ``work/S`` and search it; count opens, log failures."""
    expected = {"A": answers_of(work / "A"), "B": answers_of(work / "B")}
    opens = 0
    with open(work / f"reader-{os.getpid()}.log", "a", encoding="utf-8") as log:
        while not (work / "stop").exists():
            if not (work / "active").exists():
                time.sleep(0.05)
                continue
            try:
                with irflow.open_corpus(work / "S") as sharded:
                    got = answers(sharded)
            except CorpusError as error:
                if (work / "active").exists():  # (the main process may be removing S for a first sharding)
                    log.write(f"FAIL a reader failed: {error}\n")
                continue
            if got not in expected.values():
                log.write("FAIL a reader saw answers of neither A nor B\n")
            opens += 1
            if opens % 10 == 0:
                log.write(f"opens {opens}\n")
                log.flush()
        log.write(f"opens {opens}\n")


class Readers:
    """Reader processes (threads would race in CPython 3.11's ast, which np.load uses: gh-106905)."""

    def __init__(self, work: Path, count: int) -> None:
        self.work = work
        self.procs = [subprocess.Popen([sys.executable, __file__, "--reader", str(work)]) for _ in range(count)]

    def active(self, on: bool) -> None:
        flag = self.work / "active"
        if on:
            flag.touch()
        elif flag.exists():
            flag.unlink()
            time.sleep(1.0)  # let readers in mid-open finish

    def close(self) -> tuple[int, list[str]]:
        (self.work / "stop").touch()
        for proc in self.procs:
            proc.wait(timeout=120)
        opens, errors = 0, []
        for log in self.work.glob("reader-*.log"):
            lines = log.read_text(encoding="utf-8").splitlines()
            errors += [line[5:] for line in lines if line.startswith("FAIL ")]
            counts = [int(line.split()[1]) for line in lines if line.startswith("opens ")]
            opens += counts[-1] if counts else 0
        return opens, errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=60)
    parser.add_argument("--readers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=2024)
    parser.add_argument("--reader", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reader is not None:
        read_loop(args.reader)
        return 0
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="hostile-shard-"))
    a, b = build_sources(work)
    sources = {"A": a, "B": b}
    expected = {"A": answers_of(a), "B": answers_of(b)}
    root = work / "S"
    spawn_shard(a, 3, root).wait()
    state: tuple[str, int] | str = ("A", 3)
    readers = Readers(work, args.readers)
    readers.active(True)
    started = time.monotonic()  # how long a whole run takes with the readers at work
    spawn_shard(a, 3, root).wait()
    whole = time.monotonic() - started
    tally = {"old": 0, "new": 0, "interrupted": 0, "finished": 0}
    failures: list[str] = []
    try:
        for round_ in range(args.kills):
            if rng.random() < 0.15:  # a first sharding: nothing committed yet
                readers.active(False)
                shutil.rmtree(root, ignore_errors=True)  # (absent when the last round never made it)
                state = "interrupted"
            name, n = rng.choice(CHOICES)
            proc = spawn_shard(sources[name], n, root)
            time.sleep(rng.uniform(0.2, whole * 1.2))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
            finished = proc.returncode == 0
            try:
                now = state_of(root, expected)
            except AssertionError as error:
                failures.append(f"round {round_} ({name} {n}, after {state}): {error}")
                break
            allowed = {state, (name, n)}
            if now not in allowed or (finished and now != (name, n)):
                failures.append(f"round {round_}: S holds {now}, expected one of {sorted(map(str, allowed))}")
                break
            tally["finished" if finished else "new" if now == (name, n) and now != state else
                  "interrupted" if now == "interrupted" else "old"] += 1
            state = now
            if state != "interrupted":
                readers.active(True)
    finally:
        opens, errors = readers.close()
    failures += errors[:10]
    if not failures:  # with no reader left holding old generations, one more run leaves exactly its own files
        final = spawn_shard(b, 2, root)
        if final.wait() != 0 or state_of(root, expected) != ("B", 2):
            failures.append("the last run did not finish as B with 2 shards")
        else:
            try:
                assert_clean(root, 2)
            except AssertionError as error:
                failures.append(f"leftovers after the last run: {error}")
    print(f"{args.kills} rounds (a whole run takes {whole:.1f} s): killed and left the old sharding {tally['old']}, "
          f"the new one {tally['new']}, an interrupted first sharding {tally['interrupted']}; finished before the "
          f"kill {tally['finished']}; readers opened and searched {opens} times, {len(errors)} failed")
    for failure in failures:
        print("FAIL:", failure)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
