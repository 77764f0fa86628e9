"""Hostile loop (not collected): kill ``irflow run --trace T`` at random moments; T stays whole, no temp outlives a write.

Each round starts the real command line writing a large trace to T, sends it
SIGKILL after a random delay (before, during or after the write), then checks
that T is the previous trace or the new one, whole (it loads), and that the
next write of T leaves no ``.T.<pid>.<hex>.tmp`` behind.  It also asks for a
trace inside the corpus each round and checks the corpus is byte for byte
what it was.  The quick versions are in tests/test_stale_temps.py and
tests/test_output_guard.py.

    python tests/hostile_outputs.py [ROUNDS]
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_fakes  # noqa: E402,F401  (maps irflow.stages / irflow.recipes in a bare checkout)
from irflow.engine.trace import Trace  # noqa: E402
from irflow.store.corpus import build  # noqa: E402
from search_reference import records  # noqa: E402

IRFLOW = [sys.executable, "-m", "irflow"]
WORDS = ["json", "parser", "http", "client", "graph", "tool", "sql", "database", "async", "queue", "fast", "cli"]
# many queries: a trace of megabytes, so a kill often lands in the middle of its write
QUERIES = [arg for i in range(400) for arg in ("-q", f"{WORDS[i % 12]} {WORDS[i * 7 % 12]} {WORDS[i * 5 % 12]}")]


def corpus_bytes(root: Path) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for path in sorted(root.rglob("*")):
        digest.update(str(path.relative_to(root)).encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def temps_of(target: Path) -> list[str]:
    return [p.name for p in target.parent.iterdir() if p.name.startswith(f".{target.name}.") and p.name.endswith(".tmp")]


def main(rounds: int) -> int:
    work = Path(tempfile.mkdtemp(prefix="hostile-outputs-"))
    corpus = work / "corpus"
    build(records(), embedder="hash", path=corpus)
    before = corpus_bytes(corpus)
    target = work / "run.jsonl"
    run = [*IRFLOW, "run", "hybrid", "--corpus", str(corpus), *QUERIES, "--set", "k=50", "--trace"]
    start = time.monotonic()
    subprocess.run([*run, str(target)], check=True, capture_output=True)
    took = time.monotonic() - start
    print(f"one traced run: {took:.2f} s, trace {target.stat().st_size >> 10} KiB; killing at 40-100 % of that")
    leftovers = 0
    for n in range(rounds):
        writer = subprocess.Popen([*run, str(target)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(random.uniform(0.4, 1.0) * took)
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        leftovers += len(temps_of(target))
        Trace.load(target)  # the old trace or the new one, whole
        subprocess.run([*run, str(target)], check=True, capture_output=True)
        assert temps_of(target) == [], f"round {n}: {temps_of(target)} left after the next write"
        refused = subprocess.run([*run, str(corpus / "CURRENT")], capture_output=True, text=True)
        assert refused.returncode == 1 and "inside the irflow corpus" in refused.stderr, refused.stderr
        assert corpus_bytes(corpus) == before, f"round {n}: the corpus changed"
    print(f"{rounds} rounds: {leftovers} temporary files left by killed writers, all removed by the next write; "
          f"the corpus unchanged")
    return 0


if __name__ == "__main__":
    os.chdir(Path(__file__).resolve().parent.parent)
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 30))
