"""Recipe validation: every problem at once, each naming the file, the stage and the fix.

Validation is a list of small checks (as Hamilton's and Haystack's graph
validation are): each looks at one aspect of a recipe and returns its
problems; :func:`analyze` runs them all, in order, and reports everything
together.  What several checks need (the stage classes, the derived
defaults, the port bindings, the graph) is worked out once, on first use, by
:class:`irflow.engine.facts.Facts`.  The checks, in the order their problems are reported:

- structural problems found while parsing (missing kind, malformed inputs, ...);
- text: a name, a description or a parameter value UTF-8 cannot encode;
- recipe level: invalid or reserved parameter names, ``[choices]`` and
  ``[derived]`` tables;
- per stage (:data:`STAGE_CHECKS`): invalid or reserved names, unknown kinds
  (with the known kinds and the closest match), ``when`` keys and values,
  unknown parameters (with the kind's valid parameters) and ``"$param"``
  references, ill-typed parameters (through the kind's own attrs validators,
  also for the defaults of ``"$param"`` references), inputs that do not fit
  the kind's ports;
- wiring, per stage (:data:`WIRING_CHECKS`): unknown upstream stages, edges
  whose types do not fit (both ports, their types, what would fit),
  unconnected inputs (with the stages that could feed them);
- the graph: cycles (the stages on each), a missing or unknown output,
  stages that do not lead to the output;
- scales: a stage that makes no sense on its inputs' score scales says so
  through its ``check`` hook (e.g. a blend fusion needs a cosine and a bm25 input).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import networkx as nx

from irflow.engine.batches import Scale
from irflow.engine.facts import MAX_CYCLES, Facts, is_ident, kinds_producing, stage_label
from irflow.engine.kinds import stage_kinds
from irflow.engine.model import QUERY_NODE, RESERVED_PARAM_NAMES, RecipeSpec, StageSpec, param_ref
from irflow.engine.ports import QUERY, PortType, fits, fitting_sources
from irflow.engine.stage import Stage, stage_params
from irflow.engine.validators import closest, did_you_mean, listing
from irflow.errors import RecipeError
from irflow.util.unicode import find_lone_surrogate, surrogate_reason

__all__ = ["Analysis", "analyze", "validate_recipe", "CHECKS", "STAGE_CHECKS", "WIRING_CHECKS"]


@attrs.frozen(eq=False)
class Analysis:
    """What validation learned about a recipe (the pipeline is built from it)."""

    problems: tuple[str, ...]
    classes: dict[str, type[Stage]]
    bindings: dict[str, dict[str, tuple[str, ...]]]
    graph: nx.DiGraph
    scales: dict[str, frozenset[Scale] | None]
    instances: dict[str, Stage]


# --------------------------------------------------------------------------
# wording


# --------------------------------------------------------------------------
# what the checks share, worked out once


# --------------------------------------------------------------------------
# recipe-level checks


def check_parse(facts: Facts) -> list[str]:
    """What parsing found (missing kinds, malformed tables...)."""
    return list(facts.recipe.parse_problems)


def check_text(facts: Facts) -> list[str]:
    """Strings UTF-8 cannot encode (a lone surrogate, e.g. from a YAML escape): one problem per table."""
    problems = []
    for table, value in facts.recipe.to_dict().items():
        found = find_lone_surrogate(value, table)
        if found is not None:
            where, text, at = found
            problems.append(f"{facts.src}: {where}: {surrogate_reason(text, at)}")
    return problems


def check_parameter_names(facts: Facts) -> list[str]:
    problems = []
    for name in facts.recipe.params:
        if not is_ident(name):
            problems.append(f"{facts.src}: recipe parameter name {name!r} is not an identifier; use letters, "
                            "digits and _ (it is referred to as \"$name\")")
        elif name in RESERVED_PARAM_NAMES:
            problems.append(f"{facts.src}: recipe parameter name {name!r} is reserved (an argument of Recipe.run: "
                            f"{', '.join(RESERVED_PARAM_NAMES)}); rename it")
    return problems


def check_choices(facts: Facts) -> list[str]:
    recipe, problems = facts.recipe, []
    for name, allowed in recipe.choices.items():
        if name not in recipe.params:
            problems.append(f"{facts.src}: [choices] names {name!r}, which is not a recipe parameter"
                            f"{did_you_mean(name, recipe.params)}; recipe parameters: {listing(recipe.params)}")
            continue
        default = recipe.params[name]
        if default is not None and default not in allowed:
            problems.append(f"{facts.src}: the default of parameter {name!r} ({default!r}) is not among its "
                            f"[choices] ({', '.join(map(repr, allowed))})")
    return problems


def check_derived(facts: Facts) -> list[str]:
    return [problem for _, problems in facts.derived.values() for problem in problems]


def check_each_stage(facts: Facts) -> list[str]:
    """The :data:`STAGE_CHECKS` of every stage, stage by stage."""
    return [problem for name, spec in facts.recipe.stages.items()
            for check in STAGE_CHECKS for problem in check(facts, name, spec)]


def check_wiring(facts: Facts) -> list[str]:
    """The :data:`WIRING_CHECKS` of every stage of a known kind, stage by stage."""
    return [problem for name in facts.bindings for check in WIRING_CHECKS for problem in check(facts, name)]


def check_cycles(facts: Facts) -> list[str]:
    problems = []
    for i, cycle in enumerate(facts.cycles):
        if i >= MAX_CYCLES:
            problems.append(f"{facts.src}: more cycles exist; fix the ones above first")
            break
        start = cycle.index(min(cycle))
        cycle = cycle[start:] + cycle[:start]
        path = " -> ".join(repr(s) for s in [*cycle, cycle[0]])
        problems.append(f"{facts.src}: stages {path} form a cycle; a recipe must be acyclic: remove one of "
                        "these inputs")
    return problems


def check_output(facts: Facts) -> list[str]:
    output = facts.recipe.output
    if output and output not in facts.recipe.stages and ("", "output") not in facts.flags:
        return [f"{facts.src}: output {output!r} is not a stage{did_you_mean(output, facts.stage_names)}; stages: "
                f"{listing(facts.stage_names)}"]
    return []


def check_reachable(facts: Facts) -> list[str]:
    """Stages that do not lead to the output (they would never run)."""
    recipe, output = facts.recipe, facts.recipe.output
    if not output or output not in recipe.stages or any(field == "inputs" for _, field in facts.flags):
        return []
    # reachability follows the wiring as intended: a misspelt input counts as its closest stage,
    # so one typo is reported once (as the unknown input), not again as unreachable stages
    intended = facts.graph.copy()
    for name, spec in recipe.stages.items():
        for upstream in spec.upstream_names():
            target = upstream if upstream in recipe.stages else closest(upstream, facts.stage_names)
            if target is not None:
                intended.add_edge(target, name)
    used = nx.ancestors(intended, output) | {output}
    return [f"{stage_label(facts.src, name, recipe.stages[name].kind)} is unreachable: it does not lead to the "
            f"output {output!r}, so it would never run; wire it into a stage upstream of the output, or remove it"
            for name in facts.stage_names if name not in used]


def check_scales(facts: Facts) -> list[str]:
    """What each stage's own ``check`` says of its inputs' score scales (the acyclic part only)."""
    return facts.scaled[1]


# --------------------------------------------------------------------------
# per-stage checks


def check_stage_name(facts: Facts, name: str, spec: StageSpec) -> list[str]:
    problems = []
    if name == QUERY_NODE:
        problems.append(f"{facts.src}: stage name {QUERY_NODE!r} is reserved for the raw query batch (the "
                        "implicit source every query port reads); rename the stage")
    elif not isinstance(name, str) or not name or not (name[0].isalpha() or name[0] == "_") or not all(
            c.isalnum() or c in "_-" for c in name):
        problems.append(f"{facts.src}: stage name {name!r} is not valid: use letters, digits, _ and -, starting "
                        "with a letter or _ (names prefix provenance columns such as \"<stage>.score\")")
    if spec.name != name:
        problems.append(f"{facts.src}: stage {name!r} is declared with the name {spec.name!r}; use one name")
    return problems


def check_stage_kind(facts: Facts, name: str, spec: StageSpec) -> list[str]:
    kind = spec.kind
    if not kind and (name, "kind") not in facts.flags:
        return [f"{stage_label(facts.src, name, '')} has no kind; give it one of: {listing(stage_kinds())}"]
    if kind and name not in facts.classes:
        return [f"{facts.src}: stage {name!r}: unknown kind {kind!r}{did_you_mean(kind, stage_kinds())}; known "
                f"kinds: {listing(stage_kinds())} (third-party kinds register with "
                "irflow.register_stage or the entry-point group \"irflow.stages\"; on the command "
                "line, --plugin MODULE imports the module that registers them)"]
    return []


def _label_of(facts: Facts, name: str) -> str:
    return facts.label(name) if name in facts.classes else stage_label(facts.src, name, "")


def check_stage_when(facts: Facts, name: str, spec: StageSpec) -> list[str]:
    recipe, problems, label = facts.recipe, [], _label_of(facts, name)
    for key, allowed in spec.when.items():
        if key not in facts.param_names:
            problems.append(f"{label}: when refers to {key!r}, which is not a recipe parameter"
                            f"{did_you_mean(key, facts.param_names)}; declare it under [params] (recipe parameters: "
                            f"{listing(sorted(facts.param_names))})")
        elif key in recipe.choices:
            for value in allowed:
                if value not in recipe.choices[key]:
                    problems.append(f"{label}: when.{key} lists {value!r}, which is not one of the choices "
                                    f"of {key} ({', '.join(map(repr, recipe.choices[key]))})"
                                    f"{did_you_mean(value, map(str, recipe.choices[key]))}")
    return problems


def check_stage_parameters(facts: Facts, name: str, spec: StageSpec) -> list[str]:
    """Unknown parameter names and ``"$param"`` references that name no recipe parameter."""
    cls, problems, label = facts.classes.get(name), [], _label_of(facts, name)
    infos = stage_params(cls) if cls is not None else {}
    for key, raw in spec.params.items():
        if cls is not None and key not in infos:
            problems.append(f"{label}: unknown parameter {key!r}{did_you_mean(key, infos)}; valid parameters of "
                            f"{spec.kind}: {listing(info.describe() for info in infos.values())}")
        ref = param_ref(raw)
        if ref is None:
            continue
        if not is_ident(ref):
            problems.append(f"{label}: parameter {key} = {raw!r} is not a valid reference; write "
                            "\"$name\" naming a recipe parameter, or \"$$...\" for a literal string "
                            "starting with $")
        elif ref not in facts.param_names:
            problems.append(f"{label}: parameter {key} refers to ${ref}, which is not a recipe parameter"
                            f"{did_you_mean(ref, facts.param_names)}; declare it under [params] (recipe parameters: "
                            f"{listing(sorted(facts.param_names))})")
    return problems


def check_stage_values(facts: Facts, name: str, spec: StageSpec) -> list[str]:
    """Parameter values the kind's own validators refuse (the defaults of ``"$param"`` references included)."""
    return facts.built[name][1] if name in facts.built else []


