"""The stage model: a stage kind is a frozen attrs class with typed ports and a ``run``.

A stage kind is a small frozen attrs class.  Its attrs fields *are* its
parameters (names, defaults, validators, one-line docs in field metadata);
its class variables declare its typed input ports and its output type; its
``run`` maps one batch of inputs to one output.  Because parameters are
attrs fields, a recipe's parameters are checked by the same validators the
Python API uses, and the list of valid parameters in an error message comes
from the class itself.

Kinds are registered by name (:mod:`irflow.engine.kinds`); a stage reaches
its corpus only through the corpus protocol (``ctx.corpus``, a
:class:`~irflow.store.protocol.CorpusProtocol`).  Stage authors import all of
this from :mod:`irflow.engine`.

A minimal third-party kind::

    @register_stage
    @attrs.frozen
    class Floor(Stage):
        "Drop candidates scoring below ``minimum``."
        kind = "floor"
        inputs = (Port("candidates", CANDIDATES),)
        output = CANDIDATES
        minimum: float = param(0.0, validator=finite_number, doc="lowest score kept")

        def run(self, ctx, candidates):
            return candidates.select(candidates.score >= self.minimum)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from irflow.engine.batches import QueryBatch, Scale
from irflow.engine.ports import CANDIDATES, Port, PortType
from irflow.engine.validators import one_of
from irflow.store.protocol import CorpusProtocol

__all__ = [
    "Stage",
    "StageContext",
    "Promise",
    "Upstream",
    "ParamInfo",
    "param",
    "stage_params",
    "describe_params",
    "RESERVED_SPEC_KEYS",
]

#: Keys of a recipe's stage table that are not parameters.
RESERVED_SPEC_KEYS: tuple[str, ...] = ("kind", "inputs", "when")


# --------------------------------------------------------------------------
# stage base


@attrs.frozen
class StageContext:
    """What a running stage may use besides its inputs.

    ``name`` is the stage's name in the recipe — the prefix of the provenance
    columns it writes (``"<name>.score"``); ``queries`` is the raw query batch
    of the run; ``corpus`` the corpus the recipe runs on.
    """

    corpus: CorpusProtocol
    name: str
    queries: QueryBatch


@attrs.frozen
class Upstream:
    """What validation knows about one stage feeding an input port.

    ``scales`` is the set of score scales that stage may produce (``None``:
    unknown, e.g. a third-party kind that does not say) — a stage's
    :meth:`Stage.check` uses it to refuse inputs it cannot interpret.
    """

    name: str
    kind: str
    type: PortType
    scales: frozenset[Scale] | None = None


@attrs.frozen
class Promise:
    """What an output stage promises per original query when enough match: ``k`` results.

    ``per_artifact``: the results are distinct artifacts (a collapse per
    artifact), else distinct records.
    """

    k: int
    per_artifact: bool


@attrs.frozen
class Stage:
    """Base class of every stage kind.

    Subclasses are ``@attrs.frozen`` and set the class variables ``kind``,
    ``inputs`` (a tuple of :class:`~irflow.engine.ports.Port`) and ``output`` (a
    :class:`~irflow.engine.ports.PortType`); their attrs fields are their
    parameters.  ``run`` receives the inputs as keyword arguments named after
    the ports (a variadic port receives ``{upstream stage name: value}``) and
    must not mutate them; registration checks that it takes exactly those
    (:func:`irflow.engine.kinds.run_port_problems`).
    """

    kind: ClassVar[str] = ""
    inputs: ClassVar[tuple[Port, ...]] = ()
    output: ClassVar[PortType] = CANDIDATES

    # ``*args: Any, **inputs: Any``: type checkers accept any subclass signature (each kind names its
    # ports as parameters; registration checks them against ``inputs``)
    def run(self, ctx: StageContext, *args: Any, **inputs: Any) -> Any:
        """Compute this stage's output for the whole query batch."""
        raise NotImplementedError(f"stage kind {self.kind!r} does not implement run()")

    def output_scales(self, inputs: Mapping[str, tuple[Upstream, ...]]) -> frozenset[Scale] | None:
        """The score scales this stage may output, known before any data (None: unknown)."""
        return None

    def check(self, inputs: Mapping[str, tuple[Upstream, ...]]) -> list[str]:
        """Build-time problems of this stage with these parameters and upstreams.

        Each message says what is wrong and how to fix it, without naming the
        stage (validation prefixes file and stage).  Default: none.
        """
        return []

    def passes_through(self, live: Mapping[str, int]) -> str | None:
        """The input port whose value ``run`` would return unchanged, whatever it holds (None: it works).

        ``live`` counts the active upstreams bound to each port.  A stage
        that does nothing with these parameters (no reranker, no boost, one
        channel to fuse) says so here, and an untraced run skips the call:
        the output *is* that input, at no cost — a fixed cost of every
        ``search()`` otherwise.  Declaring it is a promise that ``run``
        returns that very object (tests/test_passes_through.py holds every
        built-in kind to it); a variadic port passes through only with one
        live upstream.  Default: None (always run).
        """
        return None

    def promised(self) -> Promise | None:
        """The results per original query this stage's output holds when enough match (None: no promise).

        When a run's output stage promises ``k`` and a query gets fewer while
        its first stages may hold more, the run says so
        (:attr:`irflow.engine.result.Result.short`).  Default: None.
        """
        return None

    def fetch_depths(self, queries: QueryBatch) -> np.ndarray | None:
        """Per text of ``queries``, how many candidates this first stage fetches (None: not a first stage).

        A first stage (a channel ranking the corpus to a depth) says so, and
        gives :meth:`deeper`: a run whose output came back short then tells
        whether more could match (a text that got fewer than its depth holds
        every match) and which depth gives ``k``.  Default: None.
        """
        return None

    def deeper(self, depth: int) -> "Stage":
        """This first stage fetching exactly ``depth`` candidates per text (see :meth:`fetch_depths`)."""
        raise NotImplementedError(f"stage kind {self.kind!r} is not a first stage: it has no fetch depth")

    def params(self) -> dict[str, Any]:
        """The stage's parameters (every field, defaults included), shallow."""
        return {f.name: getattr(self, f.name) for f in attrs.fields(type(self))}

    def unused_params(self, inputs: Mapping[str, tuple[str, ...]]) -> frozenset[str]:
        """Parameters that cannot change this stage's output, given the others and its active inputs.

        ``inputs`` maps each port to the upstream stages that are active in
        this run.  A sweep uses it to evaluate once the settings that cannot
        differ (``rrf_k`` under a blend fusion).  Default: every parameter counts.
        """
        return frozenset()


