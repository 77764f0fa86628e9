"""The engine: recipes, their validation and graph, the executor, results, traces, the Stage base and its ports.

This package is also the one import home of stage authors::

    from irflow.engine import CANDIDATES, Candidates, Port, Scale, Stage, finite_number, param, register_stage

Its modules, bottom to top (each imports only modules above it in this list,
and nothing of the seed API, the evaluation harness or the command line):

- ``ports``, ``scale``, ``batches``, ``validators``, ``registry``: port types,
  what a score means, the columnar Candidates and QueryBatch, parameter
  validators, the application's registry of named callables;
- ``stage``, ``kinds``: the Stage base class and the registry of stage kinds;
- ``formats``, ``model``, ``parse``: recipe files, the recipe as data, parsing;
- ``instantiate``, ``graph``, ``facts``, ``validate``, ``pipeline``, ``params``:
  building stage objects, the DAG, what validation learns, validation as a
  list of checks, the validated pipeline, a run's parameters;
- ``events``, ``values``, ``positions``, ``explain``, ``diff``, ``shortfall``, ``tracecheck``,
  ``tracefile``, ``stageview``, ``trace``, ``result``: what a run records and returns
  (``shortfall``: the queries that got fewer than ``k`` hits while more match), and how it is
  explained, diffed, dumped, checked, loaded and shown; the sub-package
  ``report`` (between ``explain`` and ``diff``: ``diff``, ``trace`` and ``result`` use it,
  ``batches`` its notebook view of a batch) makes their HTML pages and notebook views;
- ``plan``: the plan of an untraced run (stages switched off, passed through, run);
- ``executor``: runs the stages an output needs, once per batch;
- ``recipe``: the :class:`Recipe` facade (load, validate, run) and the builder.

May import: :mod:`irflow.store` (the corpus protocol), :mod:`irflow.kernels`,
:mod:`irflow.util`, :mod:`irflow.errors`.  A corpus is reached only through
:class:`irflow.store.protocol.CorpusProtocol`.
"""

from __future__ import annotations

from irflow.engine import registry
from irflow.engine.batches import Candidates, QueryBatch, Scale, fill_value
from irflow.engine.executor import StageCache
from irflow.engine.kinds import ENTRY_POINT_GROUP, get_stage_class, register_stage, stage_kinds, unregister_stage
from irflow.engine.ports import CANDIDATES, CONTEXTS, HITS, MASK, QUERIES, QUERY, Port, PortType
from irflow.engine.recipe import Recipe, RecipeBuilder, builtin_recipes, load_recipe, ref
from irflow.engine.result import Result
from irflow.engine.stage import Promise, Stage, StageContext, Upstream, param
from irflow.engine.trace import Trace, diff
from irflow.engine.validators import (
    boolean,
    finite_number,
    is_finite,
    non_negative_int,
    non_negative_number,
    number_mapping,
    one_of,
    optional_mapping,
    optional_str_list,
    positive_int,
    positive_number,
    str_tuple,
)
from irflow.store.protocol import CorpusProtocol

__all__ = [
    # writing a stage kind
    "Stage",
    "StageContext",
    "Upstream",
    "Promise",
    "param",
    "register_stage",
    "unregister_stage",
    "get_stage_class",
    "stage_kinds",
    "ENTRY_POINT_GROUP",
    "Port",
    "PortType",
    "QUERY",
    "QUERIES",
    "MASK",
    "CANDIDATES",
    "HITS",
    "CONTEXTS",
    "Candidates",
    "QueryBatch",
    "Scale",
    "fill_value",
    "CorpusProtocol",
    # parameter validators
    "boolean",
    "finite_number",
    "is_finite",
    "non_negative_int",
    "non_negative_number",
    "number_mapping",
    "one_of",
    "optional_mapping",
    "optional_str_list",
    "positive_int",
    "positive_number",
    "str_tuple",
    # recipes and runs
    "Recipe",
    "RecipeBuilder",
    "builtin_recipes",
    "load_recipe",
    "ref",
    "Result",
    "StageCache",
    "Trace",
    "diff",
    "registry",
]
