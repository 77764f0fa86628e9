"""The result of running a recipe: hits, and every stage's output.

``result.hits`` is what callers usually want: for a single query string, its
list of :class:`~irflow.store.records.SearchHit`; for a list of queries, one list
per query.  ``result.output("fuse")`` returns any stage's output as it
flowed through the DAG (a :class:`~irflow.engine.batches.Candidates`, a mask, a
query batch), so intermediate rankings can be inspected or injected into
another run (``overrides=``).  ``result.trace`` is an :class:`irflow.engine.trace.Trace`
when the run was traced (None otherwise), ``result.explain(hit)`` says
why a hit ranks where it does, and ``result.settings`` names the embedder
and analyzer the corpus ranked with.  ``result.short`` lists the queries that got
fewer than ``k`` hits while more may match, and the ``fetch_k`` that gives
``k`` when it can be computed (:mod:`irflow.engine.shortfall`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from irflow.engine.batches import Candidates, QueryBatch
from irflow.engine.explain import Explanation, explain_result
from irflow.engine.model import QUERY_NODE, RecipeSpec
from irflow.engine.report.extract import Caps
from irflow.engine.report.reprs import result_view
from irflow.engine.report.tracepage import output_event, result_page, trace_page
from irflow.engine.shortfall import Shortfall
from irflow.engine.trace import Trace
from irflow.errors import IrflowError
from irflow.store.protocol import CorpusProtocol, CorpusSettings
from irflow.util.fileio import write_atomic

__all__ = ["Result"]


def _as_trace(value: Any) -> Trace | None:
    """The executor's TraceRecorder wrapped as a Trace; None (an untraced run) costs nothing."""
    if value is None:
        return None
    return value if isinstance(value, Trace) else Trace.from_recorder(value)


def _notes(value: Iterable[Shortfall]) -> tuple[Shortfall, ...]:
    return tuple(value)


@attrs.frozen(slots=False, eq=False)  # slots=False: the hits are computed once, on first access
class Result:
    """What :meth:`irflow.engine.recipe.Recipe.run` returns.

    ``outputs`` maps every stage that ran (and ``"query"``, the raw batch) to
    its output; ``params`` holds the resolved recipe parameters of the run.
    """

    recipe: RecipeSpec
    corpus: CorpusProtocol
    queries: QueryBatch
    single: bool
    params: Mapping[str, Any]
    outputs: Mapping[str, Any]
    trace: Trace | None = attrs.field(default=None, converter=_as_trace)  # None unless run with trace=True
    output_name: str = ""  # the stage whose output is the result ("" = the recipe's output)
    #: the queries that got fewer than the output stage's ``k`` hits while more may match, each with the
    #: fetch_k that gives k when it can be computed (:class:`~irflow.engine.shortfall.Shortfall`)
    short: tuple[Shortfall, ...] = attrs.field(default=(), converter=_notes)

    def __attrs_post_init__(self) -> None:
        if not self.output_name:
            object.__setattr__(self, "output_name", self.recipe.output)

    def output(self, name: str | None = None) -> Any:
        """The output of stage ``name`` (default: the recipe's output).

        A stage that exists but did not run (an override replaced everything
        it feeds) raises a KeyError saying so.
        """
        name = name or self.output_name
        if name in self.outputs:
            return self.outputs[name]
        if name in self.recipe.stages:
            raise KeyError(f"stage {name!r} did not run in this call: an override replaced every stage "
                           f"it feeds; stages that ran: {', '.join(n for n in self.outputs if n != QUERY_NODE)}")
        raise KeyError(f"recipe {self.recipe.name!r} has no stage {name!r}; stages: "
                       f"{', '.join(self.recipe.stages)}")

    @property
    def candidates(self) -> Candidates:
        """The output stage's Candidates (an IrflowError if the output is of another type)."""
        value = self.output()
        if not isinstance(value, Candidates):
            raise IrflowError(f"the output stage {self.output_name!r} produced {type(value).__name__}, "
                              "not Candidates")
        return value

    @functools.cached_property
    def hits(self) -> Any:
        """SearchHits of the output: a list for one query string, a list of lists for a batch.

        Candidates of a reformulated batch are grouped by original query, in
        order.  An inactive output gives empty lists.
        """
        value = self.output()
        n = self.queries.n_original
        if isinstance(value, list):  # a Hits output: already per original query
            per_query = value
        elif isinstance(value, Candidates) and n == 1 and value.queries.n_original == 1:
            per_query = [self.corpus.hits(value.row, value.score)]  # one query (every search()): in order already
        elif isinstance(value, Candidates):
            per_query = [[] for _ in range(n)]
            if len(value):
                origin = value.origin_index
                if value.queries.n_original != n:
                    raise IrflowError(f"the output's query batch has {value.queries.n_original} original "
                                      f"queries, the run had {n}")
                order = np.argsort(origin, kind="stable")
                hits = self.corpus.hits(value.row[order], value.score[order])
                ends = np.cumsum(np.bincount(origin, minlength=n)).tolist()  # each query's hits: one slice
                per_query = [hits[a:b] for a, b in zip([0, *ends[:-1]], ends)]
        else:
            raise IrflowError(f"the output stage {self.output_name!r} produced {type(value).__name__}, "
                              "which has no hits; make a stage producing Candidates or Hits the output")
        return per_query[0] if self.single else per_query

    @property
    def settings(self) -> CorpusSettings | None:
        """The embedder and analyzer the corpus ranked with (``str(result.settings)``:
        ``"embedder onnx:all-MiniLM-L6-v2, analyzer english"``); None for a corpus that does not say."""
        return getattr(self.corpus, "settings", None)

    def explain(self, hit: Any, *, query: int | None = None) -> Explanation:
        """Why ``hit`` ranks where it does: its score and rank at every stage it passed.

        ``hit`` is a SearchHit of ``self.hits``, a record id or an artifact
        id; ``query`` picks the query of a batch (default: the one whose hits
        hold this SearchHit, else the first whose output holds the record).
        Nothing is re-run: a traced run explains every stage from the trace,
        an untraced one from the provenance columns carried to the output.

        >>> print(result.explain(result.hits[0]))   # doctest: +SKIP
        """
        return explain_result(self, hit, query=query)

    def to_html(self, path: str | os.PathLike[str] | None = None, *, queries: Sequence[int] | range | None = None,
                top: int = 50, paths: int = 10) -> str:
        """This result as one self-contained HTML page (returned; written atomically to ``path`` when given).

        A traced run's page is its trace's (:meth:`Trace.to_html`: every
        stage); an untraced run's shows the output stage's candidates and each
        hit's path from the provenance columns it carries.
        """
        caps = Caps(top=top, paths=paths)
        if self.trace is not None:
            html = trace_page(self.trace, queries=queries, caps=caps)
        else:
            trace = Trace(self.recipe, self.queries, self.params, self.corpus)
            trace.append(output_event(self))
            html = result_page(self, trace, queries=queries, caps=caps)
        if path is not None:
            write_atomic(path, html, "report")
        return html

    def _repr_html_(self) -> str:
        return result_view(self)

    def __repr__(self) -> str:
        settings = self.settings
        said = "" if settings is None else f", embedder={settings.embedder!r}, analyzer={settings.analyzer!r}"
        return (f"Result(recipe={self.recipe.name!r}, queries={len(self.queries)}, "
                f"stages_run={len(self.outputs) - 1}, traced={self.trace is not None}{said})")
