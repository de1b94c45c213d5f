#!/usr/bin/env bash
# The MPI tests (docs/transport.md): mpi_check under `mpirun -np 4` for every
# plan, a rank that stops, a rank far behind (backpressure), a rank given
# other bytes, a rank that is killed, a rank SIGSTOPped, and the Python
# module with plan="locality" under `mpirun -np 2` beside mpi4py, and the
# nodes ranks report (ranks_per_node, and detected).
# usage: test_mpi.sh MPI_CHECK LADE_CLI TMPDIR
set -uo pipefail
check_bin=$1 lade=$2 tmp=$3
command -v mpirun >/dev/null || { echo "SKIPPED: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
run=(mpirun --oversubscribe)
[ "$(id -u)" -eq 0 ] && run+=(--allow-run-as-root)
fail=0
rm -rf "$tmp" && mkdir -p "$tmp"

echo "== every plan, 4 ranks"
timeout 600 "${run[@]}" -np 4 "$check_bin" "$tmp/a" all; rc=$?
[ $rc -eq 77 ] && exit 77
[ $rc -eq 0 ] || { echo "FAIL: mpi_check all (exit $rc)"; fail=1; }

echo "== resume at another world size: 4 ranks save into epoch 1, 2 ranks resume (locality over MPI)"
timeout 120 "${run[@]}" -np 4 "$check_bin" "$tmp/r" resize-save "$tmp/r.pos" &&
  timeout 120 "${run[@]}" -np 2 "$check_bin" "$tmp/r" resize-load "$tmp/r.pos" ||
  { echo "FAIL: mpi_check resize"; fail=1; }

echo "== warm restart: every rank's surviving disk cache seeds the plan (exchanged over MPI)"
timeout 200 "${run[@]}" -np 4 "$check_bin" "$tmp/w" warm || { echo "FAIL: mpi_check warm"; fail=1; }

echo "== a rank that stops mid-epoch"
timeout 120 "${run[@]}" -np 4 "$check_bin" "$tmp/b" fault-stop 1 || { echo "FAIL: mpi_check fault-stop"; fail=1; }
timeout 120 "${run[@]}" -np 4 "$check_bin" "$tmp/b" fault-stop 4 || { echo "FAIL: mpi_check fault-stop (one node)"; fail=1; }
timeout 120 "${run[@]}" -np 4 "$check_bin" "$tmp/b" close-early || { echo "FAIL: mpi_check close-early"; fail=1; }

echo "== settings that differ between ranks are named at start"
out=$(timeout 120 "${run[@]}" -np 4 "$check_bin" "$tmp/c" mismatch 2>&1); rc=$?
echo "$out" | tail -3
[ $rc -eq 0 ] || { echo "FAIL: mpi_check mismatch"; fail=1; }

echo "== nodes: ranks_per_node=2 makes 2 nodes of 2 ranks; detection finds one node of 4"
timeout 120 "${run[@]}" -np 4 "$check_bin" "$tmp/t" topology || { echo "FAIL: mpi_check topology"; fail=1; }

echo "== a rank far behind: the early messages it holds stay within its window (backpressure)"
timeout 120 "${run[@]}" -np 4 "$check_bin" "$tmp/l" lag || { echo "FAIL: mpi_check lag"; fail=1; }

echo "== one rank given other bytes under the same names and sizes: every rank fails at start, naming it"
"$lade" gen npy "$tmp/same" --count 64 --shape 16 --seed 1 >/dev/null
"$lade" gen npy "$tmp/other" --count 64 --shape 16 --seed 2 >/dev/null
out=$(timeout 120 "${run[@]}" -np 4 sh -c 'd=$1; [ "$OMPI_COMM_WORLD_RANK" = 2 ] && d=$2;
  exec "$0" bench "$d" --plan locality --set cache_mem_bytes=20000 --epochs 2 --batch-size 4' \
  "$lade" "$tmp/same" "$tmp/other" 2>&1); rc=$?
echo "$out" | grep -i "disagree" | head -4
n=$(echo "$out" | grep -c "learners disagree on the dataset's bytes.*rank 2 has")
if [ $rc -ne 0 ] && [ "$n" -eq 4 ]; then echo "ok   other bytes on rank 2: exit $rc, all 4 ranks name rank 2"
else echo "FAIL: other bytes on rank 2: exit $rc, $n of 4 ranks named it"; fail=1; fi

echo "== one rank given a copy with one file renamed: every rank fails at start, naming it"
rm -rf "$tmp/renamed" && cp -r "$tmp/same" "$tmp/renamed"
mv "$tmp/renamed/class_03/sample_00000003.npy" "$tmp/renamed/class_03/sample_renamed.npy"
out=$(timeout 120 "${run[@]}" -np 4 sh -c 'd=$1; [ "$OMPI_COMM_WORLD_RANK" = 2 ] && d=$2;
  exec "$0" bench "$d" --plan locality --set cache_mem_bytes=20000 --epochs 2 --batch-size 4' \
  "$lade" "$tmp/same" "$tmp/renamed" 2>&1); rc=$?
n=$(echo "$out" | grep -c "learners disagree on the dataset's sample names.*rank 2 has")
if [ $rc -ne 0 ] && [ "$n" -eq 4 ]; then echo "ok   a renamed file on rank 2: exit $rc, all 4 ranks name rank 2"
else echo "FAIL: a renamed file on rank 2: exit $rc, $n of 4 ranks named it"; echo "$out" | head -5; fail=1; fi

echo "== mpirun lade bench --plan: per-rank and aggregate counts (intra-node handoffs too) equal the plan's, for every kind"
"$lade" gen npy "$tmp/g" --count 480 --shape 64 >/dev/null
for kind in regular+lru regular+belady distcache locality solar; do
  rm -f "$tmp"/bench.*
  timeout 120 "${run[@]}" -np 4 sh -c 'exec "$0" bench "$1" --plan "$2" --set cache_mem_bytes=40000 \
    --set drop_last=true --epochs 3 --batch-size 16 --json > "$3/bench.$OMPI_COMM_WORLD_RANK"' \
    "$lade" "$tmp/g" "$kind" "$tmp" || { echo "FAIL: lade bench --plan $kind under mpirun"; fail=1; continue; }
  verdict=$(/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
ranks = [json.load(open("%s/bench.%d" % (sys.argv[1], r))) for r in range(4)]
ok = sorted(r["rank"] for r in ranks) == [0, 1, 2, 3]
ok &= all((r["node"], r["nodes"], r["local_rank"], r["ranks_per_node"]) == (0, 1, r["rank"], 4) for r in ranks)
for r in ranks:
    for e in r["epochs"]:
        ok &= (e["cache"], e["peer"], e["storage"], e["fallbacks"], e["handoff"]) == \
              (e["predicted_cache"], e["predicted_peer"], e["predicted_storage"], 0, e["predicted_handoff"])
        # one node of 4 (detected): the node-aware kinds plan per node, their peers all intra-node handoffs
        if e["plan"] in ("distcache", "locality", "solar"):
            ok &= e["handoff"] == e["peer"]
        else:
            ok &= e["handoff"] == 0
    for e, a in enumerate(r["aggregate"]):
        ok &= a["cache"] == sum(x["epochs"][e]["cache"] for x in ranks) and \
              (a["cache"], a["peer"], a["storage"]) == (a["predicted_cache"], a["predicted_peer"], a["predicted_storage"])
print("ok" if ok else "bad")
PY
)
  if [ "$verdict" = ok ]; then echo "ok   lade bench --plan $kind: per rank and all ranks as the plan predicts"
  else echo "FAIL: lade bench --plan $kind under mpirun: $verdict"; fail=1; fi
done

echo "== a rank killed mid-epoch: the job ends, non-zero, naming it, in bounded time"
"$lade" gen npy "$tmp/k" --count 2000 --shape 256 >/dev/null
start=$(date +%s)
out=$(timeout 120 "${run[@]}" -np 4 sh -c 'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then (sleep 1; kill -9 $$) & fi;
  exec "$0" bench "$1" --plan distcache --set cache_mem_bytes=700000 --set drop_last=true --epochs 1000 \
  --batch-size 8 --set peer_timeout_ms=5000 --step-ms 5 --no-checksum' "$lade" "$tmp/k" 2>&1); rc=$?
took=$(( $(date +%s) - start ))
echo "$out" | grep -iE "rank|signal|killed" | head -5
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -lt 60 ] && echo "$out" | grep -qiE "rank 1|signal 9|killed"; then
  echo "ok   killed rank: exit $rc after ${took}s"
else
  echo "FAIL: killed rank: exit $rc after ${took}s"; fail=1
fi

echo "== a rank stopped (SIGSTOP) for 45 s: after the peer timeout the job ends within a bound, non-zero"
start=$(date +%s)
# rank 1 is stopped once its loader runs (its first epoch done), not while MPI starts (MPI_Init waits for
# every process, without lade's bound); its output goes to a file the stopper watches
rm -f "$tmp/stopped.out"
# node_cache=off: every handoff is a message, so the others wait for rank 1 (with the node's shared cache full of
# distcache's admits they would not need it, and rightly go on: mpi_check fault-stop 4 stops a rank of a node)
out=$(timeout 120 "${run[@]}" -np 4 sh -c 'set -- "$0" bench "$1" --plan distcache --set cache_mem_bytes=700000 \
  --set drop_last=true --epochs 1000 --batch-size 8 --set peer_timeout_ms=3000 --step-ms 5 --no-checksum \
  --set node_cache=off
  [ "$OMPI_COMM_WORLD_RANK" = 1 ] || exec "$@"
  o=$(dirname "$3")/stopped.out
  (until grep -q "epoch 0 done" "$o" 2>/dev/null; do kill -0 $$ 2>/dev/null || exit; sleep 0.1; done
   kill -STOP $$; sleep 45; kill -CONT $$) >/dev/null 2>&1 &
  exec stdbuf -oL "$@" >"$o"' "$lade" "$tmp/k" 2>&1); rc=$?
took=$(( $(date +%s) - start ))
echo "$out" | grep -iE "aborting|did not arrive" | head -3
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -lt 30 ] && echo "$out" | grep -q "aborting the MPI job" &&
   echo "$out" | grep -q "from rank 1 "; then
  echo "ok   stopped rank: exit $rc after ${took}s (the stop lasts 45 s)"
else
  echo "FAIL: stopped rank: exit $rc after ${took}s (the stop lasts 45 s)"; fail=1
fi

echo "== the same from Python, the error caught and the script exiting: the job still ends within a bound"
if /usr/bin/python3 -c "import lade" 2>/dev/null; then
  start=$(date +%s)
  out=$(timeout 120 "${run[@]}" -np 4 /usr/bin/python3 "$here/stopped_rank.py" "$tmp/k" 1 2>&1); rc=$?
  took=$(( $(date +%s) - start ))
  echo "$out" | grep -E "caught|aborting" | head -2
  # the job ends either by lade's MPI_Abort (a rank whose lost peer did not close) or by mpirun, once a rank that
  # caught the error exits non-zero first (which of the two comes first is a race)
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -lt 30 ] && echo "$out" | grep -q "caught after" &&
     echo "$out" | grep -qE "aborting the MPI job|exited with non-zero status|returned a non-zero exit code"; then
    echo "ok   stopped rank, Python: exit $rc after ${took}s (the stop lasts 45 s)"
  else
    echo "FAIL: stopped rank, Python: exit $rc after ${took}s (the stop lasts 45 s)"; fail=1
  fi
else
  echo "skipped: the lade module is missing"
fi

echo "== the Python module under mpirun beside mpi4py, plan=locality"
if /usr/bin/python3 -c "import mpi4py, lade" 2>/dev/null; then
  timeout 300 "${run[@]}" -np 2 /usr/bin/python3 -m pytest -q -p no:cacheprovider "$here/test_mpi_python.py" \
    || { echo "FAIL: python under mpirun"; fail=1; }
else
  echo "skipped: mpi4py or the lade module is missing"
fi

echo "== the node cache under mpirun: one per node (2 nodes of 2 ranks, then 1 node of 4), every byte the files'"
"$lade" gen npy "$tmp/nc" --count 480 --shape 64 >/dev/null
nc_run() { # out-file, settings...
  local o=$1 sets=(); shift
  for kv in "$@"; do sets+=(--set "$kv"); done
  timeout 120 "${run[@]}" -np 4 sh -c 'd=$1 s=$2 o=$3; shift 3; exec "$0" bench "$d" --json --epochs 2 \
    --batch-size 10 --threads 2 --step-ms 5 --set cache_mem_bytes=4000000 --set shm_dir="$s" "$@" \
    > "$o.$OMPI_COMM_WORLD_RANK"' "$lade" "$tmp/nc" "$tmp/ncshm" "$o" "${sets[@]}"
}
mkdir -p "$tmp/ncshm"
if nc_run "$tmp/nc_off" node_cache=off && nc_run "$tmp/nc_2x2" ranks_per_node=2 && nc_run "$tmp/nc_1x4" ranks_per_node=4; then
  verdict=$(/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
load = lambda name: [json.load(open(f"{t}/{name}.{r}")) for r in range(4)]
off, two, one = load("nc_off"), load("nc_2x2"), load("nc_1x4")
n = 480
bad = []
misses = lambda runs: sum(r["cache_misses"] for r in runs)
for name, runs, rpn in (("2x2", two, 2), ("1x4", one, 4)):
    if [r["checksum"] for r in runs] != [r["checksum"] for r in off]:
        bad.append(f"{name}: checksums differ from node_cache=off's")
    for node in range(4 // rpn):
        mine = [r for r in runs if r["node"] == node]
        entries = max(r["node_cache_entries"] for r in mine)
        # one copy per node: every storage read was put once (sample 0 at open may be read by each rank)
        if not entries <= misses(mine) <= entries + rpn - 1:
            bad.append(f"{name} node {node}: {misses(mine)} storage reads, {entries} entries")
# 1 x 4: the dataset read from storage once for the node over both epochs (a full cache: the second epoch
# hits, up to the ranks' skew, a sample one rank reads in its second epoch before another's first is a hit there)
if misses(one) > n + 3 or misses(off) < n * 1.3:
    bad.append(f"storage reads: {misses(one)} with the node cache, {misses(off)} with a cache per rank")
print("; ".join(bad) if bad else f"ok   storage reads: 1x4 {misses(one)}, 2x2 {misses(two)}, a cache per rank "
      f"{misses(off)} (dataset {n}, 2 epochs)")
PY
)
  echo "$verdict"
  case "$verdict" in ok*) ;; *) echo "FAIL: node cache under mpirun"; fail=1 ;; esac
  [ -z "$(ls "$tmp/ncshm")" ] || { echo "FAIL: node cache segments left behind: $(ls "$tmp/ncshm")"; fail=1; }
else
  echo "FAIL: lade bench with the node cache under mpirun"; fail=1
fi

echo "== model-parallel groups read once under mpirun: plan=shards, model_parallel=2 and 4, one node of 4"
/usr/bin/python3 - "$tmp/mp" <<'PY'
import io, os, sys, tarfile
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
for s in range(12):
    with tarfile.open(os.path.join(d, "train-%06d.tar" % s), "w", format=tarfile.USTAR_FORMAT) as t:
        for j in range(25):
            i = s * 25 + j
            data = bytes((i * 7 + k) % 251 for k in range(300))
            ti = tarfile.TarInfo("s%06d_%03d.bin" % (s, j))
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
PY
mp_run() { # out-file, settings...
  local o=$1 sets=(); shift
  for kv in "$@"; do sets+=(--set "$kv"); done
  timeout 120 "${run[@]}" -np 4 sh -c 'd=$1 s=$2 o=$3; shift 3; exec "$0" bench "$d" --json --plan shards \
    --transform raw --epochs 2 --batch-size 8 --threads 2 --step-ms 15 --set shm_dir="$s" "$@" \
    > "$o.$OMPI_COMM_WORLD_RANK"' "$lade" "$tmp/mp" "$tmp/ncshm" "$o" "${sets[@]}"
}
for k in 2 4; do
  if mp_run "$tmp/mp_off$k" model_parallel=$k node_cache=off && mp_run "$tmp/mp_on$k" model_parallel=$k; then
    verdict=$(/usr/bin/python3 - "$tmp" "$k" <<'PY'
import json, sys
t, k = sys.argv[1], int(sys.argv[2])
load = lambda name: [json.load(open(f"{t}/{name}.{r}")) for r in range(4)]
off, on = load(f"mp_off{k}"), load(f"mp_on{k}")
bad = []
if [r["checksum"] for r in on] != [r["checksum"] for r in off]:
    bad.append("checksums differ")
reads = lambda runs, e: sum(r["epochs"][e]["samples_by_source"][0] for r in runs)
for e in range(2):
    if reads(off, e) < k * 300 or reads(on, e) > reads(off, e) // k * 1.1:
        bad.append(f"epoch {e}: {reads(on, e)} storage reads with the node cache, {reads(off, e)} without")
print("; ".join(bad) if bad else f"ok   model_parallel={k}: storage reads per epoch {reads(off, 0)} -> "
      f"{reads(on, 0)}, {reads(off, 1)} -> {reads(on, 1)}")
PY
)
    echo "$verdict"
    case "$verdict" in ok*) ;; *) echo "FAIL: model_parallel=$k under mpirun"; fail=1 ;; esac
  else
    echo "FAIL: lade bench --plan shards model_parallel=$k under mpirun"; fail=1
  fi
done
[ -z "$(ls "$tmp/ncshm")" ] || { echo "FAIL: node cache segments left behind: $(ls "$tmp/ncshm")"; fail=1; }

[ $fail -eq 0 ] && echo "== mpi tests passed"
exit $fail
