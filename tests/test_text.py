"""Tests of irflow.kernels.text: the analyzers' rules, their manifest round-trip, their errors."""

from __future__ import annotations

import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from irflow.errors import AnalyzerError
from irflow.kernels.stopwords import ENGLISH_STOPWORDS, STOPWORDS
from irflow.kernels.text import ANALYZER_VERSION, ANALYZERS, DEFAULT_ANALYZER, Analyzer, get_analyzer

# Text that exercises every rule: cases, joiners, underscores, digits, and the
# two characters whose lowercasing is not one-to-one and context-free.
IDENTIFIER_ALPHABET = "aAbBzZ09_.- \n\tİıΣσςΑßẞéÉ日本\u0307'/"
identifier_text = st.text(alphabet=IDENTIFIER_ALPHABET, max_size=40)
any_text = st.text(max_size=60)


# -- plain ---------------------------------------------------------------------


@settings(max_examples=400)
@given(st.one_of(any_text, identifier_text))
def test_plain_is_exactly_the_seed_tokenizer(text: str) -> None:
    assert get_analyzer("plain")(text) == re.findall(r"\w+", text.lower())


def test_plain_examples() -> None:
    assert get_analyzer("plain")("Hello, World! rank_bm25 dotted.name") == ["hello", "world", "rank_bm25", "dotted", "name"]
    assert get_analyzer("plain")("") == []


# -- identifier ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("rank_bm25", ["rank_bm25", "rank", "bm25"]),
        ("camelCase", ["camelcase", "camel", "case"]),
        ("dotted.name", ["dotted.name", "dotted", "name"]),
        ("kebab-case", ["kebab-case", "kebab", "case"]),
        ("HTTPServer2", ["httpserver2", "http", "server2"]),
        ("getHTTP2Response", ["gethttp2response", "get", "http2", "response"]),
        ("bm25Okapi", ["bm25okapi", "bm25", "okapi"]),
        ("__init__", ["__init__", "init"]),
        ("irflow.text_utils", ["irflow.text_utils", "irflow", "text_utils", "text", "utils"]),
        ("word", ["word"]),
        ("Word", ["word"]),
        ("HTTP", ["http"]),
        ("1.2.3", ["1.2.3", "1", "2", "3"]),
        ("a--b", ["a", "b"]),
        ("end. Next", ["end", "next"]),
        ("___", ["___"]),
    ],
)
def test_identifier_examples(text: str, tokens: list[str]) -> None:
    assert get_analyzer("identifier")(text) == tokens


def test_plain_word_yields_itself_once() -> None:
    assert get_analyzer("identifier")("ranking library") == ["ranking", "library"]


def _reference_identifier(text: str, prose: bool = False) -> list[str]:
    """The documented identifier rule (and with ``prose`` the prose rules), written plainly and without caches."""
    low = text.lower()
    aligned = len(low) == len(text)
    out: list[str] = []
    for match in re.finditer(r"\w+(?:[.\-]\w+)*", low):
        unit = match.group()
        runs = re.split(r"[.\-]", unit)
        abbreviation = "-" not in unit and all(len(r) == 1 and r.isalpha() for r in runs)
        if len(runs) > 1 and not (prose and ("." not in unit or abbreviation)):
            out.append(unit)
        orig_runs = re.split(r"[.\-]", text[match.start() : match.end()]) if aligned else runs
        for run, orig in zip(runs, orig_runs):
            out.append(run)
            if re.search(r"_|[a-z0-9][A-Z]|[A-Z][A-Z][a-z]", orig):
                parts = [p for p in re.split(r"_+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", orig) if p]
                if prose and "_" not in orig and min(len(p) for p in parts) < 3:
                    continue  # the prose camel rule
                parts = [p.lower() for p in parts]
                if parts != [run]:
                    out.extend(parts)
    return out


def _is_subsequence(small: list[str], big: list[str]) -> bool:
    it = iter(big)
    return all(any(token == other for other in it) for token in small)


@settings(max_examples=400)
@given(st.one_of(identifier_text, any_text))
def test_identifier_matches_reference_and_contains_plain(text: str) -> None:
    tokens = get_analyzer("identifier")(text)
    assert tokens == _reference_identifier(text)
    assert get_analyzer("identifier")(text) == tokens  # again, now from the caches
    assert _is_subsequence(get_analyzer("plain")(text), tokens)


