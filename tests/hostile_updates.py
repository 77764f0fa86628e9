"""Kill ``irflow add / delete / compact`` and Python ``put_artifact`` / ``upsert`` with SIGKILL, again and again.

Not collected by pytest (a long run; ``test_cli_update.py`` runs a quick
version of it).  Run it from the repository's root::

    python tests/hostile_updates.py --kills 120

Each round draws an operation — ``irflow add FILE`` (new artifacts),
``irflow add --upsert`` (changed texts of live records, and a new artifact),
``irflow add --artifacts`` (a live artifact given anew, and a new one),
``irflow delete --id --id --artifact``, ``irflow compact``, or a Python
process calling ``corpus.put_artifact`` or ``corpus.upsert`` — runs it in a
child process on the corpus and SIGKILLs it: half the rounds at a pause
point of the writer (``IRFLOW_TEST_PAUSE_WRITE``: after a file of the new
segment, before the generation's rename, before ``CURRENT`` moves, before the
merge that follows a commit moves it), half after a random delay.  What the
operation must do is computed beforehand on an in-memory corpus of the same
live records.  After each kill the corpus must open (checksums verified),
hold exactly the live records of before or of after the operation, and
answer every built-in recipe and ``search()`` mode exactly as a fresh build
of those records (``rebuild_oracle``).  A child that finished before its
kill must have left the state after.  At the end one more command must
commit and leave a clean directory.  Prints a table of what happened per
operation; exit status 1 on any violation.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import irflow  # noqa: E402
from irflow.cli.index import read_record_file  # noqa: E402
from irflow.store.generations import PAUSE_ENV  # noqa: E402
from irflow.util.table import render_table  # noqa: E402
from rebuild_oracle import assert_same_answers  # noqa: E402
from shard_corpus import records as make_records  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EMBEDDER = "hash:64"
OPS = ("add", "upsert", "artifacts", "delete", "compact", "put_artifact", "py_upsert")
WORDS = ["python", "parser", "graph", "sql", "http", "json", "cache", "archive", "schema", "query", "fast", "data"]


# -- the scene: a corpus, a pool of new artifacts, and what each operation must leave ---------------------


def live(root: Path) -> list[dict[str, Any]]:
    """The live records of the corpus at *root*, in row order (opened with every checksum verified)."""
    return [_plain(r) for r in irflow.open_corpus(root)]


def _plain(record: Any) -> dict[str, Any]:
    out = record.to_dict()
    out.pop("vector", None)
    return out


class Scene:
    """The corpus under attack (``work/corpus``) and the operations drawn on it."""

    def __init__(self, work: Path, seed: int, base_artifacts: int = 40) -> None:
        self.work = work
        self.root = work / "corpus"
        self.rng = random.Random(seed)
        pool = make_records(n_artifacts=1200, seed=seed)
        by_artifact: dict[str, list[dict[str, Any]]] = {}
        for record in pool:
            by_artifact.setdefault(record["artifact_id"], []).append(record)
        self.artifacts = list(by_artifact.values())
        self.next_artifact = base_artifacts
        base = [r for group in self.artifacts[:base_artifacts] for r in group]
        irflow.build(base, embedder=EMBEDDER, path=self.root)
        self.files = 0

    def _new_artifacts(self, n: int) -> list[dict[str, Any]]:
        taken = self.artifacts[self.next_artifact:self.next_artifact + n]
        self.next_artifact += n
        records = [dict(r) for group in taken for r in group]
        for r in records:
            if self.rng.random() < 0.5:
                r.pop("surface_index")  # numbered in file order, as irflow index numbers them
        return records

    def _text(self) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(2, 8)))

    def _file(self, records: list[dict[str, Any]]) -> Path:
        self.files += 1
        path = self.work / f"input-{self.files:04d}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        return path

    def plan(self, op: str, before: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The job running *op* on the corpus (holding *before*), and the live records it must leave."""
        rng, root = self.rng, str(self.root)
        artifacts = list(dict.fromkeys(r["artifact_id"] for r in before))
        model = irflow.build([irflow.Record(**r) for r in before], embedder=None)
        if op == "add":
            path = self._file(self._new_artifacts(rng.randint(1, 3)))
            job = {"cli": ["add", root, str(path), "--no-progress"]}
            model.add(read_record_file(path).records)
        elif op in ("upsert", "py_upsert"):
            changed = [dict(r, text=self._text()) for r in rng.sample(before, 2)]
            new = changed + self._new_artifacts(1)
            path = self._file(new)
            if op == "upsert":
                job = {"cli": ["add", root, str(path), "--upsert", "--no-progress"]}
                model.upsert(read_record_file(path).records)
            else:
                job = {"python": "upsert", "root": root, "file": str(path)}
                model.upsert(new)
        elif op in ("artifacts", "put_artifact"):
            artifact = rng.choice(artifacts)
            given = [{"artifact_id": artifact, "surface_kind": rng.choice(["name", "description", "readme_chunk"]),
                      "text": f"{artifact} {self._text()}", "metadata": {"owner": "ann", "lang": "py"}}
                     for _ in range(rng.randint(1, 3))]
            if op == "artifacts":
                path = self._file(given + self._new_artifacts(1))
                job = {"cli": ["add", root, str(path), "--artifacts", "--no-progress"]}
                with model.batch() as batch:
                    grouped: dict[str, list[Any]] = {}
                    for record in read_record_file(path).records:
                        grouped.setdefault(record.artifact_id, []).append(record)
                    for name, records in grouped.items():
                        batch.put_artifact(name, records)
            else:
                path = self._file(given)
                job = {"python": "put_artifact", "root": root, "file": str(path), "artifact": artifact}
                model.put_artifact(artifact, given)
        elif op == "delete":
            ids = [r["id"] for r in rng.sample(before, 2)]
            gone = rng.choice(artifacts)
            job = {"cli": ["delete", root, *(a for i in ids for a in ("--id", i)), "--artifact", gone]}
            with model.batch() as batch:
                batch.delete(ids, missing="ok")
                batch.delete_artifact(gone, missing="ok")
            job["cli"] += ["--missing", "ok"]  # an id of the deleted artifact is fine either way
        else:  # compact
            job = {"cli": ["compact", root, "--no-progress"]}
        return job, [_plain(r) for r in model]

    def next_segment(self) -> int:
        """The number the next segment written to the corpus gets."""
        manifest = json.loads((self.root / _current(self.root) / "manifest.json").read_text(encoding="utf-8"))
        return int(manifest.get("next_segment", 2))

    @staticmethod
    def pause_points(op: str) -> list[str]:
        """Where the writer of *op* can be stopped: files of its new segment (NEXT), the rename, CURRENT, the
        CURRENT of the merge that may follow a commit."""
        points = ["before-rename", "before-current", "before-current#2"]
        if op != "delete":
            points += ["after:NEXT.records.text.bytes.npy", "after:NEXT.vectors.npy"]
        return points


