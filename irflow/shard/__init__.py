"""Sharded corpora: the same recipe over shards — in this process or on Ray — with exactly one machine's answer.

Its job: split a corpus into shards that hold whole artifacts (``shard``),
and serve them behind the corpus protocol (``ShardedCorpus``), so every
recipe, ``search()`` and ``evaluate()`` run on a sharded corpus unchanged
and return the hits, order and scores (bit for bit) one machine returns.

Layering: this package may import the store and kernels layers
(:mod:`irflow.store.corpus`, :mod:`irflow.store.persist`, :mod:`irflow.kernels.bm25`, ...) and
the utilities and errors; the CLI and the evaluation harness may import
it; the engine, the seed API, the store and the kernels never do.  Ray is
an extra (``pip install -e '.[ray]'``) imported only by
:mod:`irflow.shard.ray_backend`, only when a caller asks for Ray.

Modules: ``manifest`` (the shard manifest), ``disk`` (the one commit of a
sharding, readers holding what they open, clean-up), ``split`` (planning
and writing shards), ``worker`` (one shard's side), ``merge`` (global rows and
the top-k merge), ``driver`` (ShardedCorpus), ``backend`` (in-process),
``ray_backend`` (Ray actors, a contained local cluster, batch evaluation).

``irflow.shard`` is the function :func:`shard` (``irflow/__init__.py`` binds it
over the name the import of this package set), so ``help(irflow.shard)`` shows
it.  Its modules are imported by their path: ``from irflow.shard.driver import
ShardedCorpus`` or ``from irflow.shard import driver`` — not ``import
irflow.shard.driver as driver``, which looks ``shard`` up on ``irflow`` and
finds the function.

>>> # sharded = irflow.shard(irflow.open_corpus("corpus"), 4, "corpus.sharded")
>>> # irflow.search(irflow.open_corpus("corpus.sharded", ray="auto"), "sql parser")
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping

from irflow.kernels.embedders import AUTO
from irflow.store.corpus import Corpus
from irflow.store.corpus import open_corpus as _open_plain
from irflow.errors import CorpusError
from irflow.store.paths import resolve_corpus_path
from irflow.store.records import Record
from irflow.shard.disk import is_interrupted
from irflow.shard.driver import ShardedCorpus
from irflow.shard.manifest import ShardManifest, is_sharded
from irflow.shard.split import plan_shards, shard_corpus

__all__ = ["ShardedCorpus", "ShardManifest", "shard", "open_corpus", "is_sharded", "plan_shards"]


def shard(
    source: "Corpus | str | os.PathLike[str] | Iterable[Record | Mapping[str, Any]]",
    n: int,
    path: str | os.PathLike[str],
    *,
    embedder: Any = AUTO,
    analyzer: Any = None,
    name: str | None = None,
    progress: bool = False,
    batch_size: int = 512,
    ray: Any = None,
) -> ShardedCorpus:
    """Split a corpus (a Corpus, a corpus path or name, or records) into ``n`` shards under ``path``; open it.

    An artifact's surfaces stay in one shard; shards are consecutive runs
    of artifacts of about the same size, each a generation of an ordinary
    corpus directory, plus ``shards.json`` (counts, global rows, the
    generation of each shard, the embedder and analyzer all shards share;
    sealed by its checksum).  From records, each shard is built as
    :func:`irflow.build` would build them (``embedder`` — by default the
    model when installed, else "hash", as there —, ``analyzer``,
    ``batch_size`` as there); from a corpus, its arrays are split as they
    are.  Over an existing sharded corpus (or what an interrupted sharding
    left) this is a reshard, committed in one step: a reader, or a crash at
    any point, sees the old sharding or the new one.  Returns the sharded
    corpus opened (``ray`` as :meth:`ShardedCorpus.open`).

    >>> # sharded = irflow.shard(records, 3, "corpus.sharded", embedder="hash")
    """
    shard_corpus(source, n, path, embedder=embedder, analyzer=analyzer, name=name, progress=progress,
                 batch_size=batch_size)
    return ShardedCorpus.open(path, ray=ray, verify=False)  # just written and fsynced: sizes are still checked


def open_corpus(path_or_name: str | os.PathLike[str], *, embedder: Any = None, verify: bool = True,
                ray: Any = None, **ray_options: Any) -> "Corpus | ShardedCorpus":
    """Open a corpus by path or name: a sharded one as a :class:`ShardedCorpus`, any other as a Corpus.

    ``ray`` (sharded corpora only): None serves the shards in this process,
    ``"auto"`` in Ray actors of a local cluster irflow starts (or the one
    this process is connected to), an address joins that cluster.  See
    :func:`irflow.store.corpus.open_corpus` for ``embedder`` and ``verify``.
    """
    root = resolve_corpus_path(path_or_name)
    if is_sharded(root) or is_interrupted(root):  # the latter is refused with what to do
        return ShardedCorpus.open(root, ray=ray, embedder=embedder, verify=verify, **ray_options)
    if (ray is not None or ray_options) and root.is_dir():
        raise CorpusError(f"{root} is not a sharded corpus (no shards.json), so it cannot be served on Ray; shard it "
                          f"first: irflow shard {root} --shards N --out DIR (or irflow.shard(corpus, n, path))")
    return _open_plain(path_or_name, embedder=embedder, verify=verify)

