"""Command-line text is UTF-8: an argument that is not is refused, naming its option and the byte; paths keep theirs.

Python decodes argv bytes that are not UTF-8 (a query typed in a Latin-1
terminal, ``-q $'caf\\xe9'``) into lone surrogates ("surrogate escapes").
Carried inward, they would match nothing, or fail in a corpus writer or a
model tokenizer; irflow takes UTF-8 text only (:mod:`irflow.util.unicode`),
so such an argument is a usage error naming the option and the byte.

Paths are the exception: on POSIX a file name is bytes, and a surrogate
escape is how Python names a file whose name is not UTF-8 — it opens that
very file.  Parameters that hold a path or a name of one (a recipe file or
a built-in recipe, a corpus, a collection, a plugin) are declared with
:data:`PATH_TEXT` and keep their bytes; :func:`utf8_parameters` makes every
other plain string parameter of the CLI :data:`TEXT`.  What a command prints
may name such a path: :func:`paths_print_as_given` writes its bytes back as
they were instead of failing.
"""

from __future__ import annotations

import codecs
import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import click

from irflow.util.unicode import argv_reason

__all__ = ["TEXT", "PATH_TEXT", "utf8_parameters", "paths_print_as_given", "AS_GIVEN"]

#: The error handler :func:`paths_print_as_given` gives standard output.
AS_GIVEN = "irflow.as_given"


class Utf8Text(click.types.StringParamType):
    """A string parameter that must be UTF-8 text (a usage error naming the option otherwise)."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = super().convert(value, param, ctx)
        why = argv_reason(text) if isinstance(text, str) else None
        if why is not None:
            self.fail(why, param, ctx)
        return text


class PathText(click.types.StringParamType):
    """A path, or a name that may be one (a recipe, a corpus): kept as the OS gave it (see the module docstring)."""

    name = "path"


TEXT = Utf8Text()
PATH_TEXT = PathText()


def utf8_parameters(group: click.Group) -> None:
    """Make every plain string parameter of every command under ``group`` :data:`TEXT`.

    Done once, after the commands are defined, so an option added later is
    covered without a word; :data:`PATH_TEXT` and the other types are left as
    declared.
    """
    for command in group.commands.values():
        if isinstance(command, click.Group):
            utf8_parameters(command)
            continue
        for param in command.params:
            if type(param.type) is click.types.StringParamType:
                param.type = TEXT


def _as_given(error: UnicodeError) -> tuple[bytes, int]:
    """Encoding error handler: a surrogate escape as the byte it stands for, any other surrogate as ``\\uXXXX``."""
    if not isinstance(error, UnicodeEncodeError):
        raise error
    out = bytearray()
    for char in error.object[error.start:error.end]:
        code = ord(char)
        out += bytes([code - 0xDC00]) if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}".encode("ascii")
    return bytes(out), error.end


codecs.register_error(AS_GIVEN, _as_given)


@contextlib.contextmanager
def paths_print_as_given() -> Iterator[None]:
    """Standard output writes back the bytes of a path that are not UTF-8, for one command.

    Text irflow takes in is UTF-8; what it prints may still name a path whose
    bytes are not (a corpus in such a folder is named after it): printed as
    the OS gave it (what ``ls`` shows), never a UnicodeEncodeError.  Only a
    stream that would fail (``errors="strict"``) is changed, and only while
    the command runs.
    """
    stream = sys.stdout
    errors = getattr(stream, "errors", None)
    if errors != "strict" or not hasattr(stream, "reconfigure"):
        yield
        return
    stream.reconfigure(errors=AS_GIVEN)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # the stream was closed meanwhile
            stream.reconfigure(errors=errors)