def _current(root: Path) -> str:
    return (root / "CURRENT").read_text(encoding="utf-8").split()[0]


# -- running a job in a child process ------------------------------------------------------------------


def run_job(job: dict[str, Any]) -> None:
    """Run one job in this process (a child): the irflow command line, or a Python update."""
    if "cli" in job:
        from irflow.cli import main  # the child's own import: the parent may not have loaded the CLI

        main.main(args=job["cli"], prog_name="irflow")
        return
    corpus = irflow.open_corpus(job["root"])
    records = [json.loads(line) for line in Path(job["file"]).read_text(encoding="utf-8").splitlines()]
    if job["python"] == "upsert":
        corpus.upsert(records)
    else:
        corpus.put_artifact(job["artifact"], records)


def _forked(job: dict[str, Any], pause: str | None) -> None:
    if pause:
        os.environ[PAUSE_ENV] = pause
    run_job(job)


class Child:
    """A job running in a child: a fresh interpreter (``fork=False``: the real command) or a fork of this one."""

    def __init__(self, job: dict[str, Any], pause: str | None, *, fork: bool) -> None:
        self.started = time.monotonic()
        if fork:
            self.proc: Any = multiprocessing.get_context("fork").Process(target=_forked, args=(job, pause))
            self.proc.start()
            return
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests"),
                                                           os.environ.get("PYTHONPATH", "")]))
        env.pop(PAUSE_ENV, None)
        if pause:
            env[PAUSE_ENV] = pause
        if "cli" in job:
            argv = [sys.executable, "-m", "irflow", *job["cli"]]
        else:
            argv = [sys.executable, __file__, "--job", json.dumps(job)]
        self.proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def returncode(self) -> int | None:
        if isinstance(self.proc, subprocess.Popen):
            return self.proc.poll()
        return self.proc.exitcode

    def kill(self) -> None:
        if self.returncode() is None:
            os.kill(self.proc.pid, signal.SIGKILL)

    def wait(self) -> tuple[int, str]:
        if isinstance(self.proc, subprocess.Popen):
            _, err = self.proc.communicate(timeout=600)
            return self.proc.returncode, err.decode("utf-8", "replace")
        self.proc.join(600)
        return self.proc.exitcode, ""