# --------------------------------------------------------------------------
# parameters


def param(default: Any = attrs.NOTHING, *, validator: Any = None, converter: Any = None, doc: str = "",
          choices: Sequence[Any] | None = None) -> Any:
    """An attrs field declaring a stage parameter, with a one-line ``doc``.

    ``choices`` (optional) lists the valid values; it is shown in messages
    and checked.  The doc appears in error messages and ``irflow`` help.
    """
    validators = []
    if choices is not None:
        validators.append(one_of(*choices))
    if validator is not None:
        validators.append(validator)
    metadata: dict[str, Any] = {"doc": doc}
    if choices is not None:
        metadata["choices"] = tuple(choices)
    return attrs.field(default=default, validator=validators or None, converter=converter, metadata=metadata)


@attrs.frozen
class ParamInfo:
    """One parameter of a stage kind, read from its attrs field."""

    name: str
    type: str
    default: Any
    doc: str
    choices: tuple[Any, ...] | None = None

    @property
    def required(self) -> bool:
        return self.default is attrs.NOTHING

    def describe(self) -> str:
        """``fetch_k: int = 50`` (or ``name: type, required``) for messages."""
        if self.required:
            return f"{self.name}: {self.type} (required)"
        return f"{self.name}: {self.type} = {self.default!r}"


def _type_name(annotation: Any) -> str:
    if annotation is None:
        return "any"
    if isinstance(annotation, str):
        return annotation
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def stage_params(cls: type[Stage]) -> dict[str, ParamInfo]:
    """The parameters of a stage kind, in declaration order."""
    infos: dict[str, ParamInfo] = {}
    for field in attrs.fields(cls):
        if not field.init:
            continue
        default = field.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            default = default.factory() if not default.takes_self else attrs.NOTHING
        infos[field.name] = ParamInfo(field.name, _type_name(field.type), default,
                                      field.metadata.get("doc", ""), field.metadata.get("choices"))
    return infos


def describe_params(cls: type[Stage]) -> str:
    """``fetch_k: int = 50, bm25: mapping | None = None`` — or ``(none)``."""
    infos = stage_params(cls)
    return ", ".join(info.describe() for info in infos.values()) or "(none)"


