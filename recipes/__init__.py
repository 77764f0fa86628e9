"""Built-in recipes (installed as ``irflow.recipes``).

The recipe files live next to this module, each as ``.toml`` and ``.yaml`` —
``dense``, ``lexical``, ``hybrid``, ``search`` (what ``irflow.api.retrieve.search()``
runs), ``hybrid-rerank`` (hybrid, then a reranker) and ``expand-rerank``
(retrieve -> expand -> rerank) — and load by name with
``irflow.load_recipe("hybrid")``.  :mod:`irflow.recipes.builders` makes the
same recipes in Python; the tests check that every form is equal.
"""

from __future__ import annotations

__all__: list[str] = []
