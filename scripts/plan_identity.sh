#!/bin/bash
# plan_identity.sh BASE_LADE NEW_LADE: `lade plan --dump` and `--out` of every kind, in
# 51 settings, byte for byte between two builds (a refactor of plan/ must
# leave both identical). Exit 1 when any differ.
BASE=${1:?usage: plan_identity.sh BASE_LADE NEW_LADE}; NEW=${2:?usage: plan_identity.sh BASE_LADE NEW_LADE}
T=$(mktemp -d); trap 'rm -rf $T' EXIT
n=0; bad=0
for kind in regular regular+lru regular+belady distcache locality solar; do
 for set in "--learners 1 --cache 0" "--learners 4 --cache 0" "--learners 1 --cache 50" "--learners 4 --cache 30" "--learners 4 --cache 200 --no-drop-last" "--learners 4 --cache-bytes 4000 --sample-bytes 100 --seed 7" "--learners 4 --cache 40 --imbalance 2 --order pso" "--learners 4 --cache 40 --balance storage --no-reorder --no-coalesce"; do
  args="--plan $kind --samples 203 --batch-size 5 --epochs 3 $set"
  for tool in BASE NEW; do
    L=${!tool}
    $L plan $args --dump > $T/$tool.dump 2>$T/$tool.err; echo "rc=$?" >> $T/$tool.dump
    rm -f $T/$tool.plan; $L plan $args --out $T/$tool.plan >/dev/null 2>>$T/$tool.err
  done
  n=$((n+1))
  if ! cmp -s $T/BASE.dump $T/NEW.dump || ! cmp -s $T/BASE.plan $T/NEW.plan; then echo "DIFF: $args"; bad=$((bad+1)); fi
  [ -s $T/BASE.plan ] || echo "no plan file: $args"
 done
done
# shards --dump
for set in "--learners 8 --model-parallel 2 --shards 7" "--learners 4 --shard-size 10 --buffer 50" "--learners 1 --shards 3 --buffer 0"; do
  args="--plan shards --samples 1003 --batch-size 16 --epochs 3 $set"
  $BASE plan $args --dump > $T/B.s 2>&1; $NEW plan $args --dump > $T/N.s 2>&1; n=$((n+1))
  cmp -s $T/B.s $T/N.s || { echo "DIFF: $args"; bad=$((bad+1)); }
done
echo "$n settings compared, $bad differ"
[ "$bad" -eq 0 ]
