"""The reranking API (issue 4 §3, seed ef.reranking): Reranker, rerank, with_reranker, cross_encoder_reranker."""

from __future__ import annotations

import copy
import doctest
import inspect
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import irflow.api.reranking as reranking_module
from irflow.errors import IrflowError
from irflow.api.reranking import (
    DEFAULT_CROSS_ENCODER,
    CrossEncoderReranker,
    Reranker,
    RerankError,
    RerankerUnavailable,
    cross_encoder_reranker,
    rerank,
    score_segments,
    with_reranker,
)


def by_length(query, segments):
    return [len(segment["text"]) for segment in segments]


# --- the seed's doctest examples, verbatim (module names adapted to irflow) ----------------

SEED_EXAMPLES = '''
>>> segments = [
...     {'text': 'cat', 'id': '1'},
...     {'text': 'dog', 'id': '2'},
...     {'text': 'cathedral', 'id': '3'},
... ]
>>> def by_length(query, segments):
...     return [len(segment['text']) for segment in segments]
>>> [segment['text'] for segment in rerank('a query', segments, by_length, limit=2)]
['cathedral', 'cat']

>>> def by_length(query, segments):
...     return [len(s['text']) for s in segments]
>>> isinstance(by_length, Reranker)
True

>>> segs = [{'text': 'a', 'id': '1'}, {'text': 'bbb', 'id': '2'}]
>>> ranked = rerank('q', segs, lambda q, s: [len(x['text']) for x in s])
>>> [r['text'] for r in ranked]
['bbb', 'a']
>>> ranked[0]['metadata']['rerank_score']
3.0

>>> pool = [{'text': t, 'id': t} for t in ['ab', 'abcd', 'abc']]
>>> def base(query, *, limit=10):
...     return pool[:limit]
>>> retrieve = with_reranker(
...     base, lambda q, segs: [len(s['text']) for s in segs], fetch_k=10)
>>> [s['text'] for s in retrieve('a query', limit=2)]
['abcd', 'abc']
'''


