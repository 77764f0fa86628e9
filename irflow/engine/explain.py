"""Explain one hit: its score and rank at every stage it passed, and why.

``result.explain(hit)`` answers "why is this first?" without re-running
anything.  Every stage writes provenance columns named ``"<stage>.<what>"``
(``dense.score``, ``fuse.lexical.contribution``, ``collapse.merged``,
``rerank.score``...) that later stages carry to the output, so even an
untraced run can say how each channel scored a hit.  A traced run says more:
for every stage, whether the record was in its output, at which rank and
score, and — at a collapse — which surface represented the artifact.

The explanation is generic: it lists every provenance column present for the
record, grouped by the stage that wrote it (execution order), with friendly
labels for the columns irflow's own stages write::

    why = result.explain(result.hits[0])
    print(why)                                 # a table, stage by stage
    why.value("fuse.dense.contribution")       # 1 / (rrf_k + dense rank)
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from irflow.engine.batches import Candidates, QueryBatch
from irflow.engine.events import INACTIVE
from irflow.engine.pipeline import Pipeline
from irflow.engine.positions import Locate, Scan
from irflow.engine.values import Summary, jsonable
from irflow.errors import IrflowError, NotInTrace
from irflow.util.table import format_value, render_table
from irflow.util.unicode import escape_controls

if TYPE_CHECKING:  # the callers' types: result.py and trace.py import this module
    from irflow.engine.result import Result
    from irflow.engine.trace import Trace

__all__ = ["Explanation", "Step", "Detail", "explain_result", "explain_trace", "explain_row", "label_for"]

#: Friendly names of the score a stage kind writes as "<stage>.score".
_SCORE_LABELS = {"dense": "cosine", "lexical": "bm25 score", "fuse": "fused score", "rerank": "rerank score",
                 "weight": "weighted score", "boost": "boosted score"}

#: Friendly names of "<stage>.<what>" columns, by <what>.
_LABELS = {"rank": "rank", "passthrough": "passed through unfused", "merged": "entries merged into this hit",
           "input_rank": "rank before this stage", "subquery": "sub-query index", "kept": "kept by the collapse",
           "factor": "weight applied", "weight": "weight applied", "boost": "boost", "value": "value",
           "contribution": "contribution", "input_score": "score before this stage"}


def label_for(kind: str | None, what: str, inputs: Sequence[str] = ()) -> str:
    """A readable label for column ``"<stage>.<what>"`` of a stage of ``kind``.

    >>> label_for("dense", "score"), label_for("fuse", "lexical.contribution", ["dense", "lexical"])
    ('cosine', 'lexical contribution')
    """
    if what == "score":
        return _SCORE_LABELS.get(kind or "", "score")
    if kind == "boost" and what == "value":
        return "boost"
    head, dot, tail = what.partition(".")
    if dot and (head in inputs or not inputs):
        inner = "score" if tail == "score" else _LABELS.get(tail, tail.replace("_", " "))
        return f"{head} {inner}"
    return _LABELS.get(what, what.replace("_", " ").replace(".", " "))


@attrs.frozen
class Detail:
    """One provenance value: the column, its label, the value (None when absent)."""

    column: str
    label: str
    value: Any

    def to_dict(self) -> dict[str, Any]:
        return {"column": self.column, "label": self.label, "value": self.value}


@attrs.frozen
class Step:
    """The record at one stage.

    ``present`` is True when it was in the stage's output for the query,
    False when not, None when unknown (an untraced run, a mask not kept in a
    loaded trace); ``rank`` / ``score`` / ``scale`` are its place there.
    """

    stage: str
    kind: str | None
    status: str | None = None
    present: bool | None = None
    rank: int | None = None
    score: float | None = None
    scale: str | None = None
    details: tuple[Detail, ...] = ()
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "kind": self.kind, "status": self.status, "present": self.present,
                "rank": self.rank, "score": self.score, "scale": self.scale,
                "details": [d.to_dict() for d in self.details], "note": self.note}


@attrs.frozen
class Explanation:
    """Why one record ranks where it does for one query, stage by stage.

    ``rank`` / ``score`` / ``scale`` are its place in the result (None when it
    is not in the result: a traced run can still say where it left).
    ``traced`` says whether the steps come from a trace (every stage) or only
    from the provenance columns carried to the output.
    """

    query: str
    query_index: int
    record_id: str | None
    artifact_id: str | None
    surface_kind: str | None
    rank: int | None
    score: float | None
    scale: str | None
    output_stage: str
    traced: bool
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()

    def step(self, stage: str) -> Step:
        """The step of ``stage`` (KeyError listing the stages otherwise)."""
        for step in self.steps:
            if step.stage == stage:
                return step
        raise NotInTrace(f"no step {stage!r} in this explanation; steps: {', '.join(s.stage for s in self.steps)}")

    def value(self, column: str) -> Any:
        """The value of provenance column ``column`` (e.g. ``"dense.score"``) for this record."""
        for step in self.steps:
            for detail in step.details:
                if detail.column == column:
                    return detail.value
        raise NotInTrace(f"no provenance column {column!r} in this explanation; columns: "
                         f"{', '.join(d.column for s in self.steps for d in s.details) or '(none)'}")

    def to_dict(self) -> dict[str, Any]:
        return {"query": self.query, "query_index": self.query_index, "record_id": self.record_id,
                "artifact_id": self.artifact_id, "surface_kind": self.surface_kind, "rank": self.rank,
                "score": self.score, "scale": self.scale, "output_stage": self.output_stage, "traced": self.traced,
                "steps": [s.to_dict() for s in self.steps], "notes": list(self.notes)}

    def table(self) -> str:
        """The explanation as plain text: a heading, one row per stage, then each stage's provenance."""
        where = (f"rank {self.rank} (score {format_value(self.score)}, {self.scale})" if self.rank is not None
                 else f"not in the output of {self.output_stage!r}")
        lines = [f"{self.artifact_id} [{self.surface_kind}] (record {self.record_id}) for query "
                 f"{self.query_index} {self.query!r}: {where}"]
        rows = [[s.stage, s.kind, s.status, s.present, s.rank, s.score, s.scale, s.note] for s in self.steps]
        lines.extend(["", render_table(["stage", "kind", "status", "in output", "rank", "score", "scale", "note"],
                                       rows, max_width=90)])
        for step in self.steps:
            if step.details:
                lines.extend(["", f"{step.stage}:", render_table(
                    ["value", "what", "column"], [[d.value, d.label, d.column] for d in step.details], indent="  ")])
        for note in self.notes:
            lines.extend(["", note])
        return escape_controls("\n".join(lines))  # ids and names from a trace file: an escape in one is shown, not obeyed

    def __str__(self) -> str:
        return self.table()


