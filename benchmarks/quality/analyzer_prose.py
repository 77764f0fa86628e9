"""The english analyzer's prose rules against rank_bm25 over stopworded, Snowball-stemmed tokens.

Reproduces README's table "The prose rules of the english analyzer": nDCG@10 of the lexical
recipe (depth 1000: recall@1000 is computed too) on the tuning queries — SciFact qrels/train.tsv,
the seeded tune halves of Cranfield and CISI (holdout_split(seed=0), as `irflow eval --holdout
tune`) — and on the test queries as confirmation, for:

- the baseline: rank_bm25's BM25Okapi (its default parameters, which are irflow's) over
  lowercase \\w+ tokens minus the english stopword list, Snowball-stemmed (PyStemmer), ranked by
  numpy over all documents; no irflow code but the metrics (equal to pytrec_eval's, tested);
- english with the version-1 rules (whole compounds and their parts, every camel cut):
  Analyzer("english", prose=False);
- the prose rules added one at a time (hyphen compounds as words, then abbreviations, then the
  camel rule), the last row being the english analyzer as it is.

Run from the repository root (after pip install -e .):  python benchmarks/quality/analyzer_prose.py
The data folder is ../shared/data, or $IRFLOW_DATA.  About 2 minutes on a 2-core machine.
"""

from __future__ import annotations

import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import Stemmer
from rank_bm25 import BM25Okapi

import irflow.kernels.text as text
from irflow.evaluation.datasets import load_beir
from irflow.evaluation.evaluate import evaluate, evaluate_runs, holdout_split
from irflow.kernels.stopwords import ENGLISH_STOPWORDS

DATA = Path(os.environ.get("IRFLOW_DATA") or "../shared/data")
METRICS = "ndcg@10,recall@1000"
DEPTH = 1000


def query_sets():
    """(label, collection, query ids) for the tuning sets, then the test sets."""
    scifact_train, scifact_test = load_beir(DATA / "scifact", "train"), load_beir(DATA / "scifact", "test")
    halves = {}
    for name in ("cranfield", "cisi"):
        collection = load_beir(DATA / name)
        tune, test = holdout_split(collection.eval_queries, seed=0)
        halves[name] = (collection, tune, test)
    return [
        ("SciFact train", scifact_train, list(scifact_train.eval_queries)),
        ("Cranfield tune", halves["cranfield"][0], halves["cranfield"][1]),
        ("CISI tune", halves["cisi"][0], halves["cisi"][1]),
        ("SciFact test", scifact_test, list(scifact_test.eval_queries)),
        ("Cranfield test half", halves["cranfield"][0], halves["cranfield"][2]),
        ("CISI test half", halves["cisi"][0], halves["cisi"][2]),
    ]


def stemmed_tokens(stemmer, value: str) -> list[str]:
    return stemmer.stemWords([t for t in re.findall(r"\w+", value.lower()) if t not in ENGLISH_STOPWORDS])


def baseline(sets) -> list[float]:
    stemmer = Stemmer.Stemmer("english")
    indexes = {}
    out = []
    for _, collection, qids in sets:
        key = (collection.name, collection.path)
        if key not in indexes:
            records = collection.records("prepend")  # title + text, as irflow eval builds them
            indexes[key] = ([r.artifact_id for r in records],
                            BM25Okapi([stemmed_tokens(stemmer, r.text) for r in records]))
        ids, bm25 = indexes[key]
        run = {}
        for qid in qids:
            scores = bm25.get_scores(stemmed_tokens(stemmer, collection.queries[qid]))
            top = np.argsort(-scores, kind="stable")[:DEPTH]
            run[qid] = {ids[i]: float(scores[i]) for i in top}
        result = evaluate_runs({"baseline": run}, {q: collection.qrels[q] for q in qids}, metrics=METRICS)
        out.append(result["baseline"].means["ndcg@10"])
    return out


@contextmanager
def rules(abbreviations: bool, camel: bool):
    """The english prose rules with the abbreviation and camel rules switched on or off."""
    compound, camel_min = text._prose_compound, text._PROSE_CAMEL_MIN
    if not abbreviations:
        text._prose_compound = lambda low, runs: "." not in low
    if not camel:
        text._PROSE_CAMEL_MIN = 0
    text._UNIT_CACHES.clear()
    try:
        yield
    finally:
        text._prose_compound, text._PROSE_CAMEL_MIN = compound, camel_min
        text._UNIT_CACHES.clear()


def lexical(sets, analyzer) -> list[float]:
    out = []
    for _, collection, qids in sets:
        ev = evaluate("lexical", collection, embedder=None, analyzer=analyzer, metrics=METRICS, queries=qids,
                      use_cache=False)
        out.append(ev["lexical"].means["ndcg@10"])
    return out


def main() -> None:
    if not (DATA / "scifact").is_dir():
        print(f"no {DATA}/scifact: nothing to measure", file=sys.stderr)
        return
    sets = query_sets()
    rows = [("rank_bm25, stopworded Snowball-stemmed \\w+ tokens", baseline(sets)),
            ("english, version-1 rules (prose=False)", lexical(sets, text.Analyzer("english", prose=False)))]
    with rules(abbreviations=False, camel=False):
        rows.append(("+ hyphen compounds as their words", lexical(sets, "english")))
    with rules(abbreviations=True, camel=False):
        rows.append(("+ abbreviations as their letters", lexical(sets, "english")))
    rows.append(("+ camel cuts only into 3+ char parts = english", lexical(sets, "english")))
    labels = [label for label, _, _ in sets]
    print("| rules | " + " | ".join(labels[:3]) + " | tuning mean | " + " | ".join(labels[3:]) + " |")
    print("|---|" + "---:|" * 7)
    for name, values in rows:
        mean = sum(values[:3]) / 3
        cells = [f"{v:.4f}" for v in values[:3]] + [f"{mean:.4f}"] + [f"{v:.4f}" for v in values[3:]]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
