"""Where corpora live: ``$IRFLOW_HOME`` and corpus-name resolution.

A corpus is opened either by a path or by a short *name*.  A name is looked
up under ``$IRFLOW_HOME/corpora/<name>`` (``~/.irflow`` when the variable is
unset), so applications can share corpora without passing paths around.

>>> resolve_corpus_path("/tmp/my-corpus").name
'my-corpus'
"""

from __future__ import annotations

import os
from pathlib import Path

from irflow.util.home import HOME_ENV, irflow_home

__all__ = ["HOME_ENV", "irflow_home", "corpora_dir", "is_corpus_name", "resolve_corpus_path"]


def corpora_dir() -> Path:
    """The directory holding named corpora: ``<irflow_home>/corpora``."""
    return irflow_home() / "corpora"


def is_corpus_name(value: str | os.PathLike[str]) -> bool:
    """True when *value* is a bare name: a string with no path separator that is not an existing path.

    An existing relative path (``./x`` or a directory ``x`` in the working
    directory) wins over a name, so what the user sees in ``ls`` is what opens.
    """
    if not isinstance(value, str):
        return False
    if not value or value in (".", ".."):
        return False
    separators = {os.sep, "/"} | ({os.altsep} if os.altsep else set())
    if any(sep in value for sep in separators):
        return False
    return not Path(value).exists()


def resolve_corpus_path(path_or_name: str | os.PathLike[str]) -> Path:
    """The directory of a corpus given by path or by name (see :func:`is_corpus_name`)."""
    if is_corpus_name(path_or_name):
        return corpora_dir() / str(path_or_name)
    return Path(path_or_name).expanduser()