# --------------------------------------------------------------------------
# helpers


def _value(column: np.ndarray, index: int) -> Any:
    return jsonable(column[index])


def _stage_of(column: str, stages: Sequence[str]) -> str | None:
    """The stage whose name prefixes ``column`` (the longest, so "fuse2.x" is not fuse's)."""
    best = None
    for name in stages:
        if column.startswith(f"{name}.") and (best is None or len(name) > len(best)):
            best = name
    return best


def _details(candidates: Candidates, index: int, stage: str, kind: str | None, inputs: Sequence[str]) -> tuple[Detail, ...]:
    prefix = f"{stage}."
    return tuple(Detail(name, label_for(kind, name[len(prefix):], inputs), _value(column, index))
                 for name, column in candidates.provenance.items() if name.startswith(prefix))


def _is_real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= sys.float_info.max


def _rrf_note(step: Step, params: Mapping[str, Any], inputs: Sequence[str]) -> str:
    """``fused = dense 1/(60+3) + lexical 1/(60+1)`` for an rrf fuse, from the record's input ranks."""
    if params.get("method", "rrf") != "rrf" or not inputs:
        return ""
    values = {d.column: d.value for d in step.details}
    if values.get(f"{step.stage}.passthrough"):
        return "passed through unfused (the other inputs were empty for this query)"
    weights = params.get("weights") or {}
    rrf_k = params.get("rrf_k", 60)
    if not isinstance(weights, Mapping) or not all(_is_real(v) for v in (rrf_k, *weights.values())):
        return ""  # parameters of an edited trace file: the note is optional, the explanation stands without it
    terms = []
    for name in inputs:
        rank = values.get(f"{step.stage}.{name}.rank")
        if rank:
            terms.append(f"{name} {float(weights.get(name, 1.0)):g}/({float(rrf_k):g}+{rank})")
        else:
            terms.append(f"{name} absent")
    return "rrf = " + " + ".join(terms)


