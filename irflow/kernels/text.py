"""Text analyzers: how record texts and queries become BM25 tokens.

An analyzer is chosen when a corpus is built, stored in the corpus manifest
(:meth:`Analyzer.to_dict`) and applied unchanged to queries, so a query and
the records it is scored against are always cut the same way.  Three presets:

``"plain"``
    Lowercase ``\\w+`` runs — exactly ``re.findall(r"\\w+", text.lower())``,
    what the seed's BM25 used (Unicode-aware: ``\\w`` is any letter, digit or
    underscore of any script).

``"identifier"``
    The plain tokens plus the pieces that make package, tool and skill names
    findable.  The text is cut into *units*: a ``\\w+`` run, or several joined
    by single ``.`` or ``-`` characters (``dotted.name``, ``kebab-case``,
    ``irflow.kernels.text``, ``1.2.3``).  Each unit yields, in order:

    1. the whole unit, lowercased, when it joins several runs;
    2. each of its runs (these are exactly the plain tokens, in order), each
       followed by its *parts* when the run contains an underscore or an
       ASCII camelCase boundary: the run is cut at underscores, between a
       lowercase letter or digit and an uppercase letter, and between an
       uppercase letter and an uppercase letter followed by a lowercase one;
       digits never start a part.

    ``rank_bm25`` -> ``rank_bm25 rank bm25``; ``camelCase`` -> ``camelcase
    camel case``; ``dotted.name`` -> ``dotted.name dotted name``;
    ``kebab-case`` -> ``kebab-case kebab case``; ``HTTPServer2`` ->
    ``httpserver2 http server2``; ``getHTTP2Response`` -> ``gethttp2response
    get http2 response``; ``__init__`` -> ``__init__ init``.  A run with no
    underscore and no camel boundary yields only itself, so a plain word
    appears exactly once.  Camel boundaries are looked for among ASCII letters
    only (other scripts are cut at underscores only), and are lost in the rare
    text whose lowercasing changes its length (it contains U+0130 ``İ``).

``"english"`` (the default, chosen by measurement: see DEFAULT_ANALYZER)
    The identifier tokens with the *prose* rules, minus an English stopword
    list (:data:`irflow.kernels.stopwords.ENGLISH_STOPWORDS`), then Snowball English
    stemming (PyStemmer).  The prose rules tell words of running text from
    identifiers (chosen on tuning queries: docs/guides/quality.md):

    - a hyphen-joined unit without a dot is a compound word of prose
      (``well-defined``, ``TNF-α``, ``IL-1β``, and so ``scikit-learn`` and
      ``rank-bm25`` too): it yields its runs only, not the whole;
    - a dotted unit of single letters is an abbreviation (``e.g``, ``U.S``):
      its letters only;
    - a run without an underscore is cut at camel boundaries only when every
      part has at least three characters: ``camelCase``, ``getHTTPResponse``
      and ``JavaScript`` are cut, while ``mRNA``, ``RNAs``, ``PI3K``, ``pH``
      and ``IgG`` — the notation of science, not of code — stay whole.

    Identifiers stay what they are: ``rank_bm25`` (underscores are always
    cut), ``camelCase`` and dotted names (``os.path.join``, ``irflow.kernels.text``,
    ``1.2.3``) yield the whole and its parts.  Tokens containing ``_`` or
    ``.`` are names, kept verbatim (a name is not a word to stem); their
    parts are stemmed like any word.

>>> get_analyzer("identifier")("Try rank_bm25 or camelCase.Thing")
['try', 'rank_bm25', 'rank', 'bm25', 'or', 'camelcase.thing', 'camelcase', 'camel', 'case', 'thing']
"""

from __future__ import annotations

import difflib
import re
import threading
from itertools import chain
from typing import Any, Iterable, Mapping

import attrs
import Stemmer  # PyStemmer

from irflow.errors import AnalyzerError
from irflow.kernels.stopwords import STOPWORDS

__all__ = ["Analyzer", "ANALYZERS", "DEFAULT_ANALYZER", "ANALYZER_VERSION", "get_analyzer"]

#: The analyzer presets, simplest first.
ANALYZERS: tuple[str, ...] = ("plain", "identifier", "english")

#: The analyzer a corpus gets when none is named.  Chosen by measurement: the
#: best mean nDCG@10 of the lexical recipe on the tuning queries of SciFact
#: (train), Cranfield and CISI (a seeded half) — 0.482 against 0.430 (plain)
#: and 0.428 (identifier); with the prose rules 0.484, at or above rank_bm25
#: over stopworded Snowball-stemmed tokens on each tuning set (docs/guides/quality.md,
#: "The prose rules of the english analyzer"; benchmarks/quality/analyzer_prose.py).
#: It keeps identifiers whole and adds their parts, so names still match.
DEFAULT_ANALYZER = "english"