def run_doctest(text: str, globs: dict) -> None:
    test = doctest.DocTestParser().get_doctest(text, dict(globs), "seed", None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0 and result.failed == 0


def test_seed_doctest_examples_run():
    run_doctest(SEED_EXAMPLES, {"rerank": rerank, "Reranker": Reranker, "with_reranker": with_reranker})


def test_module_docstrings_are_valid_doctests():
    result = doctest.testmod(reranking_module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


# --- Reranker --------------------------------------------------------------------------------


def test_any_callable_is_a_reranker_and_non_callables_are_not():
    assert isinstance(by_length, Reranker)
    assert isinstance(lambda q, s: [], Reranker)
    assert not isinstance("not callable", Reranker)


# --- rerank ----------------------------------------------------------------------------------


def test_rerank_calls_the_reranker_once_with_the_whole_list_and_the_query():
    calls = []

    def recorder(query, segments):
        calls.append((query, [s["id"] for s in segments]))
        return [0.0] * len(segments)

    segs = [{"text": str(i), "id": str(i)} for i in range(5)]
    rerank("the query", segs, recorder)
    assert calls == [("the query", ["0", "1", "2", "3", "4"])]


def test_rerank_empty_input_returns_empty_without_calling_the_model():
    def boom(query, segments):
        raise AssertionError("must not be called")

    assert rerank("q", [], boom) == []
    assert rerank("q", [{"text": "a"}], boom, limit=0) == []


def test_rerank_sorts_descending_with_ties_in_incoming_order():
    segs = [{"text": t, "id": str(i)} for i, t in enumerate(["a", "b", "c", "d", "e"])]
    scores = [0.5, 2.0, 0.5, 2.0, -1.0]
    ranked = rerank("q", segs, lambda q, s: scores)
    assert [r["id"] for r in ranked] == ["1", "3", "0", "2", "4"]
    assert [r["metadata"]["rerank_score"] for r in ranked] == [2.0, 2.0, 0.5, 0.5, -1.0]


def test_rerank_scores_are_python_floats_from_any_numeric_type():
    segs = [{"text": "a"}, {"text": "b"}]
    for scores in ([1, 2], np.array([1, 2], dtype=np.int64), np.array([1.0, 2.0], dtype=np.float32), (1, 2)):
        ranked = rerank("q", segs, lambda q, s, scores=scores: scores)
        assert [type(r["metadata"]["rerank_score"]) for r in ranked] == [float, float]
        assert [r["metadata"]["rerank_score"] for r in ranked] == [2.0, 1.0]


def test_rerank_returns_copies_and_leaves_caller_dicts_untouched():
    meta = {"owner": "me", "tags": ["x"]}
    segs = [{"text": "a", "id": "1", "metadata": meta}, {"text": "bb", "id": "2"}]
    before = copy.deepcopy(segs)
    ranked = rerank("q", segs, by_length)
    assert segs == before
    assert "rerank_score" not in meta
    assert all(r is not s for r in ranked for s in segs)
    assert ranked[1]["metadata"] is not meta
    assert ranked[1]["metadata"] == {"owner": "me", "tags": ["x"], "rerank_score": 1.0}
    # other keys are kept as they were
    assert ranked[0] == {"text": "bb", "id": "2", "metadata": {"rerank_score": 2.0}}


def test_rerank_accepts_read_only_mappings_and_returns_dicts():
    segs = [types.MappingProxyType({"text": "abc", "metadata": types.MappingProxyType({"k": 1})})]
    ranked = rerank("q", segs, by_length)
    assert ranked == [{"text": "abc", "metadata": {"k": 1, "rerank_score": 3.0}}]


def test_rerank_overwrites_a_previous_rerank_score_in_the_copy_only():
    segs = [{"text": "abcd", "metadata": {"rerank_score": 99.0}}]
    assert rerank("q", segs, by_length)[0]["metadata"]["rerank_score"] == 4.0
    assert segs[0]["metadata"]["rerank_score"] == 99.0


@pytest.mark.parametrize("returned", [[1.0], [1.0, 2.0, 3.0], []])
def test_length_mismatch_is_a_value_error_naming_both_counts(returned):
    segs = [{"text": "a"}, {"text": "b"}]
    with pytest.raises(ValueError) as info:
        rerank("q", segs, lambda q, s: returned)
    assert isinstance(info.value, IrflowError)
    message = str(info.value)
    assert f"returned {len(returned)} scores for 2 segments" in message


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_scores_are_rejected_clearly(bad):
    with pytest.raises(RerankError, match="non-finite"):
        rerank("q", [{"text": "a"}, {"text": "b"}], lambda q, s: [1.0, bad])


@pytest.mark.parametrize(
    "returned", [None, "ab", ["1.0", "2.0"], [1.0, None], [["x"], ["y"]], [[1.0], [2.0, 3.0]], 3.0, [[1.0, 2.0], [3.0, 4.0]]]
)
def test_malformed_scores_are_rejected(returned):
    with pytest.raises(RerankError):
        rerank("q", [{"text": "a"}, {"text": "b"}], lambda q, s: returned)


def test_generators_and_boolean_scores_are_accepted():
    segs = [{"text": "a"}, {"text": "bbb"}]
    assert [r["text"] for r in rerank("q", segs, lambda q, s: (len(x["text"]) for x in s))] == ["bbb", "a"]
    assert [r["metadata"]["rerank_score"] for r in rerank("q", segs, lambda q, s: [False, True])] == [1.0, 0.0]


def test_a_column_of_scores_is_accepted():
    ranked = rerank("q", [{"text": "a"}, {"text": "b"}], lambda q, s: np.array([[1.0], [5.0]]))
    assert [r["text"] for r in ranked] == ["b", "a"]


@pytest.mark.parametrize("limit", [-1, 1.5, "2", True])
def test_invalid_limit_is_rejected(limit):
    with pytest.raises(RerankError, match="limit"):
        rerank("q", [{"text": "a"}], by_length, limit=limit)


def test_limit_larger_than_the_list_keeps_all_and_none_keeps_all():
    segs = [{"text": "a"}, {"text": "bbb"}, {"text": "cc"}]
    assert [r["text"] for r in rerank("q", segs, by_length, limit=10)] == ["bbb", "cc", "a"]
    assert [r["text"] for r in rerank("q", segs, by_length, limit=None)] == ["bbb", "cc", "a"]


def test_non_mapping_segments_are_rejected_with_their_position():
    with pytest.raises(RerankError, match="segment #1"):
        rerank("q", [{"text": "a"}, "b"], by_length)


def test_non_callable_reranker_is_rejected():
    with pytest.raises(RerankError, match="callable"):
        rerank("q", [{"text": "a"}], [1.0])


@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, width=32), max_size=30), st.one_of(st.none(), st.integers(0, 35)))
def test_rerank_property_stable_descending_and_limited(scores, limit):
    segs = [{"text": str(i), "id": i, "metadata": {"n": i}} for i in range(len(scores))]
    before = copy.deepcopy(segs)
    ranked = rerank("q", segs, lambda q, s: scores, limit=limit)
    # independent expectation: sort (score desc, original position asc)
    expected = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    if limit is not None:
        expected = expected[:limit]
    assert [r["id"] for r in ranked] == expected
    assert [r["metadata"]["rerank_score"] for r in ranked] == [float(scores[i]) for i in expected]
    assert segs == before


