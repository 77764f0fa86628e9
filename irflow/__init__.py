"""irflow — document retrieval as an explicit, inspectable dataflow.

A query goes through a DAG of small typed stages (formulate, filter, dense,
lexical, fuse, weight, rerank, boost, collapse, expand) declared in a recipe
(TOML, YAML or Python), run in batches and traced stage by stage.
:func:`search` is one prebuilt recipe (``recipes/search.toml``) on that engine.

>>> import irflow
>>> corpus = irflow.build([irflow.Record("unbox", "description", "unpack any archive")])
>>> [hit.artifact_id for hit in irflow.search(corpus, "archive", mode="hybrid")]
['unbox']
"""

from __future__ import annotations

import logging

from irflow.engine.batches import Candidates, QueryBatch, Scale
from irflow.kernels.bm25 import BM25Params
from irflow.api.constants import (
    DFLT_BLEND_ALPHA,
    DFLT_BM25_SAT_K,
    DFLT_RRF_K,
    FUSIONS,
    MODES,
    Identity,
    Retriever,
    ScoreBoost,
)
from irflow.store.corpus import Corpus, build
from irflow.store.mergepolicy import MergePolicy
from irflow.store.updates import UpdateReport
from irflow.api.boosts import dependency_evidence_boost
from irflow.kernels.embedders import Embedder, resolve_embedder
from irflow.errors import (
    AnalyzerError,
    CorpusError,
    EmbedderError,
    FilterError,
    FilterParameterError,
    IrflowError,
    IrflowWarning,
    MissingRecordWarning,
    NoLedgerEntry,
    ParameterError,
    RecipeError,
    RerankerUnavailableWarning,
    StageError,
    UnknownFieldWarning,
    UnknownSurfaceWarning,
)
from irflow.evaluation.evaluate import Evaluation, evaluate, evaluate_runs, holdout_split
from irflow.engine.executor import StageCache
from irflow.api.federate import fuse_hits
from irflow.kernels.filters import CompiledFilter, compile_filter
from irflow.store.ledger import records_for_artifact
from irflow.engine.recipe import Recipe, RecipeBuilder, builtin_recipes, load_recipe
from irflow.store.records import Record, SearchHit
from irflow.api.reranking import Reranker, cross_encoder_reranker, rerank, with_reranker
from irflow.engine.result import Result
from irflow.api.retrieve import SearchError, as_retriever, search
from irflow.engine.kinds import register_stage, stage_kinds
from irflow.engine.stage import Stage
from irflow.store.record_store import CorpusStore
from irflow.kernels.text import ANALYZERS, Analyzer, get_analyzer
from irflow.engine.trace import Trace, diff
# open_corpus opens plain and sharded corpora alike.  irflow.shard is the function: this binding
# replaces the subpackage the import set on irflow (its modules stay importable by path:
# from irflow.shard.driver import ..., from irflow.shard import driver)
from irflow.shard import ShardedCorpus, open_corpus, shard
from irflow.engine import registry

__version__ = "0.2.0"

# a library configures no logging: its records go where the application sends them (the irflow
# command sends them to stderr: -v, -q, --log-level), and nowhere without one
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "ANALYZERS",
    "AnalyzerError",
    "Analyzer",
    "BM25Params",
    "Candidates",
    "CompiledFilter",
    "Corpus",
    "CorpusError",
    "CorpusStore",
    "DFLT_BLEND_ALPHA",
    "DFLT_BM25_SAT_K",
    "DFLT_RRF_K",
    "Embedder",
    "Evaluation",
    "EmbedderError",
    "FUSIONS",
    "FilterError",
    "FilterParameterError",
    "Identity",
    "IrflowError",
    "IrflowWarning",
    "MissingRecordWarning",
    "MODES",
    "MergePolicy",
    "NoLedgerEntry",
    "ParameterError",
    "QueryBatch",
    "Recipe",
    "RecipeBuilder",
    "RecipeError",
    "Record",
    "Reranker",
    "Result",
    "Retriever",
    "Scale",
    "ScoreBoost",
    "SearchError",
    "SearchHit",
    "ShardedCorpus",
    "RerankerUnavailableWarning",
    "Stage",
    "StageCache",
    "StageError",
    "UnknownFieldWarning",
    "UnknownSurfaceWarning",
    "UpdateReport",
    "Trace",
    "__version__",
    "as_retriever",
    "build",
    "builtin_recipes",
    "compile_filter",
    "cross_encoder_reranker",
    "dependency_evidence_boost",
    "diff",
    "evaluate",
    "evaluate_runs",
    "fuse_hits",
    "get_analyzer",
    "holdout_split",
    "load_recipe",
    "open_corpus",
    "records_for_artifact",
    "register_stage",
    "registry",
    "rerank",
    "resolve_embedder",
    "search",
    "shard",
    "stage_kinds",
    "with_reranker",
]
