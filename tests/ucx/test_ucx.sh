#!/usr/bin/env bash
# The UCX transport's tests (docs/transport.md, UCX), no mpirun anywhere:
# ucx_check in 4 processes started here, the addresses exchanged through a
# rendezvous folder, for every plan (per-rank counts equal the plan's, the
# sums the simulator's, bytes the files'); the same under torchrun (C, the
# folder named by torchrun's run id); the failure cases: a rank that never
# starts, a rank killed mid-epoch, a rank that stops early, a seed that
# differs on one rank, a rank far behind (backpressure); a warm restart
# (every rank's surviving disk cache exchanged by the transport's allgather
# seeds the plan: counts as lade_plan_warm's, fewer storage reads than cold),
# also under torchrun, and a rank that does not join that exchange or exits; a
# rank where UCX cannot be opened (ucx_missing.py: auto goes on without it on
# every rank, ucx fails on every rank); then the Python module under torchrun
# with a gloo process group (test_ucx_python.py, every plan against `lade plan`).
# usage: test_ucx.sh UCX_CHECK LADE_CLI TMPDIR
set -uo pipefail
check_bin=$1 lade=$2 tmp=$3
here=$(cd "$(dirname "$0")" && pwd)
fail=0
rm -rf "$tmp" && mkdir -p "$tmp"

# starts ucx_check for ranks 0..3 (or those given in $ranks) in mode $1, job $2; waits; fills rcs[]
run4() {
  local mode=$1 job=$2 dir=$3; shift 3
  local pids=() r
  rcs=()
  mkdir -p "$dir"
  for r in ${ranks:-0 1 2 3}; do
    timeout 300 "$check_bin" "$dir" "$r" 4 "$mode" "$dir/rdv" "$job" > "$dir/log.$mode.$r" 2>&1 &
    pids[$r]=$!
  done
  for r in ${ranks:-0 1 2 3}; do wait "${pids[$r]}"; rcs[$r]=$?; done
}

# sums the ranks' counts of every (kind, cache, epoch) against the simulator's, sent against received
sums_ok() {
  /usr/bin/python3 - "$1" <<'PY'
import collections, glob, sys
cnt = collections.defaultdict(lambda: [0, 0, 0]); sim = {}; sent = collections.Counter(); peer = collections.Counter()
files = glob.glob(sys.argv[1] + "/out/all.*")
for f in files:
    for line in open(f):
        w = line.split()
        if w[0] == "count":
            k = tuple(w[1:4]); v = list(map(int, w[4:7]))
            cnt[k] = [a + b for a, b in zip(cnt[k], v)]; peer[tuple(w[1:3])] += v[1]
        elif w[0] == "sim":
            sim[tuple(w[1:4])] = list(map(int, w[4:7]))
        elif w[0] == "sent":
            sent[tuple(w[1:3])] += int(w[3])
bad = [k for k in sim if cnt[k] != sim[k]] + [k for k in sent if sent[k] != peer[k]]
ok = len(files) == 4 and len(sim) == 30 and not bad and sum(peer.values()) > 0
print("ok" if ok else "bad: %d files, %d (kind, cache, epoch), differ: %s" % (len(files), len(sim), bad[:4]))
PY
}

echo "== every plan, 4 processes, the addresses through a rendezvous folder"
run4 all job-all "$tmp/a"
cat "$tmp"/a/log.all.* | grep -E "FAIL|rank [0-9]+ .*(epoch|create)" | head -20
grep -h "^rank 0:" "$tmp/a/log.all.0" | head -40
if [ "${rcs[*]}" = "0 0 0 0" ] && [ "$(sums_ok "$tmp/a")" = ok ]; then
  echo "ok   every plan: every rank as its plan, the sums as the simulator's, sent = received"
else
  echo "FAIL: every plan: exits ${rcs[*]}, sums $(sums_ok "$tmp/a")"; fail=1
fi

echo "== a seed that differs on rank 2: every rank fails at create naming the setting and rank 2"
run4 mismatch job-mismatch "$tmp/m"
grep -h "disagree" "$tmp"/m/log.mismatch.* | head -4
if [ "${rcs[*]}" = "0 0 0 0" ]; then echo "ok   mismatch"; else echo "FAIL: mismatch: exits ${rcs[*]}"; fail=1; fi

echo "== a rank that never starts: the others fail within the bound, naming it"
start=$(date +%s)
ranks="0 1 3" run4 mismatch job-never "$tmp/n"
took=$(( $(date +%s) - start ))
grep -h "did not write" "$tmp"/n/log.mismatch.* | head -3
n=$(grep -l "rank 2 did not write its address" "$tmp"/n/log.mismatch.* | wc -l)
if [ "${rcs[0]}" -ne 0 ] && [ "${rcs[1]}" -ne 0 ] && [ "${rcs[3]}" -ne 0 ] && [ "$n" -eq 3 ] && [ $took -lt 90 ]; then
  echo "ok   a rank that never starts: all 3 name rank 2, after ${took}s"
