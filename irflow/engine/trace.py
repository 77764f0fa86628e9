"""Traces: what every stage of a run received and produced, per query.

``recipe.run(corpus, query, trace=True).trace`` is a :class:`Trace`: the
stage events of the run in execution order (a :class:`TraceRecorder`, so
``trace.event("fuse")`` and iteration keep working) plus everything needed to
read them — record ids, artifacts and surface kinds of the candidates — so a
trace can be printed, diffed, explained, dumped and loaded back without the
corpus and without re-running anything::

    trace = recipe.run(corpus, "sql parser", trace=True).trace
    print(trace.table())
    trace.dump("run.jsonl")
    again = Trace.load("run.jsonl")
    print(diff(again.stage("dense"), again.stage("fuse")).table())
    again.to_html("run.html")   # one self-contained page: DAG, every stage, hit paths

The file format (JSON Lines, one line per stage and query) is documented in
:mod:`irflow.engine.tracefile`; a loaded trace holds real
:class:`~irflow.engine.batches.Candidates` again (masks and hit lists come
back as :class:`~irflow.engine.values.Summary` objects: their counts, not
their content).
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from irflow.engine.batches import Candidates, QueryBatch
from irflow.engine.diff import Change, Diff, diff_rankings
from irflow.engine.events import StageEvent, TraceRecorder
from irflow.engine.explain import Explanation, explain_trace
from irflow.engine.report.diffpage import diff_page
from irflow.engine.report.extract import Caps
from irflow.engine.report.reprs import trace_view
from irflow.engine.report.tracepage import trace_page
from irflow.engine.stageview import StageView
from irflow.engine.tracecheck import excerpt
from irflow.engine.tracefile import FORMAT, FORMAT_VERSION, MAX_COLUMN_BYTES, MAX_STRING_ITEMSIZE, MAX_TRACE_BYTES, \
    json_line, parse_trace_records, read_trace_file, render
from irflow.engine.values import Summary, json_float, jsonable
from irflow.errors import NotInTrace, TraceError
from irflow.store.protocol import CorpusProtocol
from irflow.util.fileio import atomic_writer, write_atomic
from irflow.util.table import render_table

__all__ = ["Trace", "StageView", "Summary", "Diff", "Change", "diff", "TraceError", "NotInTrace", "jsonable",
           "FORMAT", "FORMAT_VERSION", "MAX_TRACE_BYTES", "MAX_STRING_ITEMSIZE", "MAX_COLUMN_BYTES"]


def _irflow_version() -> str | None:
    """The installed irflow's version, for trace headers (from its metadata: the engine does not import
    the top-level package, which imports the engine)."""
    try:
        return importlib.metadata.version("irflow")
    except importlib.metadata.PackageNotFoundError:
        return None


class _Identity:
    """Row -> (record id, artifact id, surface kind), and row -> text excerpt: through the corpus protocol for
    a live trace, from the rows and excerpts a dumped trace recorded for a loaded one."""

    def __init__(self, corpus: CorpusProtocol | None = None,
                 rows: Mapping[int, tuple[str, str, str]] | None = None,
                 excerpts: Mapping[int, str] | None = None) -> None:
        self.corpus = corpus
        self.rows = dict(rows or {})
        self.texts = dict(excerpts or {})

    def excerpts(self, rows: np.ndarray) -> list[str | None]:
        """The text excerpt of each row (None where a loaded trace has none: a file from before excerpts)."""
        rows = np.asarray(rows, dtype=np.int64)
        corpus = self.corpus
        if corpus is None:
            texts = self.texts
            return [texts.get(r) for r in rows.tolist()]
        if not rows.size:
            return []
        unique, inverse = np.unique(rows, return_inverse=True)  # a record's text is read once
        found = [excerpt(record.text) for record in corpus.records(unique)]
        return [found[i] for i in inverse.tolist()]

    def __call__(self, rows: np.ndarray) -> tuple[list[Any], list[Any], list[Any]]:
        rows = np.asarray(rows, dtype=np.int64)
        corpus = self.corpus
        if corpus is not None:
            kinds = np.asarray(corpus.kinds, dtype=object)
            return (corpus.record_ids_of(rows).tolist(), corpus.artifact_ids_of(rows).tolist(),
                    kinds[corpus.kind_codes_of(rows)].tolist() if len(kinds) else [None] * rows.size)
        known = [self.rows.get(int(r), (None, None, None)) for r in rows.tolist()]
        return [k[0] for k in known], [k[1] for k in known], [k[2] for k in known]


def _trace_rows(events: Iterable[StageEvent]) -> np.ndarray:
    """Every corpus row among the candidates of these events (outputs and inputs), ascending."""
    found = [value.row for event in events for value in (event.output, *event.inputs.values())
             if isinstance(value, Candidates)]
    return np.unique(np.concatenate(found)) if found else np.empty(0, np.int64)


class Trace(TraceRecorder):
    """The stage events of a traced run, renderable without the corpus.

    Made by the executor's recorder (``Result.trace``) or by :meth:`load`.
    A loaded trace has ``recipe`` and ``corpus`` None (``recipe_name`` and
    ``corpus_name`` say what they were); its events hold real Candidates
    rebuilt from the file, masks and hit lists as :class:`Summary`.
    ``short`` holds the run's :class:`~irflow.engine.shortfall.Shortfall`
    notes (queries that got fewer than ``k`` hits while more match), which
    :meth:`table` prints under the heading of their query.
    """

    def __init__(self, recipe: Any = None, queries: QueryBatch | None = None, params: Mapping[str, Any] | None = None,
                 corpus: Any = None, *, rows: Mapping[int, tuple[str, str, str]] | None = None,
                 header: Mapping[str, Any] | None = None, source: str | None = None,
                 excerpts: Mapping[int, str] | None = None) -> None:
        super().__init__(recipe, queries, params, corpus)
        header = dict(header or {})
        self.recipe_name: str | None = getattr(recipe, "name", None) or header.get("recipe")
        self.corpus_name: str | None = getattr(corpus, "name", None) if corpus is not None else header.get("corpus")
        self.n_rows: int | None = getattr(corpus, "n_rows", None) if corpus is not None else header.get("n_rows")
        # what the corpus ranked with (a trace file of an earlier release does not say: None)
        settings = getattr(corpus, "settings", None) if corpus is not None else None
        self.embedder: str | None = settings.embedder if settings is not None else header.get("embedder")
        self.analyzer: str | None = settings.analyzer if settings is not None else header.get("analyzer")
        self.header = header
        self.source = source
        self._ident = _Identity(corpus, rows, excerpts)
        self._records: list[dict[str, Any]] | None = None
        self._views: dict[int, tuple[StageEvent, StageView]] = {}  # by id(event): what a view learns is kept

    @classmethod
    def from_recorder(cls, recorder: TraceRecorder) -> "Trace":
        """Wrap the events a run recorded (shares them: nothing is copied or rendered yet)."""
        trace = cls(recorder.recipe, recorder.queries, recorder.params, recorder.corpus)
        trace.extend(recorder)
        trace.short = recorder.short
        return trace

    # -- lookups ---------------------------------------------------------------

    @property
    def stages(self) -> tuple[str, ...]:
        """Stage names in execution order."""
        return tuple(event.name for event in self)

    @property
    def n_queries(self) -> int:
        """Number of original queries of the run."""
        return 0 if self.queries is None else self.queries.n_original

    @property
    def label(self) -> str:
        """How tables name this trace: the file it came from, else the recipe."""
        if self.source:
            return Path(self.source).name
        return self.recipe_name or "trace"

    def event(self, name: str) -> StageEvent:
        """The event of stage ``name`` (NotInTrace, a KeyError, listing the stages otherwise)."""
        for event in self:
            if event.name == name:
                return event
        raise NotInTrace(f"no stage {name!r} in this trace; stages: {', '.join(self.stages) or '(none)'}")

    def stage(self, name: str) -> "StageView":
        """A view of stage ``name``: its ranking per query, its table."""
        return self.view(self.event(name))

    def view(self, event: StageEvent) -> "StageView":
        """The view of one of this trace's events (made once per event)."""
        known = self._views.get(id(event))
        if known is None or known[0] is not event:
            known = self._views[id(event)] = (event, StageView(self, event))
        return known[1]

    def check_query(self, query: int) -> int:
        """``query`` if it indexes an original query of the run (NotInTrace otherwise)."""
        if not isinstance(query, (int, np.integer)) or not 0 <= int(query) < self.n_queries:
            raise NotInTrace(f"query {query!r} is not in this trace: it holds {self.n_queries} "
                             f"quer{'y' if self.n_queries == 1 else 'ies'} (0..{self.n_queries - 1}): "
                             f"{list(self.queries.originals) if self.queries is not None else []}")
        return int(query)

    def identify(self, rows: np.ndarray) -> tuple[list[Any], list[Any], list[Any]]:
        """Record ids, artifact ids and surface kinds of corpus ``rows``."""
        return self._ident(rows)

    def excerpts(self, rows: np.ndarray) -> list[str | None]:
        """The start of each row's text (:data:`~irflow.engine.tracecheck.EXCERPT_CHARS` characters at most),
        from the corpus for a live trace and from the file for a loaded one (None: a file from before excerpts)."""
        return self._ident.excerpts(rows)

    def find_rows(self, key: str) -> tuple[np.ndarray, bool]:
        """Rows of record id ``key``, else of artifact ``key``, among the trace's candidates; and whether
        ``key`` was a record id.  A live trace and its loaded dump find the same rows."""
        known = self._ident.rows
        if self._ident.corpus is not None:  # the rows of the trace's candidates, identified once per call
            rows = _trace_rows(self)
            known = dict(zip(rows.tolist(), zip(*self.identify(rows)))) if rows.size else {}
        by_record = [r for r, (rid, _, _) in known.items() if rid == key]
        if by_record:
            return np.array(by_record, dtype=np.int64), True
        return np.array(sorted(r for r, (_, aid, _) in known.items() if aid == key), dtype=np.int64), False

    # -- JSON Lines ------------------------------------------------------------

    def records(self) -> list[dict[str, Any]]:
        """The header and one dict per (stage, query): exactly what :meth:`dump` writes."""
        if self._records is None:
            self._records = [self._header()] + [self._line(event, q) for event in self
                                                for q in range(self.n_queries)]
        return self._records

    def _header(self) -> dict[str, Any]:
        if self.header:
            return dict(self.header)
        recipe = self.recipe
        return {"type": "header", "format": FORMAT, "format_version": FORMAT_VERSION,
                "recipe": self.recipe_name, "recipe_source": getattr(recipe, "source", None),
                "recipe_dict": jsonable(recipe.to_dict()) if recipe is not None and hasattr(recipe, "to_dict") else None,
                "params": jsonable(self.params),
                "queries": list(self.queries.originals) if self.queries is not None else [],
                "corpus": self.corpus_name, "n_rows": self.n_rows,
                "embedder": self.embedder, "analyzer": self.analyzer,
                "irflow_version": _irflow_version(), "stages": list(self.stages),
                "short": [note.to_dict() for note in self.short], "excerpts": self._excerpts()}

    def _excerpts(self) -> dict[str, str]:
        """``{"<row>": excerpt}`` for every row among the trace's candidates: each record's text once per trace."""
        rows = _trace_rows(self)
        return {str(row): text for row, text in zip(rows.tolist(), self.excerpts(rows)) if text is not None}

    def _line(self, event: StageEvent, query: int) -> dict[str, Any]:
        output = render(event.output, query, self._ident)
        kind = output.pop("type")
        line: dict[str, Any] = {
            "type": "stage", "stage": event.name, "kind": event.kind,
            "query": self.queries.originals[query] if self.queries is not None else None, "query_index": query,
            "status": event.status, "elapsed_ms": json_float(float(event.elapsed_ms)),
            "params": jsonable(event.params), "ports": {p: list(s) for p, s in event.ports.items()},
            "output_type": kind, "scale": output.pop("scale", None), "active": output.pop("active", kind != "inactive"),
            "count": output.pop("count", None), "columns": output.pop("columns", {}), "batch": output.pop("batch", None),
            "candidates": output.pop("candidates", []),
        }
        if output:  # what a non-candidate output still has to say (texts, hits, repr, size)
            line["output"] = output
        line["inputs"] = {name: render(value, query, self._ident) for name, value in event.inputs.items()}
        return line

    def dump(self, path: str | os.PathLike[str]) -> Path:
        """Write the trace as JSON Lines (schema in the module docstring); returns the path.

        Atomic: the lines go to a temporary file in the same folder, renamed
        over ``path`` once complete, so a failed dump leaves the previous
        file as it was.  Any ``str`` is written: a lone surrogate (argv bytes
        that were not UTF-8) is stored as its ``\\uXXXX`` escape and loads
        back as the same string.
        """
        path = Path(path)
        with atomic_writer(path, "trace") as out:
            for record in self.records():
                out.write(json_line(record))
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, max_bytes: int = MAX_TRACE_BYTES) -> "Trace":
        """Read a trace written by :meth:`dump` (TraceError naming the file and line when it cannot).

        Refuses, before allocating: a file larger than ``max_bytes``, a
        line nested deeper than :data:`~irflow.util.fileio.MAX_NESTING`, a
        provenance dtype off the allow-list or wider than
        :data:`~irflow.engine.tracefile.MAX_STRING_ITEMSIZE`, fields of the wrong type.
        """
        records, numbers = read_trace_file(path, max_bytes=max_bytes)
        return cls.from_records(records, source=os.fspath(path), line_numbers=numbers)

    @classmethod
    def from_records(cls, records: Iterable[Mapping[str, Any]], *, source: str = "<records>",
                     line_numbers: Sequence[int] | None = None) -> "Trace":
        """A trace from the dicts :meth:`records` returns (what :meth:`load` parses).

        Every field is checked before it is used (types, ranges, one line
        per stage and query, dtypes on the allow-list): a malformed record
        is a TraceError naming ``source``, the line and the field.
        """
        parsed = parse_trace_records(records, source=source, line_numbers=line_numbers)
        trace = cls(None, QueryBatch(parsed.originals), parsed.header.get("params") or {}, None, rows=parsed.rows,
                    header=parsed.header, source=source, excerpts=parsed.excerpts)
        trace.extend(parsed.events)
        trace.short = parsed.short
        return trace

    # -- rendering ---------------------------------------------------------------

    def table(self, stage: str | None = None, query: int = 0, limit: int = 10) -> str:
        """A readable plain-text table for ``query``: the stage summary and each stage's top candidates.

        With ``stage``, that stage only: its parameters, inputs and top ``limit`` candidates.
        """
        query = self.check_query(query)
        settings = "" if self.embedder is None else f" (embedder {self.embedder}, analyzer {self.analyzer})"
        head = (f"trace of recipe {self.recipe_name!r} on corpus {self.corpus_name!r}{settings} — query {query}: "
                f"{self.queries.originals[query] if self.queries is not None else ''!r}")
        notes = [f"note: {note.message()}" for note in self.short if note.query_index == query]
        if notes:
            head = "\n".join([head, *notes])
        if stage is not None:
            return head + "\n\n" + self.stage(stage).table(query, limit)
        parts = [head, "", self.summary_table(query)]
        for event in self:
            view = self.view(event)
            if view.has_candidates:
                parts.extend(["", view.table(query, limit, params=False)])
        return "\n".join(parts)

    def summary_table(self, query: int = 0) -> str:
        """One row per stage: stage, kind, status, in -> out counts, scale, elapsed ms.

        The status is ``passed`` for a stage that returned an input unchanged
        and ``inactive`` for one switched off (see :class:`StageView`).
        """
        query = self.check_query(query)
        rows = []
        for event in self:
            view = self.view(event)
            rows.append([event.name, event.kind, view.state, view.in_counts(query), view.out_count(query),
                         view.scale or None, f"{float(event.elapsed_ms):.2f}"])
        return render_table(["stage", "kind", "status", "in", "out", "scale", "ms"], rows, right=("in", "out", "ms"))

    def diff(self, before: str, after: str, query: int = 0) -> Diff:
        """What entered, left and moved between stages ``before`` and ``after`` of this trace."""
        return diff(self.stage(before), self.stage(after), query=query)

    def explain(self, record: str, query: int = 0) -> Explanation:
        """Why record (or artifact) ``record`` ranks where it does, stage by stage, from this trace alone."""
        return explain_trace(self, record, query=query)

    def to_html(self, path: str | os.PathLike[str] | None = None, *, queries: Sequence[int] | range | None = None,
                top: int = 50, paths: int = 10) -> str:
        """This trace as one self-contained HTML page (returned; written atomically to ``path`` when given).

        The page shows the DAG, every stage's counts, scale and time, its
        top ``top`` candidates per query and a histogram of its scores, how the
        final hits moved across stages and the path of each query's top
        ``paths`` hits.  It holds ``queries`` (original query indexes; default
        the first 100), a picker switching between them.  Inline CSS, script and
        SVG; nothing is fetched; readable with JavaScript off.
        """
        html = trace_page(self, queries=queries, caps=Caps(top=top, paths=paths))
        if path is not None:
            write_atomic(path, html, "report")
        return html

    def diff_html(self, other: "Trace", path: str | os.PathLike[str] | None = None, *, stage: str | None = None,
                  queries: Sequence[int] | range | None = None, top: int = 50) -> str:
        """What changed at ``stage`` from this trace to ``other``, query by query, as one HTML page.

        ``stage`` defaults to the result's stage; per query, the records that
        entered, left, moved or were rescored (``top`` a section at most), as
        ``irflow trace diff`` says them.  Returned; written atomically to ``path`` when given.
        """
        html = diff_page(self, other, stage=stage, queries=queries, caps=Caps(top=top))
        if path is not None:
            write_atomic(path, html, "report")
        return html

    def _repr_html_(self) -> str:
        """A notebook's view: the DAG, the stage summary, how the final hits moved, the final candidates."""
        return trace_view(self)

    def __repr__(self) -> str:
        where = f", source={self.source!r}" if self.source else ""
        return (f"Trace(recipe={self.recipe_name!r}, corpus={self.corpus_name!r}, queries={self.n_queries}, "
                f"stages={list(self.stages)}{where})")


def diff(a: "StageView | Trace", b: "StageView | Trace", *, stage: str | None = None, query: int = 0) -> Diff:
    """Compare two rankings of one query: two stages of a trace, or one stage of two traces::

        diff(trace.stage("dense"), trace.stage("fuse"))
        diff(old_trace, new_trace, stage="collapse", query=1)
    """
    views = []
    for side in (a, b):
        if isinstance(side, Trace):
            if stage is None:
                raise TraceError("diff of two traces needs stage=NAME (the stage to compare in both); to compare "
                                 "two stages of one trace, pass trace.stage(A) and trace.stage(B)")
            side = side.stage(stage)
        if not isinstance(side, StageView):
            raise TraceError(f"diff compares StageView or Trace objects, got {type(side).__name__}")
        views.append(side)
    before, after = views
    return diff_rankings(before, after, query)
