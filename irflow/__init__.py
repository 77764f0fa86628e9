"""irflow — document retrieval as an explicit, inspectable dataflow."""

from __future__ import annotations

from irflow.errors import (
    CorpusError,
    EmbedderError,
    FilterError,
    IrflowError,
    NoLedgerEntry,
    RecipeError,
    StageError,
)
from irflow.records import Record, SearchHit

__version__ = "0.1.0"

__all__ = [
    "CorpusError",
    "EmbedderError",
    "FilterError",
    "IrflowError",
    "NoLedgerEntry",
    "RecipeError",
    "Record",
    "SearchHit",
    "StageError",
    "__version__",
]