def _wait_for(marker: Path, child: Child, timeout: float = 300.0) -> bool:
    """True when the child reached its pause point; False when it exited first (the point never came)."""
    deadline = time.monotonic() + timeout
    while not marker.exists():
        if child.returncode() is not None:
            return False
        if time.monotonic() > deadline:
            raise AssertionError("the child neither reached its pause point nor exited")
        time.sleep(0.01)
    return True


# -- one round -------------------------------------------------------------------------------------


class Attack:
    """Rounds of (operation, kill) on a scene; the tally of what happened, the failures."""

    def __init__(self, scene: Scene, *, fork: bool) -> None:
        self.scene = scene
        self.fork = fork
        self.tally: dict[str, Counter[str]] = {op: Counter() for op in OPS}
        self.failures: list[str] = []
        self.took: dict[str, list[float]] = {op: [] for op in OPS}
        self.startup = 0.0 if fork else _startup()
        self.kills = 0
        self.rounds = 0

    def _delay(self, op: str) -> float:
        """A random moment of the child's life: after the interpreter starts, up to a little past its end."""
        runs = self.took[op]
        whole = max(runs) if runs else self.startup + 2.0
        return self.scene.rng.uniform(0.8 * self.startup, 1.15 * whole)

    def round(self, op: str, how: str, point: str | None = None) -> None:
        """Run *op*, kill it at a pause point (``how="pause"``: *point*, else one drawn) or at a random time
        (``"random"``), or let it finish (``"none"``); then check the corpus."""
        scene = self.scene
        before = live(scene.root)
        job, after = scene.plan(op, before)
        self.rounds += 1
        marker = scene.work / f"paused-{self.rounds:05d}"  # one per round: an old marker would end the wait at once
        if how == "pause":
            point = point or scene.rng.choice(scene.pause_points(op))
            point = point.replace("NEXT", f"seg-{scene.next_segment():06d}")
        child = Child(job, None if how != "pause" else f"{point}@{marker}", fork=self.fork)
        if how == "pause":
            reached = _wait_for(marker, child)
            self.took[op].append(time.monotonic() - child.started)  # about a whole run (the points are late)
        elif how == "random":
            time.sleep(self._delay(op))
            reached = child.returncode() is None
        else:
            reached = False
        if how != "none":
            child.kill()
        code, err = child.wait()
        killed = code in (-signal.SIGKILL, -9)
        if not killed and code != 0:
            self.failures.append(f"{op}: the child failed (exit status {code}): {err.strip()[-500:]}")
            return
        self.kills += killed
        # stopped in its own commit, the child leaves the state before; in the merge after it, the state after
        must = None if not (killed and reached and how == "pause") else "after" if point.endswith("#2") else "before"
        self._judge(op, how, before, after, killed and reached, must)

    def _judge(self, op: str, how: str, before: list[dict[str, Any]], after: list[dict[str, Any]],
               killed: bool, must: str | None) -> None:
        try:
            now = live(self.scene.root)
        except irflow.IrflowError as error:
            self.failures.append(f"{op} ({how}): the corpus does not open after the kill: {error}")
            return
        state = "same" if now == before == after else "after" if now == after else "before" if now == before else None
        if state is None:
            self.failures.append(f"{op} ({how}, {'killed' if killed else 'finished'}): the corpus holds "
                                 f"{len(now)} records, neither the {len(before)} of before nor the {len(after)} of "
                                 "after")
            return
        if not killed and state == "before":
            self.failures.append(f"{op} ({how}): the child finished but left the state before")
            return
        if must is not None and state not in (must, "same"):
            self.failures.append(f"{op} (paused and killed): left the state {state}, not {must}")
            return
        try:
            assert_same_answers(irflow.open_corpus(self.scene.root), quick=True)
        except AssertionError as error:
            self.failures.append(f"{op} ({how}): answers differ from a fresh build's: {error}")
            return
        self.tally[op][f"{how} {'killed' if killed else 'finished'}"] += 1
        self.tally[op][f"left {state}"] += 1

    def finish(self) -> None:
        """More commands commit (adds: a compact of a compact corpus writes nothing), and the directory then
        holds exactly the corpus's files (the commits removed what killed writers left).

        Two commits: a writer leaves a superseded generation that something holds under a shared lock
        at that moment, for a later writer to remove (the rule of ``irflow.store.generations``); what
        two commits leave is garbage no writer will remove, listed with each directory's contents.
        """
        names: list[str] = []
        for _ in range(2):
            self.round("add", "none")
            names = sorted(p.name for p in self.scene.root.iterdir())
            if names == [".lock", "CURRENT", _current(self.scene.root)]:
                return
        held = {name: sorted(q.name for q in (self.scene.root / name).iterdir())[:12]
                for name in names if (self.scene.root / name).is_dir()}
        self.failures.append(f"leftovers after two commits: {names}; their files: {held}")

    def table(self) -> str:
        columns = ["pause killed", "random killed", "random finished", "pause finished", "none finished",
                   "left before", "left after", "left same"]
        rows = [[op, *(self.tally[op][c] for c in columns)] for op in OPS]
        rows.append(["all", *(sum(self.tally[op][c] for op in OPS) for c in columns)])
        return render_table(["operation", *columns], rows)


