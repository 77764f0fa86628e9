"""A corpus's hits: what ``Corpus.hits`` makes from its columns equals what the SearchHit constructor makes of its records."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from irflow.store.records import SearchHit


def _expected(corpus, row: int, score: float) -> SearchHit:
    record = corpus.record(row)
    return SearchHit(artifact_id=record.artifact_id, surface_kind=record.surface_kind, score=score,
                     text=record.text, metadata=record.metadata, source=corpus.name,
                     surface_index=record.surface_index, record_id=record.id)


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_hits_equal_the_constructors_hits_of_the_records(corpus, data):
    rows = data.draw(st.lists(st.integers(0, corpus.n_rows - 1), max_size=12))
    scores = data.draw(st.lists(st.floats(allow_nan=False, width=64), min_size=len(rows), max_size=len(rows)))
    hits = corpus.hits(np.array(rows, dtype=np.int64), np.array(scores, dtype=np.float64))
    expected = [_expected(corpus, r, s) for r, s in zip(rows, scores)]
    assert hits == expected
    for hit in hits:
        assert type(hit.score) is float and type(hit.surface_index) is int and type(hit.metadata) is dict


def test_a_hit_holds_a_copy_of_the_metadata(corpus):
    hit = corpus.hits([0], [1.0])[0]
    hit.metadata["added"] = True
    assert "added" not in corpus.record(0).metadata
    assert "added" not in corpus.hits([0], [1.0])[0].metadata


def test_a_nan_score_is_refused(corpus):
    with pytest.raises(ValueError, match="NaN"):
        corpus.hits([0, 1], [0.5, math.nan])
