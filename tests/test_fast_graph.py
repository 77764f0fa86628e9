"""The fast graph of all-MiniLM-L6-v2 ("onnx:all-MiniLM-L6-v2-fast"): its bits, its cache, its identity.

Runs where the ``models`` extra is installed (CI installs it).  The graph is
built once per module into a temporary ``$IRFLOW_HOME`` (a few seconds);
the property test embeds short texts, so each example costs milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from irflow.errors import EmbedderError
from irflow.kernels import onnx_cache, onnx_embedder, onnx_fastgraph, onnx_run
from irflow.kernels.embedders import resolve_embedder
from irflow.kernels.onnx_embedder import OnnxEmbedder, pinned_model_available
from irflow.util.extras import install_hint

pytestmark = pytest.mark.skipif(not pinned_model_available(),
                                reason=f"the models extra is not installed ({install_hint('models')})")

LONG = " ".join(f"clause {i} about microglia, cytokines and the blood-brain barrier" for i in range(40))
POOL = [
    "rank_bm25 is a collection of BM25 ranking functions",
    "Unpack any archive: zip, tar, 7z.",
    "graph algorithms and networks",
    "progress bar for loops",
    "a car",
    "an automobile",
    "",
    "Microglia are the resident immune cells of the central nervous system.",
    "Microglia are the resident immune cells of the central nervous system!",  # same length, other text
    "Vitamin D deficiency and the risk of tuberculosis in 1,024 adults (HR 1.4; 95% CI 1.1-1.8).",
    LONG,
]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("irflow_home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IRFLOW_HOME", str(path))
        yield path


@pytest.fixture(scope="module")
def fast(home):
    one = OnnxEmbedder("all-MiniLM-L6-v2", threads=1, graph="fast")
    return one, OnnxEmbedder("all-MiniLM-L6-v2", threads=2, graph="fast"), one(POOL)


def test_the_spec_names_the_fast_graph_and_its_own_identity(home):
    fast, exact = resolve_embedder("onnx:all-MiniLM-L6-v2-fast"), resolve_embedder("onnx:all-MiniLM-L6-v2")
    assert fast.spec == "onnx:all-MiniLM-L6-v2-fast" and fast.dim == 384
    assert fast.embed_fn.graph == "fast" and exact.embed_fn.graph == "exact"
    # the eval cache keys by identity: the two graphs never share a cached corpus
    assert fast.identity() != exact.identity() and fast.identity()["graph_version"] == onnx_fastgraph.FAST_GRAPH_VERSION
    # the exact graph is named by its file, the fast one by its source and the transformation's version
    assert exact.digest() == onnx_embedder._PINNED_WEIGHTS[2]
    expected = hashlib.sha256(f"all-MiniLM-L6-v2-fast/{onnx_fastgraph.FAST_GRAPH_VERSION}/"
                              f"{onnx_embedder._PINNED_WEIGHTS[2]}".encode()).hexdigest()
    assert fast.digest() == expected
    with pytest.raises(EmbedderError, match="pinned all-MiniLM-L6-v2 only"):
        OnnxEmbedder("/some/folder", graph="fast")


def test_the_same_meaning_as_the_exact_graph(fast):
    _, _, vectors = fast
    assert vectors.shape == (len(POOL), 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    exact = resolve_embedder("onnx:all-MiniLM-L6-v2").embed_documents(POOL)
    cosines = np.einsum("ij,ij->i", vectors.astype(np.float64), exact.astype(np.float64))
    # int8 activations move a vector by a few degrees at most (the empty text, two tokens, the most)
    assert cosines.min() >= 0.98 and np.median(cosines) >= 0.995, cosines
    assert not np.array_equal(vectors, exact)  # and it is another graph, not the same one renamed
    car, automobile, banana = fast[0](["a car", "an automobile", "a banana"])
    assert car @ automobile > car @ banana + 0.2


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(picks=st.lists(st.integers(0, len(POOL) - 1), min_size=1, max_size=12), two_threads=st.booleans())
def test_a_text_gets_the_same_bits_in_any_batch_on_one_or_two_threads(fast, picks, two_threads):
    one, two, reference = fast
    embedder = two if two_threads else one
    got = embedder([POOL[i] for i in picks])
    assert np.array_equal(got, reference[picks])


def test_batches_hold_texts_of_one_length_and_keep_the_budget():
    lengths = np.array([5, 7, 5, 5, 300, 7, 9, 5] + [3] * 200)
    batches = onnx_run.batches(lengths, same_length=True)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(lengths)))
    for rows in batches:
        assert len(set(lengths[rows].tolist())) == 1
        assert len(rows) == 1 or len(rows) * int(lengths[rows[0]]) <= onnx_run.FAST_TOKEN_BUDGET
        assert len(rows) <= onnx_run.MAX_BATCH
    padded = onnx_run.batches(lengths, same_length=False)
    assert any(len(set(lengths[rows].tolist())) > 1 for rows in padded)  # the exact graph pads


# -- the cache ------------------------------------------------------------------------------------


def _entries(home: Path) -> list[Path]:
    return sorted((home / "cache" / "models").iterdir())


def test_built_once_then_read_from_the_cache_and_checked(fast, home, monkeypatch):
    (folder,) = _entries(home)
    record = json.loads((folder / "model.json").read_text())
    data = (folder / "model.onnx").read_bytes()
    assert record["sha256"] == hashlib.sha256(data).hexdigest()
    assert record["source_sha256"] == onnx_embedder._PINNED_WEIGHTS[2]
    assert record["graph_version"] == onnx_fastgraph.FAST_GRAPH_VERSION
    import onnxruntime

    assert record["onnxruntime"] == onnxruntime.__version__

    def no_build(path):
        raise AssertionError("built again although the cache holds the graph")

    monkeypatch.setattr(onnx_embedder, "build_fast_graph", no_build)
    again = OnnxEmbedder("all-MiniLM-L6-v2", threads=1, graph="fast")
    assert np.array_equal(again(POOL[:3]), fast[2][:3])


def test_the_build_is_deterministic(fast):
    source = onnx_embedder._pinned_files().model
    assert onnx_fastgraph.build_fast_graph(source) == onnx_fastgraph.build_fast_graph(source)


def test_a_damaged_cached_graph_is_built_again(fast, home, caplog):
    (folder,) = _entries(home)
    model = folder / "model.onnx"
    good = model.read_bytes()
    damaged = bytearray(good)
    damaged[len(damaged) // 2] ^= 0x01  # one bit of a weight: onnxruntime would load it and embed differently
    model.write_bytes(bytes(damaged))
    with caplog.at_level(logging.WARNING, logger="irflow.kernels.onnx_cache"):
        vectors = OnnxEmbedder("all-MiniLM-L6-v2", threads=1, graph="fast")(POOL)
    assert np.array_equal(vectors, fast[2])
    assert "not the" in caplog.text and "building it again" in caplog.text
    assert model.read_bytes() == good


def test_a_home_inside_a_corpus_gets_no_model_cache_there(fast, tmp_path, monkeypatch, caplog):
    from irflow.store.corpus import build

    build([{"artifact_id": "a", "surface_kind": "name", "text": "x"}], embedder=None, path=tmp_path / "corpus")
    before = sorted(p.name for p in (tmp_path / "corpus").rglob("*"))
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "corpus" / "home"))
    with caplog.at_level(logging.WARNING, logger="irflow.kernels.onnx_cache"):
        vectors = OnnxEmbedder("all-MiniLM-L6-v2", threads=1, graph="fast")(POOL[:2])
    assert np.array_equal(vectors, fast[2][:2])  # built in memory
    assert sorted(p.name for p in (tmp_path / "corpus").rglob("*")) == before
    assert "cannot cache" in caplog.text


def test_two_first_uses_at_once_leave_one_good_graph(fast, tmp_path):
    """Two processes building the graph into an empty cache at the same time: both embed, the cache is whole."""
    script = textwrap.dedent("""
        import sys
        import numpy as np
        from irflow.kernels.onnx_embedder import OnnxEmbedder
        vectors = OnnxEmbedder("all-MiniLM-L6-v2", threads=1, graph="fast")(sys.argv[1:])
        sys.stdout.write(vectors.tobytes().hex())
    """)
    env = {**os.environ, "IRFLOW_HOME": str(tmp_path / "home")}
    procs = [subprocess.Popen([sys.executable, "-c", script, *POOL[:3]], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outputs]
    for out, _ in outputs:
        assert bytes.fromhex(out) == fast[2][:3].tobytes()
    (folder,) = _entries(tmp_path / "home")
    record = json.loads((folder / "model.json").read_text())
    assert record["sha256"] == hashlib.sha256((folder / "model.onnx").read_bytes()).hexdigest()
    assert sorted(p.name for p in folder.iterdir()) == ["model.json", "model.onnx"]  # no temporary file left


def test_without_the_onnx_package_the_error_says_how_to_install_it(monkeypatch, tmp_path):
    import importlib

    real = importlib.import_module

    def no_onnx(name, *args):
        if name == "onnx":
            raise ImportError("No module named 'onnx'")
        return real(name, *args)

    monkeypatch.setattr(onnx_fastgraph.importlib, "import_module", no_onnx)
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path))
    with pytest.raises(EmbedderError, match=r"onnx package.*pip install"):
        OnnxEmbedder("all-MiniLM-L6-v2", graph="fast")(["x"])


def test_a_source_that_is_not_the_expected_export_is_refused(tmp_path):
    onnx = pytest.importorskip("onnx")
    model = onnx.load(str(onnx_embedder._pinned_files().model))
    for node in model.graph.node:  # the first layer's key projection goes missing
        node.input[:] = ["renamed.bias" if i == "inner.encoder.layer.0.attention.self.key.bias" else i
                         for i in node.input]
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    with pytest.raises(EmbedderError, match="layer 0 has no attention.self.key"):
        onnx_fastgraph.build_fast_graph(path)
    assert onnx_cache.models_cache_dir().name == "models"
