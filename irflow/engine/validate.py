"""Recipe validation: every problem at once, each naming the file, the stage and the fix.

:func:`analyze` walks a recipe and collects, without stopping at the first:

- structural problems found while loading (missing kind, malformed inputs, ...);
- recipe level: invalid or reserved parameter names, ``[choices]`` and
  ``[derived]`` tables, a missing or unknown output;
- per stage: invalid or reserved names, unknown kinds (with the known kinds
  and the closest match), unknown parameters (with the kind's valid
  parameters), ill-typed parameters (through the kind's own attrs
  validators, also for the defaults of ``"$param"`` references), unknown
  ``"$param"`` references, bad ``when`` keys and values;
- wiring: unknown upstream stages, unknown ports, unconnected inputs (with
  the stages that could feed them), edges whose types do not fit (both
  ports, their types, what would fit);
- the graph: cycles (the stages on each), stages that do not lead to the output;
- scales: a stage that makes no sense on its inputs' score scales says so
  through its ``check`` hook (e.g. a blend fusion needs a cosine and a bm25 input).

:func:`resolved_instances` repeats the parameter and scale checks with a
run's actual parameter values (``recipe.run(corpus, q, k="ten")`` fails
before any stage runs, naming the stage and the recipe parameter).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs
import networkx as nx

from irflow.engine.batches import Scale
from irflow.errors import RecipeError
from irflow.engine.ports import QUERY, PortType, fits, fitting_sources
from irflow.engine.recipe import (
    DERIVED_RULES,
    QUERY_NODE,
    RESERVED_PARAM_NAMES,
    Recipe,
    StageSpec,
    derived_rule_args,
    evaluate_derived,
    literal,
    param_ref,
    thaw,
)
from irflow.engine.stage import Stage, Upstream, get_stage_class, stage_kinds, stage_params

if TYPE_CHECKING:
    from irflow.engine.pipeline import Pipeline

__all__ = ["Analysis", "analyze", "validate_recipe", "resolved_instances", "instantiate", "run_argument_problems"]

_MAX_CYCLES = 5


@attrs.frozen(eq=False)
class Analysis:
    """What validation learned about a recipe (the pipeline is built from it)."""

    problems: tuple[str, ...]
    classes: dict[str, type[Stage]]
    bindings: dict[str, dict[str, tuple[str, ...]]]
    graph: nx.DiGraph
    scales: dict[str, frozenset[Scale] | None]
    instances: dict[str, Stage]


def _did(word: Any, options: Iterable[str]) -> str:
    match = difflib.get_close_matches(str(word), list(options), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _closest(word: str, options: Iterable[str]) -> str | None:
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.6)
    return match[0] if match else None


def _listing(names: Iterable[str]) -> str:
    names = list(names)
    return ", ".join(names) if names else "(none)"


def _stage_label(source: str, name: str, kind: str) -> str:
    return f"{source}: stage {name!r} ({kind})" if kind else f"{source}: stage {name!r}"


def _is_ident(name: Any) -> bool:
    return isinstance(name, str) and name.isidentifier()


def _kinds_producing(dst: PortType, taking: PortType | None = None) -> list[str]:
    """Kinds whose output fits ``dst`` (and, given ``taking``, with an input port that takes it)."""
    kinds = []
    for kind in stage_kinds():
        cls = get_stage_class(kind)
        if cls is None or not fits(cls.output, dst):
            continue
        if taking is not None and not any(fits(taking, port.type) for port in cls.inputs):
            continue
        kinds.append(kind)
    return kinds


def instantiate(cls: type[Stage], values: Mapping[str, Any], via: Mapping[str, str],
                label: str) -> tuple[Stage | None, list[str]]:
    """Build ``cls(**values)`` through its attrs converters and validators, reporting every bad value.

    ``via[key]`` names the recipe parameter a value came from (for messages).
    Each field is checked on its own first so that several bad parameters
    are all reported; then the whole object is built (cross-field checks).
    """
    infos = stage_params(cls)
    fields = {f.name: f for f in attrs.fields(cls) if f.init}
    problems: list[str] = []
    for key, value in values.items():
        where = f" (from recipe parameter ${via[key]})" if key in via else ""
        phrase = _field_problem(fields[key], value)
        if phrase is not None:
            problems.append(f"{label}: parameter {key} = {value!r}{where}: {phrase}; "
                            f"valid: {infos[key].describe()}{_doc(infos[key].doc)}")
    for key, info in infos.items():
        if info.required and key not in values:
            problems.append(f"{label}: missing required parameter {key} ({info.describe()}{_doc(info.doc)}); "
                            f"add {key} = ... to the stage")
    if problems:
        return None, problems
    try:
        return cls(**values), []
    except (TypeError, ValueError) as error:
        return None, [f"{label}: invalid parameters {dict(values)!r}: {error}"]


def _field_problem(field: "attrs.Attribute", value: Any) -> str | None:
    """What is wrong with ``value`` for one attrs field (its converter and validator alone), or None."""
    try:
        converted = value
        if field.converter is not None and not isinstance(field.converter, attrs.Converter):
            converted = field.converter(value)
        if field.validator is not None:
            field.validator(None, field, converted)
    except (TypeError, ValueError) as error:
        return _phrase(error)
    except Exception:  # a validator that needs the instance: left to the constructor
        return None
    return None


def _readers(recipe: Recipe) -> dict[str, list[tuple[str, "attrs.Attribute", Any]]]:
    """Per recipe parameter, who reads it: (who, attrs field, ParamInfo or None); built once per recipe."""
    cached = recipe._cache.get("readers")
    if cached is not None:
        return cached
    found: dict[str, list[tuple[str, attrs.Attribute, Any]]] = {}
    for stage_name, spec in recipe.stages.items():
        cls = get_stage_class(spec.kind)
        if cls is None:
            continue
        fields, infos = attrs.fields_dict(cls), stage_params(cls)
        for key, raw in spec.params.items():
            name = param_ref(raw)
            if name is not None and key in fields and fields[key].init:
                found.setdefault(name, []).append((f"stage {stage_name}", fields[key], infos.get(key)))
    for derived_name, spec in recipe.derived.items():
        cls = DERIVED_RULES.get(spec.rule)
        if cls is None:
            continue
        fields = attrs.fields_dict(cls)
        for key, raw in spec.args.items():
            name = None if isinstance(raw, tuple) else param_ref(raw)
            if name is not None and key in fields:
                found.setdefault(name, []).append((f"derived {derived_name}", fields[key], None))
    recipe._cache["readers"] = found
    return found


def run_argument_problems(recipe: Recipe, given: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """The caller's run arguments that a stage or derived rule reading them refuses.

    One entry per bad argument, ``(name, value, reason, fix)`` as
    :class:`~irflow.errors.ParameterError` takes it: the reason says what
    is wrong (each distinct complaint once), who reads the value and what
    it takes; the fix is the recipe's default when that one is accepted.
    ``None`` values are skipped (a stage's own default applies).  Each value
    goes through the readers' own converters and validators only, so a
    valid call pays a few attribute checks.
    """
    readers = _readers(recipe)
    out: list[tuple[Any, ...]] = []
    for name, value in given.items():
        uses = readers.get(name)
        if value is None or not uses:
            continue
        default = recipe.params.get(name)
        if type(value) is type(default) and isinstance(value, (str, int, float)) and value == default:
            continue  # the recipe's own default, checked when the recipe was validated (search() passes them all)
        complaints: dict[str, list[str]] = {}
        valid = ""
        for who, field, info in uses:
            phrase = _field_problem(field, thaw(value))
            if phrase is None:
                continue
            complaints.setdefault(phrase, [])
            if who not in complaints[phrase]:
                complaints[phrase].append(who)
            if not valid and info is not None and info.doc:  # the first documented reader says what it takes
                valid = f"; valid: {info.type} — {info.doc}"
        if not complaints:
            continue
        reason = "; ".join(f"{phrase} (read by {', '.join(whos)})" for phrase, whos in complaints.items())
        fix = None
        if default is not None and all(_field_problem(field, thaw(default)) is None for _, field, _ in uses):
            fix = (name, thaw(default), "e.g.")
        out.append((name, value, reason + valid, fix))
    return out


def _phrase(error: Exception) -> str:
    text = str(error).rstrip(".")
    return text if text.startswith(("must", "is ", "should")) else f"invalid ({text})"


def _doc(doc: str) -> str:
    return f" — {doc}" if doc else ""


def _stage_values(spec: StageSpec, params: Mapping[str, Any], valid_refs: set[str],
                  fields: Iterable[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Literal and resolved ``"$param"`` values of a stage's known parameters (None dropped)."""
    values: dict[str, Any] = {}
    via: dict[str, str] = {}
    known = set(fields)
    for key, raw in spec.params.items():
        if key not in known:
            continue
        name = param_ref(raw)
        if name is None:
            values[key] = thaw(literal(raw))
        elif name in valid_refs:
            value = params.get(name)
            if value is not None:  # None: the stage default applies
                values[key] = thaw(value)
                via[key] = name
    return values, via


def analyze(recipe: Recipe) -> Analysis:
    """Every problem of ``recipe`` (see the module docstring), plus what the pipeline needs."""
    src = recipe.source
    problems: list[str] = list(recipe.parse_problems)
    flags = recipe.parse_flags
    param_names = set(recipe.params) | set(recipe.derived)

    # -- recipe parameters, choices, derived ---------------------------------
    for name in recipe.params:
        if not _is_ident(name):
            problems.append(f"{src}: recipe parameter name {name!r} is not an identifier; use letters, digits "
                            "and _ (it is referred to as \"$name\")")
        elif name in RESERVED_PARAM_NAMES:
            problems.append(f"{src}: recipe parameter name {name!r} is reserved (an argument of Recipe.run: "
                            f"{', '.join(RESERVED_PARAM_NAMES)}); rename it")
    for name, allowed in recipe.choices.items():
        if name not in recipe.params:
            problems.append(f"{src}: [choices] names {name!r}, which is not a recipe parameter"
                            f"{_did(name, recipe.params)}; recipe parameters: {_listing(recipe.params)}")
            continue
        default = recipe.params[name]
        if default is not None and default not in allowed:
            problems.append(f"{src}: the default of parameter {name!r} ({default!r}) is not among its "
                            f"[choices] ({', '.join(map(repr, allowed))})")
    defaults: dict[str, Any] = dict(recipe.params)
    for name, spec in recipe.derived.items():
        label = f"{src}: derived parameter {name!r}"
        if not _is_ident(name) or name in RESERVED_PARAM_NAMES:
            problems.append(f"{label}: the name must be an identifier not in {', '.join(RESERVED_PARAM_NAMES)}")
        if spec.rule not in DERIVED_RULES:
            if (name, "rule") not in flags:
                problems.append(f"{label}: unknown rule {spec.rule!r}{_did(spec.rule, DERIVED_RULES)}; "
                                f"rules: {_listing(DERIVED_RULES)}")
            defaults[name] = None
            continue
        valid_args = derived_rule_args(spec.rule)
        bad = False
        for key, value in spec.args.items():
            if key not in valid_args:
                problems.append(f"{label}: rule {spec.rule!r} has no argument {key!r}{_did(key, valid_args)}; "
                                f"its arguments: {_listing(valid_args)}")
                bad = True
            for item in (value if isinstance(value, tuple) else (value,)):
                ref = param_ref(item)
                if ref is not None and ref not in recipe.params:
                    problems.append(f"{label}: argument {key} refers to {item!r}, which is not a recipe "
                                    f"parameter{_did(ref, recipe.params)}; recipe parameters: "
                                    f"{_listing(recipe.params)}")
                    bad = True
        if bad:
            defaults[name] = None
            continue
        try:
            defaults[name] = evaluate_derived(recipe, spec, recipe.params, given=recipe.params.get(name))
        except RecipeError as error:
            problems.extend(error.problems)
            defaults[name] = None

    # -- stages ---------------------------------------------------------------
    classes: dict[str, type[Stage]] = {}
    instances: dict[str, Stage] = {}
    bindings: dict[str, dict[str, tuple[str, ...]]] = {}
    miswired: set[str] = set()
    stage_names = list(recipe.stages)
    for name, spec in recipe.stages.items():
        kind = spec.kind
        if name == QUERY_NODE:
            problems.append(f"{src}: stage name {QUERY_NODE!r} is reserved for the raw query batch (the "
                            "implicit source every query port reads); rename the stage")
        elif not isinstance(name, str) or not name or not (name[0].isalpha() or name[0] == "_") or not all(
                c.isalnum() or c in "_-" for c in name):
            problems.append(f"{src}: stage name {name!r} is not valid: use letters, digits, _ and -, starting "
                            "with a letter or _ (names prefix provenance columns such as \"<stage>.score\")")
        if spec.name != name:
            problems.append(f"{src}: stage {name!r} is declared with the name {spec.name!r}; use one name")
        cls = get_stage_class(kind) if kind else None
        label = _stage_label(src, name, kind if cls is not None else "")
        if not kind and (name, "kind") not in flags:
            problems.append(f"{label} has no kind; give it one of: {_listing(stage_kinds())}")
        if cls is None and kind:
            problems.append(f"{src}: stage {name!r}: unknown kind {kind!r}{_did(kind, stage_kinds())}; known "
                            f"kinds: {_listing(stage_kinds())} (third-party kinds register with "
                            "irflow.register_stage or the entry-point group \"irflow.stages\"; on the command "
                            "line, --plugin MODULE imports the module that registers them)")
        # when
        for key, allowed in spec.when.items():
            if key not in param_names:
                problems.append(f"{label}: when refers to {key!r}, which is not a recipe parameter"
                                f"{_did(key, param_names)}; declare it under [params] (recipe parameters: "
                                f"{_listing(sorted(param_names))})")
            elif key in recipe.choices:
                for value in allowed:
                    if value not in recipe.choices[key]:
                        problems.append(f"{label}: when.{key} lists {value!r}, which is not one of the choices "
                                        f"of {key} ({', '.join(map(repr, recipe.choices[key]))})"
                                        f"{_did(value, map(str, recipe.choices[key]))}")
        # parameter names and references
        infos = stage_params(cls) if cls is not None else {}
        for key, raw in spec.params.items():
            if cls is not None and key not in infos:
                problems.append(f"{label}: unknown parameter {key!r}{_did(key, infos)}; valid parameters of "
                                f"{kind}: {_listing(info.describe() for info in infos.values())}")
            ref = param_ref(raw)
            if ref is None:
                continue
            if not _is_ident(ref):
                problems.append(f"{label}: parameter {key} = {raw!r} is not a valid reference; write "
                                "\"$name\" naming a recipe parameter, or \"$$...\" for a literal string "
                                "starting with $")
            elif ref not in param_names:
                problems.append(f"{label}: parameter {key} refers to ${ref}, which is not a recipe parameter"
                                f"{_did(ref, param_names)}; declare it under [params] (recipe parameters: "
                                f"{_listing(sorted(param_names))})")
        if cls is None:
            continue
        classes[name] = cls
        values, via = _stage_values(spec, defaults, param_names, infos)
        instance, bad = instantiate(cls, values, via, label)
        problems.extend(bad)
        if instance is not None:
            instances[name] = instance
        bound, bind_problems = bind_inputs_checked(spec, cls)
        if (name, "inputs") not in flags:
            problems.extend(f"{label} {p}" for p in bind_problems)
        if bind_problems:
            miswired.add(name)  # its unconnected ports would only repeat the wiring problem
        bindings[name] = bound

    # -- wiring: unknown upstreams, types, unconnected ports -------------------
    for name, bound in bindings.items():
        cls = classes[name]
        label = _stage_label(src, name, cls.kind)
        ports = {p.name: p for p in cls.inputs}
        for port_name, sources in bound.items():
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
                                    f"{_did(source, stage_names)}; stages: {_listing(stage_names)}")
                    continue
                if src_type is None or fits(src_type, port.type):
                    continue
                wanted = " or ".join(t.name for t in fitting_sources(port.type))
                here = [s for s, c in classes.items() if fits(c.output, port.type) and s != name]
                fix = (f"wire a stage that outputs it instead: {_listing(here)}" if here else
                       f"add a stage of kind {' or '.join(_kinds_producing(port.type, src_type)) or '(none registered)'} "
                       "between them")
                problems.append(
                    f"{label}: input port {port.describe()} cannot take {src_desc}, whose output is "
                    f"{src_type}; the port needs {wanted}: {fix}")
        if (name, "inputs") in flags or name in miswired:
            continue
        for port in cls.inputs:
            count = len(bound.get(port.name, ()))
            short = (port.variadic and 0 < count < port.minimum) or (port.required and count == 0)
            if not short:
                continue
            here = [s for s, c in classes.items() if fits(c.output, port.type) and s != name]
            if count:
                problems.append(f"{label}: input port {port.describe()} needs at least {port.minimum} "
                                f"stages, got {count}; add more to its inputs (stages here that output "
                                f"{port.type}: {_listing(here)})")
            elif port.variadic and here:
                listed = ", ".join(f'"{h}"' for h in here[:2])
                problems.append(f"{label}: input port {port.describe()} is not connected; list the stages it "
                                f"takes, e.g. inputs = [{listed}] (stages here that output {port.type}: "
                                f"{_listing(here)})")
            elif here:
                problems.append(f"{label}: input port {port.describe()} is not connected; wire it with "
                                f"inputs = {{ {port.name} = \"{here[0]}\" }} (stages here that output "
                                f"{port.type}: {_listing(here)})")
            else:
                problems.append(f"{label}: input port {port.describe()} is not connected, and no stage here "
                                f"outputs {port.type}; add a stage of kind "
                                f"{' or '.join(_kinds_producing(port.type)) or '(none registered)'} and wire "
                                f"it with inputs = {{ {port.name} = \"<that stage>\" }}")

    # -- the graph -------------------------------------------------------------
    from irflow.engine.pipeline import build_graph

    graph = build_graph(stage_names, bindings)
    acyclic = True
    for i, cycle in enumerate(nx.simple_cycles(graph)):
        acyclic = False
        if i >= _MAX_CYCLES:
            problems.append(f"{src}: more cycles exist; fix the ones above first")
            break
        start = cycle.index(min(cycle))
        cycle = cycle[start:] + cycle[:start]
        path = " -> ".join(repr(s) for s in [*cycle, cycle[0]])
        problems.append(f"{src}: stages {path} form a cycle; a recipe must be acyclic: remove one of "
                        "these inputs")
    output = recipe.output
    if output and output not in recipe.stages:
        if ("", "output") not in flags:
            problems.append(f"{src}: output {output!r} is not a stage{_did(output, stage_names)}; stages: "
                            f"{_listing(stage_names)}")
    elif output and not any(field == "inputs" for _, field in flags):
        # reachability follows the wiring as intended: a misspelt input counts as its closest stage,
        # so one typo is reported once (as the unknown input), not again as unreachable stages
        intended = graph.copy()
        for name, spec in recipe.stages.items():
            for upstream in spec.upstream_names():
                target = upstream if upstream in recipe.stages else _closest(upstream, stage_names)
                if target is not None:
                    intended.add_edge(target, name)
        used = nx.ancestors(intended, output) | {output}
        for name in stage_names:
            if name not in used:
                kind = recipe.stages[name].kind
                problems.append(f"{_stage_label(src, name, kind)} is unreachable: it does not lead to the "
                                f"output {output!r}, so it would never run; wire it into a stage upstream of "
                                f"the output, or remove it")

    # -- scales ------------------------------------------------------------------
    scales: dict[str, frozenset[Scale] | None] = {}
    # scale checks run on the acyclic part (stages on or behind a cycle are already reported)
    dag = graph
    if not acyclic:
        tangled: set[str] = set()
        for component in nx.strongly_connected_components(graph):
            if len(component) > 1 or any(graph.has_edge(n, n) for n in component):
                tangled |= component
        for node in list(tangled):
            tangled |= nx.descendants(graph, node)
        dag = graph.subgraph(n for n in graph if n not in tangled)
    for name in (n for n in nx.topological_sort(dag) if n != QUERY_NODE):
        cls = classes.get(name)
        instance = instances.get(name)
        if cls is None or instance is None:
            scales[name] = None
            continue
        upstreams = _upstreams(bindings[name], classes, scales)
        scales[name] = instance.output_scales(upstreams)
        label = _stage_label(src, name, cls.kind)
        problems.extend(f"{label}: {message}" for message in instance.check(upstreams))

    return Analysis(tuple(problems), classes, bindings, graph, scales, instances)


