"""The postings consistency checks: every index irflow builds passes them, every one-row edit fails them.

Property tests over random token lists (hypothesis), independent of any
corpus file: ``Postings.from_arrays`` (the checks run on open) and
``cross_problems`` (the exact checks run on first scoring) accept what
``Postings.build`` makes, and refuse it once one document length, one
posting row or one row-major term is changed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from irflow.errors import CorpusError
from irflow.kernels.postings import Postings
from irflow.kernels.postings_checks import cross_problems

TOKENS = st.lists(st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f"]), max_size=8), min_size=1, max_size=12)


def _problems(arrays: dict[str, np.ndarray], terms: list[str]) -> list[str]:
    """What the checks say of these arrays: on open, else on first scoring."""
    try:
        postings = Postings.from_arrays(terms, arrays, n_rows=arrays["doc_lengths"].size)
    except CorpusError as error:
        return [str(error)]
    return cross_problems(postings.term_offsets, postings.post_rows, postings.post_tfs, postings.doc_lengths,
                          postings.row_offsets, postings.row_terms, str)


@settings(max_examples=100, deadline=None)
@given(tokens=TOKENS)
def test_every_built_index_passes(tokens):
    built = Postings.build(tokens)
    assert _problems({k: v.copy() for k, v in built.arrays().items()}, built.vocab_terms) == []
    without_row_major = {k: v for k, v in built.arrays().items() if not k.startswith("row_")}
    assert _problems(without_row_major, built.vocab_terms) == []  # older files: rebuilt, then checked


@settings(max_examples=100, deadline=None)
@given(tokens=TOKENS, data=st.data())
def test_one_changed_length_is_always_found(tokens, data):
    built = Postings.build(tokens)
    arrays = {k: v.copy() for k, v in built.arrays().items()}
    row = data.draw(st.integers(0, len(tokens) - 1))
    delta = data.draw(st.integers(-int(arrays["doc_lengths"][row]), 50).filter(lambda d: d != 0))
    arrays["doc_lengths"][row] += delta
    assert _problems(arrays, built.vocab_terms)


@settings(max_examples=100, deadline=None)
@given(tokens=TOKENS, data=st.data())
def test_lengths_moved_between_rows_are_found(tokens, data):
    built = Postings.build(tokens)
    if len(tokens) < 2:
        return
    arrays = {k: v.copy() for k, v in built.arrays().items()}
    a, b = data.draw(st.lists(st.integers(0, len(tokens) - 1), min_size=2, max_size=2, unique=True))
    moved = data.draw(st.integers(1, 5))
    arrays["doc_lengths"][a] += moved
    arrays["doc_lengths"][b] -= moved
    assert _problems(arrays, built.vocab_terms)


@settings(max_examples=100, deadline=None)
@given(tokens=TOKENS, data=st.data())
def test_one_changed_posting_row_or_row_term_is_found(tokens, data):
    built = Postings.build(tokens)
    arrays = {k: v.copy() for k, v in built.arrays().items()}
    if arrays["post_rows"].size == 0:
        return
    name = data.draw(st.sampled_from(["post_rows", "row_terms"]))
    bound = len(tokens) if name == "post_rows" else built.vocab_size
    i = data.draw(st.integers(0, arrays[name].size - 1))
    new = data.draw(st.integers(0, bound - 1).filter(lambda v: v != arrays[name][i]))
    arrays[name][i] = new
    assert _problems(arrays, built.vocab_terms)


def test_messages_name_the_array_and_the_place():
    built = Postings.build([["a", "b", "a"], ["b"], ["a", "c"]])
    arrays = {k: v.copy() for k, v in built.arrays().items()}
    arrays["post_rows"][[0, 1]] = arrays["post_rows"][[1, 0]]  # term 'a': rows 2, 0
    with pytest.raises(CorpusError, match=r"post_rows: the rows of term 'a' are not strictly ascending at posting 1"):
        Postings.from_arrays(built.vocab_terms, arrays)