def test_lowering_premise_of_the_fast_path() -> None:
    """The identifier fast path assumes single-character lowering keeps \\w-ness.

    It also assumes U+0130 is the only character lowering to several; if a
    new Unicode version breaks either, this test says so before tokens drift.
    """
    word = re.compile(r"\w")
    multi = []
    for cp in range(sys.maxunicode + 1):
        c = chr(cp)
        low = c.lower()
        if len(low) != 1:
            multi.append(cp)
        else:
            assert bool(word.match(c)) == bool(word.match(low)), hex(cp)
    assert multi == [0x130]


def test_tokenize_many_equals_calls() -> None:
    texts = ["rank_bm25 is fast", "", "camelCase.Thing and kebab-case", "The Libraries ran"]
    for name in ANALYZERS:
        analyzer = get_analyzer(name)
        assert analyzer.tokenize_many(texts) == [analyzer(t) for t in texts]
        assert analyzer.tokenize_many(iter(texts)) == [analyzer(t) for t in texts]


# -- english -------------------------------------------------------------------


def test_english_removes_stopwords_and_stems() -> None:
    english = get_analyzer("english")
    assert english("The ranking libraries are running") == ["rank", "librari", "run"]
    # Identifiers stay verbatim, their parts are stemmed like words.
    # analyzer version 2 (issue 14): a hyphen compound is prose, its words only ("kebab-cases" whole is gone)
    assert english("kebab-cases running_jobs") == ["kebab", "case", "running_jobs", "run", "job"]
    assert english("the of and") == []


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("well-defined", ["well", "defined"]),  # prose compound: its words, not the whole
        ("TNF-α IL-1β", ["tnf", "α", "il", "1β"]),
        ("scikit-learn rank-bm25", ["scikit", "learn", "rank", "bm25"]),
        ("e.g. U.S.", ["e", "g", "u", "s"]),  # abbreviations: their letters
        ("os.path.join", ["os.path.join", "os", "path", "join"]),  # dotted names stay identifiers
        ("1.2.3", ["1.2.3", "1", "2", "3"]),
        ("rank_bm25 __init__", ["rank_bm25", "rank", "bm25", "__init__", "init"]),
        ("camelCase getHTTPResponse", ["camelcase", "camel", "case", "gethttpresponse", "get", "http", "response"]),
        ("mRNA siRNAs RNAs PI3K pH IgG", ["mrna", "sirnas", "rnas", "pi3k", "ph", "igg"]),  # notation, not code
        ("my_mRNA", ["my_mrna", "my", "m", "rna"]),  # an underscore makes it an identifier: every cut
        ("a.b-c", ["a.b-c", "a", "b", "c"]),  # dots and hyphens together: not prose
    ],
)
def test_prose_rules_examples(text: str, tokens: list[str]) -> None:
    assert Analyzer("identifier", prose=True)(text) == tokens  # the rules alone, before stopwords and stems


prose_text = st.lists(
    st.sampled_from(["well", "-", ".", "_", " ", "mRNA", "RNAs", "camelCase", "getHTTPResponse", "e", "g", "α",
                     "IL", "1β", "os", "path", "x", "Ab", "AB", "abc", "İ", "Σ"]),
    max_size=12,
).map("".join)


@settings(max_examples=400)
@given(st.one_of(prose_text, identifier_text, any_text))
def test_prose_rules_match_reference_and_only_drop_tokens(text: str) -> None:
    prose = Analyzer("identifier", prose=True)(text)
    assert prose == _reference_identifier(text, prose=True)
    identifier = get_analyzer("identifier")(text)
    # the prose rules only leave out compounds and camel parts: every plain token is still there
    assert _is_subsequence(prose, identifier) and _is_subsequence(get_analyzer("plain")(text), prose)
    if "." not in text:
        assert not any("-" in token for token in prose)  # no hyphen compound survives without a dot


def test_english_settings_can_be_overridden() -> None:
    assert Analyzer("english", stopwords=None)("the libraries") == ["the", "librari"]
    assert Analyzer("english", stemmer=None)("the libraries") == ["libraries"]
    assert Analyzer("plain", stemmer="english")("Libraries rank_bm25") == ["librari", "rank_bm25"]
    assert Analyzer("english", stemmer="french")("les maisons") == ["le", "maison"]


def test_stopword_list() -> None:
    assert STOPWORDS["english"] is ENGLISH_STOPWORDS
    assert len(ENGLISH_STOPWORDS) == 153  # NLTK's 179 minus the 26 spelled with an apostrophe
    assert {"the", "and", "don", "t", "wouldn"} <= ENGLISH_STOPWORDS
    assert all(re.fullmatch(r"\w+", w) for w in ENGLISH_STOPWORDS)


def test_english_is_thread_safe() -> None:
    texts = [f"running libraries number{i} rank_bm25 quickly jumped" for i in range(400)]
    expected = [get_analyzer("english")(t) for t in texts]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(get_analyzer("english"), texts))
    assert results == expected