def check_stage_inputs(facts: Facts, name: str, spec: StageSpec) -> list[str]:
    """Inputs that do not fit the kind's ports (unless parsing already reported them)."""
    if name not in facts.bound or (name, "inputs") in facts.flags:
        return []
    return [f"{facts.label(name)} {problem}" for problem in facts.bound[name][1]]


# --------------------------------------------------------------------------
# wiring checks (stages of a known kind)


def check_input_types(facts: Facts, name: str) -> list[str]:
    """Upstream names that are no stage, and edges whose types do not fit the port."""
    recipe, classes, problems = facts.recipe, facts.classes, []
    cls, label = classes[name], facts.label(name)
    ports = {p.name: p for p in cls.inputs}
    for port_name, sources in facts.bindings[name].items():
        port = ports[port_name]
        for source in sources:
            if source == QUERY_NODE:
                src_type: PortType | None = QUERY
                src_desc = "the raw query batch 'query'"
            elif source in recipe.stages:
                up = classes.get(source)
                src_type = up.output if up is not None else None
                src_desc = f"stage {source!r} ({up.kind})" if up is not None else ""
            else:
                problems.append(f"{label}: input {source!r} is not a stage of this recipe"
                                f"{did_you_mean(source, facts.stage_names)}; stages: {listing(facts.stage_names)}")
                continue
            if src_type is None or fits(src_type, port.type):
                continue
            wanted = " or ".join(t.name for t in fitting_sources(port.type))
            here = [s for s, c in classes.items() if fits(c.output, port.type) and s != name]
            fix = (f"wire a stage that outputs it instead: {listing(here)}" if here else
                   f"add a stage of kind {' or '.join(kinds_producing(port.type, src_type)) or '(none registered)'} "
                   "between them")
            problems.append(f"{label}: input port {port.describe()} cannot take {src_desc}, whose output is "
                            f"{src_type}; the port needs {wanted}: {fix}")
    return problems


