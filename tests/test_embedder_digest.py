"""A corpus records which graph made its vectors, and refuses to embed queries with another one.

The spec alone does not say it: one spec can name another graph later (a
model folder whose file was replaced, a spec whose graph a release changed).
These tests use small embedders with a digest of their own; the real
models' digests are checked in tests/test_fast_graph.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import irflow
from irflow.errors import EmbedderError
from irflow.kernels.embedders import Embedder, check_digest, resolve_embedder
from irflow.kernels.hash_embedder import HashEmbedder
from irflow.store.persist import EmbedderInfo
from search_reference import records

OLD, NEW = "a1" * 32, "b2" * 32


class Graph:
    """A backend with a digest: hash vectors (so searches answer), named by the digest it is given."""

    def __init__(self, digest: str | None) -> None:
        self._digest = digest
        self._hash = HashEmbedder(dim=32)

    def digest(self) -> str | None:
        return self._digest

    def __call__(self, texts: list[str], kind: str) -> np.ndarray:
        return self._hash(texts, kind)


def model(digest: str | None) -> Embedder:
    return Embedder(spec="onnx:/models/mini", name="onnx:/models/mini", embed_fn=Graph(digest), declared_dim=32)


def _manifest_embedder(path: Path) -> dict:
    (manifest,) = path.rglob("manifest.json")
    return json.loads(manifest.read_text())["embedder"]


def test_the_manifest_records_the_digest_and_another_graph_is_refused(tmp_path):
    irflow.build(records(), embedder=model(OLD), path=tmp_path / "c")
    assert _manifest_embedder(tmp_path / "c")["digest"] == OLD
    same = irflow.open_corpus(tmp_path / "c", embedder=model(OLD))
    assert irflow.search(same, "archive", k=3)
    other = irflow.open_corpus(tmp_path / "c", embedder=model(NEW))
    with pytest.raises(EmbedderError) as caught:
        irflow.search(other, "archive", k=3)
    message = str(caught.value)
    assert OLD in message and NEW in message and "onnx:/models/mini" in message
    assert irflow.search(other, "archive", k=3, mode="lexical")  # lexical search needs no query vector


def test_corpora_without_a_digest_keep_working(tmp_path):
    # a corpus of an earlier release records no digest: nothing to compare, any embedder of its spec answers
    irflow.build(records(), embedder=model(None), path=tmp_path / "old")
    assert "digest" not in _manifest_embedder(tmp_path / "old")
    assert irflow.search(irflow.open_corpus(tmp_path / "old", embedder=model(NEW)), "archive", k=3)
    # and embedders without a digest write the manifest entry as before (earlier releases read it)
    irflow.build(records(), embedder="hash", path=tmp_path / "hash")
    assert set(_manifest_embedder(tmp_path / "hash")) == {"spec", "dim", "description", "source"}
    old_entry = {"spec": "hash:256", "dim": 256, "description": "", "source": "embedded"}  # an earlier release's
    assert EmbedderInfo(**old_entry).digest is None and EmbedderInfo(**old_entry).to_dict() == old_entry


def test_a_user_embedder_is_trusted_like_its_dimension(tmp_path):
    irflow.build(records(), embedder=model(OLD), path=tmp_path / "c")
    mine = irflow.open_corpus(tmp_path / "c", embedder=lambda texts: HashEmbedder(dim=32)(list(texts), "query"))
    assert irflow.search(mine, "archive", k=3)


def test_a_sharded_corpus_refuses_another_graph_too(tmp_path):
    irflow.shard(records(), 2, tmp_path / "s", embedder=model(OLD)).close()
    with irflow.open_corpus(tmp_path / "s", embedder=model(OLD)) as same:
        assert irflow.search(same, "archive", k=3)
    with irflow.open_corpus(tmp_path / "s", embedder=model(NEW)) as other:
        with pytest.raises(EmbedderError, match=f"{OLD}.*{NEW}"):
            irflow.search(other, "archive", k=3)


def test_check_digest_compares_only_what_is_known():
    check_digest(model(OLD), OLD)
    check_digest(model(OLD), None)
    check_digest(model(None), OLD)
    check_digest(resolve_embedder("hash"), OLD)  # no digest: not compared
    with pytest.raises(EmbedderError, match="the corpus's vectors were made by the graph"):
        check_digest(model(NEW), OLD)
    assert resolve_embedder("hash").digest() is None


def test_an_update_never_mixes_two_graphs_and_keeps_the_digest(tmp_path):
    """Added texts are embedded by the corpus's own graph: another one is refused, nothing changes."""
    irflow.build(records(), embedder=model(OLD), path=tmp_path / "c")
    other = irflow.open_corpus(tmp_path / "c", embedder=model(NEW))
    before = sorted(p.name for p in (tmp_path / "c").iterdir())
    new = [irflow.Record("fresh-tool", "description", "a brand new text no record holds")]
    with pytest.raises(EmbedderError, match=OLD):
        other.add(new)
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == before and len(other) == len(records())
    same = irflow.open_corpus(tmp_path / "c", embedder=model(OLD))
    same.add(new)
    assert _manifest_embedder(tmp_path / "c")["digest"] == OLD  # the update's manifest keeps the identity
    reopened = irflow.open_corpus(tmp_path / "c", embedder=model(NEW))
    with pytest.raises(EmbedderError, match=NEW):
        irflow.search(reopened, "brand new", k=3)
