"""A small real corpus and a plain reference implementation of the seed's ``search()``.

The reference is written from the text of ``ir.retrieve.search`` (the seed)
and issue 4, one candidate at a time, in plain Python: numpy cosine over the
corpus vectors, rank_bm25's BM25Okapi over the candidates' tokens, RRF and
blend by hand, weights / rerank / boost / collapse by hand, multi-query
formulation as recursive sub-searches.  It shares nothing with the engine but
the corpus's stored data (records, vectors, the analyzer, the query embedder)
and the filter oracle ``filter_reference.matches``.

One departure from the seed, on purpose: a per-artifact search over one
channel (mode dense or lexical) without a ``fetch_k`` fetches deeper —
the depth doubled — until its candidates hold ``k`` artifacts or every
match, instead of returning fewer than ``k`` hits while more artifacts
match (the seed stops at ``max(k * 5, 50)`` surfaces).

Ties follow the seed: a first ranking (the dense and lexical channels)
orders equal scores by corpus row, lowest first; every later re-sort is
Python's stable ``sorted`` (equal scores keep the order they came in), the
fusion and the collapse accumulate in dicts, which keep first-seen order
(README, "Ties").
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable

import numpy as np
from rank_bm25 import BM25Okapi

from filter_reference import matches
from irflow.store.records import SearchHit

NAMES = ["sqlparse", "httpx", "lark", "networkx", "unbox", "celery", "fastjson", "graphene", "asyncpg",
         "clickit", "tqdmx", "parsy"]
WORDS = ["parser", "http", "client", "graph", "sql", "async", "python", "fast", "json", "tool", "network", "cli",
         "task", "queue", "archive", "database", "schema", "lexer", "grammar", "progress"]
TAGS = ["web", "data", "cli", "parsing", "graphs"]
DEPS = ["networkx>=3", "numpy", "anyio[trio]>=4", "click; python_version>'3.8'", "Requests[security]"]


def records() -> list[dict[str, Any]]:
    """~45 records of 12 artifacts: name, description, 0-2 readme chunks, a deps surface when it has deps."""
    rng = np.random.default_rng(20240607)
    out: list[dict[str, Any]] = []
    for i, name in enumerate(NAMES):
        deps = [str(d) for d in rng.choice(DEPS, size=int(rng.integers(0, 3)), replace=False)]
        metadata = {"owner": ["alice", "bob", "carol"][i % 3], "tags": sorted({str(t) for t in rng.choice(TAGS, 2)}),
                    "deps": deps, "stars": int(rng.integers(0, 500))}

        def words(n: int) -> str:
            return " ".join(str(w) for w in rng.choice(WORDS, size=n))

        out.append({"artifact_id": name, "surface_kind": "name", "text": f"{name} {words(1)}", "metadata": metadata})
        out.append({"artifact_id": name, "surface_kind": "description", "text": words(7), "metadata": metadata})
        for j in range(i % 3):
            out.append({"artifact_id": name, "surface_kind": "readme_chunk", "text": f"{words(9)} part{j}",
                        "metadata": metadata})
        if deps:
            bare = [re.match(r"[A-Za-z0-9_.-]+", d).group(0).lower() for d in deps]  # type: ignore[union-attr]
            out.append({"artifact_id": name, "surface_kind": "deps", "text": f"{name} needs {' '.join(bare)}",
                        "metadata": metadata})
    return out


# -- the reference ----------------------------------------------------------------------------


def _hit(corpus: Any, row: int, score: float) -> SearchHit:
    r = corpus.record(row)
    return SearchHit(r.artifact_id, r.surface_kind, score, r.text, r.metadata, source=corpus.name,
                     surface_index=r.surface_index, record_id=r.id)


def _stable(pairs: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Best score first; sorted() is stable: equal scores keep the order they came in (the seed's rule)."""
    return sorted(pairs, key=lambda pair: -pair[1])


