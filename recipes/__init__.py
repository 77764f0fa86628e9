"""Built-in recipes (installed as ``irflow.recipes``).

The recipe files live next to this module — ``hybrid.toml`` (also as
``hybrid.yaml``), ``dense.toml``, ``lexical.toml``, ``search.toml`` (also as
``search.yaml``: what ``irflow.retrieve.search()`` runs) — and load by name
with ``irflow.load_recipe("hybrid")``.  :mod:`irflow.recipes.builders` makes the
same recipes in Python; the tests check that every form is equal.
"""

from __future__ import annotations

__all__: list[str] = []
