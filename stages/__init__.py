"""The built-in stage library, one module per kind (installed as ``irflow.stages``).

Importing this package registers the built-in kinds: formulate, filter,
dense, lexical, fuse, weight, rerank, boost, collapse, expand.  The engine imports
it lazily at the first kind lookup; third-party kinds register through the
entry-point group ``irflow.stages`` or :func:`irflow.engine.stage.register_stage`.
"""

from __future__ import annotations

from . import boost, collapse, dense, expand, filter, formulate, fuse, lexical, rerank, weight  # noqa: F401  (registers)

__all__ = ["boost", "collapse", "dense", "expand", "filter", "formulate", "fuse", "lexical", "rerank", "weight"]