def check_connected(facts: Facts, name: str) -> list[str]:
    """Input ports with too few upstream stages, with the stages here that could feed them."""
    if (name, "inputs") in facts.flags or facts.bound[name][1]:
        return []  # a wiring problem was reported: its unconnected ports would only repeat it
    cls, label, problems = facts.classes[name], facts.label(name), []
    bound = facts.bindings[name]
    for port in cls.inputs:
        count = len(bound.get(port.name, ()))
        if not ((port.variadic and 0 < count < port.minimum) or (port.required and count == 0)):
            continue
        here = [s for s, c in facts.classes.items() if fits(c.output, port.type) and s != name]
        if count:
            problems.append(f"{label}: input port {port.describe()} needs at least {port.minimum} "
                            f"stages, got {count}; add more to its inputs (stages here that output "
                            f"{port.type}: {listing(here)})")
        elif port.variadic and here:
            listed = ", ".join(f'"{h}"' for h in here[:2])
            problems.append(f"{label}: input port {port.describe()} is not connected; list the stages it "
                            f"takes, e.g. inputs = [{listed}] (stages here that output {port.type}: "
                            f"{listing(here)})")
        elif here:
            problems.append(f"{label}: input port {port.describe()} is not connected; wire it with "
                            f"inputs = {{ {port.name} = \"{here[0]}\" }} (stages here that output "
                            f"{port.type}: {listing(here)})")
        else:
            problems.append(f"{label}: input port {port.describe()} is not connected, and no stage here "
                            f"outputs {port.type}; add a stage of kind "
                            f"{' or '.join(kinds_producing(port.type)) or '(none registered)'} and wire "
                            f"it with inputs = {{ {port.name} = \"<that stage>\" }}")
    return problems