# --- score_segments (shared with the engine's rerank stage) --------------------------------


def test_score_segments_returns_float64_and_validates():
    scores = score_segments(by_length, "q", [{"text": "ab"}, {"text": "c"}])
    assert scores.dtype == np.float64 and scores.tolist() == [2.0, 1.0]
    with pytest.raises(RerankError, match="returned 1 scores for 2 segments"):
        score_segments(lambda q, s: [1], "q", [{"text": "ab"}, {"text": "c"}])
    with pytest.raises(RerankError, match="non-finite"):
        score_segments(lambda q, s: [1, math.nan], "q", [{"text": "ab"}, {"text": "c"}])


# --- with_reranker ---------------------------------------------------------------------------


def make_retriever(pool):
    calls = []

    def retrieve(query, *, limit=10, **kwargs):
        """Base retriever docstring."""
        calls.append((query, limit, kwargs))
        return [dict(s) for s in pool[:limit]]

    return retrieve, calls


def test_with_reranker_over_fetches_reranks_and_trims():
    pool = [{"text": "x" * n, "id": str(n)} for n in [1, 5, 2, 4, 3, 6]]
    base, calls = make_retriever(pool)
    seen = []

    def recorder(query, segments):
        seen.append(len(segments))
        return by_length(query, segments)

    retrieve = with_reranker(base, recorder, fetch_k=4)
    out = retrieve("q", limit=2)
    assert calls == [("q", 4, {})]
    assert seen == [4]  # the reranker sees the whole fetched list, once
    assert [s["id"] for s in out] == ["5", "4"]
    assert out[0]["metadata"]["rerank_score"] == 5.0


def test_with_reranker_default_limit_is_10_and_default_fetch_k_is_50():
    pool = [{"text": "x" * n} for n in range(1, 80)]
    base, calls = make_retriever(pool)
    out = with_reranker(base, by_length)("q")
    assert calls[0][1] == 50
    assert len(out) == 10 and len(out[0]["text"]) == 50


def test_with_reranker_passes_extra_keyword_arguments_through():
    base, calls = make_retriever([{"text": "a"}])
    with_reranker(base, by_length, fetch_k=7)("q", limit=1, filter={"owner": "me"}, mode="hybrid")
    assert calls == [("q", 7, {"filter": {"owner": "me"}, "mode": "hybrid"})]


def test_with_reranker_fetches_at_least_limit():
    base, calls = make_retriever([{"text": "x" * n} for n in range(1, 30)])
    out = with_reranker(base, by_length, fetch_k=5)("q", limit=12)
    assert calls[0][1] == 12 and len(out) == 12


def test_with_reranker_limit_none_returns_all_fetched():
    base, calls = make_retriever([{"text": "x" * n} for n in range(1, 30)])
    out = with_reranker(base, by_length, fetch_k=5)("q", limit=None)
    assert calls[0][1] == 5 and len(out) == 5


def test_with_reranker_keeps_name_and_doc_and_exposes_its_parts():
    base, _ = make_retriever([])
    wrapped = with_reranker(base, by_length, fetch_k=9)
    assert wrapped.__name__ == "retrieve"
    assert wrapped.__doc__ == "Base retriever docstring."
    assert wrapped.retriever is base and wrapped.reranker is by_length and wrapped.fetch_k == 9
    params = inspect.signature(wrapped).parameters
    assert params["limit"].default == 10 and params["limit"].kind is inspect.Parameter.KEYWORD_ONLY


def test_with_reranker_accepts_callables_without_a_name():
    class Retriever:
        def __call__(self, query, *, limit=10):
            return [{"text": "ab"}, {"text": "abc"}][:limit]

    out = with_reranker(Retriever(), by_length, fetch_k=2)("q", limit=1)
    assert [s["text"] for s in out] == ["abc"]


@pytest.mark.parametrize("fetch_k", [0, -3, 2.5, True])
def test_with_reranker_validates_fetch_k(fetch_k):
    base, _ = make_retriever([])
    with pytest.raises(RerankError, match="fetch_k"):
        with_reranker(base, by_length, fetch_k=fetch_k)


def test_with_reranker_validates_callables_and_limit():
    base, _ = make_retriever([])
    with pytest.raises(RerankError):
        with_reranker("nope", by_length)
    with pytest.raises(RerankError):
        with_reranker(base, 42)
    with pytest.raises(RerankError, match="limit"):
        with_reranker(base, by_length)("q", limit=-1)


# --- cross_encoder_reranker (sentence-transformers mocked) ---------------------------------


