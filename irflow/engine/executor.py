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
from collections.abc import Hashable, Mapping
from typing import Any

import attrs
import numpy as np

from irflow.engine.batches import Candidates, QueryBatch, frozen_array
from irflow.engine.events import INACTIVE, StageEvent, TraceRecorder, is_inactive
from irflow.engine.model import QUERY_NODE, RecipeSpec
from irflow.engine.params import resolve_params_keyed
from irflow.engine.pipeline import Pipeline
from irflow.engine.plan import OFF, THROUGH, Step, plan_run, when_holds
from irflow.engine.ports import CANDIDATES, HITS, MASK, QUERIES, QUERY, PortType
from irflow.engine.result import Result
from irflow.engine.shortfall import Shortfall, find_shortfalls
from irflow.engine.stage import Stage, StageContext
from irflow.errors import ArgumentError, ParameterError, RecipeError, StageError
from irflow.store.protocol import CorpusProtocol, pinned
from irflow.util.cachekey import UnkeyableError, cache_key
from irflow.util.fileio import check_nesting
from irflow.util.unicode import check_text, find_lone_surrogate, surrogate_reason

__all__ = ["run_recipe", "check_corpus", "StageCache", "StageEvent", "TraceRecorder", "INACTIVE", "is_inactive"]


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
        check_text(query_or_queries, "the query")  # InputError: text UTF-8 cannot encode (irflow.util.unicode)
        return QueryBatch.of([query_or_queries]), True
    if isinstance(query_or_queries, QueryBatch):
        batch = query_or_queries
    else:
        batch = QueryBatch.of(query_or_queries)  # ArgumentError for a dict, a set, bytes, a non-iterable
    for i, text in enumerate(batch.originals):  # text UTF-8 cannot encode is refused (irflow.util.unicode)
        check_text(text, f"query {i}")
    if batch.texts is not batch.originals:  # a formulated batch passed in: its texts are embedded too
        for i, text in enumerate(batch.texts):
            check_text(text, f"query text {i}")
    return batch, False


def _text_problem(name: str, value: Any) -> str | None:
    """Why run argument ``name`` is refused for its text (a lone surrogate in a string, keys included), or None."""
    found = find_lone_surrogate(value, name)
    if found is None:
        return None
    where, text, at = found
    return f"{'' if where == name else f'{where}: '}{surrogate_reason(text, at)}"


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


