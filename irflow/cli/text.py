"""Command-line text is UTF-8: an argument that is not is refused, naming its option and the byte.

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
other plain string parameter of the CLI :data:`TEXT`.
"""

from __future__ import annotations

from typing import Any

import click

from irflow.util.unicode import argv_reason

__all__ = ["TEXT", "PATH_TEXT", "utf8_parameters"]


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