class FakeCrossEncoder:
    instances: list["FakeCrossEncoder"] = []

    def __init__(self, model_name, device=None, **kwargs):
        self.model_name, self.device, self.kwargs = model_name, device, kwargs
        self.predict_calls = []
        FakeCrossEncoder.instances.append(self)

    def predict(self, pairs, batch_size=32, **kwargs):
        self.predict_calls.append((list(pairs), batch_size, kwargs))
        # float32 scores, as the real model returns: the length of the passage
        return np.array([len(passage) for _, passage in pairs], dtype=np.float32)


@pytest.fixture
def fake_st(monkeypatch):
    FakeCrossEncoder.instances = []
    module = types.ModuleType("sentence_transformers")
    module.CrossEncoder = FakeCrossEncoder
    monkeypatch.setitem(sys.modules, "sentence_transformers", module)
    return module


def test_cross_encoder_reranker_loads_the_model_once_and_predicts_pairs(fake_st):
    reranker = cross_encoder_reranker()
    assert isinstance(reranker, Reranker) and isinstance(reranker, CrossEncoderReranker)
    assert len(FakeCrossEncoder.instances) == 1
    model = FakeCrossEncoder.instances[0]
    assert model.model_name == DEFAULT_CROSS_ENCODER == "cross-encoder/ms-marco-MiniLM-L-6-v2"
    assert model.device is None
    segs = [{"text": "ab", "id": "1"}, {"text": "abcd", "id": "2"}]
    scores = reranker("the q", segs)
    assert scores == [2.0, 4.0] and all(type(s) is float for s in scores)
    reranker("again", segs[:1])
    assert len(FakeCrossEncoder.instances) == 1  # not reloaded per call
    assert model.predict_calls == [([("the q", "ab"), ("the q", "abcd")], 32, {}), ([("again", "ab")], 32, {})]


def test_cross_encoder_reranker_forwards_device_batch_size_and_predict_kwargs(fake_st):
    reranker = cross_encoder_reranker("my/model", device="cpu", batch_size=4, show_progress_bar=False, activation_fn=None)
    model = FakeCrossEncoder.instances[0]
    assert (model.model_name, model.device) == ("my/model", "cpu")
    reranker("q", [{"text": "abc"}])
    assert model.predict_calls == [([("q", "abc")], 4, {"show_progress_bar": False, "activation_fn": None})]
    assert "my/model" in repr(reranker)


def test_cross_encoder_reranker_in_rerank_and_with_reranker(fake_st):
    reranker = cross_encoder_reranker()
    ranked = rerank("q", [{"text": "a"}, {"text": "abc"}, {"text": "ab"}], reranker, limit=2)
    assert [r["text"] for r in ranked] == ["abc", "ab"]
    assert ranked[0]["metadata"]["rerank_score"] == 3.0
    pool = [{"text": t} for t in ["a", "abcd", "abc"]]
    retrieve = with_reranker(lambda query, *, limit=10: pool[:limit], reranker, fetch_k=3)
    assert [s["text"] for s in retrieve("q", limit=1)] == ["abcd"]
    assert len(FakeCrossEncoder.instances) == 1


def test_cross_encoder_reranker_empty_list_skips_predict(fake_st):
    reranker = cross_encoder_reranker()
    assert reranker("q", []) == []
    assert FakeCrossEncoder.instances[0].predict_calls == []


def test_cross_encoder_reranker_names_a_missing_text_key(fake_st):
    with pytest.raises(RerankError, match="'text'"):
        cross_encoder_reranker()("q", [{"id": "1"}])


def test_each_factory_call_loads_its_own_model(fake_st):
    cross_encoder_reranker()
    cross_encoder_reranker()
    assert len(FakeCrossEncoder.instances) == 2


def test_missing_sentence_transformers_raises_import_error_naming_the_extra(monkeypatch):
    # None in sys.modules makes `import sentence_transformers` raise ImportError.
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(ImportError) as info:
        cross_encoder_reranker()
    assert isinstance(info.value, RerankerUnavailable) and isinstance(info.value, IrflowError)
    # the hint for this installation: a source checkout installs its own extra
    assert "pip install -e '.[st]'" in str(info.value)


def test_importing_the_module_does_not_import_sentence_transformers():
    import subprocess

    code = "import sys, irflow.api.reranking; print('sentence_transformers' in sys.modules)"
    root = Path(__file__).resolve().parents[1]  # the repository, so irflow is importable
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    "kwargs, match",
    [({"model_name": ""}, "model_name"), ({"batch_size": 0}, "batch_size"), ({"device": 0}, "device")],
)
def test_cross_encoder_reranker_validates_arguments(fake_st, kwargs, match):
    with pytest.raises(RerankError, match=match):
        cross_encoder_reranker(**kwargs)