def _check_overrides(pipeline: Pipeline, overrides: Mapping[str, Any], batch: QueryBatch,
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


#: Argument types that hold nothing (exact types: a subclass could be a container).
_SCALARS: frozenset[type] = frozenset({int, float, str, bool, type(None)})


def run_recipe(recipe: RecipeSpec, corpus: CorpusProtocol, query_or_queries: Any, *, trace: bool = False,
               overrides: Mapping[str, Any] | None = None, cache: StageCache | None = None,
               output: str | None = None, params: Mapping[str, Any] | None = None) -> Result:
    """Run ``recipe`` on ``corpus`` (see :meth:`irflow.engine.recipe.Recipe.run`).

    The run reads one state of the corpus throughout (:func:`irflow.store.protocol.pinned`).
    """
    corpus = pinned(corpus)
    run = _Run.prepare(recipe, corpus, query_or_queries, trace=trace, overrides=overrides or {}, cache=cache,
                       output=output, params=params or {})
    if run.recorder is None and run.keys is None and not run.injected:
        run.run_planned()  # nothing to record, key or inject (every search()): the planned path
    else:
        for name in run.needed:
            if name in run.injected:
                run.inject(name)
            else:
                run.execute(name)
    short = run.shortfalls()
    if run.recorder is not None:
        run.recorder.short = short
    return Result(recipe=recipe, corpus=corpus, queries=run.batch, single=run.single, params=run.values,
                  outputs=run.outputs, trace=run.recorder, output_name=run.target, short=short)


@attrs.define(eq=False)
class _Run:
    """One run of a recipe: what it resolved before any stage ran, and each stage's output as it comes."""

    recipe: RecipeSpec
    pipeline: Pipeline
    corpus: CorpusProtocol
    batch: QueryBatch
    single: bool
    values: dict[str, Any]
    injected: dict[str, Any]
    target: str
    needed: tuple[str, ...]
    stages: dict[str, Stage]
    cache: StageCache | None
    outputs: dict[str, Any]
    recorder: TraceRecorder | None
    # cache keys of the outputs so far, and of the corpus (None: no cache, nothing is keyed)
    keys: dict[str, Any] | None
    corpus_key: Any
    values_key: Hashable | None = None
    switched_off: Candidates | None = None

    @classmethod
    def prepare(cls, recipe: RecipeSpec, corpus: CorpusProtocol, query_or_queries: Any, *, trace: bool,
                overrides: Mapping[str, Any], cache: StageCache | None, output: str | None,
                params: Mapping[str, Any]) -> "_Run":
        """Resolve everything a run needs before a stage runs; bad arguments fail here, naming what is wrong."""
        pipeline = Pipeline.of(recipe)
        for name, value in params.items():  # freezing and hashing parameters recurse: bound the depth first
            kind = type(value)
            if kind is str and value.isascii():
                continue
            if kind not in _SCALARS:  # a plain scalar nests nothing (a fixed cost of every search())
                check_nesting(value, f"recipe {recipe.name!r}: parameter {name!r}")
            if kind not in _SCALARS or kind is str:  # text must be UTF-8 text, at any depth
                why = _text_problem(name, value)
                if why is not None:
                    raise ParameterError(recipe.name, [(name, value, why, None)])
        values, values_key = resolve_params_keyed(recipe, params)
        batch, single = _batch(query_or_queries)
        check_corpus(corpus, f"recipe {recipe.name!r}")
        injected = _check_overrides(pipeline, overrides, batch, corpus)
        target = output or recipe.output
        if target not in pipeline.classes:
            raise RecipeError(f"{recipe.source}: output {target!r} is not a stage of recipe {recipe.name!r}; "
                              f"stages: {', '.join(pipeline.order)}", source=recipe.source)
        needed = pipeline.needed(target, injected)
        stages = pipeline.instances(values, [name for name in needed if name not in injected], values_key=values_key)
        recorder = TraceRecorder(recipe, batch, values, corpus) if trace else None
        keys = None
        corpus_key = None
        if cache is not None:
            keys = {QUERY_NODE: ("query", batch.texts, batch.originals, batch.origin.tobytes())}
            # the corpus object and its version (a delete bumps it: stale outputs miss)
            corpus_key = (id(corpus), corpus.version)
        return cls(recipe, pipeline, corpus, batch, single, values, injected, target, needed, stages, cache,
                   {QUERY_NODE: batch}, recorder, keys, corpus_key, values_key)

    def run_planned(self) -> None:
        """Run the needed stages by the plan of an untraced run (:mod:`irflow.engine.plan`).

        Switched-off stages output an inactive batch and pass-through stages
        their input, without a call; the others are called with the inputs
        the plan bound.  A stage whose upstreams did not come out as planned
        (one switched itself off) runs the general way.
        """
        def make() -> tuple[Step, ...]:
            return plan_run(self.pipeline, self.stages, self.needed, self.values)

        steps = make() if self.values_key is None else self.pipeline.remember(
            ("untraced plan", self.needed, self.values_key), make)
        outputs = self.outputs
        for step in steps:
            name, action = step.name, step.action
            if action == OFF:
                outputs[name] = self._inactive() if step.candidates else INACTIVE
            elif (step.live or step.off) and not _as_planned(outputs, step):
                self.execute(name)  # an upstream switched itself off: the general way
            elif action == THROUGH:
                outputs[name] = outputs[step.source]
            else:  # inputs as planned: the stage's arguments are its planned-active upstreams' outputs
                kwargs = {port: {s: outputs[s] for s in sources} if variadic else outputs[sources[0]]
                          for port, variadic, sources in step.ports}
                outputs[name] = _run_stage(self.stages[name], StageContext(self.corpus, name, self.batch), kwargs,
                                           name, self.corpus)

    def shortfalls(self) -> tuple[Shortfall, ...]:
        """The queries that got fewer results than the output stage promises while more may match."""
        stage = self.stages.get(self.target)
        promise = stage.promised() if stage is not None else None
        return find_shortfalls(self.corpus, self.batch, self.outputs.get(self.target), promise, self._first_stages)

    def _first_stages(self) -> list[tuple[str, Stage, Candidates, dict[str, Any]]]:
        """The first stages that ran (a fetch depth, an active output), with the inputs they got."""
        found = []
        for name in self.needed:
            stage, out = self.stages.get(name), self.outputs.get(name)
            if stage is None or not isinstance(out, Candidates) or not out.active \
                    or stage.fetch_depths(out.queries) is None:
                continue
            found.append((name, stage, out, self._inputs(name)[0]))
        return found

    def inject(self, name: str) -> None:
        """Take stage ``name``'s output from the caller's overrides."""
        cls, value = self.pipeline.classes[name], self.injected[name]
        self.outputs[name] = value
        if self.keys is not None:
            self.keys[name] = _key_of(value)
        if self.recorder is not None:
            self.recorder.append(StageEvent(name, cls.kind, {}, {}, dict(self.pipeline.bindings[name]), value, 0.0,
                                            "override"))

    def execute(self, name: str) -> None:
        """Run stage ``name`` once for the whole batch (or reuse its cached output, or switch it off)."""
        stage = self.stages[name]
        kwargs, active, live = self._inputs(name)
        if self.recorder is None and self.keys is None:
            # untraced and uncached (every search()): nothing to record or key; a stage that declares
            # it would return an input unchanged is not called — its output is that input
            self.outputs[name] = self._plain(name, stage, kwargs, active, live)
            return
        cls, bound = self.pipeline.classes[name], self.pipeline.bindings[name]
        start = time.perf_counter() if self.recorder is not None else 0.0
        if not active:
            output: Any = self._inactive() if cls.output is CANDIDATES else INACTIVE
            status = "inactive"
            if self.keys is not None:
                self.keys[name] = ("inactive", name)
        else:
            output, status = self._cached_or_run(name, stage, kwargs)
            if status == "ran" and _returned_input(stage, kwargs, live, output):
                status = "passed"  # it had nothing to do (no reranker, one channel): a trace says so
        self.outputs[name] = output
        if self.recorder is not None:
            elapsed = (time.perf_counter() - start) * 1000.0
            inputs_by_upstream = {s: self.outputs[s] for sources in bound.values() for s in sources}
            self.recorder.append(StageEvent(name, cls.kind, stage.params(), inputs_by_upstream, dict(bound), output,
                                            elapsed, status))

    def _plain(self, name: str, stage: Stage, kwargs: dict[str, Any], active: bool, live: dict[str, int]) -> Any:
        """A stage's output in an untraced, uncached run."""
        if not active:
            return self._inactive() if type(stage).output is CANDIDATES else INACTIVE
        port = stage.passes_through(live)
        if port is None:
            return _run_stage(stage, StageContext(self.corpus, name, self.batch), kwargs, name, self.corpus)
        value = kwargs[port]
        return next(iter(value.values())) if isinstance(value, dict) else value

    def _inputs(self, name: str) -> tuple[dict[str, Any], bool, dict[str, int]]:
        """The stage's inputs by port (a variadic port gets ``{upstream: value}`` without inactive entries),
        whether it runs (its ``when`` holds and no required input is inactive), and the live upstreams per port."""
        when, ports = self.pipeline.input_plan(name)
        active = when_holds(when, self.values)
        kwargs: dict[str, Any] = {}
        counts: dict[str, int] = {}
        for port, variadic, minimum, required, sources in ports:
            if variadic:
                live = {s: self.outputs[s] for s in sources if not is_inactive(self.outputs[s])}
                if len(live) < minimum:
                    active = False
                kwargs[port] = live
                counts[port] = len(live)
            else:
                value = self.outputs[sources[0]]
                off = is_inactive(value)
                if off and required:
                    active = False
                kwargs[port] = value
                counts[port] = 0 if off else 1
        return kwargs, active, counts

    def _inactive(self) -> Candidates:
        """The output of a switched-off stage: one per run, shared (it is empty and immutable)."""
        if self.switched_off is None:
            self.switched_off = Candidates.inactive(self.batch)
        return self.switched_off

    def _cached_or_run(self, name: str, stage: Stage, kwargs: Mapping[str, Any]) -> tuple[Any, str]:
        """The stage's output, from the cache when it holds this very execution, else by running it."""
        key = self._cache_key(name, stage)
        cache = self.cache
        output = _MISSING
        if cache is not None and key is not None:
            output = cache.get(key, self.corpus)
        status = "ran" if output is _MISSING else "cached"
        if output is _MISSING:
            output = _run_stage(stage, StageContext(self.corpus, name, self.batch), kwargs, name, self.corpus)
            if cache is not None:
                cache.executions[name] += 1
                if key is not None:
                    cache.put(key, self.corpus, output)
        if self.keys is not None:
            # an unkeyed output gets a key of its own, so nothing downstream can hit on it either
            self.keys[name] = key if key is not None else ("uncached", object())
        return output, status

    def _cache_key(self, name: str, stage: Stage) -> Any:
        """What determines this stage execution's output (None: no cache, or a parameter too deep to key)."""
        if self.cache is None or self.keys is None:
            return None
        keys = self.keys
        input_keys = tuple((port, tuple(keys[s] for s in sources))
                           for port, sources in self.pipeline.bindings[name].items())
        # parameters that cannot change the output (Stage.unused_params, every bound input counted as
        # live) are left out: a lexical stage's lean without deepen_to reuses the same ranking
        unused = stage.unused_params(self.pipeline.bindings[name])
        params = {k: v for k, v in stage.params().items() if k not in unused}
        try:
            # the name too: it prefixes the provenance columns the stage writes; parameters by
            # a type-exact key, so {"n": True} never reuses the output of {"n": 1}
            return (name, type(stage).kind, type(stage), cache_key(params), input_keys, self.corpus_key)
        except UnkeyableError:  # a parameter too deep to key: run the stage, never guess
            return None


def _returned_input(stage: Stage, kwargs: Mapping[str, Any], live: Mapping[str, int], output: Any) -> bool:
    """Whether ``output`` is the very input the stage declares it passes through (``Stage.passes_through``)."""
    port = stage.passes_through(live)
    if port is None or port not in kwargs:
        return False
    value = kwargs[port]
    if isinstance(value, dict):
        return len(value) == 1 and next(iter(value.values())) is output
    return value is output


def _as_planned(outputs: Mapping[str, Any], step: Step) -> bool:
    """True when the step's upstreams came out active or switched off as its plan assumed."""
    for source in step.live:
        if is_inactive(outputs[source]):
            return False
    for source in step.off:
        if not is_inactive(outputs[source]):
            return False
    return True


def _run_stage(stage: Any, ctx: Any, kwargs: Mapping[str, Any], name: str, corpus: Any) -> Any:
    try:
        output = stage.run(ctx, **kwargs)
    except Exception as error:  # keep the type (callers catch ValueError, EmbedderError...), say where
        if hasattr(error, "add_note"):  # Python >= 3.11
            error.add_note(f"while running stage {name!r} ({stage.kind})")
        raise
    why = _check_output(output, type(stage).output, corpus)
    if why is not None:
        raise StageError(f"stage {name!r} ({stage.kind}) returned an invalid output: {why}")
    if type(stage).output is MASK and output.flags.writeable:
        output = frozen_array(output, bool)  # stage outputs are immutable
    return output
