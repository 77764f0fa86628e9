"""english vs identifier vs plain analyzers (lexical recipe) on the tuning queries, paired tests.

Run from the repository root: python benchmarks/quality/analyzer_significance.py   (after pip install -e .)
Tuning queries: SciFact qrels/train.tsv (809); Cranfield and CISI: holdout_split(seed=0) 'tune' half.
"""
from irflow.evaluation.datasets import load_beir
from irflow.evaluation.evaluate import evaluate, holdout_split
from irflow.evaluation.significance import compare_many

D = __import__("os").environ.get("IRFLOW_DATA") or "../shared/data"
sets = {
    "scifact train": (load_beir(f"{D}/scifact", "train"), None),
    "cranfield tune": (load_beir(f"{D}/cranfield"), "tune"),
    "cisi tune": (load_beir(f"{D}/cisi"), "tune"),
}
for name, (collection, half) in sets.items():
    queries = None if half is None else holdout_split(collection.eval_queries, seed=0)[0]
    per = {}
    for analyzer in ("plain", "identifier", "english"):
        ev = evaluate("lexical", collection, embedder=None, analyzer=analyzer, metrics="ndcg@10", queries=queries)
        per[analyzer] = ev["lexical"].per_query["ndcg@10"]
    out = compare_many(per["identifier"], {"english": per["english"], "plain": per["plain"]})
    for other, c in out.items():
        print(f"{name:15s} {other:8s} vs identifier: diff {c.mean_diff:+.4f}  t p(holm) {c.t_p_adjusted:.2g}  "
              f"rand p(holm) {c.rand_p_adjusted:.2g}  W/L/T {c.wins}/{c.losses}/{c.ties}")