# -- settings, manifest round-trip, errors --------------------------------------


def test_defaults() -> None:
    assert ANALYZERS == ("plain", "identifier", "english")
    assert DEFAULT_ANALYZER == "english"  # chosen by measurement (docs/guides/quality.md)
    assert get_analyzer(None) == Analyzer("english")
    assert get_analyzer() == Analyzer()
    plain, ident, english = (Analyzer(n) for n in ANALYZERS)
    assert (plain.identifiers, plain.stopwords, plain.stemmer) == (False, None, None)
    assert (ident.identifiers, ident.stopwords, ident.stemmer) == (True, None, None)
    assert (english.identifiers, english.stopwords, english.stemmer) == (True, "english", "english")
    assert (plain.prose, ident.prose, english.prose) == (False, False, True)


@pytest.mark.parametrize(
    "analyzer",
    [Analyzer(n) for n in ANALYZERS] + [Analyzer("english", stopwords=None, stemmer="porter"), Analyzer("plain", lowercase=False)],
)
def test_round_trip_through_json(analyzer: Analyzer) -> None:
    data = json.loads(json.dumps(analyzer.to_dict()))
    assert data["version"] == ANALYZER_VERSION
    again = Analyzer.from_dict(data)
    assert again == analyzer and hash(again) == hash(analyzer)
    assert get_analyzer(data) == analyzer
    text = "The RankBM25 ranking_library; dotted.name"
    assert again(text) == analyzer(text)


def test_a_version_1_manifest_keeps_the_version_1_rules() -> None:
    """A corpus built before the prose rules is still queried with the tokens it was built with."""
    old = {"name": "english", "lowercase": True, "identifiers": True, "stopwords": "english", "stemmer": "english",
           "version": 1}
    analyzer = Analyzer.from_dict(old)
    assert analyzer.prose is False and analyzer("well-defined") == ["well-defined", "well", "defin"]
    assert Analyzer.from_dict({**old, "version": 2}).prose is True


def test_lowercase_off_keeps_case() -> None:
    assert Analyzer("identifier", lowercase=False)("camelCase X") == ["camelCase", "camel", "Case", "X"]


def test_from_dict_refuses_unknown_keys_and_newer_versions() -> None:
    with pytest.raises(AnalyzerError, match="unknown analyzer settings.*'stemming'"):
        Analyzer.from_dict({"name": "english", "stemming": True})
    with pytest.raises(AnalyzerError, match="upgrade irflow or rebuild"):
        Analyzer.from_dict({**Analyzer().to_dict(), "version": ANALYZER_VERSION + 1})
    with pytest.raises(AnalyzerError, match="mapping"):
        Analyzer.from_dict(["identifier"])  # type: ignore[arg-type]


def test_unknown_name_lists_valid_names_and_closest() -> None:
    with pytest.raises(AnalyzerError) as info:
        get_analyzer("identifer")
    message = str(info.value)
    assert "'plain', 'identifier', 'english'" in message
    assert "did you mean 'identifier'?" in message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"stemmer": "klingon"}, "unknown stemmer language 'klingon'"),
        ({"stopwords": "englsh"}, "did you mean 'english'"),
        ({"lowercase": "yes"}, "'lowercase' must be true or false"),
    ],
)
def test_invalid_settings(kwargs: dict, pattern: str) -> None:
    with pytest.raises(AnalyzerError, match=pattern):
        Analyzer("identifier", **kwargs)


def test_wrong_types() -> None:
    with pytest.raises(AnalyzerError, match="an analyzer is a name"):
        get_analyzer(42)  # type: ignore[arg-type]
    with pytest.raises(AnalyzerError, match="take text"):
        get_analyzer("identifier")(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(AnalyzerError, match="take text"):
        get_analyzer("plain")(None)  # type: ignore[arg-type]


def test_full_caches_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import irflow.kernels.text as text_module

    texts = ["The rank_bm25 libraries", "camelCase.Thing ran", "ΟΔΟΣ_ΚΑΙ İstanbul_Foo"]
    expected = {name: [get_analyzer(name)(t) for t in texts] for name in ANALYZERS}
    monkeypatch.setattr(text_module, "_CACHE_LIMIT", 0)
    monkeypatch.setattr(text_module, "_UNIT_CACHES", {})
    monkeypatch.setattr(text_module, "_FINISH_CACHES", {})
    for name in ANALYZERS:
        assert get_analyzer(name).tokenize_many(texts * 2) == expected[name] * 2
    assert all(not cache for cache in text_module._UNIT_CACHES.values())
