"""Install hints for irflow's optional extras that work for the way irflow was installed.

``pip install 'irflow[st]'`` only works when irflow came from a package
index; from a source checkout it asks the index for a package that may not be
there (or a different version).  :func:`install_hint` reads the installed
distribution's ``direct_url.json`` (PEP 610) and says what to run:

- installed from an index: ``pip install 'irflow[st]'``;
- code running from a source checkout (an editable install, or the
  checkout on ``sys.path``): ``cd <checkout> && pip install -e '.[st]'``;
- a non-editable install of a local folder: ``pip install '<folder>[st]'``.

>>> install_hint("st").startswith(("pip install", "cd "))
True
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import shlex
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

__all__ = ["install_hint"]

_DIST = "irflow"


def _checkout() -> Path | None:
    """The source checkout this irflow package sits in (a folder with pyproject.toml), if any."""
    root = Path(__file__).resolve().parents[2]  # irflow/util/extras.py -> the checkout
    return root if (root / "pyproject.toml").is_file() else None


def _direct_url() -> dict[str, Any] | None:
    """The installed distribution's PEP 610 record (None: installed from an index, or not installed)."""
    try:
        text = importlib.metadata.distribution(_DIST).read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _local_folder(url: str) -> Path | None:
    parsed = urlparse(url)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else None


@functools.lru_cache(maxsize=None)
def install_hint(extra: str) -> str:
    """The command that installs the optional ``extra`` (e.g. ``"st"``) for this installation."""
    checkout = _checkout()
    if checkout is not None:
        # the code runs from a source checkout (an editable install, or the checkout on sys.path):
        # only the checkout itself knows this version's extras
        return f"cd {shlex.quote(str(checkout))} && pip install -e '.[{extra}]'"
    info = _direct_url()
    folder = None if info is None else _local_folder(str(info.get("url", "")))
    if folder is not None:  # a non-editable install of a local folder
        return f"pip install {shlex.quote(f'{folder}[{extra}]')}"
    return f"pip install 'irflow[{extra}]'"
