"""irflow's home directory, ``$IRFLOW_HOME`` (``~/.irflow`` when unset): named corpora and caches live under it.

Here, below every layer, because the store (named corpora), the evaluation
cache and the model cache of the kernels all read it.

>>> isinstance(irflow_home(), Path)
True
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["HOME_ENV", "irflow_home"]

#: The environment variable naming irflow's home directory.
HOME_ENV = "IRFLOW_HOME"


def irflow_home() -> Path:
    """``$IRFLOW_HOME`` if set and non-empty, else ``~/.irflow`` (read on every call, so tests can monkeypatch it)."""
    value = os.environ.get(HOME_ENV, "").strip()
    return Path(value).expanduser() if value else Path.home() / ".irflow"