def _startup() -> float:
    """How long a child interpreter takes to import irflow's command line (random kills land after it)."""
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "irflow", "--version"], check=True, capture_output=True, cwd=REPO)
    return time.monotonic() - started


def attack(work: Path, *, kills: int, seed: int, fork: bool, pause_share: float = 0.5,
           schedule: list[tuple[str, str, str | None]] | None = None) -> Attack:
    """Rounds until *kills* children were killed (at most 3 x *kills* rounds), or the rounds of *schedule*
    (operation, how, pause point); then the last clean commit."""
    scene = Scene(work, seed)
    done = Attack(scene, fork=fork)
    rounds = 0
    while not done.failures and (rounds < len(schedule) if schedule is not None else
                                 done.kills < kills and rounds < 3 * kills):
        if schedule is not None:
            op, how, point = schedule[rounds]
        else:
            op = OPS[rounds] if rounds < len(OPS) else scene.rng.choice(OPS)
            how, point = "pause" if scene.rng.random() < pause_share else "random", None
        done.round(op, how, point)
        rounds += 1
    if not done.failures:
        done.finish()
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=120)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--fork", action="store_true", help="fork this interpreter instead of starting new ones")
    parser.add_argument("--job", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job is not None:
        run_job(json.loads(args.job))
        return 0
    work = Path(tempfile.mkdtemp(prefix="hostile-updates-"))
    started = time.monotonic()
    done = None
    try:
        done = attack(work, kills=args.kills, seed=args.seed, fork=args.fork)
        print(done.table())
        print(f"{done.kills} kills in {sum(sum(c[k] for k in c if k.startswith(('pause', 'random'))) for c in done.tally.values())} "
              f"rounds, {time.monotonic() - started:.0f} s; corpus of {len(live(work / 'corpus'))} records at the end")
        for failure in done.failures:
            print("FAIL:", failure)
        if done.failures:
            print(f"the corpus and the inputs are kept in {work}")
        return 1 if done.failures or done.kills < args.kills else 0
    finally:
        if done is None or not done.failures:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
