#!/bin/bash
# test_plan_cli.sh LADE TMPDIR - checks lade plan/simulate/model end to end:
# JSON dump contents, plan files (round trip, corruption, foreign version),
# bad settings, the locality/regular storage targets and the model's crossover.
set -u
LADE=$1
T=$2
rm -rf "$T" && mkdir -p "$T"
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }
expect_fail() { # name, regex, command...
  local name=$1 re=$2; shift 2
  if "$@" >"$T/out" 2>&1; then bad "$name: exit 0"; elif grep -Eq "$re" "$T/out"; then ok "$name"; else bad "$name: message: $(cat "$T/out")"; fi
}

# --dump: one JSON line per (epoch, step, learner); every sample once per epoch
"$LADE" plan --plan locality --samples 96 --learners 4 --batch-size 4 --epochs 2 --cache 24 --dump >"$T/d.jsonl" || bad "dump exit"
[ "$(wc -l <"$T/d.jsonl")" = 48 ] && ok "dump lines" || bad "dump lines $(wc -l <"$T/d.jsonl")"
python3 - "$T/d.jsonl" <<'PY' && ok "dump content" || bad "dump content"
import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
for e in (0, 1):
    c = collections.Counter(s for r in rows if r["epoch"] == e for s in r["samples"])
    assert sorted(c) == list(range(96)) and set(c.values()) == {1}, e
assert all(f in ("cache", "storage") or f.startswith("peer:") for r in rows for f in r["from"])
assert all(f == "storage" for r in rows if r["epoch"] == 0 for f in r["from"])
assert all(f != "storage" for r in rows if r["epoch"] == 1 for f in r["from"])  # whole dataset cached
PY

# plan files: round trip equals --dump, corruption and version are caught
"$LADE" plan --plan solar --samples 200 --learners 4 --batch-size 5 --epochs 3 --cache 20 --imbalance 2 --out "$T/p.plan" 2>/dev/null || bad "write plan"
"$LADE" plan --plan solar --samples 200 --learners 4 --batch-size 5 --epochs 3 --cache 20 --imbalance 2 --dump >"$T/a.jsonl"
"$LADE" plan --in "$T/p.plan" --dump >"$T/b.jsonl" || bad "read plan"
cmp -s "$T/a.jsonl" "$T/b.jsonl" && ok "plan file round trip" || bad "plan file round trip"
cp "$T/p.plan" "$T/c.plan"
printf '\x07' | dd of="$T/c.plan" bs=1 seek=400 conv=notrunc 2>/dev/null
expect_fail "corrupt plan file" "checksum" "$LADE" plan --in "$T/c.plan"
cp "$T/p.plan" "$T/v.plan"
printf '\x09' | dd of="$T/v.plan" bs=1 seek=8 conv=notrunc 2>/dev/null
expect_fail "plan file version" "version 9" "$LADE" plan --in "$T/v.plan"
head -c 100 "$T/p.plan" >"$T/t.plan"
expect_fail "truncated plan file" "too short|truncated" "$LADE" plan --in "$T/t.plan"

# impossible settings
expect_fail "cache larger than dataset" "larger than the dataset" "$LADE" simulate --plan locality --samples 100 --learners 2 --batch-size 4 --cache 101
expect_fail "batch larger than dataset" "larger than the dataset" "$LADE" simulate --plan regular --samples 100 --learners 2 --batch-size 101
expect_fail "zero learners" "zero learners" "$LADE" plan --plan regular --samples 100 --learners 0 --batch-size 4 --dump
expect_fail "unknown plan" "unknown plan" "$LADE" plan --plan fastest --dump
expect_fail "bad number" "non-negative integer" "$LADE" simulate --samples 12x