def _fuse_inputs(ports: Mapping[str, Sequence[str]] | None, columns: Sequence[str], stage: str) -> list[str]:
    if ports:
        return [name for sources in ports.values() for name in sources if name != "query"]
    # untraced: the inputs are the middle parts of "<stage>.<input>.contribution"
    suffix = ".contribution"
    return [c[len(stage) + 1:-len(suffix)] for c in columns if c.startswith(f"{stage}.") and c.endswith(suffix)]


# --------------------------------------------------------------------------
# from a trace


def _query_text(trace: "Trace", query: int) -> str:
    """The original text of ``query`` (a checked index: a trace with queries)."""
    return trace.queries.originals[query] if trace.queries is not None else ""


def _trace_target(trace: "Trace", key: str, query: int) -> int:
    """The row to explain for ``key`` (record id, else artifact id) in ``query``."""
    rows, is_record = trace.find_rows(key)
    if rows.size == 0:
        raise NotInTrace(f"{key!r} is neither a record id nor an artifact id of a candidate in this trace "
                         f"(query {query}: {_query_text(trace, query)!r})")
    if is_record or rows.size == 1:
        return int(rows[0])
    # an artifact: the surface that went furthest — the latest stage holding one, best rank there
    for event in reversed(trace):
        output = event.output
        if isinstance(output, Candidates) and len(output):
            mine = np.flatnonzero((output.origin_index == query) & np.isin(output.row, rows))
            if mine.size:
                return int(output.row[mine[0]])
    return int(rows[0])


def _collapse_note(trace: "Trace", event: Any, query: int, row: int, present: bool, locate: Locate) -> str:
    """Kept or not at a collapse, and which surface represents the artifact."""
    (_, artifacts, _) = trace.identify(np.array([row]))
    artifact = artifacts[0]
    output = event.output
    if present:
        column = output.provenance.get(f"{event.name}.merged")
        merged = None if column is None else jsonable(column[locate.position(output, query, row)])
        extra = f" ({merged} entries merged)" if merged and merged > 1 else ""
        return f"kept: it represents artifact {artifact}{extra}"
    mine = locate.query_positions(output, query)
    record_ids, out_artifacts, kinds = trace.identify(output.row[mine])
    for i, other in enumerate(out_artifacts):
        if other == artifact:
            return (f"not kept: artifact {artifact} is represented by its {kinds[i]} surface "
                    f"(record {record_ids[i]}, rank {int(output.rank[mine[i]])})")
    return f"not kept: artifact {artifact} is below the cut (k)"


def _trace_step(trace: "Trace", event: Any, query: int, row: int, fed_holds: set[str], locate: Locate) -> Step:
    output = event.output
    inputs = _fuse_inputs(event.ports, (), event.name) if event.kind == "fuse" else []
    if output is INACTIVE or (isinstance(output, Candidates) and not output.active):
        return Step(event.name, event.kind, event.status, None, note="switched off (when)")
    if isinstance(output, np.ndarray) and output.dtype == np.bool_:
        kept = bool(output[row]) if row < output.size else None
        return Step(event.name, event.kind, event.status, kept,
                    note="in the candidate set" if kept else "filtered out")
    if isinstance(output, Summary) and output.type == "mask":
        # a trace file keeps a mask's size, not its rows; a record that reached a stage fed by it was in it
        if event.name in fed_holds:
            return Step(event.name, event.kind, event.status, True, note="in the candidate set")
        return Step(event.name, event.kind, event.status, None, note="candidate mask (its rows are not in a trace file)")
    if isinstance(output, QueryBatch):
        texts = [t for t, o in zip(output.texts, output.origin.tolist()) if o == query]
        return Step(event.name, event.kind, event.status, None,
                    note="query texts: " + ", ".join(repr(t) for t in texts))
    if not isinstance(output, Candidates):
        return Step(event.name, event.kind, event.status, None)
    index = locate.position(output, query, row)
    was_input = any(isinstance(v, Candidates) and locate.position(v, query, row) is not None
                    for v in event.inputs.values())
    if index is None:
        note = "dropped by this stage" if was_input else "not among its candidates"
        if event.kind == "collapse" and was_input:
            note = _collapse_note(trace, event, query, row, False, locate)
        return Step(event.name, event.kind, event.status, False, note=note)
    step = Step(event.name, event.kind, event.status, True, int(output.rank[index]), float(output.score[index]),
                output.scale.value, _details(output, index, event.name, event.kind, inputs))
    if not output.queries.is_root:  # a reformulated batch: say which sub-query ranked it there
        step = attrs.evolve(step, note=f"in sub-query {output.queries.texts[int(output.query_index[index])]!r}")
    if event.kind == "collapse":
        return attrs.evolve(step, note=_collapse_note(trace, event, query, row, True, locate))
    if event.kind == "fuse":
        return attrs.evolve(step, note=_rrf_note(step, event.params, inputs))
    return step


