"""The executor: run the stages an output needs, each once for the whole batch.

For a run it

1. resolves the recipe parameters (defaults, run-time overrides, derived
   ones) and builds the stage objects — bad values fail here, before any
   stage runs, naming the stage and the recipe parameter;
2. picks the stages the output needs (upstream of it, stopping at stages
   whose output the caller injected through ``overrides``), in a
   reproducible topological order;
3. runs each one once for the whole query batch, feeding it its upstream
   outputs by port name; a stage whose ``when`` does not hold, or whose
   required input is inactive, outputs an inactive batch without running;
4. optionally reuses outputs from a :class:`StageCache`: a stage execution
   is keyed by its name, kind and resolved parameters, the keys of its inputs
   (recursively, down to the query texts) and the corpus, so a sweep that
   changes only ``rrf_k`` re-runs the fuse and what follows, never the
   first-stage channels;
5. optionally records a trace: with ``trace=True``, one :class:`StageEvent`
   per stage in execution order (name, kind, resolved parameters, inputs by
   upstream name, output, elapsed ms, status) into a :class:`TraceRecorder`.
   With ``trace=False`` none of that work happens: no timers, no events.
"""

from __future__ import annotations

import os
import time
from collections import Counter, OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

from irflow.engine.batches import Candidates, QueryBatch, frozen_array
from irflow.util.cachekey import UnkeyableError, cache_key
from irflow.errors import ArgumentError, RecipeError, StageError
from irflow.util.fileio import check_nesting
from irflow.engine.ports import CANDIDATES, HITS, MASK, QUERIES, QUERY, PortType
from irflow.engine.recipe import QUERY_NODE

if TYPE_CHECKING:
    from irflow.engine.pipeline import Pipeline
    from irflow.engine.recipe import Recipe
    from irflow.engine.result import Result

__all__ = ["run_recipe", "check_corpus", "StageCache", "StageEvent", "TraceRecorder", "INACTIVE", "is_inactive"]


class _Inactive:
    """The output of a switched-off stage whose output is not Candidates."""

    _instance: "_Inactive | None" = None

    def __new__(cls) -> "_Inactive":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "INACTIVE"

    def __bool__(self) -> bool:
        return False


#: The output of a switched-off stage whose port type is not Candidates.
INACTIVE = _Inactive()


def is_inactive(value: Any) -> bool:
    """True for :data:`INACTIVE` and for inactive Candidates."""
    return value is INACTIVE or (isinstance(value, Candidates) and not value.active)


@attrs.frozen(eq=False)
class StageEvent:
    """One stage of a traced run.

    ``status`` is ``"ran"``, ``"cached"`` (output reused from a StageCache),
    ``"override"`` (output injected by the caller) or ``"inactive"`` (its
    ``when`` did not hold or a required input was inactive).  ``inputs`` maps
    each upstream name (``"query"`` for the raw batch) to the value the stage
    received; ``ports`` maps each input port to its upstream names.
    """

    name: str
    kind: str
    params: dict[str, Any]
    inputs: dict[str, Any]
    ports: dict[str, tuple[str, ...]]
    output: Any
    elapsed_ms: float
    status: str = "ran"


class TraceRecorder(list):
    """The events of a traced run, in execution order (a plain list of StageEvent).

    Carries the run's context as attributes: ``recipe`` (the Recipe),
    ``queries`` (the raw QueryBatch), ``params`` (the resolved recipe
    parameters) and ``corpus``, so a trace module can render record ids and
    artifacts without re-running anything.
    """

    def __init__(self, recipe: "Recipe | None" = None, queries: QueryBatch | None = None,
                 params: Mapping[str, Any] | None = None, corpus: Any = None) -> None:
        super().__init__()
        self.recipe = recipe
        self.queries = queries
        self.params = dict(params or {})
        self.corpus = corpus

    def event(self, name: str) -> StageEvent:
        """The event of stage ``name``."""
        for event in self:
            if event.name == name:
                return event
        raise KeyError(f"no stage {name!r} in this trace; stages: {', '.join(e.name for e in self)}")


_MISSING = object()


class StageCache:
    """Stage outputs kept across runs, keyed by what determines them.

    A key is (stage name, kind, resolved parameters, input keys, corpus): the input keys
    are the upstream stages' keys, down to the query texts, so a cached
    output is reused exactly when every input would be the same.  ``hits``
    and ``misses`` count lookups; ``executions`` counts, per stage name, how
    often a stage actually ran while this cache was in use.  ``maxsize``
    bounds the entries (least recently used dropped first; None = unbounded).

    The corpus is part of every key: the corpus object, and its store's
    ``version`` when it has one, so deleting records between runs makes the
    old entries miss.

    >>> cache = StageCache()
    >>> cache.hits, cache.misses, len(cache)
    (0, 0, 0)
    """

    def __init__(self, maxsize: int | None = None) -> None:
        if maxsize is not None and maxsize < 1:
            raise ValueError(f"maxsize must be >= 1 or None, got {maxsize}")
        self.maxsize = maxsize
        self._entries: OrderedDict[Any, tuple[Any, Any]] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.executions: Counter[str] = Counter()

    def get(self, key: Any, corpus: Any) -> Any:
        entry = self._entries.get(key)
        # the entry holds its corpus, so an id() in the key can never be recycled while it lives
        if entry is None or entry[0] is not corpus:
            self.misses += 1
            return _MISSING
        self._entries.move_to_end(key)
        self.hits += 1
        return entry[1]

    def put(self, key: Any, corpus: Any, value: Any) -> None:
        self._entries[key] = (corpus, value)
        self._entries.move_to_end(key)
        if self.maxsize is not None:
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        """Drop every entry and reset the counters."""
        self._entries.clear()
        self.hits = self.misses = 0
        self.executions.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"StageCache({len(self)} entries, {self.hits} hits, {self.misses} misses)"