# --resume E:C[:S]: the plan starts inside epoch E with empty caches, the first C positions of its
# order trained on before (at another world size): the rest of it once, cut in this plan's batches
"$LADE" plan --plan locality --samples 96 --learners 3 --batch-size 4 --epochs 2 --cache 24 --resume 0:40 --dump >"$T/r.jsonl" || bad "resume dump exit"
"$LADE" plan --plan regular --samples 96 --learners 4 --batch-size 5 --epochs 2 --dump >"$T/r4.jsonl"
python3 - "$T/r.jsonl" "$T/r4.jsonl" <<'PY' && ok "resume: the rest of the epoch once, then whole epochs" || bad "resume dump content"
import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
reg = [json.loads(l) for l in open(sys.argv[2])]
# 4 learners of 5 trained 2 steps: positions [0, 40) of epoch 0's order; the rest is [40, 96)
order = [s for st in range(4) for r in reg if r["epoch"] == 0 and r["step"] == st for s in r["samples"]]
rest = collections.Counter(s for r in rows if r["epoch"] == 0 for s in r["samples"])
assert not set(rest) & set(order[:40]) and set(rest.values()) == {1}
assert len(rest) == (96 - 40) // 12 * 12 and set(rest) <= set(range(96))
assert min(r["step"] for r in rows if r["epoch"] == 0) == 8 - (96 - 40) // 12  # the epoch's last steps
assert all(f == "storage" for r in rows if r["epoch"] == 0 for f in r["from"])  # caches start empty
c = collections.Counter(s for r in rows if r["epoch"] == 1 for s in r["samples"])
assert sorted(c) == list(range(96))
PY
"$LADE" simulate --plan locality --samples 96 --learners 3 --batch-size 4 --epochs 2 --cache 24 --resume 0:40 >"$T/rs.txt" 2>&1 || bad "resume simulate exit"
awk '$1 == "0" {print $2}' "$T/rs.txt" | grep -qx 48 && ok "simulate --resume: the rest's storage reads" || bad "simulate --resume: $(cat "$T/rs.txt")"
expect_fail "resume past the run" "outside a run" "$LADE" plan --plan locality --samples 96 --learners 3 --batch-size 4 --epochs 2 --cache 24 --resume 2:0 --dump
expect_fail "resume syntax" "EPOCH:CONSUMED" "$LADE" plan --plan locality --samples 96 --learners 3 --batch-size 4 --resume 1 --dump
expect_fail "resume plan file" "whole run" "$LADE" plan --plan locality --samples 96 --learners 3 --batch-size 4 --cache 8 --resume 0:40 --out "$T/r.plan"

# targets: locality with the whole dataset cached reads nothing after epoch 0; regular reads everything
"$LADE" simulate --plan locality --samples 65536 --learners 64 --batch-size 64 --epochs 3 --cache 1024 --no-drop-last >"$T/loc.txt"
awk '$1 ~ /^[12]$/ { n++; if ($2 != 0) b = 1 } END { exit b || n != 2 }' "$T/loc.txt" && ok "locality zero storage" || bad "locality storage: $(cat "$T/loc.txt")"
"$LADE" simulate --plan regular --samples 65536 --learners 64 --batch-size 64 --epochs 3 >"$T/reg.txt"
awk '$1 ~ /^[12]$/ { n++; if ($2 != 65536) b = 1 } END { exit b || n != 2 }' "$T/reg.txt" && ok "regular full storage" || bad "regular storage"

# shards order: --dump is every sample once per epoch over the groups (plus padding), equal
# steps per group, the two ranks of a model-parallel group named together; simulate's table
"$LADE" plan --plan shards --samples 1003 --shards 7 --learners 8 --model-parallel 2 --batch-size 16 --epochs 2 \
  --buffer 50 --no-drop-last --seed 3 --dump >"$T/s.jsonl" || bad "shards dump exit"
python3 - "$T/s.jsonl" <<'PY' && ok "shards dump content" || bad "shards dump content"
import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
for e in (0, 1):
    er = [r for r in rows if r["epoch"] == e]
    real = collections.Counter()
    for r in er:
        real.update(r["samples"][:len(r["samples"]) - r["padding"]])
    assert sorted(real) == list(range(1003)) and set(real.values()) == {1}, e
    per = collections.Counter(r["group"] for r in er)
    assert sorted(per) == [0, 1, 2, 3] and len(set(per.values())) == 1, per  # equal steps
    lens = collections.Counter(r["group"] for r in er for s in r["samples"])
    assert set(lens.values()) == {251}, lens  # ceil(1003 / 4), one group pads one sample
    assert sum(r["padding"] for r in er) == 1
    assert all(r["ranks"] == [2 * r["group"], 2 * r["group"] + 1] for r in er)
e0 = [s for r in rows if r["epoch"] == 0 and r["group"] == 0 for s in r["samples"]]
e1 = [s for r in rows if r["epoch"] == 1 and r["group"] == 0 for s in r["samples"]]
assert e0 != e1
PY
"$LADE" plan --plan shards --samples 1003 --shards 7 --learners 8 --model-parallel 2 --batch-size 16 --epochs 2 \
  --buffer 50 --no-drop-last --seed 3 --dump | cmp -s - "$T/s.jsonl" && ok "shards deterministic" || bad "shards deterministic"
