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

# targets: locality with the whole dataset cached reads nothing after epoch 0; regular reads everything
"$LADE" simulate --plan locality --samples 65536 --learners 64 --batch-size 64 --epochs 3 --cache 1024 --no-drop-last >"$T/loc.txt"
awk '$1 ~ /^[12]$/ { n++; if ($2 != 0) b = 1 } END { exit b || n != 2 }' "$T/loc.txt" && ok "locality zero storage" || bad "locality storage: $(cat "$T/loc.txt")"
"$LADE" simulate --plan regular --samples 65536 --learners 64 --batch-size 64 --epochs 3 >"$T/reg.txt"
awk '$1 ~ /^[12]$/ { n++; if ($2 != 65536) b = 1 } END { exit b || n != 2 }' "$T/reg.txt" && ok "regular full storage" || bad "regular storage"

# model: crossover R/V and the three loaders
"$LADE" model --D 1000000 --p 64 --V 100 --R 3200 --beta 0.05 >"$T/m.txt" || bad "model exit"
grep -Eq "crossover +p = R/V +32.00" "$T/m.txt" && ok "model crossover" || bad "model: $(cat "$T/m.txt")"
"$LADE" model --cost >"$T/c.txt" && grep -q "total \\$" "$T/c.txt" && ok "cost model" || bad "cost model"
for c in plan simulate model; do "$LADE" $c --help >/dev/null && ok "$c --help" || bad "$c --help"; done
exit $fail