# --------------------------------------------------------------------------


def check_corpus(corpus: Any, where: str) -> None:
    """ArgumentError when ``corpus`` is plainly not a corpus object (None, a path, a dict, a number...).

    Caught here, by its type, rather than as an AttributeError deep in the
    first stage; any object with the corpus protocol passes.
    """
    if corpus is None or isinstance(corpus, (str, bytes, os.PathLike, Mapping, list, tuple, int, float)):
        fix = ("open it first: irflow.open_corpus(path)" if isinstance(corpus, (str, bytes, os.PathLike))
               else "build one with irflow.build(records) or open one with irflow.open_corpus(path)")
        raise ArgumentError(f"{where} needs a corpus, got {type(corpus).__name__}; {fix}")


def _batch(query_or_queries: Any) -> tuple[QueryBatch, bool]:
    if isinstance(query_or_queries, str):
        return QueryBatch.of([query_or_queries]), True
    if isinstance(query_or_queries, QueryBatch):
        return query_or_queries, False
    return QueryBatch.of(query_or_queries), False  # ArgumentError for a dict, a set, bytes, a non-iterable


def _check_output(value: Any, expected: PortType, corpus: Any) -> str | None:
    """Why ``value`` is not a valid output of type ``expected`` (None when it is)."""
    if value is INACTIVE:
        return None
    if expected is CANDIDATES:
        return None if isinstance(value, Candidates) else f"expected Candidates, got {type(value).__name__}"
    if expected is MASK:
        if not isinstance(value, np.ndarray) or value.dtype != np.bool_ or value.ndim != 1:
            return f"expected a 1-d bool numpy array, got {type(value).__name__}"
        n_rows = getattr(corpus, "n_rows", None)
        if n_rows is not None and value.size != n_rows:
            return f"expected a mask of {n_rows} rows, got {value.size}"
        return None
    if expected in (QUERY, QUERIES):
        return None if isinstance(value, QueryBatch) else f"expected a QueryBatch, got {type(value).__name__}"
    if expected is HITS:
        return None if isinstance(value, list) else f"expected a list (per query) of hit lists, got {type(value).__name__}"
    return None  # CONTEXTS and third-party types: not checked


def _check_overrides(pipeline: "Pipeline", overrides: Mapping[str, Any], batch: QueryBatch,
                     corpus: Any) -> dict[str, Any]:
    recipe = pipeline.recipe
    problems = []
    clean: dict[str, Any] = {}
    for name, value in overrides.items():
        if name not in pipeline.classes:
            problems.append(f"{recipe.source}: overrides names {name!r}, which is not a stage; stages: "
                            f"{', '.join(pipeline.order)}")
            continue
        cls = pipeline.classes[name]
        why = _check_output(value, cls.output, corpus)
        if why is not None:
            problems.append(f"{recipe.source}: the override for stage {name!r} ({cls.kind}) does not fit its "
                            f"output type {cls.output}: {why}")
            continue
        if isinstance(value, Candidates) and value.queries.originals != batch.originals and value.active:
            problems.append(f"{recipe.source}: the override for stage {name!r} was computed for the queries "
                            f"{list(value.queries.originals)!r}, not {list(batch.originals)!r}")
            continue
        if cls.output is MASK:
            value = frozen_array(value, bool)
        clean[name] = value
    if problems:
        raise RecipeError(problems, source=recipe.source)
    return clean


def _key_of(value: Any) -> Any:
    """A cache key for an injected value (type-exact; other objects by identity, held by the key)."""
    if isinstance(value, Candidates):
        return ("override", value.fingerprint())
    if isinstance(value, QueryBatch):
        return ("override", cache_key((value.texts, value.originals, value.origin)))
    return ("override", cache_key(value))