else echo "FAIL: a rank that never starts: exits ${rcs[*]}, $n of 3 name rank 2, ${took}s"; fail=1; fi

echo "== a rank that stops early in epoch 1 and closes its loader: the others fail within the bound"
run4 fault-stop job-stop "$tmp/s"
grep -h "as expected" "$tmp"/s/log.fault-stop.* | head -3
names1=$(cat "$tmp"/s/out/fault-stop.* 2>/dev/null | grep -c "names1 1")
if [ "${rcs[*]}" = "0 0 0 0" ] && [ "$names1" -ge 1 ]; then echo "ok   fault-stop"
else echo "FAIL: fault-stop: exits ${rcs[*]}, $names1 name rank 1"; fail=1; fi

echo "== a rank far behind: the early messages it holds stay within its window (backpressure)"
run4 lag job-lag "$tmp/l"
grep -h "held at most\|FAIL" "$tmp"/l/log.lag.* | head -4
if [ "${rcs[*]}" = "0 0 0 0" ]; then echo "ok   lag"; else echo "FAIL: lag: exits ${rcs[*]}"; fail=1; fi

# sums the ranks' storage reads after the warm and the cold restart, per node size: warm < cold for each
warm_ok() {
  /usr/bin/python3 - "$1" <<'PY'
import collections, glob, sys
sums = collections.defaultdict(lambda: [0, 0, 0])
files = glob.glob(sys.argv[1] + "/out/warm.*")
for f in files:
    for line in open(f):
        w = line.split()
        if w[0] == "storage":
            v = sums[w[1]]; v[0] += int(w[2]); v[1] += int(w[3]); v[2] = int(w[4])  # survivors: every rank's
ok = len(files) == 4 and len(sums) == 2 and all(v[0] < v[1] and v[2] > 0 for v in sums.values())
print("ok" if ok else "bad: %d files, %s" % (len(files), dict(sums)))
for rpn, (w, c, n) in sorted(sums.items()):
    print("     ranks_per_node %s: %d entries survived; storage reads after the restart %d, cold %d" % (rpn, n, w, c),
          file=sys.stderr)
PY
}

echo "== warm restart: every rank's surviving disk cache seeds the plan (exchanged by the UCX allgather)"
run4 warm job-warm "$tmp/w"
grep -h "FAIL\|epoch\|create" "$tmp"/w/log.warm.* | head -8
if [ "${rcs[*]}" = "0 0 0 0" ] && [ "$(warm_ok "$tmp/w" 2>/dev/null)" = ok ]; then warm_ok "$tmp/w" >/dev/null; echo "ok   warm"
else echo "FAIL: warm: exits ${rcs[*]}, sums $(warm_ok "$tmp/w" 2>&1)"; fail=1; fi

echo "== warm restart, a rank that does not join the exchange: the others fail at the bound, naming it"
run4 warm-skip job-wskip "$tmp/ws"
grep -h "as expected" "$tmp"/ws/log.warm-skip.* | head -3
if [ "${rcs[*]}" = "0 0 0 0" ]; then echo "ok   warm-skip"; else echo "FAIL: warm-skip: exits ${rcs[*]}"; fail=1; fi

echo "== warm restart, a rank that exits instead of joining the exchange: the others fail at once, naming it"
run4 warm-die job-wdie "$tmp/wd"
grep -h "as expected" "$tmp"/wd/log.warm-die.* | head -3
if [ "${rcs[*]}" = "0 0 0 0" ]; then echo "ok   warm-die"; else echo "FAIL: warm-die: exits ${rcs[*]}"; fail=1; fi

echo "== a rank killed (SIGKILL) mid-epoch: the others fail within the bound, naming it"
mkdir -p "$tmp/k"
pids=()
for r in 0 1 2 3; do  # no `timeout` in between: the kill must reach the rank itself
  "$check_bin" "$tmp/k" $r 4 run "$tmp/k/rdv" job-kill > "$tmp/k/log.$r" 2>&1 &
  pids[$r]=$!
