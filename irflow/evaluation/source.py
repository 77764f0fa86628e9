"""Where an evaluation's documents and corpus come from: a dataset spec, and the corpus built from it or given.

A dataset is a BEIR-format directory or ``irds:NAME`` (an ir_datasets
collection, :mod:`irflow.evaluation.irds`).  Its corpus is built once and
cached (:mod:`irflow.evaluation.cache`) with the embedder every entry point
defaults to — decided here, once per evaluation, so the Ray actors and the
cache key agree — or it is a corpus already built and given
(``irflow eval --corpus C --queries FILE --qrels FILE``), which brings its
own embedder and analyzer.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from irflow.engine.recipe import Recipe
from irflow.evaluation.cache import CorpusSource, corpus_for
from irflow.evaluation.datasets import Collection, load_beir
from irflow.evaluation.irds import is_irds, load_irds
from irflow.evaluation.metrics import EvaluationError
from irflow.kernels.embedders import AUTO, default_embedder
from irflow.shard import open_corpus

__all__ = ["load_dataset", "corpus_embedder", "evaluation_corpus"]

#: Built-in stage kinds that never read a corpus's vectors: recipes of these alone need no embedder.
_LEXICAL_KINDS = frozenset({"formulate", "filter", "lexical", "fuse", "weight", "rerank", "boost", "collapse",
                            "expand"})


def load_dataset(spec: str | os.PathLike[str], split: str = "test") -> Collection:
    """The collection ``spec`` names: ``"irds:NAME"`` (its split is part of the name), else a BEIR directory."""
    if is_irds(spec):
        if split != "test":
            raise EvaluationError(f"{spec}: an ir_datasets name includes its split (e.g. irds:beir/scifact/train); "
                                  f"drop split={split!r} (--split)")
        return load_irds(str(spec))
    return load_beir(spec, split)


def _is_auto(embedder: Any) -> bool:
    return isinstance(embedder, str) and embedder.strip().lower() == AUTO


def corpus_embedder(embedder: Any, recipes: Sequence[Recipe]) -> Any:
    """The embedder to build the corpus with: ``"auto"`` decided now, once, or None when no recipe reads vectors.

    One decision for the whole evaluation (and every Ray actor); without a
    dense stage (or a stage kind irflow does not know, which might embed)
    the default embeds nothing and says nothing: the figures cannot change.
    """
    if not _is_auto(embedder):
        return embedder
    kinds = {spec.kind for recipe in recipes for spec in recipe.stages.values()}
    return default_embedder() if kinds - _LEXICAL_KINDS else None


def evaluation_corpus(collection: Collection, recipes: Sequence[Recipe], *, corpus: Any = None, embedder: Any = AUTO,
                      analyzer: Any = None, title_mode: str = "prepend", **build: Any) -> tuple[Any, CorpusSource, Any]:
    """(the corpus, where it came from, the embedder to open it with elsewhere, e.g. in Ray actors).

    ``corpus`` given (a corpus or a path): it is opened as it is — the
    embedder, analyzer and title handling it was built with stand, and
    asking for others is an error (they would silently not apply).  Else the
    collection's documents are built (or reopened from the cache) with
    ``build`` (``batch_size``, ``progress``, ``cache_dir``, ``use_cache``).
    """
    if corpus is None:
        chosen = corpus_embedder(embedder, recipes)
        built, source = corpus_for(collection, embedder=chosen, analyzer=analyzer, title_mode=title_mode, **build)
        return built, source, chosen
    asked = [f"{name}={value!r}" for name, value, default in (("embedder", embedder, AUTO), ("analyzer", analyzer, None),
                                                              ("title_mode", title_mode, "prepend"))
             if not (value == default or (name == "embedder" and _is_auto(value)))]
    if asked:
        raise EvaluationError(f"{', '.join(asked)}: a corpus given to evaluate was built already, with its own "
                              "embedder, analyzer and titles; drop the option (or evaluate a dataset, which builds "
                              "its corpus as asked)")
    if isinstance(corpus, (str, os.PathLike)):
        corpus = open_corpus(corpus)  # a path or a name under $IRFLOW_HOME/corpora; plain or sharded
    path = getattr(corpus, "path", None)  # None for a corpus in memory (which Ray actors cannot open)
    return corpus, CorpusSource("opened", None if path is None else Path(path)), None