"$LADE" simulate --plan shards --samples 20000 --shard-size 100 --learners 4 --batch-size 64 --epochs 2 >"$T/sq.txt" || bad "shards simulate exit"
grep -q "every group delivers 4992 samples = 78 batches per epoch; per epoch 32 samples dropped" "$T/sq.txt" \
  && ok "shards lengths" || bad "shards lengths: $(cat "$T/sq.txt")"
# b=0 reads shards in order (same shard ~1); more buffer, more shards per batch; the global shuffle the most
awk '$1 ~ /^[01]$/ { k = $2 " " $3; if (k == "shards b=0") { s0 = $6; p0 = $7 } else if (k == "shards b=1000") p1 = $7;
  else if (k == "shards b=10000") p2 = $7; else if (k == "global shuffle") { sg = $6; pg = $7; n++ } }
  END { exit !(n == 2 && s0 > 0.98 && sg < 0.05 && p0 < p1 && p1 < p2 && p2 < pg) }' "$T/sq.txt" \
  && ok "shards quality table" || bad "shards quality: $(cat "$T/sq.txt")"
"$LADE" simulate --plan shards --samples 64 --shard-size 8 --learners 8 --model-parallel 2 --devices-per-node 4 \
  --batch-size 4 --epochs 1 >"$T/sr.txt" && grep -q "rank   5 -> (1, 1): group 2" "$T/sr.txt" \
  && ok "shards rank table" || bad "shards ranks: $(cat "$T/sr.txt")"
expect_fail "shards plan file" "no plan file" "$LADE" plan --plan shards --samples 100 --out "$T/x.plan"
expect_fail "shards too few samples" "fewer than the 4 data-parallel groups" "$LADE" simulate --plan shards --samples 3 --learners 4
expect_fail "shards model parallel" "multiple of --model-parallel" "$LADE" simulate --plan shards --learners 6 --model-parallel 4
expect_fail "shards zero shards" "shards needs a positive" "$LADE" simulate --plan shards --shards 0
expect_fail "shards buffer list" "buffer takes" "$LADE" simulate --plan shards --buffer 1,x

# model: crossover R/V and the three loaders
"$LADE" model --D 1000000 --p 64 --V 100 --R 3200 --beta 0.05 >"$T/m.txt" || bad "model exit"
grep -Eq "crossover +p = R/V +32.00" "$T/m.txt" && ok "model crossover" || bad "model: $(cat "$T/m.txt")"
"$LADE" model --cost >"$T/c.txt" && grep -q "total \\$" "$T/c.txt" && ok "cost model" || bad "cost model"

# nodes (--ranks-per-node): --counts per rank and node agree with --dump's routes and with simulate's
# table; handoffs only inside a node, peers only between nodes; the model splits the two
for kind in distcache locality solar; do
  args="--plan $kind --samples 480 --learners 4 --ranks-per-node 2 --batch-size 16 --epochs 3 --cache 120 --sample-bytes 1000"
  "$LADE" plan $args --dump >"$T/n.jsonl" && "$LADE" plan $args --counts >"$T/n.counts" &&
    "$LADE" simulate $args >"$T/n.sim" || bad "nodes $kind: exit"
  python3 - "$T/n.jsonl" "$T/n.counts" "$T/n.sim" $kind <<'PY' && ok "nodes $kind: --counts = --dump = simulate" || bad "nodes $kind"
