"""Misspelled names do not silently return nothing: filter fields warn, unknown surface kinds are refused."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from click.testing import CliRunner

import irflow
from irflow.cli import main
from irflow.errors import FilterError, IrflowWarning, UnknownFieldWarning, UnknownSurfaceWarning

RECORDS = [
    irflow.Record("unbox", "name", "unbox", {"license": "MIT", "repo": {"owner": "me"}}),
    irflow.Record("unbox", "description", "Unpack any archive: zip, tar.", {"license": "MIT"}),
    irflow.Record("bm", "description", "Okapi BM25 ranking.", {"license": "Apache-2.0", "tags": [{"k": 1}]}),
]


def _corpus(name: str = "tools") -> irflow.Corpus:
    return irflow.build(RECORDS, embedder="hash", name=name)


def _caught(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, [w for w in caught if issubclass(w.category, IrflowWarning)]


def test_a_filter_field_no_record_has_warns_once_per_corpus_naming_the_closest():
    corpus = _corpus()
    hits, caught = _caught(lambda: [irflow.search(corpus, q, filter={"licence": "MIT"}, mode=m)
                                    for q in ("zip", "tar", "bm25") for m in ("lexical", "hybrid")])
    assert hits == [[]] * 6
    assert len(caught) == 1 and caught[0].category is UnknownFieldWarning  # once for (corpus, path)
    message = str(caught[0].message)
    assert "'licence'" in message and "(did you mean 'license'?)" in message
    assert "license, repo, repo.owner, tags, tags.k" in message  # the fields there are, nested ones dotted
    # another corpus warns again: the warning is per (corpus, path)
    _, caught = _caught(lambda: irflow.search(_corpus("other"), "zip", filter={"licence": "MIT"}))
    assert len(caught) == 1


def test_fields_that_exist_do_not_warn_even_when_nothing_matches():
    corpus = _corpus()
    for spec in ({"license": "GPL"}, {"repo.owner": "you"}, {"tags.k": 2}, {"license": {"$exists": True}},
                 {"$or": [{"license": "MIT"}, {"repo.owner": "me"}]}):
        _, caught = _caught(lambda: irflow.search(corpus, "zip", filter=spec))  # noqa: B023 (called at once)
        assert caught == [], spec


def test_a_nested_misspelling_names_the_nested_field():
    _, caught = _caught(lambda: irflow.search(_corpus(), "zip", filter={"$or": [{"repo.ownr": "me"}, {"license": "x"}]}))
    assert len(caught) == 1 and "'repo.ownr' (did you mean 'repo.owner'?)" in str(caught[0].message)


def test_a_field_only_deleted_records_had_warns():
    corpus = irflow.build(RECORDS + [irflow.Record("old", "name", "old", {"legacy": True})], embedder="hash", name="t")
    corpus.store.delete_record(corpus.record_ids[-1])
    _, caught = _caught(lambda: irflow.search(corpus, "old", filter={"legacy": True}))
    assert len(caught) == 1 and "'legacy'" in str(caught[0].message)


def test_surfaces_the_corpus_does_not_hold_are_refused_naming_kinds_and_closest():
    corpus = _corpus()
    with pytest.raises(FilterError) as info:
        irflow.search(corpus, "zip", surfaces=["nam"])
    assert "holds no surface kind 'nam' (did you mean 'name'?); its kinds are name, description" in str(info.value)
    with pytest.raises(FilterError, match="an empty list selects no surface kind"):
        irflow.search(corpus, "zip", surfaces=[])
    with pytest.raises(FilterError, match="holds no surface kind 'nam'"):  # every path, not only search()
        irflow.load_recipe("hybrid").run(corpus, "zip", surfaces="nam")


def test_a_stray_unknown_kind_next_to_held_ones_warns_and_keeps_the_held_ones():
    corpus = _corpus()
    hits, caught = _caught(lambda: irflow.search(corpus, "unbox", surfaces=["name", "readme"], mode="lexical"))
    assert [h.surface_kind for h in hits] == ["name"]
    assert len(caught) == 1 and caught[0].category is UnknownSurfaceWarning
    assert "no surface kind 'readme'" in str(caught[0].message)
    mask = corpus.candidate_mask(surfaces=["name", "readme"])
    assert np.flatnonzero(mask).tolist() == [0]


def test_cli_prints_the_warning_as_one_line(tmp_path):
    irflow.build(RECORDS, embedder="hash", path=tmp_path / "c")
    result = CliRunner().invoke(main, ["run", "search", "--corpus", str(tmp_path / "c"), "-q", "zip", "-q", "tar",
                                       "--set", 'filter={"licence": "MIT"}'])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("Warning:")]
    assert len(lines) == 1 and "(did you mean 'license'?)" in lines[0]
    assert result.stderr.count("\n") == 1  # one line, no source location or code line
    result = CliRunner().invoke(main, ["run", "search", "--corpus", str(tmp_path / "c"), "-q", "zip",
                                       "--set", 'surfaces=["nam"]'])
    assert result.exit_code == 1 and "did you mean 'name'?" in result.stderr and "Traceback" not in result.output
