"""Stage reuse in a sweep: executions per stage and wall time, shared cache vs one evaluate() per setting.

Run from the repository root: python benchmarks/quality/sweep_reuse.py   (after pip install -e .)
"""
import time

from irflow.evaluation.datasets import load_beir
from irflow.evaluation.evaluate import evaluate
from irflow.evaluation.sweep import expand_sweep

collection = load_beir("../shared/data/scifact", "train")
sweep = {"alpha": [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], "bm25_sat_k": [4, 8, 16]}
common = dict(analyzer="english", metrics="ndcg@10,recall@100", params={"fusion": "blend"})
evaluate("hybrid", collection, queries=list(collection.eval_queries)[:5], **common)  # warm the corpus cache
start = time.perf_counter()
ev = evaluate("hybrid", collection, sweep=sweep, **common)
shared = time.perf_counter() - start
print(f"sweep of {len(ev)} settings over {ev.n_queries} queries, one shared StageCache: {shared:.1f} s; "
      f"stage executions: {dict(ev.stage_cache.executions)}")
start = time.perf_counter()
for setting in expand_sweep(sweep):
    evaluate("hybrid", collection, **{**common, "params": {"fusion": "blend", **setting}})
print(f"the same {len(ev)} settings as separate evaluate() calls: {time.perf_counter() - start:.1f} s")
