"""The one exception hierarchy of irflow: every error and warning it issues on purpose, in one place.

Every error irflow raises on purpose is an ``IrflowError``; the children say
which layer refused what, so callers can catch exactly the failure they can
handle.  Several also subclass the builtin a Python user would reach for
first (``ValueError``, ``KeyError``), so ``except ValueError`` keeps working.
Every warning is an ``IrflowWarning``.

The classes are defined here, at the bottom of the layers, so that any module
may raise any of them; the module that raises one also re-exports it
(``irflow.engine.trace.TraceError`` is ``irflow.errors.TraceError``).  The docs'
errors page (``docs/guides/errors.md``) lists them all, with where they are raised and what they carry.
"""

from __future__ import annotations

from typing import Any


class IrflowError(Exception):
    """Base class of every error irflow raises on purpose."""


class CorpusError(IrflowError):
    """A corpus on disk is missing, truncated, altered or of an unknown format."""


class FilterError(IrflowError, ValueError):
    """A metadata filter is malformed: names the operator, its path and the valid ones."""


class EmbedderError(IrflowError, ValueError):
    """An embedder is unknown, unavailable, or returned unusable vectors."""


class AnalyzerError(IrflowError, ValueError):
    """An analyzer name or setting is unknown."""


class RecipeError(IrflowError, ValueError):
    """A recipe is invalid.  Carries every problem found, not just the first.

    ``problems`` is a tuple of one-line messages, each naming the file and the
    stage it concerns; ``str(error)`` lists them all.
    """

    def __init__(self, problems: "list[str] | tuple[str, ...] | str", *, source: str | None = None) -> None:
        if isinstance(problems, str):
            problems = (problems,)
        self.problems: tuple[str, ...] = tuple(problems)
        self.source = source
        where = f" in {source}" if source else ""
        # each problem names its file (problems are also read one by one); the message names it once
        shown = [p[len(source) + 2:] if source and p.startswith(f"{source}: ") else p for p in self.problems]
        if len(shown) == 1:
            message = f"invalid recipe{where}: {shown[0]}"
        else:
            lines = "\n".join(f"  - {p}" for p in shown)
            message = f"invalid recipe{where}: {len(shown)} problems\n{lines}"
        super().__init__(message)


class ParameterError(RecipeError):
    """A run-time argument of a recipe (a keyword of ``Recipe.run`` or ``search``, a ``--set``) is wrong.

    The recipe is fine; the caller's argument is not.  ``arguments`` holds
    one entry per problem: ``(name, value, reason, fix)`` where ``name`` and
    ``value`` are the caller's argument (``None`` for a problem of the
    combination of values), ``reason`` says what is wrong and what is valid,
    and ``fix`` is ``(name, value, phrase)`` of an argument that would work
    (phrase ``"did you mean"`` or ``"e.g."``), or None.
    :meth:`render` words them for another caller (the CLI writes
    ``--set k=10`` where Python writes ``k=10``).
    """

    def __init__(self, recipe: str, arguments: "list[tuple[Any, ...]] | tuple[tuple[Any, ...], ...]", *,
                 source: str | None = None) -> None:
        self.recipe = recipe
        self.arguments = tuple(tuple(a) for a in arguments)
        super().__init__(self.render(), source=source)
        self.args = (self._message(self.problems),)

    def render(self, label: "object" = None) -> list[str]:
        """One line per problem; ``label(name, value) -> str`` writes an argument (default ``name=value!r``)."""
        write = label if callable(label) else (lambda name, value: f"{name}={value!r}")
        lines = []
        for name, value, reason, fix in self.arguments:
            head = "" if name is None else f"{write(name, value)}: "
            if fix is None:
                tail = ""
            else:
                fix_name, fix_value, phrase = fix
                tail = f"; {phrase} {write(fix_name, fix_value)}{'?' if phrase == 'did you mean' else ''}"
            lines.append(f"{head}{reason}{tail}")
        return lines

    def _message(self, lines: "tuple[str, ...] | list[str]") -> str:
        # the recipe's file is not named: the recipe is fine, the caller's argument is not
        head = f"bad run argument{'s' if len(lines) > 1 else ''} for recipe {self.recipe!r}"
        if len(lines) == 1:
            return f"{head}: {lines[0]}"
        return f"{head}:\n" + "\n".join(f"  - {line}" for line in lines)

    def message(self, label: "object" = None) -> str:
        """The whole message, arguments written by ``label`` (see :meth:`render`)."""
        return self._message(self.render(label))

    def __str__(self) -> str:
        return str(self.args[0])


class FilterParameterError(ParameterError, FilterError):
    """A run argument that is a metadata filter is malformed (``search(filter=...)``, ``Recipe.run``).

    Both a :class:`ParameterError` (the argument, its reader and the fix)
    and a :class:`FilterError` (the operator and its path): caught as either.
    """


class InputError(IrflowError, ValueError):
    """A file or value the caller gave is unreadable, too large, too deeply nested or malformed.

    The message names the file (and line) or the argument, what is wrong,
    the limit when one was passed, and the fix.  Parent of the errors of
    specific inputs (trace files, test collections).
    """


class ArgumentError(InputError, TypeError):
    """An API argument has the wrong type (``corpus=None``, a dict as a query batch).

    Also a ``TypeError``, what a Python caller checks first for a wrong type.
    """


