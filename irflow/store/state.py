"""One committed state of a corpus: its segments' views in order, its version, the view answering for it.

A :class:`~irflow.store.corpus.Corpus` holds its current state and replaces
it whole on every update; a state never changes.  So a caller that took a
state (``corpus.snapshot()``: a recipe run takes one when it starts) reads
one consistent corpus however many updates come meanwhile, and an update
is published by one assignment.

A state of one segment answers through that segment's
:class:`~irflow.store.segment.SegmentView` directly (what a corpus did
before it could change); a state of several through a
:class:`~irflow.store.segments.SegmentsView`, which combines their answers
exactly as one segment of the same live records would give them.
"""

from __future__ import annotations

from typing import Any, Sequence

import attrs

from irflow.store.generations import Generation
from irflow.store.segment import CorpusContext, SegmentView
from irflow.store.segments import SegmentsView

__all__ = ["CorpusState", "make_state"]


@attrs.frozen(eq=False)
class CorpusState:
    """The views of a corpus's segments in row order, its version, its view, and (on disk) its generation."""

    parts: tuple[SegmentView, ...]
    version: int
    view: Any  # a SegmentView (one segment) or a SegmentsView
    generation: Generation | None = None

    @property
    def n_segments(self) -> int:
        return len(self.parts)


def make_state(parts: Sequence[SegmentView], version: int, context: CorpusContext,
               generation: Generation | None = None) -> CorpusState:
    """The state of these views (in row order) at ``version``; its view is the only part's, or their combination."""
    parts = tuple(parts)
    if len(parts) == 1:
        only = parts[0]
        if only.version != version or only.context is not context:
            only = SegmentView(only.segment, context, store=only.store, version=version)
        return CorpusState((only,), version, only, generation)
    return CorpusState(parts, version, SegmentsView(parts, context, version), generation)