#: Checks of one stage: ``(facts, name, spec) -> problems``, run for every stage in declaration order.
STAGE_CHECKS: tuple[Callable[[Facts, str, StageSpec], list[str]], ...] = (
    check_stage_name, check_stage_kind, check_stage_when, check_stage_parameters, check_stage_values,
    check_stage_inputs,
)

#: Checks of one stage's wiring: ``(facts, name) -> problems``, for every stage of a known kind.
WIRING_CHECKS: tuple[Callable[[Facts, str], list[str]], ...] = (check_input_types, check_connected)

#: The checks of a recipe, ``(facts) -> problems``, in the order their problems are reported.
CHECKS: tuple[Callable[[Facts], list[str]], ...] = (
    check_parse, check_text, check_parameter_names, check_choices, check_derived, check_each_stage, check_wiring,
    check_cycles, check_output, check_reachable, check_scales,
)


def analyze(recipe: RecipeSpec) -> Analysis:
    """Every problem of ``recipe`` (the :data:`CHECKS`, in order), plus what the pipeline needs."""
    facts = Facts(recipe)
    problems = tuple(problem for check in CHECKS for problem in check(facts))
    return Analysis(problems, facts.classes, facts.bindings, facts.graph, facts.scaled[0], facts.instances)


def validate_recipe(recipe: RecipeSpec) -> None:
    """Raise one RecipeError listing every problem of ``recipe``."""
    problems = analyze(recipe).problems
    if problems:
        raise RecipeError(list(problems), source=recipe.source)