def explain_trace(trace: "Trace", record: Any, *, query: int = 0, output_stage: str | None = None) -> "Explanation":
    """Explain ``record`` (a record id, an artifact id or a SearchHit) for ``query`` from a trace alone.

    Works on a live trace (``result.trace``) and on a loaded one
    (``Trace.load(path)``): no corpus, nothing re-run.
    """
    query = trace.check_query(query)
    key = _key_of(record)
    return explain_row(trace, _trace_target(trace, key, query), query=query, output_stage=output_stage)


def explain_row(trace: "Trace", row: int, *, query: int, output_stage: str | None = None,
                locate: Locate | None = None) -> "Explanation":
    """Explain corpus row ``row`` for original query ``query`` (a checked index) from a trace alone.

    What :func:`explain_trace` answers once it has found the row; ``locate``
    finds the row in each stage's batch (a report explaining many hits indexes
    each batch once).
    """
    locate = locate if locate is not None else Scan()
    # the stages that fed a stage whose candidates hold the row, found once (not once per mask stage: a file
    # of thousands of mask stages would cost their square)
    fed_holds: set[str] = set()
    for event in trace:
        if isinstance(event.output, Candidates) and locate.position(event.output, query, row) is not None:
            fed_holds.update(event.inputs)
    steps = tuple(_trace_step(trace, event, query, row, fed_holds, locate) for event in trace)
    last = output_stage or (trace.stages[-1] if len(trace) else "")
    final = next((s for s in steps if s.stage == last), None)
    (record_ids, artifacts, kinds) = trace.identify(np.array([row]))
    notes: tuple[str, ...] = ()
    if final is not None and not final.present:
        # where it left: the first stage after the last one that held it (a parallel channel that never
        # found it, like lexical beside dense, is not where it left)
        held = [i for i, s in enumerate(steps) if s.present]
        after = steps[held[-1] + 1:] if held else steps
        left = next((s.stage for s in after if s.present is False), None)
        notes = (f"not in the output: it left at stage {left!r}" if left else "not in the output",)
    return Explanation(_query_text(trace, query), query, record_ids[0], artifacts[0], kinds[0],
                       final.rank if final else None, final.score if final else None, final.scale if final else None,
                       last, True, steps, notes)


# --------------------------------------------------------------------------
# from a result


def _key_of(hit: Any) -> str:
    if isinstance(hit, str):
        return hit
    record_id = getattr(hit, "record_id", None)
    if record_id:
        return str(record_id)
    artifact = getattr(hit, "artifact_id", None)
    if artifact:
        return str(artifact)
    raise TypeError(f"explain takes a SearchHit, a record id or an artifact id; got {type(hit).__name__}")


def _query_of_hit(result: "Result", hit: Any) -> int | None:
    """The query whose hit list holds this very SearchHit object (None when it is not one of them)."""
    if isinstance(hit, str):
        return None
    lists = [result.hits] if result.single else result.hits
    for q, hits in enumerate(lists):
        if any(h is hit for h in hits):
            return q
    return None


def _output_position(result: "Result", output: Candidates, key: str, query: int) -> int | None:
    mine = np.flatnonzero(output.origin_index == query)
    if not mine.size:
        return None
    rows = output.row[mine]
    found = np.flatnonzero(result.corpus.record_ids_of(rows) == key)
    if not found.size:
        found = np.flatnonzero(result.corpus.artifact_ids_of(rows) == key)
    return int(mine[found[0]]) if found.size else None


