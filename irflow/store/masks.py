"""Candidate masks: which live rows pass a metadata filter and a surface restriction, cached per corpus.

A mask is one bool per row of the corpus (the candidate set every channel of
a recipe shares).  Filters compile once into vectorized predicates over a
columnar view of the metadata (built on first use); masks are cached per
canonical (filter, surfaces), and a delete invalidates the cache.  A name
that can only be a typo is refused (``surfaces`` naming no kind the corpus
holds) or warned about once (a filter field no live record has).
"""

from __future__ import annotations

import collections
import difflib
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from irflow.errors import FilterError, UnknownFieldWarning, UnknownSurfaceWarning
from irflow.kernels.columns import MetadataColumns
from irflow.kernels.filters import CompiledFilter, compile_filter
from irflow.store.record_store import CorpusStore
from irflow.util.cachekey import UnkeyableError, cache_key

__all__ = ["CandidateMasks", "MASK_CACHE_SIZE", "Warned", "check_surfaces", "field_paths", "warn_unknown_field"]

#: Distinct (filter, surfaces) masks kept per corpus; each costs n_rows bytes.
MASK_CACHE_SIZE = 64


def _readonly(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.setflags(write=False)
    return view


def _surface_kinds(surfaces: Iterable[str] | str | None) -> tuple[Any, ...] | None:
    if surfaces is None:
        return None
    if isinstance(surfaces, str):  # a bare kind name, not its characters
        return (surfaces,)
    return tuple(surfaces)


def _closest_hint(word: str, options: Iterable[str]) -> str:
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def field_paths(metadata: Iterable[Mapping[str, Any]], depth: int = 3) -> list[str]:
    """Every dotted field path of these metadata mappings (nested mappings, also inside lists), sorted."""
    found: set[str] = set()

    def walk(value: Any, prefix: str, level: int) -> None:
        if isinstance(value, Mapping):
            for key, inner in value.items():
                path = f"{prefix}{key}"
                found.add(path)
                if level < depth:
                    walk(inner, f"{path}.", level + 1)
        elif isinstance(value, (list, tuple)) and level > 0:
            for item in value:
                walk(item, prefix, level)

    for record in metadata:
        walk(record, "", 0)
    return sorted(found)


class CandidateMasks:
    """The candidate masks of one corpus's store, with their cache and the warnings already given.

    ``label`` names the corpus in messages (a string, or a function giving
    it); ``columns`` gives the metadata columns (shared by every tombstone
    state of a segment; default: made here on first use); ``kinds`` the
    surface kinds ``surfaces=`` is checked against (the live records'; default
    the store's); ``warned`` the warnings given already (shared by the states
    of one corpus; default: this object's own).
    """

    def __init__(self, store: CorpusStore, label: "str | Callable[[], str]",
                 remember: Callable[[np.ndarray], None] | None = None,
                 forget: Callable[[np.ndarray], None] | None = None, *,
                 columns: Callable[[], MetadataColumns] | None = None,
                 kinds: Callable[[], Sequence[str]] | None = None,
                 warned: "Warned | None" = None) -> None:
        self.store = store
        self._label = label  # how messages name the corpus
        # called once with each read-only mask made that is not every live row (the kernels digest it once)
        self._remember = remember
        # called with each mask this cache drops (evicted, or cleared by a delete): what was kept for it goes too
        self._forget = forget
        self._columns: MetadataColumns | None = None
        self._columns_of = columns
        self._kinds_of = kinds
        self._masks: collections.OrderedDict[Any, np.ndarray] = collections.OrderedDict()
        self._masks_version = store.version
        # id(mask) -> (mask, store version, selects every live row) for the masks made here:
        # identity (checked with ``is``) tells a query's mask in O(1), no pass over its rows
        self._mask_facts: dict[int, tuple[np.ndarray, int, bool]] = {}
        self._live_facts: tuple[int, int, np.ndarray | None] | None = None
        self.warned = Warned() if warned is None else warned  # ("field" | "surface", name) already warned about
        self._field_paths: tuple[int, list[str]] | None = None  # (store version, the live records' field paths)
        self._lock = threading.Lock()

    @property
    def label(self) -> str:
        """How messages name the corpus."""
        return self._label if isinstance(self._label, str) else self._label()

    @property
    def columns(self) -> MetadataColumns:
        """Columnar metadata for filters, built on first use (a lexical-only lookup never pays for it)."""
        if self._columns is None:
            with self._lock:
                if self._columns is None:
                    self._columns = MetadataColumns(self.store.metadata) if self._columns_of is None \
                        else self._columns_of()
        return self._columns

    def mask(
        self,
        filter: "Mapping[str, Any] | CompiledFilter | None" = None,
        surfaces: Iterable[str] | str | None = None,
        *,
        checked: bool = True,
    ) -> np.ndarray:
        """Rows passing *filter* whose kind is in *surfaces* (None: any), live rows only; read-only bool (n_rows,).

        ``checked=False``: no check of the names (a segment of a corpus whose
        other segments hold the kind or the field; the corpus checked them).

        ``surfaces`` naming no kind the corpus holds raises FilterError (the
        answer could only be empty: a typo); a stray unknown kind next to held
        ones matches nothing and warns (:class:`~irflow.errors.UnknownSurfaceWarning`).
        A filter path no live record has warns too
        (:class:`~irflow.errors.UnknownFieldWarning`, naming the closest
        field), once per (corpus, path).  Masks are cached per canonical
        (filter, surfaces); a delete invalidates the cache.
        """
        kinds = _surface_kinds(surfaces)
        compiled = compile_filter(filter)  # validated and compiled once per type-exact filter
        # canonical JSON tells true from 1 from 1.0; the kinds by a type-exact key, order and repeats ignored
        try:
            key: Any = (compiled.canonical, None if kinds is None else frozenset(cache_key(k) for k in kinds))
        except UnkeyableError:
            key = None
        with self._lock:
            version = self.store.version  # read before the live rows: a mask is never older than its label
            if self._masks_version != version:
                self._dropped(self._masks.values())
                self._masks.clear()
                self._mask_facts.clear()
                self._masks_version = version
            cached = None if key is None else self._masks.get(key)
            if cached is not None:
                self._masks.move_to_end(key)
                return cached
        if checked:  # a misspelled name must not silently return nothing (checked once per mask built)
            self._check_names(compiled, kinds)
        mask = self._make(compiled, kinds)
        n_live, _ = self.live_facts()
        all_live = int(np.count_nonzero(mask)) == n_live  # once per mask made, not per query
        with self._lock:
            if key is None or self._masks_version != version:  # a delete came in meanwhile: do not keep it
                return mask
            self._masks[key] = mask
            self._mask_facts[id(mask)] = (mask, version, all_live)
            while len(self._masks) > MASK_CACHE_SIZE:
                _, evicted = self._masks.popitem(last=False)
                self._mask_facts.pop(id(evicted), None)
                self._dropped([evicted])
        if not all_live and self._remember is not None:
            self._remember(mask)
        return mask

    def _check_names(self, compiled: CompiledFilter, kinds: tuple[Any, ...] | None) -> None:
        if kinds is not None:
            held = self.store.kinds if self._kinds_of is None else self._kinds_of()
            check_surfaces(held, self.label, tuple(dict.fromkeys(kinds)), self.warned)
        if compiled.fields:
            self._check_fields(compiled.fields)

    def _make(self, compiled: CompiledFilter, kinds: tuple[Any, ...] | None) -> np.ndarray:
        """The live rows passing the filter, of these kinds (None: any): read-only."""
        mask = self.store.live.copy()
        if not compiled.matches_all:
            mask &= np.asarray(compiled.mask(self.columns), dtype=bool)
        if kinds is not None:
            codes = [code for code, kind in enumerate(self.store.kinds) if kind in kinds]
            mask &= np.isin(self.store.kind_codes, np.array(codes, dtype=np.int32))
        return _readonly(mask)

    def _dropped(self, masks: Iterable[np.ndarray]) -> None:
        if self._forget is not None:
            for mask in masks:
                self._forget(mask)

    def live_facts(self) -> tuple[int, np.ndarray | None]:
        """(number of live rows, the live mask or None while nothing is deleted), recounted only after a delete."""
        version = self.store.version  # read first: facts are never newer than their label
        facts = self._live_facts
        if facts is None or facts[0] != version:
            live = self.store.live
            n_live = int(np.count_nonzero(live))
            facts = (version, n_live, None if n_live == self.store.n_rows else live)
            if facts[2] is not None and self._remember is not None:
                self._remember(facts[2])
            self._live_facts = facts
        return facts[1], facts[2]

    def known(self, mask: Any) -> tuple[bool, bool]:
        """(made by :meth:`mask` since the last delete, selects every live row) — by identity, O(1)."""
        facts = self._mask_facts.get(id(mask))
        if facts is None or facts[0] is not mask or facts[1] != self.store.version:
            return False, False
        return True, facts[2]

    def _check_fields(self, paths: Sequence[str]) -> None:
        """Warn, once per (corpus, path), about a filter path no live record has (a misspelled field).

        Costs a bounded number of walks over the metadata whatever the number
        of paths: their columns come from one index of every field when there
        are many (a misspelled one costs nothing more), and the fields a
        warning lists are gathered once per corpus state.
        """
        todo = [path for path in paths if ("field", path) not in self.warned]
        if not todo:
            return
        self.columns.prepare(todo)
        for path in todo:
            if not self.has_field(path) and self.warned.first("field", path):
                warn_unknown_field(self.label, path, self.field_paths(), stacklevel=5)

    def has_field(self, path: str) -> bool:
        """Whether some live row's metadata has the field ``path``."""
        return self.columns.column(path).present_in(self.store.live)

    def field_paths(self) -> list[str]:
        """Every dotted field path of the live records' metadata, sorted: what a misspelled-field warning lists.

        One walk over the live metadata, kept until the corpus changes (a delete).
        """
        version = self.store.version  # read first: the list is never newer than its label
        cached = self._field_paths
        if cached is None or cached[0] != version:
            live = np.flatnonzero(self.store.live).tolist()
            cached = self._field_paths = (version, field_paths(self.store.metadata[i] for i in live))
        return cached[1]


class Warned:
    """The (what, name) pairs a corpus has warned about: each warning once per corpus (thread-safe).

    >>> warned = Warned()
    >>> warned.first("field", "ownr"), warned.first("field", "ownr"), ("field", "ownr") in warned
    (True, False, True)
    """

    def __init__(self) -> None:
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def first(self, what: str, name: str) -> bool:
        """True the first time ``(what, name)`` is offered (then warn), False after."""
        with self._lock:
            if (what, name) in self._seen:
                return False
            self._seen.add((what, name))
            return True

    def __contains__(self, pair: object) -> bool:
        return pair in self._seen

    def clear(self) -> None:
        """Forget every warning given (they are given again)."""
        with self._lock:
            self._seen.clear()


def check_surfaces(held: Sequence[str], label: str, wanted: tuple[str, ...], warned: Warned) -> None:
    """FilterError when ``surfaces`` selects no kind a corpus holds; a warning for a stray kind.

    A restriction to kinds the corpus lacks can only return nothing: almost
    always a typo (``"nam"``), so it is refused, naming the kinds held and
    the closest.  A kind missing next to kinds that are held may be meant
    (one list of kinds for several corpora), so it only warns, once per
    (corpus, kind).  One machine's corpus and a sharded one give the same
    answer and words.
    """
    unknown = [kind for kind in wanted if kind not in held]
    if wanted and not unknown:
        return
    hints = "".join(_closest_hint(kind, held) for kind in unknown)
    if len(unknown) == len(wanted):
        what = (f"{label} holds no surface kind {', '.join(repr(k) for k in wanted)}{hints}" if wanted
                else "an empty list selects no surface kind")
        raise FilterError(f"surfaces: {what}; its kinds are {', '.join(held) or '(none)'} — pass some of "
                          "them, or surfaces=None for every kind")
    for kind in unknown:
        if warned.first("surface", kind):
            warnings.warn(UnknownSurfaceWarning(
                f"surfaces: {label} holds no surface kind {kind!r}{_closest_hint(kind, held)}; it "
                f"matches nothing (its kinds are {', '.join(held)})"), stacklevel=5)


def warn_unknown_field(label: str, path: str, known: Sequence[str], *, stacklevel: int) -> None:
    """UnknownFieldWarning: no record of the corpus has the filter field ``path`` (``known``: the fields it has)."""
    listing = ", ".join(known[:20]) + (f", ... ({len(known)} fields)" if len(known) > 20 else "")
    warnings.warn(UnknownFieldWarning(
        f"filter: no record of {label} has the field {path!r}{_closest_hint(path, known)}, "
        f"so conditions on it see a missing field (equality matches nothing); its fields are "
        f"{listing or '(none)'}"), stacklevel=stacklevel + 1)
