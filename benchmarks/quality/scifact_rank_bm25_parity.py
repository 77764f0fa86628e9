"""rank_bm25 (BM25Okapi, default k1=1.5, b=0.75, epsilon=0.25) over title + text on SciFact test,
scored with irflow.evaluation.metrics, next to irflow's lexical recipe on the very same tokens.

Run from the repository root: python benchmarks/quality/scifact_rank_bm25_parity.py   (after pip install -e .)
"""
import re
import sys
import time

import numpy as np
from rank_bm25 import BM25Okapi

from irflow.evaluation.datasets import load_beir
from irflow.evaluation.evaluate import evaluate
from irflow.evaluation.metrics import evaluate_run
from irflow.kernels.text import Analyzer

DATA = sys.argv[1] if len(sys.argv) > 1 else "../shared/data/scifact"
METRICS = ["ndcg@10", "recall@100"]
collection = load_beir(DATA, "test")
docs = list(collection.documents.values())
texts = [f"{d.title}\n{d.text}" if d.title else d.text for d in docs]   # = Collection.records("prepend")
ids = [d.id for d in docs]
qids = list(collection.eval_queries)

WORD = re.compile(r"\w+")
english = Analyzer("plain", stopwords="english", stemmer="english")   # plain \w+ tokens, stopwords, Snowball
tokenizers = {
    "plain (re \\w+ lowercase)": lambda t: WORD.findall(t.lower()),
    "plain + english stopwords + Snowball": english,
    "identifier": Analyzer("identifier"),
    "english (identifier + stopwords + Snowball)": Analyzer("english"),
}
for name, tok in tokenizers.items():
    start = time.time()
    bm25 = BM25Okapi([tok(t) for t in texts])
    run = {}
    for q in qids:
        scores = bm25.get_scores(tok(collection.queries[q]))
        top = np.argsort(-scores, kind="stable")[:1000]
        run[q] = {ids[i]: float(scores[i]) for i in top if scores[i] > 0}
    ref = evaluate_run(run, collection.qrels, METRICS)
    # irflow's lexical recipe over a corpus built with the same analyzer
    analyzer = tok if isinstance(tok, Analyzer) else Analyzer("plain")
    ev = evaluate("lexical", collection, embedder=None, analyzer=analyzer, metrics=METRICS, use_cache=False)
    mine = ev["lexical"].means
    print(f"{name:48s} rank_bm25 ndcg@10 {ref['ndcg@10']:.4f} recall@100 {ref['recall@100']:.4f} | "
          f"irflow ndcg@10 {mine['ndcg@10']:.4f} recall@100 {mine['recall@100']:.4f} "
          f"({time.time() - start:.0f} s)")
    # same scores, query by query (irflow drops zero scores too)
    worst = max(max((abs(run[q].get(d, 0.0) - s) for d, s in ev["lexical"].run[q].items()), default=0.0) for q in qids)
    print(f"{'':48s} max |score difference| over irflow's top 1000: {worst:.2e}")