class RecordError(CorpusError, InputError):
    """A record given to :func:`irflow.build` (or a line of ``irflow index``) cannot be stored as given.

    Names the record (its position, artifact and kind; the line for
    ``irflow index``), the field or metadata key path, and the fix: text
    that UTF-8 cannot encode, a metadata key that is not a string, a value
    JSON cannot hold.  A :class:`CorpusError` (what ``build()`` raised for
    bad records before) and an :class:`InputError` (so a ``ValueError``).
    """


class OutputError(IrflowError, OSError):
    """A file could not be written (a missing or read-only folder, a full disk, a path inside a corpus); names it and the fix.

    Nothing was changed: irflow writes through a temporary file renamed into
    place, so the previous file, if any, is intact.  Also an ``OSError``.
    """


class StageError(IrflowError):
    """A stage failed while running; names the stage and its kind."""


class StagePortError(IrflowError, TypeError):
    """A stage kind's ``run()`` does not take the input ports it declares; refused when it is registered.

    Names the kind, its declared ports, ``run()``'s parameters and the
    signature that would fit.  Also a ``TypeError`` (what calling ``run()``
    with those ports would have raised, later, in the middle of a recipe run).
    """


class NoLedgerEntry(IrflowError, KeyError):
    """The corpus has no ledger entry for the requested artifact.

    The *benign* miss (unknown artifact, or a corpus built without ledger
    bookkeeping) — distinct from a stale/torn ledger, which raises a plain
    ``KeyError`` describing the corruption.  A ``KeyError`` subclass so
    existing ``except KeyError`` callers keep working.
    """

    def __str__(self) -> str:  # KeyError quotes its argument; we want the sentence
        return str(self.args[0]) if self.args else "no ledger entry"


# -- kernels -----------------------------------------------------------------------------------


class BM25ParamError(IrflowError, ValueError):
    """A BM25 parameter is unknown or out of range."""


# -- engine ------------------------------------------------------------------------------------


class UnknownEntry(IrflowError, KeyError):
    """A recipe names a registry entry the application did not register."""

    def __str__(self) -> str:  # KeyError would quote the sentence
        return str(self.args[0]) if self.args else "unknown registry entry"


class TraceError(InputError):
    """A trace file is unreadable or malformed, or a trace operation got an unusable argument.

    An :class:`InputError` (so a ``ValueError``); names the file, the line and the fix.
    """


class TraceFileNotFound(TraceError, FileNotFoundError):
    """The trace file does not exist (also a ``FileNotFoundError``)."""


class NotInTrace(IrflowError, KeyError):
    """A stage, query or record the caller named is not in the trace."""

    def __str__(self) -> str:  # KeyError would quote the sentence
        return str(self.args[0]) if self.args else "not in the trace"


# -- stages ------------------------------------------------------------------------------------


class FormulateError(IrflowError, TypeError):
    """A formulator returned something other than a string or a sequence of strings."""


class WeightError(IrflowError, ValueError):
    """Surface weights that are not a mapping of kind -> finite non-negative number."""


class BoostError(IrflowError, ValueError):
    """A boost parameter is invalid (a weight, a saturation, a library name), or a boost returned a non-number."""


# -- the seed API ------------------------------------------------------------------------------


class SearchError(IrflowError, ValueError):
    """An argument of ``search()`` / ``as_retriever()`` is invalid (names the valid choices)."""


class FusionError(IrflowError, ValueError):
    """An argument of :func:`irflow.fuse_hits` is invalid (source keys, weights, identity, k)."""


class RerankError(IrflowError, ValueError):
    """A reranker returned unusable scores, or a reranking argument is invalid."""


class RerankerUnavailable(IrflowError, ImportError):
    """The optional package a reranker needs (sentence-transformers) is not installed."""


# -- evaluation --------------------------------------------------------------------------------


class DatasetError(InputError):
    """A collection, qrels or run file is missing or malformed; names the file and line (an InputError)."""


class EvaluationError(IrflowError, ValueError):
    """A metric name, a run or a set of qrels cannot be evaluated; says what to fix."""


class SignificanceError(IrflowError, ValueError):
    """Inputs of a significance test are unusable (unpaired queries, bad parameters)."""


# -- warnings ----------------------------------------------------------------------------------


class IrflowWarning(UserWarning):
    """Base class of every warning irflow issues: something ran, but probably not as meant."""


class UnknownFieldWarning(IrflowWarning):
    """A metadata filter names a field no record of the corpus has (a typo matches nothing)."""


class UnknownSurfaceWarning(IrflowWarning):
    """``surfaces`` names a kind the corpus does not hold, next to kinds it does."""


class RerankerUnavailableWarning(IrflowWarning):
    """The cross-encoder reranker's optional dependency is missing; the first-stage ranking is kept."""


class MissingRecordWarning(IrflowWarning):
    """``corpus.delete`` / ``delete_artifact`` with ``missing="ok"`` was given ids or artifacts the corpus does not hold live."""


class LedgerWarning(IrflowWarning):
    """Expansion skipped ledger entries it could not resolve (a stale ledger, or no entry at all)."""


class StandInEmbedderWarning(IrflowWarning):
    """No embedding model is installed, so the default embedder is the ``"hash"`` stand-in (said once per process)."""


class ShardUnavailableError(CorpusError):
    """A shard of a sharded corpus could not answer (its server died for good): the call gives no answer."""


class RayConnectionError(IrflowError, ConnectionError):
    """No Ray cluster could be joined at the address given: names it, the reason, and what to check.

    Also a ``ConnectionError``, what a Python caller catches first for a
    cluster that does not answer.
    """
