"""Corpus build / open: columns, masks, kernels delegation, embedders restored by spec, names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

import irflow.kernels.embedders as embedders_module
from irflow.kernels import text
from irflow.store.corpus import Corpus, build, open_corpus
from irflow.errors import CorpusError, EmbedderError, FilterError, UnknownSurfaceWarning
from irflow.store.ledger import records_for_artifact
from irflow.store.records import Record, SearchHit


def _records() -> list[Record]:
    return [
        Record("unbox", "name", "unbox", {"owner": "ann", "tags": ["archive"], "stars": 12}),
        Record("unbox", "description", "Unpack any zip or tar archive.", {"owner": "ann", "tags": ["archive"], "stars": 12}),
        Record("unbox", "readme_chunk", "unbox reads zip, tar, gz and xz files.", {"owner": "ann", "stars": 12}),
        Record("graphy", "name", "graphy", {"owner": "bob", "tags": ["graph"], "stars": 3}),
        Record("graphy", "description", "Graph algorithms: shortest paths, DAG sorting.", {"owner": "bob", "tags": ["graph"], "stars": 3}),
        Record("graphy", "deps", "networkx numpy", {"owner": "bob", "deps": ["networkx>=3", "numpy"], "stars": 3}),
        Record("rankit", "name", "rank_bm25", {"owner": "cy", "tags": ["search"], "stars": 40}),
        Record("rankit", "description", "Okapi BM25 ranking for search engines.", {"owner": "cy", "tags": ["search"], "stars": 40}),
    ]


def toy_embed(texts: Sequence[str]) -> np.ndarray:
    """A custom callable embedder (3-d): not restorable from a spec."""
    return np.array([[len(t) + 1.0, t.count("a") + 1.0, t.count(" ") + 1.0] for t in texts], dtype=np.float64)


@pytest.fixture
def corpus() -> Corpus:
    return build(_records(), embedder="hash:64", name="demo")


# -- build ---------------------------------------------------------------------------------


def test_build_in_memory_columns(corpus: Corpus) -> None:
    assert corpus.name == "demo" and corpus.path is None
    assert corpus.n_rows == len(corpus) == 8
    assert corpus.kinds == ("name", "description", "readme_chunk", "deps")
    assert corpus.kind_codes.dtype == np.int32 and corpus.kind_codes.tolist() == [0, 1, 2, 0, 1, 3, 0, 1]
    assert corpus.surface_indices.tolist() == [0, 1, 2, 0, 1, 2, 0, 1]
    assert corpus.record_ids.dtype == object and corpus.artifact_ids.dtype == object
    assert corpus.record_ids[1] == Record.make_id("unbox", "description", 1)
    assert corpus.live.all()
    vectors = corpus.vectors
    assert vectors is not None and vectors.dtype == np.float32 and vectors.shape == (8, 64)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert not vectors.flags.writeable


def test_unnamed_in_memory_corpus_and_dict_records() -> None:
    corpus = build([r.to_dict() for r in _records()], embedder=None)
    assert corpus.name is None and corpus.n_rows == 8


def test_empty_build_is_an_error() -> None:
    with pytest.raises(CorpusError, match="no records"):
        build([])


def test_default_analyzer_and_tokenizer(corpus: Corpus) -> None:
    assert corpus.analyzer.name == text.DEFAULT_ANALYZER
    assert corpus.tokenizer("rank_bm25") == corpus.analyzer("rank_bm25")
    assert corpus.tokenize_queries(["rank_bm25", "Zip"]) == [corpus.analyzer("rank_bm25"), ["zip"]]
    assert build(_records(), embedder=None, analyzer="english").analyzer.name == "english"


def test_row_hit_and_record(corpus: Corpus) -> None:
    row = corpus.row_of(corpus.record_ids[4])
    assert row == 4
    hit = corpus.hit(row, 0.5)
    assert isinstance(hit, SearchHit)
    assert (hit.artifact_id, hit.surface_kind, hit.score, hit.source, hit.surface_index) == ("graphy", "description", 0.5, "demo", 1)
    assert hit.record_id == corpus.record_ids[4] and hit.metadata["owner"] == "bob"
    assert corpus.record(4).text == hit.text


def test_repr_says_name_rows_kinds_embedder_analyzer(corpus: Corpus) -> None:
    shown = repr(corpus)
    for part in ("demo", "rows=8", "description", "hash:64", text.DEFAULT_ANALYZER):
        assert part in shown
    assert "lexical-only" in repr(build(_records(), embedder=None))


# -- candidate masks -----------------------------------------------------------------------


def test_candidate_mask_filter_surfaces_and_unknown_kinds(corpus: Corpus) -> None:
    assert corpus.candidate_mask().all()
    owner = corpus.candidate_mask({"owner": "bob"})
    assert np.flatnonzero(owner).tolist() == [3, 4, 5]
    # a stray unknown kind next to held ones matches nothing and warns (issue 10: it may be a typo)
    with pytest.warns(UnknownSurfaceWarning, match="no surface kind 'nonexistent'"):
        both = corpus.candidate_mask({"stars": {"$gte": 10}}, surfaces=["name", "nonexistent"])
    assert np.flatnonzero(both).tolist() == [0, 6]
    assert np.flatnonzero(corpus.candidate_mask(surfaces="deps")).tolist() == [5]
    # only unknown kinds could only ever match nothing: refused (was: an empty mask)
    with pytest.raises(FilterError, match="holds no surface kind 'no-such-kind'"):
        corpus.candidate_mask(surfaces=["no-such-kind"])
    assert not owner.flags.writeable


def test_candidate_mask_cached_by_canonical_form_and_invalidated_on_delete(corpus: Corpus) -> None:
    first = corpus.candidate_mask({"owner": "ann", "stars": 12}, surfaces=["name", "description"])
    again = corpus.candidate_mask({"stars": 12, "owner": "ann"}, surfaces=("description", "name"))
    assert again is first
    corpus.store.delete_record(corpus.record_ids[0])
    after = corpus.candidate_mask({"owner": "ann", "stars": 12}, surfaces=["name", "description"])
    assert after is not first
    assert np.flatnonzero(after).tolist() == [1]
    assert not corpus.candidate_mask()[0]


# -- kernels --------------------------------------------------------------------------------


def test_dense_and_bm25_delegate_and_skip_deleted_rows(corpus: Corpus) -> None:
    queries = corpus.embed_queries(["Okapi BM25 ranking for search engines."])
    assert queries.dtype == np.float32 and queries.shape == (1, 64)
    top = corpus.dense_topk(queries, corpus.candidate_mask(), 3)
    rows, _ = top.per_query(0)
    assert rows[0] == 7
    lexical = corpus.bm25_topk(corpus.tokenize_queries(["zip archive"]), None, 5)
    assert set(lexical.per_query(0)[0].tolist()) == {1, 2}
    corpus.store.delete_record(corpus.record_ids[7])
    rows, _ = corpus.dense_topk(queries, None, 8).per_query(0)
    assert 7 not in rows.tolist() and len(rows) == 7
    rows, _ = corpus.dense_topk(queries, np.ones(8, dtype=bool), 8).per_query(0)
    assert 7 not in rows.tolist()
    lexical = corpus.bm25_topk(corpus.tokenize_queries(["bm25 ranking"]), None, 5, {"k1": 1.2})
    assert 7 not in lexical.per_query(0)[0].tolist()


def test_dense_query_dimension_is_checked(corpus: Corpus) -> None:
    with pytest.raises(EmbedderError, match="32"):
        corpus.dense_topk(np.ones((1, 32), dtype=np.float32), None, 3)


def test_lexical_only_corpus() -> None:
    corpus = build(_records(), embedder=None)
    assert corpus.vectors is None and corpus.embedder is None and corpus.dim is None
    with pytest.raises(EmbedderError, match="lexical-only"):
        corpus.embed_queries(["zip"])
    with pytest.raises(EmbedderError, match="lexical-only"):
        corpus.dense_topk(np.ones((1, 4), dtype=np.float32), None, 3)
    assert corpus.bm25_topk(corpus.tokenize_queries(["zip"]), None, 3).per_query(0)[0].tolist() == [1, 2]


def test_progress_and_batches_give_the_same_vectors(corpus: Corpus) -> None:
    batched = build(_records(), embedder="hash:64", batch_size=3, progress=True)
    np.testing.assert_array_equal(batched.vectors, corpus.vectors)


# -- precomputed vectors --------------------------------------------------------------------


def _with_vectors(dim: int = 4) -> list[Record]:
    rng = np.random.default_rng(0)
    return [Record(r.artifact_id, r.surface_kind, r.text, r.metadata, vector=rng.normal(size=dim)) for r in _records()]


def test_precomputed_vectors_are_normalized_and_used() -> None:
    records = _with_vectors()
    corpus = build(records, embedder=None)
    expected = np.stack([r.vector for r in records])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(corpus.vectors, expected, rtol=1e-6)
    assert "precomputed" in repr(corpus)
    # Documents have vectors, queries need an embedder: a clear error, then with_embedder fixes it.
    with pytest.raises(EmbedderError, match="precomputed document vectors.*embedder="):
        corpus.embed_queries(["zip"])
    four_d = corpus.with_embedder(lambda texts: np.ones((len(texts), 4)))
    assert four_d.embed_queries(["zip"]).shape == (1, 4)
    with pytest.raises(EmbedderError, match="3"):
        corpus.with_embedder(toy_embed).embed_queries(["zip"])


def test_precomputed_vectors_all_or_none_and_same_dimension() -> None:
    records = _with_vectors()
    with pytest.raises(CorpusError, match="7 of 8 records carry"):
        build(records[:-1] + [Record("x", "name", "x")], embedder=None)
    with pytest.raises(CorpusError, match="different dimensions"):
        build(records[:-1] + [Record("x", "name", "x", vector=[1.0, 2.0])], embedder=None)
    with pytest.raises(CorpusError, match="NaN"):
        build(records[:-1] + [Record("x", "name", "x", vector=[1.0, np.nan, 0, 0])], embedder=None)


def test_precomputed_vectors_with_an_embedder_of_another_dimension_fail_at_build() -> None:
    with pytest.raises(EmbedderError, match="4"):
        build(_with_vectors(4), embedder="hash:64")


# -- on disk: round trip, names, embedders --------------------------------------------------


def test_build_open_round_trip(tmp_path: Path, corpus: Corpus) -> None:
    built = build(_records(), embedder="hash:64", analyzer="english", path=tmp_path / "demo")
    assert built.name == "demo" and built.path == tmp_path / "demo"
    opened = open_corpus(tmp_path / "demo")
    assert opened.name == "demo"
    assert list(opened.store) == list(built.store)
    assert dict(opened.store.ledger) == dict(built.store.ledger)
    np.testing.assert_array_equal(opened.vectors, built.vectors)
    assert opened.analyzer == built.analyzer and opened.analyzer.name == "english"
    assert opened.tokenizer("Ranking libraries") == built.tokenizer("Ranking libraries")
    assert opened.embedder_spec == "hash:64" and opened.embedder is not None and opened.embedder.spec == "hash:64"
    assert opened.kinds == built.kinds and opened.surface_indices.tolist() == built.surface_indices.tolist()
    query = ["zip archives"]
    a = opened.dense_topk(opened.embed_queries(query), None, 4)
    b = built.dense_topk(built.embed_queries(query), None, 4)
    np.testing.assert_array_equal(a.row, b.row)
    np.testing.assert_allclose(a.score, b.score, rtol=1e-6)
    la = opened.bm25_topk(opened.tokenize_queries(query), None, 4)
    lb = built.bm25_topk(built.tokenize_queries(query), None, 4)
    np.testing.assert_array_equal(la.row, lb.row)
    np.testing.assert_array_equal(la.score, lb.score)
    assert not opened.vectors.flags.writeable


def test_explicit_name_overrides_directory_name(tmp_path: Path) -> None:
    assert build(_records(), embedder=None, path=tmp_path / "dir", name="nice").name == "nice"


def test_name_resolution_via_irflow_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("IRFLOW_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    build(_records(), embedder="hash:64", path=home / "corpora" / "projects")
    opened = open_corpus("projects")
    assert opened.name == "projects" and opened.path == home / "corpora" / "projects" and opened.n_rows == 8
    assert [r.surface_index for r in records_for_artifact("projects", "graphy")] == [0, 1, 2]
    with pytest.raises(CorpusError, match=r"no corpus named 'missing'.*IRFLOW_HOME"):
        open_corpus("missing")


def test_custom_callable_embedder_must_be_passed_again(tmp_path: Path) -> None:
    built = build(_records(), embedder=toy_embed, path=tmp_path / "custom")
    assert built.embed_queries(["zip"]).shape == (1, 3)
    opened = open_corpus(tmp_path / "custom")
    assert "custom" in repr(opened)
    # Lexical search and records work without it ...
    assert opened.bm25_topk(opened.tokenize_queries(["zip"]), None, 3).per_query(0)[0].tolist() == [1, 2]
    assert len(records_for_artifact(opened, "unbox")) == 3
    # ... dense search says what to do.
    with pytest.raises(EmbedderError, match=r"custom embedder.*open_corpus\(\.\.\., embedder=\.\.\.\)"):
        opened.embed_queries(["zip"])
    again = open_corpus(tmp_path / "custom", embedder=toy_embed)
    np.testing.assert_allclose(again.embed_queries(["zip"]), built.embed_queries(["zip"]))
    wrong = open_corpus(tmp_path / "custom", embedder=lambda texts: np.ones((len(texts), 5)))
    with pytest.raises(EmbedderError, match="5") as caught:
        wrong.embed_queries(["zip"])
    assert "3" in str(caught.value)


def test_embedder_spec_is_restored_lazily(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build(_records(), embedder="hash:64", path=tmp_path / "lazy")

    def refuse(spec: object) -> None:
        raise EmbedderError(f"resolve_embedder({spec!r}) must not run before dense search")

    monkeypatch.setattr(embedders_module, "resolve_embedder", refuse)  # what a corpus resolves its embedder with
    opened = open_corpus(tmp_path / "lazy")
    repr(opened)
    assert opened.bm25_topk(opened.tokenize_queries(["graph"]), None, 3).n_queries == 1
    assert len(list(opened.store)) == 8
    with pytest.raises(EmbedderError, match="must not run"):
        opened.embed_queries(["graph"])


def test_lexical_only_round_trip(tmp_path: Path) -> None:
    build(_records(), embedder=None, path=tmp_path / "lex")
    opened = open_corpus(tmp_path / "lex", embedder="hash:64")
    assert opened.vectors is None
    with pytest.raises(EmbedderError, match="lexical-only"):
        opened.embed_queries(["zip"])


def test_precomputed_round_trip_restores_named_query_embedder(tmp_path: Path) -> None:
    records = _with_vectors(64)
    build(records, embedder="hash:64", path=tmp_path / "pre")
    opened = open_corpus(tmp_path / "pre")
    assert opened.embed_queries(["zip"]).shape == (1, 64)
    build(records, embedder=None, path=tmp_path / "pre-none")
    with pytest.raises(EmbedderError, match="precomputed"):
        open_corpus(tmp_path / "pre-none").embed_queries(["zip"])


def test_rebuild_over_existing_corpus_switches_generation(tmp_path: Path) -> None:
    root = tmp_path / "c"
    build(_records(), embedder=None, path=root)
    build(_records()[:3], embedder=None, path=root)
    assert (root / "CURRENT").read_text().split()[0] == "gen-000002"
    assert not (root / "gen-000001").exists()
    assert open_corpus(root).n_rows == 3


def test_build_refuses_a_foreign_non_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("precious")
    with pytest.raises(CorpusError, match="not an irflow corpus and is not empty"):
        build(_records(), embedder=None, path=tmp_path / "mine")
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]


def test_non_json_metadata_names_the_record_in_memory_and_on_disk(tmp_path: Path) -> None:
    records = _records() + [Record("odd", "name", "odd", {"when": object()})]
    for path in (None, tmp_path / "odd"):  # refused at build time: a corpus in memory holds what one on disk can
        with pytest.raises(CorpusError, match=r"record #8 \(artifact 'odd', kind 'name'\): metadata\['when'\].*JSON"):
            build(records, embedder=None, path=path)
    assert not (tmp_path / "odd").exists()


def test_metadata_round_trips_as_json(tmp_path: Path) -> None:
    records = [Record("a", "name", "a", {"nested": {"x": [1, 2.5, None, True]}, "t": "é"})]
    build(records, embedder=None, path=tmp_path / "m")
    assert open_corpus(tmp_path / "m").record(0).metadata == json.loads(json.dumps(records[0].metadata))
