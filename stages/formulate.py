"""formulate: each query -> one or several query texts (rewrite, expansion, HyDE).

The seed's ``formulate`` hook, applied before retrieval: a formulator
``str -> str | Sequence[str]`` (a Python callable, or the name of an
:mod:`irflow.registry` entry in a recipe file).  Blank strings are dropped;
when none is left the original query is kept.  Several texts for one query
become sub-queries: the output batch's ``origin`` ties each text to its
original query, so the collapse stage merges their results back.  Without a
formulator the stage is the identity (embed the query verbatim).

    [stages.formulate]
    kind = "formulate"
    formulator = "my_rewriter"        # irflow.registry.register("my_rewriter", fn)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from irflow.engine import QUERIES, QUERY, Port, QueryBatch, Stage, StageContext, param, register_stage, registry
from irflow.errors import FormulateError
from irflow.util.unicode import lone_surrogate, surrogate_reason

from ._util import callable_or_name

__all__ = ["Formulate", "FormulateError", "formulated_texts"]


def formulated_texts(formulator: Callable[[str], Any], query: str) -> list[str]:
    """The texts ``formulator`` makes of ``query``: blanks dropped, ``[query]`` when none is left.

    >>> formulated_texts(lambda q: [q, " ", q.upper()], "sql")
    ['sql', 'SQL']
    >>> formulated_texts(lambda q: "", "sql")
    ['sql']
    """
    out = formulator(query)
    if isinstance(out, str):
        texts = [out]
    elif isinstance(out, Sequence) and not isinstance(out, (bytes, bytearray)) and all(
            isinstance(t, str) for t in out):
        texts = list(out)
    else:
        raise FormulateError(f"formulator {getattr(formulator, '__qualname__', formulator)!r} returned "
                             f"{out!r} for {query!r}; a formulator returns a string or a list of strings")
    for text in texts:  # a query text is UTF-8 text, as every query is (irflow.util.unicode)
        at = lone_surrogate(text)
        if at >= 0:
            raise FormulateError(f"formulator {getattr(formulator, '__qualname__', formulator)!r} returned "
                                 f"unusable text for {query!r}: {surrogate_reason(text, at)}")
    kept = [t for t in texts if t.strip()]
    return kept or [query]


@register_stage
@attrs.frozen
class Formulate(Stage):
    """Turn each query into the texts a formulator makes of it (identity without one)."""

    kind = "formulate"
    inputs = (Port("query", QUERY, "the raw query batch"),)
    output = QUERIES

    formulator: Callable[[str], Any] | str | None = param(
        None, validator=callable_or_name,
        doc="str -> str | list[str] (a callable or an irflow.registry name); none: the query as is")

    def passes_through(self, live: Mapping[str, int]) -> str | None:
        return "query" if self.formulator is None else None

    def run(self, ctx: StageContext, query: QueryBatch) -> QueryBatch:
        formulator = registry.resolve(self.formulator, what="formulator")
        if formulator is None:
            return query
        return query.expand([formulated_texts(formulator, text) for text in query.texts])
