"""Ports declared once: registering a stage kind cross-checks run()'s parameters against its input ports.

The engine calls ``run(ctx, **{port: value})`` with the ports a recipe wired
(query ports always, an optional port only when wired).  A kind whose run()
cannot take that call is refused when it is registered, with a
``StagePortError`` naming the kind, the ports, run()'s parameters and the fix.
The property test checks the rule against ``inspect.Signature.bind`` (what the
call would do) over every wiring the executor can pass.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import itertools
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import irflow.engine.kinds
from engine_fakes import ShiftStage
from irflow.engine import CANDIDATES, MASK, QUERIES, Port, Stage, get_stage_class, register_stage, stage_kinds
from irflow.engine import unregister_stage
from irflow.engine.kinds import run_port_problems
from irflow.errors import IrflowError, StagePortError


def test_every_builtin_kind_takes_exactly_its_ports():
    kinds = [k for k in stage_kinds() if get_stage_class(k).__module__.startswith("irflow.stages.")]
    assert len(kinds) == 10
    for kind in kinds:
        cls = get_stage_class(kind)
        assert run_port_problems(cls.run, cls.inputs) == [], kind


def test_a_plugin_whose_run_misnames_its_port_is_refused_at_registration():
    @attrs.frozen
    class Floor(Stage):
        kind = "floor_misnamed"
        inputs = (Port("candidates", CANDIDATES),)

        def run(self, ctx, ranking):
            return ranking

    with pytest.raises(StagePortError) as caught:
        register_stage(Floor)
    message = str(caught.value)
    assert isinstance(caught.value, IrflowError) and isinstance(caught.value, TypeError)
    for part in ("stage kind 'floor_misnamed'", "test_stage_ports", "Floor",
                 "port 'candidates' is not a parameter of run()", "run() parameter 'ranking' is no declared port",
                 "Declared ports (inputs): candidates (Candidates)", "run(self, ctx, ranking)",
                 "def run(self, ctx, candidates)"):
        assert part in message, part
    assert "floor_misnamed" not in stage_kinds()


@pytest.mark.parametrize("inputs, run, found", [
    # a declared port run() cannot take
    ((Port("mask", MASK), Port("query", QUERIES)), lambda self, ctx, mask: None,
     ["port 'query' is not a parameter of run()"]),
    # a parameter no port fills (a TypeError at every run), with or without a default (a typo never filled)
    ((Port("candidates", CANDIDATES),), lambda self, ctx, candidates, extra: None,
     ["run() parameter 'extra' is no declared port"]),
    ((Port("candidates", CANDIDATES),), lambda self, ctx, candidates, *, other=None: None,
     ["run() parameter 'other' is no declared port"]),
    # an optional port may be left unwired: the engine passes nothing, so run() needs a default
    ((Port("candidates", CANDIDATES), Port("prior", CANDIDATES, required=False)),
     lambda self, ctx, candidates, prior: None,
     ["port 'prior' is optional (required=False) but run()'s parameter 'prior' has no default"]),
    # a port named like the context parameter: run(ctx, ctx=...) is a TypeError
    ((Port("ctx", CANDIDATES),), lambda self, ctx: None,
     ["port 'ctx' has the name of run()'s context parameter"]),
    # ports go by keyword
    ((Port("candidates", CANDIDATES),), lambda self, ctx, candidates, /: None,
     ["port 'candidates' is not a parameter of run()", "run() parameter 'candidates' is positional-only"]),
    # no context parameter at all
    ((Port("candidates", CANDIDATES),), lambda self, *, candidates: None,
     ["run() must take the stage context as its first positional parameter (after self)"]),
])
def test_each_mismatch_is_named(inputs, run, found):
    cls = attrs.frozen(type("Mismatch", (Stage,), {"kind": "mismatch", "inputs": inputs, "run": run,
                                                   "__module__": __name__}))
    assert [p.split(";")[0] for p in run_port_problems(cls.run, cls.inputs)] == [f.split(";")[0] for f in found]
    with pytest.raises(StagePortError, match="stage kind 'mismatch'"):
        register_stage(cls)
    assert "mismatch" not in stage_kinds()


@pytest.mark.parametrize("inputs, run", [
    ((Port("candidates", CANDIDATES),), lambda self, ctx, candidates: None),
    ((Port("candidates", CANDIDATES),), lambda self, ctx, **inputs: None),
    ((Port("candidates", CANDIDATES),), lambda self, ctx, *, candidates: None),
    ((Port("candidates", CANDIDATES),), lambda self, *args, **kwargs: None),
    ((Port("candidates", CANDIDATES), Port("prior", CANDIDATES, required=False)),
     lambda self, ctx, candidates, prior=None: None),
    ((Port("candidates", CANDIDATES), Port("prior", CANDIDATES, required=False)),
     lambda self, ctx, candidates, **rest: None),
    # a query port is fed the raw queries when unwired, so even an optional one is always passed
    ((Port("query", QUERIES, required=False),), lambda self, ctx, query: None),
    ((), lambda self, ctx: None),
])
def test_what_fits_is_registered(inputs, run):
    cls = attrs.frozen(type("Fits", (Stage,), {"kind": "fits", "inputs": inputs, "run": run}))
    register_stage(cls)
    try:
        assert get_stage_class("fits") is cls
    finally:
        unregister_stage("fits")


def test_a_static_run_has_no_self_to_skip():
    @attrs.frozen
    class Static(Stage):
        kind = "static_run"
        inputs = (Port("candidates", CANDIDATES),)

        @staticmethod
        def run(ctx, candidates):  # type: ignore[override]
            return candidates

    register_stage(Static)
    try:
        assert get_stage_class("static_run") is Static
    finally:
        unregister_stage("static_run")


@attrs.frozen
class MisportedStage(ShiftStage):
    """Declares ``candidates`` but its run() takes ``hits``: refused, also as a plugin."""

    kind = "ep_misported"

    def run(self, ctx: Any, hits: Any) -> Any:  # type: ignore[override]
        return hits


def test_a_mismatching_entry_point_kind_is_skipped_with_a_warning(monkeypatch):
    point = importlib.metadata.EntryPoint(name="ep_misported", value="test_stage_ports:MisportedStage",
                                          group="irflow.stages")
    monkeypatch.setattr(irflow.engine.kinds, "_entry_points", lambda: [point])
    irflow.engine.kinds._reset_entry_points()
    try:
        with pytest.warns(UserWarning, match=r"entry point 'ep_misported'.*port 'candidates' is not a parameter"):
            kinds = stage_kinds()
        assert "ep_misported" not in kinds and "dense" in kinds
    finally:
        unregister_stage("ep_misported")
        irflow.engine.kinds._reset_entry_points()


# -- the rule, against what the call would do ---------------------------------------------------------

_NAMES = ("ctx", "candidates", "mask", "query", "extra")
_KINDS = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
          inspect.Parameter.KEYWORD_ONLY)


@st.composite
def _ports(draw: Any) -> tuple[Port, ...]:
    names = draw(st.lists(st.sampled_from(_NAMES), unique=True, max_size=3))
    return tuple(Port(n, QUERIES if n == "query" else CANDIDATES, required=draw(st.booleans())) for n in names)


@st.composite
def _signature(draw: Any) -> inspect.Signature:
    """A valid run() signature: self, maybe a context, maybe *args, some named parameters, maybe **kwargs."""
    P = inspect.Parameter
    drawn = []
    if draw(st.booleans()):
        drawn.append(P(draw(st.sampled_from(("ctx", "context", "candidates"))), draw(st.sampled_from(_KINDS[:2]))))
    if draw(st.booleans()):
        drawn.append(P("args", P.VAR_POSITIONAL))
    for name in draw(st.lists(st.sampled_from(_NAMES), unique=True, max_size=3)):
        if name not in {p.name for p in drawn}:
            drawn.append(P(name, draw(st.sampled_from(_KINDS)), default=draw(st.sampled_from((None, P.empty)))))
    if draw(st.booleans()):
        drawn.append(P("kwargs", P.VAR_KEYWORD))
    self_kind = P.POSITIONAL_ONLY if any(p.kind is P.POSITIONAL_ONLY for p in drawn) else P.POSITIONAL_OR_KEYWORD
    ordered = sorted([P("self", self_kind), *drawn], key=lambda p: p.kind)  # stable: self stays first
    fixed, defaulted = [], False
    for p in ordered:  # a positional parameter after one with a default needs a default too
        if p.kind in _KINDS[:2]:
            if defaulted and p.default is P.empty:
                p = p.replace(default=None)
            defaulted = defaulted or p.default is not P.empty
        fixed.append(p)
    return inspect.Signature(fixed)


def _wirings(ports: tuple[Port, ...]) -> list[set[str]]:
    """Every set of ports the executor may pass: the required and query ports, plus any optional ones."""
    always = {p.name for p in ports if p.required or p.is_query}
    optional = [p.name for p in ports if p.name not in always]
    return [always | set(extra) for r in range(len(optional) + 1) for extra in itertools.combinations(optional, r)]


@settings(max_examples=300, deadline=None)
@given(ports=_ports(), signature=_signature())
def test_refused_exactly_when_some_wiring_cannot_be_called_or_a_parameter_is_never_filled(ports, signature):
    def run(*args: Any, **kwargs: Any) -> None:
        return None

    run.__signature__ = signature  # type: ignore[attr-defined]
    callable_always = True
    for wiring in _wirings(ports):
        try:
            signature.bind("self", "ctx", **dict.fromkeys(wiring))
        except TypeError:
            callable_always = False
    port_names = {p.name for p in ports}
    after_self = list(signature.parameters.values())[1:]
    if after_self and after_self[0].kind in (*_KINDS[:2], inspect.Parameter.VAR_POSITIONAL):
        after_self = after_self[1:]  # the context's slot
    # a parameter the engine never fills: positional-only (ports go by keyword), or named after no port
    never_filled = [p.name for p in after_self if p.kind is inspect.Parameter.POSITIONAL_ONLY
                    or (p.kind in _KINDS[1:] and p.name not in port_names)]
    expected_ok = callable_always and not never_filled
    assert (run_port_problems(run, ports) == []) == expected_ok, (ports, signature, run_port_problems(run, ports))
