"""Merging the shards' top-k into the whole corpus's: :mod:`irflow.kernels.rowmap`, shared with segmented corpora.

Kept so ``irflow.shard.merge.RowMap`` and ``merge_topk`` still import from here.
"""

from __future__ import annotations

from irflow.kernels.rowmap import RowMap, merge_topk

__all__ = ["RowMap", "merge_topk"]