def run_recipe(recipe: "Recipe", corpus: Any, query_or_queries: Any, *, trace: bool = False,
               overrides: Mapping[str, Any] | None = None, cache: StageCache | None = None,
               output: str | None = None, params: Mapping[str, Any] | None = None) -> "Result":
    """Run ``recipe`` on ``corpus`` (see :meth:`irflow.engine.recipe.Recipe.run`)."""
    from irflow.engine.result import Result
    from irflow.engine.stage import StageContext

    pipeline = recipe.pipeline()
    for name, value in (params or {}).items():  # freezing and hashing parameters recurse: bound the depth first
        check_nesting(value, f"recipe {recipe.name!r}: parameter {name!r}")
    values = recipe.resolve_params(params)
    batch, single = _batch(query_or_queries)
    check_corpus(corpus, f"recipe {recipe.name!r}")
    injected = _check_overrides(pipeline, overrides or {}, batch, corpus)
    target = output or recipe.output
    if target not in pipeline.classes:
        raise RecipeError(f"{recipe.source}: output {target!r} is not a stage of recipe {recipe.name!r}; "
                          f"stages: {', '.join(pipeline.order)}", source=recipe.source)
    needed = pipeline.needed(target, injected)
    to_run = [name for name in needed if name not in injected]
    stages = pipeline.instances(values, to_run)

    outputs: dict[str, Any] = {QUERY_NODE: batch}
    recorder = TraceRecorder(recipe, batch, values, corpus) if trace else None
    keys: dict[str, Any] | None = {QUERY_NODE: ("query", batch.texts, batch.originals,
                                                batch.origin.tobytes())} if cache is not None else None
    # the corpus object, and its store's version when it has one (a delete bumps it: stale outputs miss)
    corpus_key = (id(corpus), getattr(getattr(corpus, "store", None), "version", None)) if cache is not None else None

    for name in needed:
        cls = pipeline.classes[name]
        bound = pipeline.bindings[name]
        if name in injected:
            outputs[name] = injected[name]
            if keys is not None:
                keys[name] = _key_of(injected[name])
            if recorder is not None:
                recorder.append(StageEvent(name, cls.kind, {}, {}, dict(bound), injected[name], 0.0, "override"))
            continue
        stage = stages[name]
        spec = recipe.stages[name]

        # gather inputs by port; a variadic port gets {upstream: value} without inactive entries
        kwargs: dict[str, Any] = {}
        active = all(any(values.get(param) == v and isinstance(values.get(param), bool) == isinstance(v, bool)
                         for v in allowed) for param, allowed in spec.when.items())
        for port in cls.inputs:
            sources = bound.get(port.name)
            if not sources:
                continue
            if port.variadic:
                live = {s: outputs[s] for s in sources if not is_inactive(outputs[s])}
                if len(live) < port.minimum:
                    active = False
                kwargs[port.name] = live
            else:
                value = outputs[sources[0]]
                if is_inactive(value) and port.required:
                    active = False
                kwargs[port.name] = value

        start = time.perf_counter() if recorder is not None else 0.0
        status = "ran"
        if not active:
            output: Any = Candidates.inactive(batch) if cls.output is CANDIDATES else INACTIVE
            status = "inactive"
        else:
            key = None
            output = _MISSING
            if cache is not None and keys is not None:
                input_keys = tuple((port, tuple(keys[s] for s in sources)) for port, sources in bound.items())
                try:
                    # the name too: it prefixes the provenance columns the stage writes; parameters by
                    # a type-exact key, so {"n": True} never reuses the output of {"n": 1}
                    key = (name, cls.kind, cls, cache_key(stage.params()), input_keys, corpus_key)
                except UnkeyableError:  # a parameter too deep to key: run the stage, never guess
                    key = None
                if key is not None:
                    output = cache.get(key, corpus)
                if output is not _MISSING:
                    status = "cached"
            if output is _MISSING:
                output = _run_stage(stage, StageContext(corpus, name, batch), kwargs, name, corpus)
                if cache is not None:
                    cache.executions[name] += 1
                    if key is not None:
                        cache.put(key, corpus, output)
            if keys is not None:
                # an unkeyed output gets a key of its own, so nothing downstream can hit on it either
                keys[name] = key if key is not None else ("uncached", object())
        if keys is not None and not active:
            keys[name] = ("inactive", name)
        outputs[name] = output
        if recorder is not None:
            elapsed = (time.perf_counter() - start) * 1000.0
            inputs_by_upstream = {s: outputs[s] for sources in bound.values() for s in sources}
            recorder.append(StageEvent(name, cls.kind, stage.params(), inputs_by_upstream, dict(bound), output,
                                       elapsed, status))

    return Result(recipe=recipe, corpus=corpus, queries=batch, single=single, params=values,
                  outputs=outputs, trace=recorder, output_name=target)


def _run_stage(stage: Any, ctx: Any, kwargs: Mapping[str, Any], name: str, corpus: Any) -> Any:
    where = f"while running stage {name!r} ({stage.kind})"
    try:
        output = stage.run(ctx, **kwargs)
    except Exception as error:  # keep the type (callers catch ValueError, EmbedderError...), say where
        if hasattr(error, "add_note"):  # Python >= 3.11
            error.add_note(where)
        raise
    why = _check_output(output, type(stage).output, corpus)
    if why is not None:
        raise StageError(f"stage {name!r} ({stage.kind}) returned an invalid output: {why}")
    if type(stage).output is MASK and output.flags.writeable:
        output = frozen_array(output, bool)  # stage outputs are immutable
    return output