def bind_inputs_checked(spec: StageSpec, cls: type[Stage]) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    from irflow.engine.pipeline import bind_inputs

    return bind_inputs(spec, cls.inputs)


def _upstreams(bound: Mapping[str, tuple[str, ...]], classes: Mapping[str, type[Stage]],
               scales: Mapping[str, frozenset[Scale] | None]) -> dict[str, tuple[Upstream, ...]]:
    out: dict[str, tuple[Upstream, ...]] = {}
    for port, sources in bound.items():
        infos = []
        for source in sources:
            if source == QUERY_NODE:
                infos.append(Upstream(QUERY_NODE, QUERY_NODE, QUERY, None))
            elif source in classes:
                cls = classes[source]
                infos.append(Upstream(source, cls.kind, cls.output, scales.get(source)))
        out[port] = tuple(infos)
    return out


def validate_recipe(recipe: Recipe) -> None:
    """Raise one RecipeError listing every problem of ``recipe``."""
    problems = analyze(recipe).problems
    if problems:
        raise RecipeError(list(problems), source=recipe.source)


def resolved_instances(pipeline: "Pipeline", values: Mapping[str, Any], stages: Iterable[str]) -> dict[str, Stage]:
    """Stage objects for a run's parameter values, with parameter and scale checks.

    Raises one RecipeError naming every stage whose resolved parameters are
    invalid or whose inputs' scales it cannot take.
    """
    recipe = pipeline.recipe
    src = recipe.source
    names = set(recipe.params) | set(recipe.derived)
    stages = tuple(stages)
    problems: list[str] = []
    made: dict[str, Stage] = {}
    for name in stages:
        cls = pipeline.classes[name]
        spec = recipe.stages[name]
        values_, via = _stage_values(spec, values, names, stage_params(cls))
        instance, bad = instantiate(cls, values_, via, _stage_label(src, name, cls.kind))
        problems.extend(bad)
        if instance is not None:
            made[name] = instance
    if problems:
        raise RecipeError(problems, source=src)
    scales: dict[str, frozenset[Scale] | None] = {}
    wanted = set(stages)
    for name in pipeline.order:
        if name not in wanted:
            scales[name] = None
            continue
        upstreams = _upstreams(pipeline.bindings[name], pipeline.classes, scales)
        scales[name] = made[name].output_scales(upstreams)
        label = _stage_label(src, name, pipeline.classes[name].kind)
        problems.extend(f"{label}: {message}" for message in made[name].check(upstreams))
    if problems:
        raise RecipeError(problems, source=src)
    return made
