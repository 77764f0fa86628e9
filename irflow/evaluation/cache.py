"""The on-disk cache of corpora built from test collections for evaluation.

Building a corpus (tokenizing, and above all embedding with a real model)
costs far more than evaluating it, and an evaluation is rerun many times
while a recipe is tuned.  So :func:`corpus_for` builds each (collection,
embedder, analyzer, title mode) once into
``$IRFLOW_HOME/cache/eval/<collection>-<key>`` and reopens it afterwards.

The key is a digest of everything that decides the corpus' content:

- the content digest of ``corpus.jsonl`` (so an edited file is a new key and
  rebuilds; the queries and qrels are not part of it: editing them must not
  re-embed the documents),
- the embedder's identity (:meth:`~irflow.kernels.embedders.Embedder.identity`): its
  canonical spec (``"hash"`` and ``"hash:256"`` are one key) plus its model's
  weights and tokenizer digests and its code version, so a new model behind
  the same name is a new entry,
- the analyzer's settings and rule version,
- the title mode,
- irflow's corpus format version and :data:`CACHE_VERSION`.

A user callable as the embedder cannot be named in a key (two functions may
embed differently under one name), so it disables the cache with a warning.
Entries are never deleted by irflow: remove the directory to reclaim space.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import warnings
from pathlib import Path
from typing import Any, Literal

import attrs

from irflow.util.cachekey import UnkeyableError, stable_digest
from irflow.util.corpusmarks import CORPUS, refuse_inside_corpus
from irflow.store.corpus import Corpus, build, open_corpus
from irflow.evaluation.datasets import Collection
from irflow.kernels.embedders import AUTO, Embedder, resolve_embedder
from irflow.errors import CorpusError
from irflow.store.paths import irflow_home
from irflow.store.persist import FORMAT_VERSION
from irflow.kernels.text import ANALYZER_VERSION, Analyzer, get_analyzer

__all__ = ["CACHE_VERSION", "CorpusSource", "eval_cache_dir", "corpus_key", "corpus_for"]

log = logging.getLogger(__name__)

#: Bumped when what evaluation puts into a cached corpus changes in a way the
#: other parts of the key do not capture (e.g. how records are made from documents).
CACHE_VERSION = 1

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def eval_cache_dir() -> Path:
    """The default cache directory: ``$IRFLOW_HOME/cache/eval``."""
    return irflow_home() / "cache" / "eval"


@attrs.frozen
class CorpusSource:
    """Where an evaluation's corpus came from.

    ``status`` is ``"built"`` (built now and cached), ``"cached"`` (reopened
    from the cache, nothing rebuilt), ``"memory"`` (built in memory: cache
    disabled or a callable embedder) or ``"opened"`` (a corpus built before,
    given to the evaluation: ``irflow eval --corpus``).
    """

    status: Literal["built", "cached", "memory", "opened"]
    path: Path | None = None
    key: str | None = None


def _documents_digest(collection: Collection) -> str:
    """A digest of the documents themselves, for a collection not read from files.

    Type-exact (:func:`irflow.util.cachekey.stable_digest`): metadata ``1``,
    ``True``, ``"1"`` and ``numpy.int64(1)`` are four keys, where a JSON dump
    with ``default=str`` made the last two one and reopened the wrong corpus.
    """
    h = hashlib.blake2b(digest_size=16)
    for doc in collection.documents.values():
        try:
            h.update(stable_digest([doc.id, doc.title, doc.text, doc.metadata]).encode("ascii"))
        except UnkeyableError as exc:
            raise CorpusError(
                f"document {doc.id!r} of {collection.name!r} holds a value an on-disk corpus cannot store ({exc}); "
                "use JSON types in its metadata (str, numbers, bools, None, lists, dicts) or pass use_cache=False"
            ) from None
    return h.hexdigest()


def _corpus_digest(collection: Collection) -> str:
    # a Collection made in Python has no file stamps: digest what it holds instead
    has_file = any(stamp.path.name == "corpus.jsonl" for stamp in collection.stamps)
    return collection.corpus_fingerprint() if has_file else _documents_digest(collection)


def corpus_key(collection: Collection, *, embedder: Embedder | None, analyzer: Analyzer, title_mode: str) -> str:
    """The cache key (32 hex digits) of a corpus built from ``collection`` this way.

    ``embedder`` must have a spec (a named embedder) or be None (lexical-only).
    """
    if embedder is not None and embedder.spec is None:
        raise ValueError("a callable embedder has no spec to key a cache entry by")
    parts = {
        "corpus": _corpus_digest(collection),
        "embedder": None if embedder is None else embedder.identity(),
        "analyzer": analyzer.to_dict(),
        "analyzer_version": ANALYZER_VERSION,
        "title_mode": title_mode,
        "format_version": FORMAT_VERSION,
        "cache_version": CACHE_VERSION,
    }
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def corpus_for(
    collection: Collection,
    *,
    embedder: Any = AUTO,
    analyzer: Analyzer | str | None = None,
    title_mode: str = "prepend",
    batch_size: int = 256,
    progress: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    use_cache: bool = True,
) -> tuple[Corpus, CorpusSource]:
    """The corpus of ``collection``'s documents, from the cache when an entry exists.

    ``embedder`` is ``"auto"`` (the model when installed, else ``"hash"``:
    :func:`irflow.kernels.embedders.default_embedder`), a spec (``"hash"``, ``"st:all-MiniLM-L6-v2"``), None for
    a lexical-only corpus, or a callable (built in memory, not cached, with a
    warning).  A cache entry that cannot be opened (an interrupted write, an
    older format) is rebuilt in place.
    """
    the_analyzer = get_analyzer(analyzer)
    the_embedder = resolve_embedder(embedder)
    records = collection.records(title_mode)  # type: ignore[arg-type]  # validates title_mode
    named = the_embedder is None or the_embedder.spec is not None
    if not use_cache or not named:
        if use_cache:
            warnings.warn(
                f"the embedder {the_embedder.describe() if the_embedder else None} is a Python callable, which a "
                "cache key cannot name; the corpus is built in memory and not cached (use a spec such as "
                "'st:<model>' to cache it)", stacklevel=3)
        corpus = build(records, embedder=the_embedder, analyzer=the_analyzer, progress=progress,
                       batch_size=batch_size, name=collection.name)
        return corpus, CorpusSource("memory")

    key = corpus_key(collection, embedder=the_embedder, analyzer=the_analyzer, title_mode=title_mode)
    root = Path(cache_dir).expanduser() if cache_dir is not None else eval_cache_dir()
    path = root / f"{_UNSAFE.sub('_', collection.name) or 'collection'}-{key[:20]}"
    if path.exists():
        try:
            # an st model loads on the first dense query only, so lexical-only runs never load it
            cached = open_corpus(path, embedder=the_embedder)
            log.info("the corpus of %s is cached: %s", collection.name, path)
            return cached, CorpusSource("cached", path, key)
        except CorpusError as error:  # an interrupted or foreign entry: rebuild rather than fail
            log.warning("the cached corpus %s cannot be opened (%s); rebuilding it", path, error)
    refuse_inside_corpus(path, "evaluation corpus", replacing=CORPUS)  # before its folders are made
    path.parent.mkdir(parents=True, exist_ok=True)
    log.info("building the corpus of %s into %s", collection.name, path)
    corpus = build(records, embedder=the_embedder, analyzer=the_analyzer, path=path, progress=progress,
                   batch_size=batch_size)
    return corpus, CorpusSource("built", path, key)