def explain_result(result: "Result", hit: Any, *, query: int | None = None) -> Explanation:
    """What :meth:`irflow.engine.result.Result.explain` returns: from the trace when traced, else from provenance."""
    key = _key_of(hit)
    n = result.queries.n_original
    if query is None:
        query = _query_of_hit(result, hit)
    if query is not None and not 0 <= query < n:
        raise IrflowError(f"query {query} is out of range: the run had {n} quer{'y' if n == 1 else 'ies'}")
    output = result.output()
    if not isinstance(output, Candidates):
        raise IrflowError(f"the output stage {result.output_name!r} produced {type(output).__name__}; explain "
                          "reads the provenance columns of a Candidates output")
    queries = [query] if query is not None else list(range(n))
    found = [(q, _output_position(result, output, key, q)) for q in queries]
    in_output = [(q, i) for q, i in found if i is not None]
    trace = result.trace
    if trace is not None:
        q = in_output[0][0] if in_output else queries[0]
        if not in_output and query is None:  # not in any output: the first query whose trace holds it
            for candidate in queries:
                try:
                    explanation = explain_trace(trace, key, query=candidate, output_stage=result.output_name)
                except NotInTrace:
                    continue
                return explanation
        return explain_trace(trace, key, query=q, output_stage=result.output_name)
    if not in_output:
        where = f"query {query}" if query is not None else "any query"
        raise IrflowError(f"{key!r} is not in the output of {where}; an untraced run only knows the provenance "
                          "of its output — run with trace=True to see where a record left")
    q, index = in_output[0]
    return _from_provenance(result, output, q, index)


def _from_provenance(result: "Result", output: Candidates, query: int, index: int) -> Explanation:
    recipe = result.recipe
    order = list(Pipeline.of(recipe).order)
    kinds = {name: spec.kind for name, spec in recipe.stages.items()}
    groups: dict[str, list[str]] = {}
    other: list[str] = []
    for column in output.provenance:
        stage = _stage_of(column, order)
        (groups.setdefault(stage, []) if stage else other).append(column)
    steps = []
    for stage in order:
        columns = groups.get(stage, [])
        if not columns and stage != result.output_name:
            continue
        kind = kinds.get(stage)
        inputs = _fuse_inputs(None, columns, stage) if kind == "fuse" else []
        details = _details(output, index, stage, kind, inputs)
        values = {d.column: d.value for d in details}
        rank: int | None
        score: float | None
        present: bool | None
        if stage == result.output_name:
            rank, score, present = int(output.rank[index]), float(output.score[index]), True
        else:
            rank = values.get(f"{stage}.rank") or None  # 0 / NaN: the stage did not hold it (fuse fills)
            score = values.get(f"{stage}.score")
            known = f"{stage}.rank" in values or f"{stage}.score" in values
            present = (rank is not None or score is not None) if known else None
        step = Step(stage, kind, None, present, rank, score, None, details)
        if kind == "fuse":
            step = attrs.evolve(step, note=_rrf_note(step, _fuse_params(recipe, result.params, stage), inputs))
        if kind == "collapse" and stage == result.output_name:
            merged = values.get(f"{stage}.merged")
            step = attrs.evolve(step, note="kept: it represents its artifact"
                                + (f" ({merged} entries merged)" if merged and merged > 1 else ""))
        steps.append(step)
    if other:
        steps.append(Step("(other)", None, None, None, details=tuple(
            Detail(c, c, _value(output.provenance[c], index)) for c in other)))
    rows = output.row[index:index + 1]
    corpus = result.corpus
    record_id = corpus.record_ids_of(rows)[0]
    artifact = corpus.artifact_ids_of(rows)[0]
    kind_name = corpus.kinds[int(corpus.kind_codes_of(rows)[0])]
    notes = ("not traced: the steps come from the provenance columns carried to the output; "
             "run with trace=True for every stage's candidates",)
    return Explanation(result.queries.originals[query], query, record_id, artifact, kind_name, int(output.rank[index]),
                       float(output.score[index]), output.scale.value, result.output_name, False, tuple(steps), notes)


def _fuse_params(recipe: Any, params: Mapping[str, Any], stage: str) -> dict[str, Any]:
    """The fuse stage's resolved method / rrf_k / weights (its stage object, built from the run's params)."""
    try:
        return Pipeline.of(recipe).instances(params, [stage])[stage].params()
    except (IrflowError, KeyError):  # the note is optional: an explanation never fails over it
        return {}
