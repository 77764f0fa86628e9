"""Fewer than ``k`` hits, said: which queries of a run came back short, and which ``fetch_k`` gives ``k``.

A run's output stage may promise ``k`` results per original query
(:meth:`~irflow.engine.stage.Stage.promised`: the collapse's ``k``, distinct
artifacts or records).  A query that gets fewer while a first stage
returned all it was asked for (so more may match) gets a :class:`Shortfall`:
in :attr:`Result.short <irflow.engine.result.Result.short>`, in the trace
(``irflow trace show``) and as one line on stderr from ``irflow run``.  A
query whose first stages returned fewer than asked holds every match: no
note.

Which ``fetch_k`` gives ``k`` is computed when one first stage feeds the
query through one text: that stage is asked for deeper rankings
(:meth:`~irflow.engine.stage.Stage.deeper`, the depth doubled until they
hold ``k`` results or nothing more matches), and the depth is where its
``k``-th distinct result first appears — the exact answer for a per-artifact
search over one channel.  A fused ranking's depth for ``k`` is not computed
(its scores depend on ``fetch_k``: it would mean re-running everything), nor
a query formulated into several texts' (each sub-search keeps its own best
``k`` records): the note says what to raise.

>>> Shortfall(0, "sql parser", got=4, k=5, per_artifact=True, fetch_k=50, needed=73, gives=5,
...           reason=DEPTH).message()
"query 0 'sql parser': 4 hits, fewer than k=5: the 50 candidates fetched (fetch_k=50) hold 4 artifacts; fetch_k=73 gives 5"
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from irflow.engine.batches import Candidates, QueryBatch
from irflow.engine.ports import QUERIES, QUERY
from irflow.engine.stage import Promise, Stage, StageContext
from irflow.store.protocol import CorpusProtocol

__all__ = ["Shortfall", "find_shortfalls", "REASONS", "DEPTH", "FUSED", "SUBQUERIES", "UNKNOWN"]

#: Why a query came back short, and so what the note can say.
DEPTH, FUSED, SUBQUERIES, UNKNOWN = "depth", "fused", "sub-queries", "unknown"
REASONS: tuple[str, ...] = (DEPTH, FUSED, SUBQUERIES, UNKNOWN)


def _optional_count(instance: Any, attribute: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise ValueError(f"{attribute.name} must be None or an integer >= 0, got {value!r}")


def _count(instance: Any, attribute: Any, value: Any) -> None:
    _optional_count(instance, attribute, value)
    if value is None:
        raise ValueError(f"{attribute.name} must be an integer >= 0, got None")


@attrs.frozen
class Shortfall:
    """One query that got fewer than ``k`` hits while more may match, and what would give ``k``.

    ``fetch_k``: the depth its first stage fetched (None: unknown);
    ``needed``: the ``fetch_k`` that gives ``gives`` results — ``k``, or
    every match when fewer than ``k`` match at any depth (None: not
    computed, see ``reason``: ``"depth"`` computed it, ``"fused"`` /
    ``"sub-queries"`` / ``"unknown"`` cannot).
    """

    query_index: int = attrs.field(validator=_count)
    query: str = attrs.field(validator=attrs.validators.instance_of(str))
    got: int = attrs.field(validator=_count)
    k: int = attrs.field(validator=_count)
    per_artifact: bool = attrs.field(validator=attrs.validators.instance_of(bool))
    fetch_k: int | None = attrs.field(default=None, validator=_optional_count)
    needed: int | None = attrs.field(default=None, validator=_optional_count)
    gives: int | None = attrs.field(default=None, validator=_optional_count)
    reason: str = attrs.field(default=UNKNOWN, validator=attrs.validators.in_(REASONS))

    def message(self) -> str:
        """One line: the query, what came back, and the fetch_k that gives k (or what to raise)."""
        what = "artifact" if self.per_artifact else "record"

        def count(n: int | None) -> str:
            return f"{n} {what}{'' if n == 1 else 's'}"

        head = (f"query {self.query_index} {self.query!r}: {self.got} hit{'' if self.got == 1 else 's'}, "
                f"fewer than k={self.k}")
        depth = f" (fetch_k={self.fetch_k})" if self.fetch_k is not None else ""
        if self.reason == DEPTH and self.needed is not None:
            fetched = f"the {self.fetch_k} candidates fetched (fetch_k={self.fetch_k})" if self.fetch_k is not None \
                else "the candidates fetched"
            tail = f"fetch_k={self.needed} gives {self.gives}" if self.gives == self.k else \
                f"only {count(self.gives)} match: fetch_k={self.needed} gives them all"
            return f"{head}: {fetched} hold {count(self.got)}; {tail}"
        if self.reason == FUSED:
            return (f"{head}{depth}: a fused ranking's depth for k={self.k} cannot be computed (its scores "
                    "depend on fetch_k); raise fetch_k")
        if self.reason == SUBQUERIES:
            return (f"{head}: it was formulated into several texts, each a sub-search that keeps its best k "
                    f"records, and together they hold {count(self.got)}")
        return f"{head}{depth}: raise fetch_k"

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (a trace header's ``short`` entries, ``irflow run --json``): the fields and the message."""
        return {**attrs.asdict(self), "message": self.message()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Shortfall":
        """From :meth:`to_dict` (``message`` is recomputed); ValueError / TypeError naming a bad field."""
        fields = {f.name for f in attrs.fields(cls)}
        unknown = set(data) - fields - {"message"}
        if unknown:
            raise ValueError(f"unknown field {sorted(unknown)[0]!r}")
        return cls(**{name: value for name, value in data.items() if name in fields})


#: A run's first stages that ran: ``(name, stage, output, inputs by port)`` each.
Channels = Sequence[tuple[str, Stage, Candidates, Mapping[str, Any]]]


def find_shortfalls(corpus: CorpusProtocol, batch: QueryBatch, output: Any, promise: Promise | None,
                    channels: Callable[[], Channels]) -> tuple[Shortfall, ...]:
    """The queries of a run whose ``output`` holds fewer than ``promise.k`` results while more may match.

    ``channels()`` lists the run's first stages; it is called only when a
    query is short.  Costs a count when none is (every run pays it); only a
    short query asks a first stage for more.
    """
    if promise is None or not isinstance(output, Candidates) or not output.active:
        return ()
    n = batch.n_original
    if n == 1:  # one query (every search()): no per-query count
        if len(output) >= promise.k:
            return ()
        got = np.array([len(output)])
    else:
        got = np.bincount(output.origin_index, minlength=n) if len(output) else np.zeros(n, dtype=np.int64)
    found = []
    first_stages = channels()
    for q in np.flatnonzero(got < promise.k).tolist():
        note = _shortfall(corpus, batch, q, int(got[q]), promise, first_stages)
        if note is not None:
            found.append(note)
    return tuple(found)


def _shortfall(corpus: CorpusProtocol, batch: QueryBatch, q: int, got: int, promise: Promise,
               channels: Channels) -> Shortfall | None:
    """Query ``q``'s note, or None when its first stages returned fewer than asked (every match is in)."""
    base = Shortfall(q, batch.originals[q], got=got, k=promise.k, per_artifact=promise.per_artifact)
    if not channels:
        return base  # no first stage to ask: that it is short is all it can say
    full, depth, texts = False, None, np.empty(0, dtype=np.int64)
    for _, stage, out, _ in channels:
        texts = np.flatnonzero(out.queries.origin == q)
        depths = stage.fetch_depths(out.queries)
        if depths is None or not texts.size:
            continue
        depth = int(depths[texts[0]]) if depth is None else depth
        full = full or bool((out.counts()[texts] >= depths[texts]).any())
    if not full:
        return None  # every first stage returned fewer than it asked for: nothing more matches
    if len(channels) > 1:
        return attrs.evolve(base, fetch_k=depth, reason=FUSED)
    if texts.size > 1:
        return attrs.evolve(base, fetch_k=depth, reason=SUBQUERIES)
    name, stage, out, inputs = channels[0]
    needed, gives = _needed_depth(corpus, name, stage, inputs, out.queries.texts[int(texts[0])], depth or 1,
                                  promise)
    if gives <= got:
        return None  # deeper rankings hold nothing more: every match is in
    return attrs.evolve(base, fetch_k=depth, needed=needed, gives=gives, reason=DEPTH)


def _needed_depth(corpus: CorpusProtocol, name: str, stage: Stage, inputs: Mapping[str, Any], text: str,
                  depth: int, promise: Promise) -> tuple[int, int]:
    """``(depth, results)``: the smallest depth of ``stage``'s ranking of ``text`` holding ``promise.k``
    distinct results (artifacts or records), or every match and how many there are.

    Asks the stage for its ranking at twice ``depth``, doubling, until it
    holds them or comes back shorter than asked (nothing more matches); the
    rankings are exact, so each is a prefix of the next.
    """
    one = QueryBatch.of([text])
    types = {port.name: port.type for port in type(stage).inputs}
    kwargs = {port: one if types.get(port) in (QUERIES, QUERY) else value for port, value in inputs.items()}
    while True:
        depth *= 2
        ranked = stage.deeper(depth).run(StageContext(corpus, name, one), **kwargs)
        keys = corpus.artifact_ids_of(ranked.row) if promise.per_artifact else ranked.row
        # each key's first position: where the ranking first holds it
        _, first = np.unique(keys.astype(str) if promise.per_artifact else keys, return_index=True)
        first.sort()
        if first.size >= promise.k:
            return int(first[promise.k - 1]) + 1, promise.k
        if len(ranked) < depth:
            return (int(first[-1]) + 1 if first.size else 0), int(first.size)