#: Bumped whenever a rule above changes the tokens of some text, so a corpus
#: built by a newer irflow is refused rather than searched with other tokens.
#: Version 2 added the ``prose`` setting (a version-1 manifest reads as prose=False).
ANALYZER_VERSION = 2

_WORD = re.compile(r"\w+")
# A \w run, or several joined by single "." / "-": the unit the identifier
# presets work on.  Its \w runs are exactly the plain tokens.
_UNIT = re.compile(r"\w+(?:[.\-]\w+)*")
_JOINERS = re.compile(r"[.\-]")
_UNIT_HINT = re.compile(r"[.\-_]|[a-z0-9][A-Z]|[A-Z][A-Z][a-z]")
_SPLIT_HINT = re.compile(r"_|[a-z0-9][A-Z]|[A-Z][A-Z][a-z]")
_PART_CUT = re.compile(r"_+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_IDENTIFIER_CHARS = re.compile(r"[_.\-]")
# under the prose rules a camel cut needs every part this long (mRNA, RNAs, pH, IgG stay whole)
_PROSE_CAMEL_MIN = 3

# Caches shared by every analyzer with the same settings (get_analyzer makes
# new instances freely).  Vocabularies are Zipfian: the first few hundred
# thousand distinct units seen include nearly all frequent ones, so a full
# cache stops growing (rare units are then computed each time) rather than
# restarting, which would thrash on a large vocabulary.  ~200 bytes an entry.
_CACHE_LIMIT = 1 << 18
_UNIT_CACHES: dict[tuple[Any, ...], dict[str, tuple[str, ...]]] = {}
_FINISH_CACHES: dict[tuple[str | None, str | None], dict[str, str]] = {}
_STEMMERS = threading.local()  # PyStemmer objects are not thread-safe


def _stemmer(language: str) -> Any:
    """This thread's Snowball stemmer for ``language`` (created once per thread)."""
    cache = getattr(_STEMMERS, "by_language", None)
    if cache is None:
        cache = _STEMMERS.by_language = {}
    if language not in cache:
        cache[language] = Stemmer.Stemmer(language, 100_000)
    return cache[language]


def _stemmer_languages() -> tuple[str, ...]:
    return tuple(Stemmer.algorithms())


def _prose_compound(low: str, runs: list[str]) -> bool:
    """Whether a joined unit is prose under the prose rules: hyphen-joined without a dot, or an abbreviation."""
    if "." not in low:
        return True  # well-defined, TNF-α, IL-1β
    return "-" not in low and all(len(run) == 1 and run.isalpha() for run in runs)  # e.g, U.S


def _unit_tokens(low: str, orig: str | None, lowercase: bool, prose: bool = False) -> list[str]:
    """Identifier tokens of one unit: the compound if joined, then each run and its parts.

    ``low`` is the unit as cut from the lowered text; ``orig`` the same unit in
    the original case (None when the two do not line up, which loses camel
    boundaries only).  ``prose`` applies the prose rules (module docstring).
    """
    if not _UNIT_HINT.search(orig if orig is not None else low):
        return [low]  # a plain word: by far the most common unit
    runs = _JOINERS.split(low)
    joined = len(runs) > 1
    tokens = [low] if joined and not (prose and _prose_compound(low, runs)) else []
    orig_runs = _JOINERS.split(orig) if orig is not None else runs
    for run, orig_run in zip(runs, orig_runs):
        tokens.append(run)
        if _SPLIT_HINT.search(orig_run):
            parts = [p for p in _PART_CUT.split(orig_run) if p]
            if prose and "_" not in orig_run and min(map(len, parts)) < _PROSE_CAMEL_MIN:
                continue  # mRNA, RNAs, PI3K: notation, not a camelCase identifier
            if lowercase:
                parts = [p.lower() for p in parts]
            if parts != [run]:
                tokens.extend(parts)
    return tokens


def _check_name(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value not in ANALYZERS:
        raise AnalyzerError(_unknown_message("analyzer", value, ANALYZERS))


def _check_stopwords(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and value not in STOPWORDS:
        raise AnalyzerError(_unknown_message("stopword list", value, tuple(STOPWORDS)) + " (or None for no stopwords)")


def _check_stemmer(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and value not in _stemmer_languages():
        raise AnalyzerError(_unknown_message("stemmer language", value, _stemmer_languages()) + " (or None for no stemming)")


def _check_bool(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, bool):
        raise AnalyzerError(f"analyzer setting {attribute.name!r} must be true or false, got {value!r}")


def _unknown_message(what: str, value: Any, valid: tuple[str, ...]) -> str:
    message = f"unknown {what} {value!r}; valid: {', '.join(repr(v) for v in valid)}"
    close = difflib.get_close_matches(str(value), valid, n=1) if isinstance(value, str) else []
    if close:
        message += f" (did you mean {close[0]!r}?)"
    return message


@attrs.frozen
class Analyzer:
    """Turns text into tokens: a named preset plus the settings that define it.

    ``name`` picks the preset (one of :data:`ANALYZERS`); the settings default
    from it and may be overridden, e.g. ``Analyzer("english", stopwords=None)``
    stems without removing stopwords.  Instances are immutable and hashable,
    and equal when their settings are, so a corpus can compare the analyzer in
    its manifest with the one it is asked to use.

    >>> Analyzer("english")("The ranking libraries")
    ['rank', 'librari']
    """

    name: str = attrs.field(default=DEFAULT_ANALYZER, validator=_check_name)
    #: Lowercase the text before cutting it (every preset does).
    lowercase: bool = attrs.field(default=True, validator=_check_bool)
    #: Add compounds and identifier parts (``"identifier"`` and ``"english"``).
    identifiers: bool = attrs.field(
        default=attrs.Factory(lambda self: self.name != "plain", takes_self=True), validator=_check_bool
    )
    #: Apply the prose rules to compounds and camel parts (``"english"``; see the module docstring).
    prose: bool = attrs.field(
        default=attrs.Factory(lambda self: self.name == "english", takes_self=True), validator=_check_bool
    )
    #: Name of the stopword list to remove (see ``irflow.kernels.stopwords.STOPWORDS``), or None.
    stopwords: str | None = attrs.field(
        default=attrs.Factory(lambda self: "english" if self.name == "english" else None, takes_self=True),
        validator=_check_stopwords,
    )
    #: Snowball stemmer language (any of ``Stemmer.algorithms()``), or None.
    stemmer: str | None = attrs.field(
        default=attrs.Factory(lambda self: "english" if self.name == "english" else None, takes_self=True),
        validator=_check_stemmer,
    )

    # -- tokenizing ---------------------------------------------------------

    def __call__(self, text: str) -> list[str]:
        """The tokens of one text."""
        if not isinstance(text, str):
            raise AnalyzerError(f"analyzers take text (str), got {type(text).__name__}: {text!r:.80}")
        low = text.lower() if self.lowercase else text
        if not self.identifiers:
            tokens = _WORD.findall(low)
            return self._finish(tokens) if self._finishes else tokens
        cache = _UNIT_CACHES.setdefault((self.lowercase, self.prose, self.stopwords, self.stemmer), {})
        # Fast path: when lowering maps every character to exactly one (all but
        # U+0130) and without context (all but the final-sigma rule of U+03A3),
        # the units of the original text, lowered one by one, are the units of
        # the lowered text; so a cache keyed by the original unit is exact.
        # tests/test_text.py checks this premise over every code point.
        if len(low) == len(text) and "\u03a3" not in text:
            units = _UNIT.findall(text)
            found = list(map(cache.get, units))
            if None in found:
                self._fill(units, found, cache)
            return list(chain.from_iterable(found))  # type: ignore[arg-type]
        # Slow path (rare texts): cut the lowered text, read case from the
        # original where the two still line up.
        aligned = len(low) == len(text)
        tokens = []
        for match in _UNIT.finditer(low):
            start, end = match.span()
            tokens.extend(_unit_tokens(match.group(), text[start:end] if aligned else None, self.lowercase, self.prose))
        return self._finish(tokens) if self._finishes else tokens

    def tokenize_many(self, texts: Iterable[str]) -> list[list[str]]:
        """The tokens of each text, in order (what corpus building calls)."""
        return list(map(self, texts))

    @property
    def _finishes(self) -> bool:
        return self.stopwords is not None or self.stemmer is not None

    def _fill(self, units: list[str], found: list[Any], cache: dict[str, tuple[str, ...]]) -> None:
        """Compute the tokens of the units ``found`` lacks (cache misses), caching them while there is room."""
        missing = [i for i, tokens in enumerate(found) if tokens is None]
        lowercase = self.lowercase
        raw = {i: _unit_tokens(units[i].lower() if lowercase else units[i], units[i], lowercase, self.prose)
               for i in missing}
        if self._finishes:
            # One stemming call for all the new tokens of the text.
            finished = self._finish_map(chain.from_iterable(raw.values()))
            raw = {i: [r for r in map(finished.__getitem__, tokens) if r] for i, tokens in raw.items()}
        room = len(cache) < _CACHE_LIMIT
        for i, tokens in raw.items():
            found[i] = tuple(tokens)
            if room:
                cache[units[i]] = found[i]

    def _finish(self, tokens: list[str]) -> list[str]:
        """Remove stopwords and stem: the tokens minus stopwords, each stemmed."""
        finished = self._finish_map(tokens)
        return [r for r in map(finished.__getitem__, tokens) if r]

    def _finish_map(self, tokens: Iterable[str]) -> dict[str, str]:
        """Each distinct token -> its stem, or "" for a stopword; through a shared cache.

        Tokens not seen before are stemmed together in one ``stemWords`` call.
        Results are returned in a local dict, so a full cache (which stops
        growing) loses nothing.
        """
        cache = _FINISH_CACHES.setdefault((self.stopwords, self.stemmer), {})
        results: dict[str, str] = {}
        new = []
        for token in set(tokens):
            found = cache.get(token)
            if found is None:
                new.append(token)
            else:
                results[token] = found
        if new:
            stop = STOPWORDS[self.stopwords] if self.stopwords is not None else frozenset()
            to_stem = []
            for token in new:
                if token in stop:
                    results[token] = ""
                elif self.stemmer is None or _IDENTIFIER_CHARS.search(token):
                    results[token] = token  # identifiers are names: kept verbatim
                else:
                    to_stem.append(token)
            if to_stem:
                # Snowball stems of non-empty words are non-empty, so "" stays
                # reserved for stopwords.
                results.update(zip(to_stem, _stemmer(self.stemmer).stemWords(to_stem)))  # type: ignore[arg-type]
            if len(cache) < _CACHE_LIMIT:
                cache.update((token, results[token]) for token in new)
        return results

    # -- manifest round-trip -----------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready settings stored in a corpus manifest."""
        return {
            "name": self.name,
            "lowercase": self.lowercase,
            "identifiers": self.identifiers,
            "prose": self.prose,
            "stopwords": self.stopwords,
            "stemmer": self.stemmer,
            "version": ANALYZER_VERSION,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Analyzer":
        """The analyzer a :meth:`to_dict` mapping describes.

        Unknown keys and a version newer than this irflow's are refused:
        tokens cut by other rules would silently search wrong.
        """
        if not isinstance(data, Mapping):
            raise AnalyzerError(f"an analyzer description must be a mapping, got {type(data).__name__}")
        settings = dict(data)
        version = settings.pop("version", ANALYZER_VERSION)
        if not isinstance(version, int) or version > ANALYZER_VERSION or version < 1:
            raise AnalyzerError(
                f"analyzer version {version!r} is not supported by this irflow (which cuts tokens by version "
                f"{ANALYZER_VERSION}); upgrade irflow or rebuild the corpus"
            )
        if version < 2:
            settings.setdefault("prose", False)  # the rules of version 1, which had no prose setting
        valid = [f.name for f in attrs.fields(cls)]
        unknown = sorted(set(settings) - set(valid))
        if unknown:
            raise AnalyzerError(f"unknown analyzer settings {unknown}; valid keys: {valid + ['version']}")
        return cls(**settings)


def get_analyzer(spec: "str | Analyzer | Mapping[str, Any] | None" = None) -> Analyzer:
    """The analyzer for ``spec``: a preset name, an Analyzer, a ``to_dict`` mapping, or None.

    None gives the default (:data:`DEFAULT_ANALYZER`).  An unknown name raises
    :class:`AnalyzerError` listing the valid names and the closest one.

    >>> get_analyzer("plain")("Hello, World")
    ['hello', 'world']
    """
    if spec is None:
        return Analyzer(DEFAULT_ANALYZER)
    if isinstance(spec, Analyzer):
        return spec
    if isinstance(spec, str):
        return Analyzer(spec)
    if isinstance(spec, Mapping):
        return Analyzer.from_dict(spec)
    raise AnalyzerError(
        f"an analyzer is a name ({', '.join(map(repr, ANALYZERS))}), an irflow.kernels.text.Analyzer, "
        f"or None for the default; got {type(spec).__name__}"
    )

