"""Running a sentence-embedding graph on onnxruntime: the session, batches by token count, mean pooling.

The half of :mod:`irflow.kernels.onnx_embedder` that touches onnxruntime
once the files are found and checked.  Texts go in batches of similar token
counts under a token budget: the exact graph pads each batch to its
longest row (sorted by length, so little padding) and pools each row over
its own tokens only, so padding never changes a row's bits; the fast graph
takes no padding at all, so its batches hold texts of one token count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from irflow.errors import EmbedderError

__all__ = ["MODEL_FIX", "TOKEN_BUDGET", "FAST_TOKEN_BUDGET", "MAX_BATCH", "detail", "session", "batches",
           "run_batch"]

# Tokens per onnxruntime call: on a 2-core x86 machine batches of ~500 tokens
# ran fastest (short texts gain ~20-40% over one text per call; 256-token
# texts gain nothing from batching, and larger batches lose cache locality).
TOKEN_BUDGET = 512
# The fast graph's batches hold texts of one token count (no padding): 512 tokens ran as fast as
# 1024 and faster than 256 or 2048+ (1 thread, SciFact abstracts and titles, onnxruntime 1.32).
FAST_TOKEN_BUDGET = 512
MAX_BATCH = 64

#: What each message about a broken model file says to do.
MODEL_FIX = ("put the model's ONNX export there, copied whole (e.g. optimum-cli export onnx --model NAME FOLDER "
             "writes model.onnx and tokenizer.json)")


def detail(exc: BaseException) -> str:
    """A library's message on one line, cut to about 200 characters (onnxruntime's span many)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:199] + "…"


def session(ort: Any, model: str | bytes, path: Path, threads: int, *, unfused: Sequence[str] = ()) -> Any:
    """An onnxruntime CPU session of ``model`` (a file name, or a graph's bytes; ``path`` names it in messages).

    ``unfused``: onnxruntime optimizers to turn off for this graph.
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    # idle workers sleep instead of spinning: CPU time goes to embedding, not waiting
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(model, sess_options=options, providers=["CPUExecutionProvider"],
                                    disabled_optimizers=list(unfused))
    except Exception as exc:  # noqa: BLE001 — onnxruntime raises its own types
        raise EmbedderError(f"{path}: onnxruntime cannot load this ONNX model ({detail(exc)}); "
                            f"{MODEL_FIX}") from exc


def batches(lengths: np.ndarray, *, same_length: bool) -> list[np.ndarray]:
    """Rows in batches by token count, each within the token budget; ``same_length``: one length per batch.

    The exact graph pads each batch to its longest row (sorted by length, so
    little padding); the fast graph takes no padding, so its batches hold
    texts of one token count.
    """
    order = np.argsort(lengths, kind="stable")
    budget = FAST_TOKEN_BUDGET if same_length else TOKEN_BUDGET
    batches = []
    start = 0
    while start < len(order):
        # grow the batch while its padded size stays within the token budget
        stop = start + 1
        while (stop < len(order) and stop - start < MAX_BATCH
               and int(lengths[order[stop]]) * (stop + 1 - start) <= budget
               and not (same_length and lengths[order[stop]] != lengths[order[start]])):
            stop += 1
        batches.append(order[start:stop])
        start = stop
    return batches


def run_batch(session: Any, names: frozenset[str], batch: list[np.ndarray], model: Path) -> np.ndarray:
    """Mean-pooled (b, dim) float32 vectors of one batch of token id arrays (``model``: for messages)."""
    width = max(len(row) for row in batch)
    input_ids = np.zeros((len(batch), width), dtype=np.int64)
    mask = np.zeros((len(batch), width), dtype=np.int64)
    for i, row in enumerate(batch):
        input_ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    feeds = {"input_ids": input_ids}
    if "attention_mask" in names:
        feeds["attention_mask"] = mask
    if "token_type_ids" in names:
        feeds["token_type_ids"] = np.zeros_like(input_ids)
    try:
        hidden = np.asarray(session.run(None, feeds)[0])
    except Exception as exc:  # noqa: BLE001 — onnxruntime raises its own types
        raise EmbedderError(f"{model}: onnxruntime cannot run this model on tokenized text ({detail(exc)}); "
                            f"{MODEL_FIX}") from exc
    if (hidden.ndim not in (2, 3) or hidden.shape[0] != len(batch) or hidden.shape[-1] == 0
            or (hidden.ndim == 3 and hidden.shape[1] != width)):
        raise EmbedderError(f"{model} outputs shape {hidden.shape} for {len(batch)} texts; a sentence-embedding "
                            f"model outputs (texts, tokens, dim) or (texts, dim): {MODEL_FIX}")
    if hidden.ndim == 2:  # the export pools already
        return hidden.astype(np.float32)
    # each row summed over its own tokens only, so padding never changes its bits
    return np.stack([hidden[i, : len(row)].sum(axis=0, dtype=np.float64) / len(row)
                     for i, row in enumerate(batch)]).astype(np.float32)
