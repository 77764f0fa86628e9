"""Which dotted field paths a list of metadata mappings holds: one walk over every record, for any number of paths.

A filter naming 2,000 fields used to cost 2,000 walks over the metadata
(one per path, to build its column, and another per unknown path to list
the fields a warning suggests).  :func:`index_fields` walks the records
once and keeps what makes most of those walks unnecessary: the rows holding
each top-level key (a path's column needs only those rows: the others miss
it), every path some record has an item at, and the paths whose item is a
list somewhere.  A path that no record has, under no list, is missing from
every row (MongoDB's "missing"): its column is known without reading a record.

Paths follow :func:`irflow.kernels.columns.resolve_path` exactly: mapping
keys, through one level of lists of mappings.  A record that holds a
container twice (shared, or inside itself) makes the index inexact; then no
path is taken as absent and every column is walked for, as before.
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from irflow.kernels.typed_values import as_list

__all__ = ["FieldIndex", "MAX_INDEXED_PARTS", "index_fields"]

#: Paths of more parts than this are not indexed (their columns are walked for): metadata read from
#: files nests at most 64 levels.
MAX_INDEXED_PARTS = 64

_EMPTY_ROWS = np.empty(0, dtype=np.int64)


def _is_container(value: Any) -> bool:
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:  # the common cases, fast
        return False
    return isinstance(value, (Mapping, list, tuple)) or (isinstance(value, np.ndarray) and value.ndim > 0)


@attrs.frozen(eq=False)
class FieldIndex:
    """The fields of a list of metadata mappings (see the module docstring).

    ``heads`` maps each top-level key to the rows holding it (ascending);
    ``paths`` holds every path of two or more parts with an item in some row
    and ``listy`` every path whose item is a list in some row; ``exact`` is
    False when a record holds a container twice, and then only ``heads`` is
    to be trusted.
    """

    n_rows: int
    heads: Mapping[str, np.ndarray]
    paths: frozenset[tuple[str, ...]]
    listy: frozenset[tuple[str, ...]]
    exact: bool

    def rows_with_head(self, head: str) -> np.ndarray:
        """The rows whose metadata has the top-level key ``head`` (every other row misses a path under it)."""
        return self.heads.get(head, _EMPTY_ROWS)

    def surely_absent(self, parts: tuple[str, ...]) -> bool:
        """True when no row has an item at the path and every row misses it.

        A path no row has can still end cleanly in a row whose value on the
        way is a list without mappings (``{"a": []}`` for ``a.b``: no item,
        not missing), so a path under a list somewhere is not taken as absent.
        """
        if parts[0] not in self.heads:
            return True
        if len(parts) == 1 or not self.exact or len(parts) > MAX_INDEXED_PARTS or parts in self.paths:
            return False
        return not any(parts[:i] in self.listy for i in range(1, len(parts)))


def index_fields(metadata: Sequence[Mapping[str, Any]]) -> FieldIndex:
    """One walk over ``metadata`` (mappings): the :class:`FieldIndex` of its fields."""
    heads: dict[str, array[int]] = {}
    paths: set[tuple[str, ...]] = set()
    listy: set[tuple[str, ...]] = set()
    exact = True
    stack: list[tuple[tuple[str, ...], Any]] = []
    for row, record in enumerate(metadata):
        for key, value in record.items():
            if not isinstance(key, str):  # a path's parts are strings: no path reaches this key
                continue
            rows = heads.get(key)
            if rows is None:
                rows = heads[key] = array("q")
            rows.append(row)
            if _is_container(value):
                stack.append(((key,), value))
        if stack:
            exact = _walk_nested(stack, paths, listy) and exact
    return FieldIndex(len(metadata), {key: np.frombuffer(rows, dtype=np.int64) if len(rows) else _EMPTY_ROWS
                                      for key, rows in heads.items()}, frozenset(paths), frozenset(listy), exact)


def _walk_nested(stack: list[tuple[tuple[str, ...], Any]], paths: set[tuple[str, ...]],
                 listy: set[tuple[str, ...]]) -> bool:
    """Record the paths below one record's containers (emptying ``stack``); False when a container recurs."""
    seen: set[int] = set()
    exact = True
    while stack:
        path, value = stack.pop()
        if id(value) in seen:  # shared or cyclic: walking it again could blow up, or never end
            exact = False
            continue
        seen.add(id(value))
        elements = None if isinstance(value, Mapping) else as_list(value)
        if elements is not None:
            listy.add(path)
            mappings = [element for element in elements if isinstance(element, Mapping)]
        else:
            mappings = [value]
        if len(path) >= MAX_INDEXED_PARTS:
            continue
        for mapping in mappings:
            if mapping is not value:
                if id(mapping) in seen:
                    exact = False
                    continue
                seen.add(id(mapping))
            for key, inner in mapping.items():
                if isinstance(key, str):
                    below = (*path, key)
                    paths.add(below)
                    if _is_container(inner):
                        stack.append((below, inner))
    return exact