def candidate_rows(corpus: Any, filter: Any, surfaces: Any) -> list[int]:
    rows = []
    for row in range(corpus.n_rows):
        r = corpus.record(row)
        if filter is not None and not matches(r.metadata, filter):
            continue
        if surfaces is not None and r.surface_kind not in set(surfaces):
            continue
        rows.append(row)
    return rows


def dense_channel(corpus: Any, query: str, rows: list[int], fetch: int) -> list[tuple[int, float]]:
    if not rows:
        return []
    q = corpus.embed_queries([query])[0].astype(np.float64)
    vectors = np.asarray(corpus.vectors, dtype=np.float64)[rows]
    # the stored vectors and the query's are unit length (normalized as float32), so the cosine is their
    # dot product: the float64 products are exact, and fsum adds them exactly (no renormalization, which
    # would turn a float32 unit vector's 0.99999998 into 1.0 and make ties the engine does not have)
    cosine = [math.fsum(products) for products in (vectors * q).tolist()]
    ranked = sorted(zip(rows, cosine), key=lambda pair: (-pair[1], pair[0]))
    return ranked[:fetch]


def lexical_channel(corpus: Any, query: str, rows: list[int], fetch: int, bm25: Any) -> list[tuple[int, float]]:
    if not rows:
        return []
    tokens = corpus.tokenizer(query)
    docs = [corpus.tokenizer(corpus.record(row).text) for row in rows]
    scores = BM25Okapi(docs, **(bm25 or {})).get_scores(tokens)
    found = [(row, float(s)) for row, s, doc in zip(rows, scores, docs) if set(tokens) & set(doc)]
    # rank_bm25 sums in its own order, so two documents with mathematically equal scores can differ
    # in the last bit: scores equal to 1e-9 are ties, and ties go to the earlier row
    return sorted(found, key=lambda pair: (-round(pair[1], 9), pair[0]))[:fetch]


def fuse(dense: list, lexical: list, fusion: str, rrf_k: float, alpha: float, sat_k: float) -> list:
    if not lexical:
        return list(dense)  # the dense ranking passes through with its cosine scores
    if fusion == "blend" and not dense:
        return list(lexical)  # ... and the lexical one with its raw BM25 scores
    order: list[int] = []
    score: dict[int, float] = {}
    cos, bm = dict(dense), dict(lexical)
    for channel in (dense, lexical):  # first-seen order: dense first, each channel in rank order
        for rank, (row, _) in enumerate(channel, start=1):
            if row not in score:
                order.append(row)
                score[row] = 0.0
            if fusion == "rrf":
                score[row] += 1.0 / (rrf_k + rank)
    if fusion == "blend":
        for row in order:
            lex = bm.get(row)
            lex_term = (1 - alpha) * lex / (lex + sat_k) if lex is not None and lex > 0 else 0.0
            score[row] = (alpha * cos[row] if row in cos else 0.0) + lex_term
    return _stable([(row, score[row]) for row in order])


def artifact_text(corpus: Any, artifact_id: str) -> str:
    """The artifact's surfaces in plan order, joined by newlines (found by scanning every record)."""
    siblings = [corpus.record(row) for row in range(corpus.n_rows) if corpus.record(row).artifact_id == artifact_id]
    return "\n".join(r.text for r in sorted(siblings, key=lambda r: r.surface_index))


def segment(corpus: Any, row: int, rerank_text: Any, max_chars: int) -> dict[str, Any]:
    r = corpus.record(row)
    if rerank_text == "surface":
        text = r.text
    elif rerank_text == "artifact":
        text = artifact_text(corpus, r.artifact_id)
    else:
        text = rerank_text(corpus, r.metadata)
    return {"text": text[:max_chars], "id": r.id, "metadata": r.metadata}


def collapse(corpus: Any, ranked: list[tuple[int, float]], per_artifact: bool, k: int) -> list[tuple[int, float]]:
    best: dict[Any, tuple[int, float]] = {}
    for row, score in ranked:
        key = (corpus.name, corpus.record(row).artifact_id) if per_artifact else row
        if key not in best or score > best[key][1]:  # a tie keeps the earlier entry
            best[key] = (row, score)
    return _stable(list(best.values()))[:k]  # a dict keeps its keys in first-seen order