done
(sleep 120; kill -9 "${pids[@]}") 2>/dev/null &
watchdog=$!
for i in $(seq 1 300); do [ "$(grep -l running "$tmp"/k/log.* 2>/dev/null | wc -l)" -eq 4 ] && break; sleep 0.1; done
sleep 1
start=$(date +%s)
kill -9 "${pids[1]}"
for r in 0 2 3; do wait "${pids[$r]}"; rcs[$r]=$?; done
wait "${pids[1]}" 2>/dev/null
kill "$watchdog" 2>/dev/null
took=$(( $(date +%s) - start ))
grep -h "stopped:" "$tmp"/k/log.* | head -3
n=$(grep -l "stopped: .*rank 1" "$tmp"/k/log.0 "$tmp"/k/log.2 "$tmp"/k/log.3 | wc -l)
if [ "${rcs[0]}" -eq 3 ] && [ "${rcs[2]}" -eq 3 ] && [ "${rcs[3]}" -eq 3 ] && [ "$n" -ge 1 ] && [ $took -lt 60 ]; then
  echo "ok   killed rank: the others failed after ${took}s, $n naming rank 1"
else echo "FAIL: killed rank: exits ${rcs[0]} ${rcs[2]} ${rcs[3]}, $n name rank 1, ${took}s"; fail=1; fi

torchrun=(/usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node=4 --redirects 2 --tee 2)
if /usr/bin/python3 -c "import torch.distributed" 2>/dev/null; then
  echo "== torchrun --standalone --nproc_per_node=4 ucx_check (C; the folder keyed by torchrun's run id)"
  mkdir -p "$tmp/t"
  timeout 600 "${torchrun[@]}" --no_python "$check_bin" "$tmp/t" - - all "$tmp/t/rdv" - > "$tmp/t/log" 2>&1; rc=$?
  grep -E "FAIL" "$tmp/t/log" | head
  if [ $rc -eq 0 ] && [ "$(sums_ok "$tmp/t")" = ok ]; then echo "ok   torchrun, C: every plan as planned"
  else echo "FAIL: torchrun, C: exit $rc, sums $(sums_ok "$tmp/t")"; tail -20 "$tmp/t/log"; fail=1; fi

  echo "== torchrun --standalone --nproc_per_node=4 ucx_check warm (C): a warm restart across the ranks"
  mkdir -p "$tmp/tw"
  timeout 600 "${torchrun[@]}" --no_python "$check_bin" "$tmp/tw" - - warm "$tmp/tw/rdv" - > "$tmp/tw/log" 2>&1; rc=$?
  grep -E "FAIL|epoch [0-9]+:" "$tmp/tw/log" | head
  if [ $rc -eq 0 ] && [ "$(warm_ok "$tmp/tw" 2>/dev/null)" = ok ]; then warm_ok "$tmp/tw" >/dev/null
    echo "ok   torchrun, C: warm restart as planned"
  else echo "FAIL: torchrun, C: warm: exit $rc, sums $(warm_ok "$tmp/tw" 2>&1)"; tail -20 "$tmp/tw/log"; fail=1; fi

  echo "== torchrun --standalone --nproc_per_node=2, the Python module: UCX cannot be opened on rank 1"
  torchrun2=(/usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node=2 --redirects 2 --tee 2)
  for mode in auto ucx; do
    rm -rf "$tmp/miss-$mode"
    t0=$(date +%s)
    timeout 300 "${torchrun2[@]}" "$here/ucx_missing.py" $mode "$tmp/miss-$mode" > "$tmp/miss-$mode.log" 2>&1; rc=$?
    took=$(( $(date +%s) - t0 ))
    n=$(grep -o "ok rank [01]:" "$tmp/miss-$mode.log" | sort -u | wc -l)  # the ranks' lines may interleave
    if [ $rc -eq 0 ] && [ "$n" -eq 2 ]; then echo "ok   UCX missing on rank 1, transport=$mode: both ranks ok in ${took}s"
      grep -o "ok rank [01]: .*" "$tmp/miss-$mode.log" | cut -c1-160 | head -2
    else echo "FAIL: UCX missing on rank 1, transport=$mode: exit $rc, $n ranks ok"; tail -20 "$tmp/miss-$mode.log"; fail=1; fi
  done

  echo "== torchrun --standalone --nproc_per_node=4, the Python module, gloo: every plan against lade plan"
  LADE_CLI="$lade" LADE_UCX_TMP="$tmp/py" timeout 600 "${torchrun[@]}" -m pytest -q -p no:cacheprovider -x \
    "$here/test_ucx_python.py" > "$tmp/py.log" 2>&1; rc=$?
  grep -E "passed|failed|Error|error" "$tmp/py.log" | head -20
  [ $rc -eq 0 ] || { echo "FAIL: the Python module under torchrun (exit $rc)"; tail -40 "$tmp/py.log"; fail=1; }
else
  echo "SKIPPED: torch is missing (apt-get install python3-torch)"; [ $fail -eq 0 ] && exit 77
fi

[ $fail -eq 0 ] && echo "== ucx tests passed"
exit $fail
