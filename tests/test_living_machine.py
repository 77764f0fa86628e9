"""A state machine of updates: after every step a corpus answers exactly as a fresh build of its live records.

Hypothesis draws a sequence of operations — add (new artifacts, new surfaces
of existing ones, texts that repeat a held text so its vector is reused,
ids deleted earlier), upsert (live and new ids), delete (with unknown ids
under ``missing="ok"``), put_artifact, delete_artifact, a batch of several,
compact, a tiny merge policy (so commits merge), reopen (on disk) and
refused operations (which must change nothing) — on one corpus, and after
each step checks two independent expectations:

- a plain-Python model of the live records (:class:`Model`, the rules of
  :mod:`irflow.store.updates` restated: an added or upserted record goes
  last, an omitted ``surface_index`` follows the artifact's highest live
  one, ``put_artifact`` numbers from 0) equals ``list(corpus)``;
- the rebuild oracle (``rebuild_oracle.assert_sampled_answers``): a fresh
  ``irflow.build`` of ``list(corpus)`` answers a sample of the built-in
  recipes, ``search()`` in every mode and option, and the BM25 (every
  variant and statistics mode) and dense kernels to the bit; the ledger and
  ``records_for_artifact`` too.

A target is one function (:data:`TARGETS`): a corpus in memory and one on
disk run here.  Quick by default; ``IRFLOW_LIVING_MACHINE=long`` runs many
more and longer sequences, with the whole oracle at the end of each.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import warnings
import zlib
from pathlib import Path
from typing import Any, Callable

import attrs
import pytest
from hypothesis import HealthCheck, event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import irflow
from irflow.errors import CorpusError, MissingRecordWarning
from irflow.shard.driver import ShardedCorpus
from irflow.store.corpus import open_corpus
from irflow.store.mergepolicy import MergePolicy
from rebuild_oracle import assert_same_answers, assert_sampled_answers
from shard_corpus import WORDS, records

LONG = os.environ.get("IRFLOW_LIVING_MACHINE") == "long"
POOL = records(18, seed=5, interleave=True)  # the records the corpus starts from (a part) and adds from
FIRST = 40  # records of the initial build
NEW_ARTIFACTS = [f"new{i}" for i in range(12)]
NEW_KINDS = ["name", "description", "readme_chunk", "deps", "notes"]  # "notes": a kind no build had


# -- the model: the live records as plain dicts, by the documented rules ---------------------------------


def _full(record: dict[str, Any], index: int) -> dict[str, Any]:
    """The record as the corpus lists it (``Record.to_dict``): its index and id filled."""
    return irflow.Record(**dict(record, surface_index=index)).to_dict()


@attrs.define
class Model:
    """The live records in row order (id -> record dict) and the texts ever held (to repeat them)."""

    live: dict[str, dict[str, Any]]
    gone: dict[str, dict[str, Any]] = attrs.field(factory=dict)  # deleted ones, to add again

    def copy(self) -> "Model":
        return Model(dict(self.live), dict(self.gone))

    def artifacts(self) -> list[str]:
        return sorted({r["artifact_id"] for r in self.live.values()})

    def indices(self, artifact: str) -> dict[int, str]:
        return {r["surface_index"]: i for i, r in self.live.items() if r["artifact_id"] == artifact}

    def texts(self) -> list[str]:
        return sorted({r["text"] for r in (*self.live.values(), *self.gone.values())})

    def remove(self, record_id: str) -> None:
        self.gone[record_id] = self.live.pop(record_id)

    def append(self, records: list[dict[str, Any]], *, first: bool = False) -> list[dict[str, Any]]:
        """add / upsert (or put_artifact's, ``first``): omitted indices follow the artifact's highest live one."""
        seen: dict[str, int] = {}
        full = []
        for record in records:
            artifact = record["artifact_id"]
            start = 0 if first else max(self.indices(artifact), default=-1) + 1
            at = seen.setdefault(artifact, start)
            seen[artifact] = at + 1
            full.append(_full(record, at if record.get("surface_index") is None else record["surface_index"]))
        for record in full:  # an upsert's new version goes last: out first
            self.live.pop(record["id"], None)
        for record in full:
            self.live[record["id"]] = record
            self.gone.pop(record["id"], None)
        return full


# -- operations, drawn against a model and applied to it ----------------------------------------------


@attrs.frozen
class Op:
    """One operation: its kind and arguments (records, ids, artifact, missing)."""

    kind: str
    records: tuple[dict[str, Any], ...] = ()
    ids: tuple[str, ...] = ()
    artifact: str = ""
    missing: str = "error"

    def run(self, corpus: Any) -> Any:
        """Call it on a corpus or a batch."""
        if self.kind in ("add", "upsert"):
            return getattr(corpus, self.kind)([dict(r) for r in self.records])
        if self.kind == "delete":
            return corpus.delete(list(self.ids), missing=self.missing)
        if self.kind == "put_artifact":
            return corpus.put_artifact(self.artifact, [dict(r) for r in self.records])
        return corpus.delete_artifact(self.artifact, missing=self.missing)

    def apply(self, model: Model) -> None:
        """What it does to the live records, by the documented rules."""
        if self.kind in ("add", "upsert"):
            model.append(list(self.records))
        elif self.kind == "delete":
            for record_id in self.ids:
                if record_id in model.live:
                    model.remove(record_id)
        else:
            for record_id in model.indices(self.artifact).values():
                model.remove(record_id)
            if self.kind == "put_artifact":
                model.append(list(self.records), first=True)

    @property
    def warns(self) -> bool:
        return self.missing == "ok"


def _text(data: st.DataObject, model: Model) -> str:
    held = model.texts()
    if held and data.draw(st.booleans(), label="repeat a held text"):  # its vector is reused
        return data.draw(st.sampled_from(held))
    return " ".join(data.draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6)))


def _metadata(data: st.DataObject) -> dict[str, Any]:
    metadata: dict[str, Any] = {"owner": data.draw(st.sampled_from(["ann", "bob", "cy", "dee"])),
                                "stars": data.draw(st.integers(0, 60)), "lang": data.draw(st.sampled_from(["py", "rs"])),
                                "tags": data.draw(st.lists(st.sampled_from(["web", "ml", "db", "cli"]), max_size=2,
                                                           unique=True))}
    if data.draw(st.booleans()):
        metadata["license"] = "mit"
    return metadata


def _record(data: st.DataObject, model: Model, artifact: str, index: int | None = None) -> dict[str, Any]:
    record = {"artifact_id": artifact, "surface_kind": data.draw(st.sampled_from(NEW_KINDS)),
              "text": _text(data, model), "metadata": _metadata(data)}
    if index is not None:
        record["surface_index"] = index
    return record


def _artifact(data: st.DataObject, model: Model, *, new: bool | None = None) -> str:
    held = model.artifacts()
    if new is None:
        new = not held or data.draw(st.booleans(), label="a new artifact")
    if not new:
        return data.draw(st.sampled_from(held))
    free = [a for a in NEW_ARTIFACTS + [f"pkg{i:02d}" for i in range(18)] if a not in held]
    # every name taken (a long run): one more
    return data.draw(st.sampled_from(free)) if free else next(f"more{i}" for i in range(10**6) if f"more{i}" not in held)


def _draw_add(data: st.DataObject, model: Model) -> Op:
    """New records: new artifacts, new surfaces of held ones (indices omitted or free), deleted ids again."""
    out: list[dict[str, Any]] = []
    if model.gone and data.draw(st.booleans(), label="add deleted records again"):
        free = [r for r in model.gone.values() if r["surface_index"] not in model.indices(r["artifact_id"])]
        if free:
            again = dict(data.draw(st.sampled_from(free)))
            again["text"] = _text(data, model)
            out.append({k: v for k, v in again.items() if k != "id"})
    for _ in range(data.draw(st.integers(0 if out else 1, 3), label="records")):
        artifact = _artifact(data, model)
        if any(r["artifact_id"] == artifact for r in out):
            continue  # one way of numbering per artifact and call: the model keeps to the simple rules
        if data.draw(st.booleans(), label="explicit index"):
            free = [i for i in range(20) if i not in model.indices(artifact)]
            out.append(_record(data, model, artifact, data.draw(st.sampled_from(free)) if free else None))
        else:
            out.extend(_record(data, model, artifact) for _ in range(data.draw(st.integers(1, 2))))
    return Op("add", tuple(out))


def _draw_upsert(data: st.DataObject, model: Model) -> Op:
    """Live ids with new texts and metadata, and new records."""
    out: list[dict[str, Any]] = []
    ids: set[str] = set()
    for _ in range(data.draw(st.integers(1, 3), label="records")):
        if model.live and data.draw(st.booleans(), label="a live id"):
            old = model.live[data.draw(st.sampled_from(sorted(model.live)))]
            if old["id"] in ids:
                continue
            ids.add(old["id"])
            out.append(dict({k: v for k, v in old.items() if k != "id"}, text=_text(data, model),
                            metadata=_metadata(data)))
        else:
            artifact = _artifact(data, model, new=True)
            if any(r["artifact_id"] == artifact for r in out):
                continue
            out.append(_record(data, model, artifact, 0))
    return Op("upsert", tuple(out))


def _draw_delete(data: st.DataObject, model: Model) -> Op:
    ids = data.draw(st.lists(st.sampled_from(sorted(model.live)), min_size=1, max_size=4, unique=True)) \
        if model.live else []
    if not ids or data.draw(st.booleans(), label="unknown ids too"):
        unknown = data.draw(st.sampled_from(["nope", "0" * 20, *sorted(model.gone)[:3]]))
        return Op("delete", ids=tuple(ids + [unknown]), missing="ok")
    return Op("delete", ids=tuple(ids))


def _draw_put(data: st.DataObject, model: Model) -> Op:
    artifact = _artifact(data, model)
    n = data.draw(st.integers(0, 3), label="surfaces")
    return Op("put_artifact", tuple(_record(data, model, artifact) for _ in range(n)), artifact=artifact)


def _draw_delete_artifact(data: st.DataObject, model: Model) -> Op:
    if not model.live or data.draw(st.integers(0, 4)) == 0:
        return Op("delete_artifact", artifact=_artifact(data, model, new=True), missing="ok")
    return Op("delete_artifact", artifact=_artifact(data, model, new=False))


DRAWS = [_draw_add, _draw_upsert, _draw_delete, _draw_put, _draw_delete_artifact]


def _draw_refused(data: st.DataObject, model: Model) -> tuple[Op, str]:
    """An operation the corpus must refuse, and the words of its error."""
    choices = ["unknown id", "unknown artifact", "stranger"]
    if model.live:
        choices += ["live id", "taken surface"]
    choice = data.draw(st.sampled_from(choices), label="refusal")
    if choice == "unknown id":
        return Op("delete", ids=(*sorted(model.live)[:1], "nope")), "not in corpus"
    if choice == "unknown artifact":
        return Op("delete_artifact", artifact="ghost"), "artifact not in corpus"
    if choice == "stranger":
        artifact = _artifact(data, model)
        return Op("put_artifact", (_record(data, model, artifact), _record(data, model, "ghost")),
                  artifact=artifact), "of other artifacts"
    held = model.live[data.draw(st.sampled_from(sorted(model.live)))]
    if choice == "live id":
        return Op("add", (_record(data, model, "new5"), {k: v for k, v in held.items() if k != "id"})), \
            "already in corpus"
    other = next(k for k in NEW_KINDS if k != held["surface_kind"])  # the same surface under another id
    return Op(data.draw(st.sampled_from(["add", "upsert"])), (dict(_record(data, model, held["artifact_id"]),
                                                                     surface_kind=other,
                                                                     surface_index=held["surface_index"]),)), \
        "take a surface another live record"


# -- targets: where the corpus lives ------------------------------------------------------------------


def _fresh(corpus: Any) -> Any:
    """A fresh build of the corpus's live records, in its order (the oracle's expectation)."""
    return irflow.build(list(corpus), embedder="hash:32", name="toys")


@attrs.define
class Target:
    """A corpus under test: how to open it again, where it lives (None: in memory), how it is rebuilt."""

    corpus: Any
    reopen: Callable[[Any], Any]  # the corpus opened again (on disk), or refreshed (in memory)
    directory: Path | None = None
    cleanup: Callable[[], None] = lambda: None
    rebuild: Callable[[Any], Any] = _fresh

    def listing(self) -> Any:
        """What a refused operation must leave as it was on disk: the pointer and the generations."""
        if self.directory is None:
            return None
        return (self.directory / "CURRENT").read_bytes(), sorted(p.name for p in self.directory.iterdir())


def memory_target() -> Target:
    def refresh(corpus: Any) -> Any:
        assert not corpus.refresh()  # nobody else commits to it
        return corpus
    return Target(irflow.build(POOL[:FIRST], embedder="hash:32", name="toys"), refresh)


def disk_target() -> Target:
    tmp = Path(tempfile.mkdtemp(prefix="irflow-machine-"))
    path = tmp / "toys"
    corpus = irflow.build(POOL[:FIRST], embedder="hash:32", name="toys", path=path)
    return Target(corpus, reopen=lambda _: open_corpus(path), directory=path,
                  cleanup=lambda: shutil.rmtree(tmp, ignore_errors=True))


def sharded_target() -> Target:
    """The corpus split in 3 shards on disk: it takes the same operations (a rebuild is one machine's)."""
    tmp = Path(tempfile.mkdtemp(prefix="irflow-machine-"))
    single = irflow.build(POOL[:FIRST], embedder="hash:32", name="toys", path=tmp / "single")
    sharded = irflow.shard(single, 3, tmp / "toys")
    return Target(sharded, reopen=lambda old: (old.close(), irflow.open_corpus(tmp / "toys"))[1],
                  directory=None, cleanup=lambda: shutil.rmtree(tmp, ignore_errors=True))


TARGETS: dict[str, Callable[[], Target]] = {"memory": memory_target, "disk": disk_target}
# A sharded corpus runs the same machine once it takes updates (add, upsert, delete, put_artifact,
# delete_artifact, batch, compact, merge_policy, refresh): until then it is left out.
SHARDED = hasattr(ShardedCorpus, "add")
if SHARDED:
    TARGETS["sharded"] = sharded_target

POLICIES = [MergePolicy.never(), MergePolicy(merge_factor=2, max_deleted=0.3, max_segments=3),
            MergePolicy(merge_factor=3, max_deleted=0.5, max_segments=2), MergePolicy(merge_factor=2),
            MergePolicy(max_deleted=0.05, max_segments=1)]


class LivingMachine(RuleBasedStateMachine):
    """Operations on one corpus; the model and a fresh build agree with it after every step."""

    make_target: Callable[[], Target] = staticmethod(memory_target)

    def __init__(self) -> None:
        super().__init__()
        self.target = type(self).make_target()
        self.model = Model({r["id"]: r for r in (r.to_dict() for r in self.target.corpus)})
        self.policy = MergePolicy.never()

    @property
    def corpus(self) -> Any:
        return self.target.corpus

    def teardown(self) -> None:
        try:
            if LONG:
                assert_same_answers(self.corpus, self.target.rebuild(self.corpus), quick=True)  # the whole oracle
        finally:
            self.target.cleanup()

    def _commit(self, op: Op) -> None:
        note(repr(op))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            report = op.run(self.corpus)
        assert [type(w.message) for w in caught if issubclass(w.category, MissingRecordWarning)] == \
            ([MissingRecordWarning] if op.warns else [])
        op.apply(self.model)
        self._merged(report)

    def _merged(self, report: Any) -> None:
        """After a commit, the policy has merged what it would (an operation that changed nothing commits nothing)."""
        for name in ("added", "replaced", "deleted", "reused", "merged"):
            event(f"a commit {name} records" if getattr(report, name) else f"a commit {name} none")
        if self.policy.enabled and hasattr(self.corpus, "segments") and (report.added or report.replaced or
                                                                          report.deleted):
            assert len(self.corpus.segments) <= self.policy.max_segments
            assert self.policy.plan(self.corpus.segments) == []

    @initialize(policy=st.sampled_from(POLICIES))
    def start(self, policy: MergePolicy) -> None:
        self.policy = self.corpus.merge_policy = policy
        assert [r.to_dict() for r in self.corpus] == [_full(r, r["surface_index"]) for r in POOL[:FIRST]]

    @rule(data=st.data(), draw=st.sampled_from(DRAWS))
    def operation(self, data: st.DataObject, draw: Callable[[st.DataObject, Model], Op]) -> None:
        self._commit(draw(data, self.model))

    @rule(data=st.data())
    def batch(self, data: st.DataObject) -> None:
        """Several operations, one commit, validated in call order against what the earlier ones did."""
        model = self.model.copy()
        ops = []
        for _ in range(data.draw(st.integers(2, 4), label="operations")):
            op = data.draw(st.sampled_from(DRAWS))(data, model)
            op.apply(model)
            ops.append(op)
        note(f"batch of {ops!r}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MissingRecordWarning)
            with self.corpus.batch() as batch:
                for op in ops:
                    op.run(batch)
        self.model = model
        self._merged(batch.report)

    @rule(data=st.data())
    def refused(self, data: st.DataObject) -> None:
        """A refused operation (alone or last in a batch) raises one CorpusError and changes nothing."""
        op, words = _draw_refused(data, self.model)
        note(f"refused: {op!r}")
        snapshot, listing, before = self.corpus.snapshot(), self.target.listing(), self._state()
        with pytest.raises(CorpusError, match=words):
            if data.draw(st.booleans(), label="in a batch"):
                with self.corpus.batch() as batch:
                    _draw_add(data, self.model.copy()).run(batch)
                    op.run(batch)
            else:
                op.run(self.corpus)
        assert self.corpus.snapshot() is snapshot and self.target.listing() == listing
        assert self._state() == before

    def _state(self) -> Any:
        """What a refused operation must leave as it was: the records, ledger and segments."""
        store = getattr(self.corpus, "store", None)
        return ([r.to_dict() for r in self.corpus], None if store is None else dict(store.ledger),
                getattr(self.corpus, "segments", None))

    @rule()
    def compact(self) -> None:
        self.corpus.compact()
        assert len(getattr(self.corpus, "segments", [None])) == 1

    @rule(policy=st.sampled_from(POLICIES))
    def merge_policy(self, policy: MergePolicy) -> None:
        """A tiny policy: the next commits merge segments (each merge its own commit)."""
        self.policy = self.corpus.merge_policy = policy

    @rule()
    def reopen(self) -> None:
        self.target.corpus = self.target.reopen(self.corpus)
        self.corpus.merge_policy = self.policy

    @invariant()
    def answers_as_a_fresh_build(self) -> None:
        listed = [r.to_dict() for r in self.corpus]
        assert listed == list(self.model.live.values())
        # the sample is a function of the state: a failing state fails again when replayed
        pick = random.Random(zlib.crc32(repr([(r["id"], r["text"]) for r in listed]).encode()))
        assert_sampled_answers(self.corpus, self.target.rebuild(self.corpus), pick)


def _machine(name: str, examples: int) -> Any:
    """The machine over one target, as a test case (quick; ``IRFLOW_LIVING_MACHINE=long``: many long runs)."""
    machine = type(f"{name.title()}Machine", (LivingMachine,), {"make_target": staticmethod(TARGETS[name])})
    case = machine.TestCase
    case.settings = settings(max_examples=100 if LONG else examples, stateful_step_count=25 if LONG else 8,
                             deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    case.pytestmark = [pytest.mark.slow]
    return case


TestInMemory = _machine("memory", 15)
TestOnDisk = _machine("disk", 10)  # each commit writes and fsyncs a generation: fewer runs, as many steps
if SHARDED:
    TestSharded = _machine("sharded", 5)  # three shards on disk: each step costs the most