def reference_search(corpus: Any, query: str, *, k: int = 10, filter: Any = None, surfaces: Any = None,
                     per_artifact: bool = True, mode: str = "dense", fusion: str = "rrf", rrf_k: float = 60,
                     alpha: float = 0.5, bm25_sat_k: float = 8.0, fetch_k: int | None = None,
                     rerank: Callable | None = None, rerank_text: Any = "surface", rerank_max_chars: int = 2000,
                     bm25: Any = None, formulate: Callable | None = None, surface_weights: Any = None,
                     dep_boost: Callable | None = None) -> list[SearchHit]:
    """The seed's search(), written from its documentation; hits best first."""
    args = dict(k=k, filter=filter, surfaces=surfaces, mode=mode, fusion=fusion, rrf_k=rrf_k, alpha=alpha,
                bm25_sat_k=bm25_sat_k, fetch_k=fetch_k, rerank=rerank, rerank_text=rerank_text,
                rerank_max_chars=rerank_max_chars, bm25=bm25, surface_weights=surface_weights, dep_boost=dep_boost)
    if formulate is not None:
        out = formulate(query)
        texts = [t for t in ([out] if isinstance(out, str) else list(out)) if t.strip()] or [query]
        if len(texts) > 1:
            # each runs the whole path with per_artifact=False and no further formulation; the union collapses
            pool: list[tuple[int, float]] = []
            for text in texts:
                pool.extend((h.row, h.score) for h in _ranked(corpus, text, per_artifact=False, **args))
            return [_hit(corpus, row, score) for row, score in collapse(corpus, pool, per_artifact, k)]
        query = texts[0]
    return [_hit(corpus, h.row, h.score) for h in _ranked(corpus, query, per_artifact=per_artifact, **args)]


class _Row:
    __slots__ = ("row", "score")

    def __init__(self, row: int, score: float) -> None:
        self.row, self.score = row, score


def _ranked(corpus: Any, query: str, *, k: int, filter: Any, surfaces: Any, per_artifact: bool, mode: str,
            fusion: str, rrf_k: float, alpha: float, bm25_sat_k: float, fetch_k: int | None, rerank: Any,
            rerank_text: Any, rerank_max_chars: int, bm25: Any, surface_weights: Any, dep_boost: Any) -> list[_Row]:
    if fetch_k is not None:
        fetch = fetch_k
    elif per_artifact or rerank or surface_weights or dep_boost:
        fetch = max(k * 5, 50)
    else:
        fetch = k
    rows = candidate_rows(corpus, filter, surfaces)
    if mode != "hybrid":
        def channel(depth: int) -> list[tuple[int, float]]:
            return dense_channel(corpus, query, rows, depth) if mode == "dense" else \
                lexical_channel(corpus, query, rows, depth, bm25)

        ranked = channel(fetch)
        # one channel, fetch_k not given, per artifact: deeper (doubled) until k artifacts or every match
        while fetch_k is None and per_artifact and len(ranked) == fetch and \
                len({corpus.record(row).artifact_id for row, _ in ranked}) < k:
            fetch *= 2
            ranked = channel(fetch)
    else:
        dense = dense_channel(corpus, query, rows, fetch)
        lexical = lexical_channel(corpus, query, rows, fetch, bm25)
        ranked = fuse(dense, lexical, fusion, rrf_k, alpha, bm25_sat_k)
    if surface_weights:
        ranked = _stable([(row, score * surface_weights.get(corpus.record(row).surface_kind, 1.0))
                          for row, score in ranked])
    ranked = ranked[:fetch]
    if rerank is not None and ranked:
        scores = rerank(query, [segment(corpus, row, rerank_text, rerank_max_chars) for row, _ in ranked])
        ranked = _stable([(row, float(s)) for (row, _), s in zip(ranked, scores)])
    if dep_boost is not None:
        ranked = _stable([(row, score + dep_boost(_hit(corpus, row, score))) for row, score in ranked])
    return [_Row(row, score) for row, score in collapse(corpus, ranked, per_artifact, k)]