import json, sys, collections
dump = [json.loads(l) for l in open(sys.argv[1])]
counts = [json.loads(l) for l in open(sys.argv[2])]
sim = [l.split() for l in open(sys.argv[3]) if l.split() and l.split()[0].isdigit() and len(l.split()) == 11]
want = collections.Counter()
for r in dump:
    for f in r["from"]:
        kind = f.split(":")[0]
        if kind in ("node", "peer"):
            k = int(f.split(":")[1])
            assert (k // 2 == r["learner"] // 2) == (kind == "node") and k != r["learner"], (r, f)
        want[(r["epoch"], r["learner"], {"cache": "own", "node": "handoff", "peer": "inter", "storage": "storage"}[kind])] += 1
ranks = [c for c in counts if "rank" in c]
nodes = [c for c in counts if "rank" not in c]
assert len(ranks) == 12 and len(nodes) == 6
for c in ranks:
    for k in ("own", "handoff", "inter", "storage"):
        assert c[k] == want[(c["epoch"], c["rank"], k)], (c, k)
for n in nodes:
    mine = [c for c in ranks if c["epoch"] == n["epoch"] and c["node"] == n["node"]]
    assert n["cache"] == sum(c["own"] + c["handoff"] for c in mine) and n["in"] == sum(c["inter"] for c in mine)
    assert n["inter_bytes"] == 1000 * n["in"]
assert len(sim) == 3
for e, row in enumerate(sim):
    tot = lambda k: sum(c[k] for c in ranks if c["epoch"] == e)
    assert [int(x) for x in row[1:5]] == [tot("storage"), tot("inter"), tot("own"), tot("handoff")], (row, e)
    assert tot("inter") == sum(n["out"] for n in nodes if n["epoch"] == e)
assert sys.argv[4] != "distcache" or sum(c["handoff"] for c in ranks) > 0  # regular slices: handoffs happen
PY
done
expect_fail "ranks per node must divide" "ranks_per_node \\(3\\) must divide the learners \\(4\\)" "$LADE" simulate --plan locality --samples 100 --learners 4 --batch-size 2 --ranks-per-node 3
"$LADE" model --ranks-per-node 8 --R-intra 100000 --R-inter 10000 --beta 0.05 --gamma 0.1 >"$T/mn.txt" || bad "node model exit"
grep -Eq "I/O, locality-aware +0.96 s" "$T/mn.txt" && ok "node model" || bad "node model: $(cat "$T/mn.txt")"

# two tiers (--cache-disk): --dump names each cached read's tier; simulate's per-tier table adds up to its
# cache reads; the tiered model beats memory alone; --cache-disk outside solar, or in a plan file, is refused
args="--plan solar --samples 600 --learners 4 --batch-size 8 --epochs 3 --cache 20 --cache-disk 60"
"$LADE" plan $args --dump >"$T/t.jsonl" && "$LADE" simulate $args >"$T/t.sim" || bad "tiers: exit"
python3 - "$T/t.jsonl" "$T/t.sim" <<'PY' && ok "tiers: --dump = simulate per tier" || bad "tiers: $(cat "$T/t.sim")"
import json, sys, collections
dump = [json.loads(l) for l in open(sys.argv[1])]
rows = [l.split() for l in open(sys.argv[2]) if l.split() and l.split()[0].isdigit()]
main, tiers = rows[:3], rows[3:]
assert len(tiers) == 3
for e in range(3):
    c = collections.Counter(t for r in dump if r["epoch"] == e for t in r["tier"])
    st = sum(1 for r in dump if r["epoch"] == e for f in r["from"] if f == "storage")
    assert c["-"] == st == int(main[e][1]), (e, c, st)
    assert [c["mem"], c["disk"]] == [int(x) for x in tiers[e][1:3]], (e, c, tiers[e])
    assert c["mem"] + c["disk"] == int(main[e][2]) + int(main[e][3])
assert int(tiers[1][2]) > 0 and int(tiers[1][1]) > 0
PY
expect_fail "tiers: solar only" "solar only" "$LADE" simulate --plan locality --samples 600 --learners 4 --batch-size 8 --cache 20 --cache-disk 60
expect_fail "tiers: no plan file" "two tiers" "$LADE" plan $args --out "$T/t.plan"
"$LADE" model --tiers --p 16 --ranks-per-node 4 --D 100000 --mem-frac 0.2 --disk-frac 0.6 >"$T/mt.txt" || bad "tiers model exit"
python3 - "$T/mt.txt" <<'PY' && ok "tiers model: memory + disk faster than memory alone" || bad "tiers model: $(cat "$T/mt.txt")"
import sys
rows = {l.split("  ")[1].strip(): l.split() for l in open(sys.argv[1]) if l.startswith("  memory")}
mem, both = rows["memory"], rows["memory + disk"]
assert float(both[-2]) < float(mem[-2]) and float(both[-5]) > 0 and float(mem[-5]) == 0  # I/O s; h_disk
PY
# --warm (docs/plan.md "Warm restarts"): the caches at the start from listings (tests/cli/test_cli.sh: from a loader's
# cache folder, against the loader's warm run). A listing per learner equals one of LEARNER SAMPLE lines; the samples
# the learners hold come from their caches in epoch 0; an empty listing simulates as no --warm (every kind)
printf '# learner 0 holds\n5\n7 # a comment\n\n9\n9\n' >"$T/w0.txt"
printf '11\n13\n' >"$T/w1.txt"
printf '0 5\n0 7\n1 13\n0 9\n1 11\n' >"$T/wall.txt"
: >"$T/wnone.txt"
args="--plan locality --samples 96 --learners 2 --batch-size 4 --epochs 2 --cache 24"
"$LADE" plan $args --warm "$T/w0.txt" --warm "$T/w1.txt" --dump >"$T/w.jsonl" || bad "warm: dump exit"
"$LADE" plan $args --warm "$T/wall.txt" --dump | cmp -s - "$T/w.jsonl" && ok "warm: listings per learner = LEARNER SAMPLE" \
  || bad "warm: listings per learner differ from LEARNER SAMPLE lines"
"$LADE" simulate $args --warm "$T/wall.txt" >"$T/w.sim" || bad "warm: simulate exit"
python3 - "$T/w.jsonl" "$T/w.sim" <<'PY' && ok "warm: the caches at the start serve epoch 0" || bad "warm: $(cat "$T/w.sim")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sim = [l.split() for l in open(sys.argv[2]) if l.split() and l.split()[0].isdigit()]
held = {0: {5, 7, 9}, 1: {11, 13}}
hits = [(r["learner"], s) for r in rows if r["epoch"] == 0 for s, f in zip(r["samples"], r["from"]) if f == "cache"]
assert sorted(hits) == sorted((l, s) for l in held for s in held[l]), hits
assert int(sim[0][3]) == 5 and int(sim[0][1]) == 96 - 5, sim
assert " warm=5" in open(sys.argv[2]).readline()
PY
same=1
for kind in regular regular+lru regular+belady distcache locality solar; do
  a="--plan $kind --samples 600 --learners 4 --batch-size 8 --epochs 3 --cache 40 --imbalance 2 --no-drop-last"
  "$LADE" simulate $a | grep -v '^plan ' >"$T/wc.sim" && "$LADE" simulate $a --warm "$T/wnone.txt" | grep -v '^plan ' \
    >"$T/ww.sim" && [ "$(wc -l <"$T/wc.sim")" -ge 4 ] && cmp -s "$T/wc.sim" "$T/ww.sim" || same=0
done
[ $same = 1 ] && ok "warm: an empty listing simulates as no --warm" || bad "warm: an empty listing changes simulate"
printf '0 5\n3 1\n' >"$T/wb1.txt"
printf '5\n500\n' >"$T/wb2.txt"
printf '5 x\n' >"$T/wb3.txt"
mkdir -p "$T/notcache/sub"
expect_fail "warm: learner out of range" "wb1.txt:2: learner 3 is not below --learners 2" "$LADE" plan $args --warm "$T/wb1.txt" --dump
expect_fail "warm: sample out of range" "wb2.txt:2: sample 500 is not below --samples 96" "$LADE" simulate $args --warm "$T/wb2.txt"
expect_fail "warm: a line that is not numbers" "wb3.txt:1: a line is SAMPLE or LEARNER SAMPLE.*'5 x'" "$LADE" plan $args --warm "$T/wb3.txt" --dump
expect_fail "warm: a learner's listing past the learners" "w0.txt:2: a line of one sample is learner 2's" \
  "$LADE" plan $args --warm "$T/w0.txt" --warm "$T/w1.txt" --warm "$T/w0.txt" --dump
expect_fail "warm: a folder that is not a cache" "notcache: not a lade cache folder" "$LADE" plan $args --warm "$T/notcache" --dump
expect_fail "warm: a missing path" "nothere: No such file" "$LADE" simulate $args --warm "$T/nothere"
expect_fail "warm: no plan file" "plan file holds a run from empty caches" "$LADE" plan $args --warm "$T/w0.txt" --out "$T/w.plan"
expect_fail "warm: two tiers start empty" "two tiers" "$LADE" simulate --plan solar --samples 96 --learners 2 --batch-size 4 --cache 8 --cache-disk 16 --warm "$T/w0.txt"
expect_fail "warm: not for --fig6" "not to --fig6" "$LADE" simulate --fig6 --warm "$T/w0.txt"
for c in plan simulate model; do "$LADE" $c --help >/dev/null && ok "$c --help" || bad "$c --help"; done
exit $fail
