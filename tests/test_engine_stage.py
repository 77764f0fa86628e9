"""Port types, the stage base class, parameter introspection, validators and the kind registry."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from engine_fakes import ShiftStage
from irflow.engine.ports import CANDIDATES, CONTEXTS, HITS, MASK, PORT_TYPES, QUERIES, QUERY, Port, fits, fitting_sources
from irflow.engine import (
    boolean,
    finite_number,
    non_negative_int,
    number_mapping,
    one_of,
    optional_mapping,
    optional_str_list,
    param,
    positive_int,
    positive_number,
    register_stage,
    Stage,
    stage_kinds,
    str_tuple,
    unregister_stage,
)
from irflow.engine.stage import describe_params, ParamInfo, stage_params


def test_port_types_and_fits():
    assert set(PORT_TYPES) == {"Query", "Queries", "Mask", "Candidates", "Hits", "Contexts"}
    assert fits(QUERY, QUERIES) and not fits(QUERIES, QUERY)
    assert fits(CANDIDATES, CANDIDATES) and not fits(MASK, CANDIDATES) and not fits(HITS, CONTEXTS)
    assert fitting_sources(QUERIES) == (QUERIES, QUERY)
    assert str(MASK) == "Mask" and MASK.doc


def test_ports():
    port = Port("inputs", CANDIDATES, variadic=True)
    assert port.describe() == "inputs (Candidates, any number)" and not port.is_query
    assert Port("query", QUERIES).is_query and Port("q", QUERY).is_query
    with pytest.raises(TypeError, match="must be a PortType"):
        Port("x", "Candidates")


def test_stage_params_come_from_attrs_fields():
    infos = stage_params(ShiftStage)
    assert infos == {"by": ParamInfo("by", "float", 0.0, "added to every score")}
    assert describe_params(ShiftStage) == "by: float = 0.0"
    assert ShiftStage(by=1.5).params() == {"by": 1.5}
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        ShiftStage().by = 2.0  # type: ignore[misc]


@pytest.mark.parametrize("validator, good, bad, message", [
    (positive_int, [1, np.int64(3)], [0, -1, 1.0, True, "1"], "positive integer"),
    (non_negative_int, [0, 5], [-1, 0.5, False], "integer >= 0"),
    (finite_number, [0, -1.5, 3], [float("nan"), float("inf"), "1", True], "finite number"),
    (positive_number, [0.1, 2], [0, -1], "> 0"),
    (boolean, [True, False, np.bool_(True)], [1, "true", None], "true or false"),
    (one_of("rrf", "blend"), ["rrf"], ["RRF", 1, None], "one of 'rrf', 'blend'"),
    (one_of(True, 1), [True, 1], [False], "one of"),
    (optional_mapping, [None, {"a": 1}], [[1], {1: 2}], "table"),
    (optional_str_list, [None, ("a",)], [["a"], ("a", 1), "a"], "list of strings"),
    (number_mapping, [None, {"a": 0}], [{"a": -1}, {"a": "x"}, [1], {1: 1.0}], "must be|must|keys must"),
])
def test_validators(validator, good, bad, message):
    for value in good:
        validator(None, None, value)
    for value in bad:
        with pytest.raises(ValueError, match=message):
            validator(None, None, value)


def test_one_of_suggests_and_str_tuple_converts():
    with pytest.raises(ValueError, match=r"did you mean 'blend'\?"):
        one_of("rrf", "blend")(None, None, "blnd")
    assert str_tuple(["a", "b"]) == ("a", "b") and str_tuple("x") == "x" and str_tuple([1]) == [1]


def test_param_records_doc_and_choices():
    @attrs.frozen
    class Thing(ShiftStage):
        kind = "thing"
        mode: str = param("a", choices=("a", "b"), doc="which one")

    info = stage_params(Thing)["mode"]
    assert info.choices == ("a", "b") and info.doc == "which one" and not info.required
    with pytest.raises(ValueError, match="one of 'a', 'b'"):
        Thing(mode="c")


@pytest.mark.parametrize("make, error, message", [
    (lambda: type("NotStage", (), {}), TypeError, "subclass of irflow.engine.stage.Stage"),
    (lambda: type("Plain", (Stage,), {"kind": "plain"}), TypeError, "must be an attrs class"),
])
def test_register_stage_rejects_non_stages(make, error, message):
    with pytest.raises(error, match=message):
        register_stage(make())


def test_register_stage_checks_the_class():
    @attrs.frozen
    class NoRun(Stage):
        kind = "norun"

    with pytest.raises(TypeError, match="must implement run"):
        register_stage(NoRun)

    @attrs.frozen
    class Reserved(ShiftStage):
        kind = "reserved"
        when: int = 0

    with pytest.raises(ValueError, match="reserved recipe keys"):
        register_stage(Reserved)

    @attrs.frozen
    class DupPorts(ShiftStage):
        kind = "dups"
        inputs = (Port("a", CANDIDATES), Port("a", CANDIDATES))

    with pytest.raises(ValueError, match="duplicate input port names"):
        register_stage(DupPorts)

    @attrs.frozen
    class TwoVariadic(ShiftStage):
        kind = "twov"
        inputs = (Port("a", CANDIDATES, variadic=True), Port("b", CANDIDATES, variadic=True))

    with pytest.raises(ValueError, match="more than one variadic port"):
        register_stage(TwoVariadic)

    with pytest.raises(ValueError, match="identifier-like"):
        register_stage(ShiftStage, kind="bad kind")
    with pytest.raises(ValueError, match="already registered"):
        register_stage(ShiftStage, kind="dense")


def test_register_stage_as_decorator_and_replace():
    @register_stage(kind="shift2")
    @attrs.frozen
    class Shift2(ShiftStage):
        pass

    try:
        assert "shift2" in stage_kinds() and Shift2.kind == "shift2"

        @attrs.frozen
        class Shift3(ShiftStage):
            pass

        register_stage(Shift3, kind="shift2", replace=True)
        from irflow.engine import get_stage_class

        assert get_stage_class("shift2") is Shift3
    finally:
        unregister_stage("shift2")
    assert "shift2" not in stage_kinds()
