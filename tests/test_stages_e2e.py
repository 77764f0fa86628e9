"""End to end: the built-in recipes on a real corpus, against a hand computation.

Builds a real corpus (``irflow.store.corpus.build``, embedder "hash") and checks
recipes/hybrid's fused scores against numpy cosine over the corpus vectors,
rank_bm25 over the candidates' tokens, RRF / blend and the per-artifact
collapse computed by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from irflow.engine.recipe import load_recipe

corpus_module = pytest.importorskip("irflow.store.corpus", reason="the corpus module is not available yet")

WORDS = ["parser", "http", "client", "graph", "sql", "async", "python", "fast", "json", "tool", "network", "cli"]


def _records() -> list[dict]:
    rng = np.random.default_rng(7)
    records = []
    for i in range(15):
        name = f"pkg{i}"
        words = rng.choice(WORDS, size=6)
        records.append({"artifact_id": name, "surface_kind": "name", "text": f"{name} {words[0]}",
                        "metadata": {"owner": "team" if i % 3 == 0 else f"user{i}"}})
        records.append({"artifact_id": name, "surface_kind": "description", "text": " ".join(words),
                        "metadata": {"owner": "team" if i % 3 == 0 else f"user{i}"}})
    return records


@pytest.fixture(scope="module")
def corpus():
    return corpus_module.build(_records(), embedder="hash", name="e2e")


def _top(rows: np.ndarray, scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    order = np.lexsort((rows, -scores))[:k]
    return [(int(rows[i]), float(scores[i])) for i in order]


def _channels(corpus, query: str, mask: np.ndarray, fetch: int):
    rows = np.flatnonzero(mask)
    qv = corpus.embed_queries([query])[0].astype(np.float64)
    vectors = np.asarray(corpus.vectors, dtype=np.float64)[rows]
    cosine = vectors @ qv / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(qv))
    dense = _top(rows, cosine, fetch)
    tokens = corpus.tokenize_queries([query])[0]
    docs = [corpus.analyzer(corpus.record(int(r)).text) for r in rows]
    bm25 = np.asarray(BM25Okapi(docs).get_scores(tokens), dtype=np.float64)
    matched = np.array([bool(set(tokens) & set(doc)) for doc in docs], dtype=bool)
    lexical = _top(rows[matched], bm25[matched], fetch)
    return dense, lexical


def _fuse(dense, lexical, method: str, rrf_k: int = 60, alpha: float = 0.5, sat_k: float = 8.0):
    if not lexical:
        return list(dense)
    if method == "blend" and not dense:
        return list(lexical)
    order, score = [], {}
    cos, bm = dict(dense), dict(lexical)
    for channel in (dense, lexical):
        for rank, (row, _) in enumerate(channel, start=1):
            if row not in score:
                order.append(row)
                score[row] = 0.0
            if method == "rrf":
                score[row] += 1 / (rrf_k + rank)
    if method == "blend":
        for row in order:
            lex = bm.get(row)
            lex_term = (1 - alpha) * lex / (lex + sat_k) if lex is not None and lex > 0 else 0.0
            score[row] = (alpha * cos[row] if row in cos else 0.0) + lex_term
    return sorted(((row, score[row]) for row in order), key=lambda item: -item[1])  # stable: first-seen order


def _collapse(corpus, fused, k: int):
    best: dict[str, tuple[int, float]] = {}
    for row, s in fused:
        artifact = corpus.record(row).artifact_id
        if artifact not in best or s > best[artifact][1]:  # a tie keeps the earlier-ranked surface
            best[artifact] = (row, s)
    return sorted(best.values(), key=lambda item: -item[1])[:k]  # stable: the artifacts' first-seen order


@pytest.mark.parametrize("method", ["rrf", "blend"])
@pytest.mark.parametrize("query", ["fast python parser", "http client", "graph network tool", "zzz unknown"])
def test_hybrid_equals_the_hand_computation(corpus, query, method):
    recipe = load_recipe("hybrid")
    result = recipe.run(corpus, query, k=4, fusion=method, bm25_sat_k=8.0)  # _fuse's saturation
    dense, lexical = _channels(corpus, query, corpus.candidate_mask(), fetch=50)

    got_dense = result.output("dense")
    assert got_dense.row.tolist() == [r for r, _ in dense]
    assert got_dense.score.tolist() == pytest.approx([s for _, s in dense], abs=1e-6)  # float32 vectors
    got_lexical = result.output("lexical")
    assert got_lexical.row.tolist() == [r for r, _ in lexical]
    assert got_lexical.score.tolist() == pytest.approx([s for _, s in lexical], rel=1e-9)

    # fuse the kernels' own channel scores by hand (cosine is float32-exact only to ~1e-7)
    fused = _fuse(list(zip(got_dense.row.tolist(), got_dense.score.tolist())),
                  list(zip(got_lexical.row.tolist(), got_lexical.score.tolist())), method)
    got_fuse = result.output("fuse")
    assert got_fuse.row.tolist() == [r for r, _ in fused]
    assert got_fuse.score.tolist() == pytest.approx([s for _, s in fused], rel=1e-12)

    expected = _collapse(corpus, fused, k=4)
    assert [h.record_id for h in result.hits] == [corpus.record(r).id for r, _ in expected]
    assert [h.score for h in result.hits] == pytest.approx([s for _, s in expected], rel=1e-12)
    assert all(h.source == "e2e" for h in result.hits)


def test_filter_and_surfaces_make_one_candidate_set(corpus):
    recipe = load_recipe("hybrid")
    result = recipe.run(corpus, "python parser", k=3, filter={"owner": "team"}, surfaces=["description"])
    mask = corpus.candidate_mask(filter={"owner": "team"}, surfaces=["description"])
    dense, lexical = _channels(corpus, "python parser", mask, fetch=50)
    assert set(result.output("dense").row.tolist()) == {r for r, _ in dense}
    assert set(result.output("lexical").row.tolist()) == {r for r, _ in lexical}
    assert all(h.metadata["owner"] == "team" and h.surface_kind == "description" for h in result.hits)
    assert recipe.run(corpus, "python", filter={"owner": "nobody"}).hits == []


@pytest.mark.parametrize("name", ["dense", "lexical", "hybrid"])
def test_every_builtin_recipe_runs_on_a_real_corpus(corpus, name):
    result = load_recipe(name).run(corpus, ["python parser", "http client"], k=3, trace=True)
    assert [len(hits) for hits in result.hits] == [3, 3]
    assert len({h.artifact_id for h in result.hits[0]}) == 3
    assert [e.name for e in result.trace][-1] == "collapse"
