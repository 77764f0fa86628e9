"""Fixtures several test modules share, and the one set-up every module needs.

Set-up: ``irflow.stages`` and ``irflow.recipes`` live in the top-level
``stages/`` and ``recipes/`` folders; an install (editable or not) maps them
into the package, and a bare checkout gets them mapped here, before any test
module is imported.

Fixtures: ``corpus`` is the small real corpus of toy packages the search
tests share (``search_reference.records()``, the hash embedder, named
"toys"); ``hybrid`` is the built-in hybrid recipe with RRF fusion (the tests
that read RRF's columns and parameters use it: since issue 14 the blend is
the default).  A module that needs another corpus or recipe defines its own
fixture of the same name, which pytest prefers.
"""

from __future__ import annotations

import pytest

from irflow.engine.kinds import _source_subpackage
from irflow.engine.recipe import Recipe, load_recipe
from irflow.store.corpus import Corpus, build
from search_reference import records

_source_subpackage("stages")
_source_subpackage("recipes")


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return build(records(), embedder="hash", name="toys")


@pytest.fixture(scope="module")
def hybrid() -> Recipe:
    return load_recipe("hybrid").with_params(fusion="rrf", bm25_sat_k=8.0)
