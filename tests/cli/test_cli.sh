#!/usr/bin/env bash
# CLI integration: gen is deterministic, bench checksums are identical for any
# thread count and resume-independent, errors are clear. Usage: test_cli.sh LADE TMPDIR
set -u
lade=$1
tmp=$2/cli-$$
rm -rf "$tmp"; mkdir -p "$tmp"
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $*"; }
bad() { fail=$((fail+1)); echo "FAIL $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }

"$lade" gen npy "$tmp/a" --count 300 --shape 8,8 --seed 3 >/dev/null
"$lade" gen npy "$tmp/b" --count 300 --shape 8,8 --seed 3 >/dev/null
check "gen npy is deterministic" diff -r "$tmp/a" "$tmp/b"
check "gen npy makes 10 classes" test "$(ls "$tmp/a" | wc -l)" -eq 10

sum() { "$lade" bench "$@" --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["checksum"])'; }
s1=$(sum "$tmp/a" --threads 1 --batch-size 16 --epochs 2 --seed 7)
s2=$(sum "$tmp/a" --threads 2 --batch-size 16 --epochs 2 --seed 7)
s5=$(sum "$tmp/a" --threads 5 --batch-size 16 --epochs 2 --seed 7 --prefetch 4)
s8=$(sum "$tmp/a" --threads 2 --batch-size 16 --epochs 2 --seed 8)
check "checksum equal for 1/2/5 threads ($s1)" test "$s1" = "$s2" -a "$s1" = "$s5"
check "another seed gives another checksum" test "$s1" != "$s8"

out=$("$lade" bench "$tmp/a" --set bach_size=3 2>&1); rc=$?
check "unknown setting fails with the valid keys" test $rc -ne 0 -a -n "$(echo "$out" | grep 'valid keys' | grep batch_size)"
out=$("$lade" bench "$tmp/missing" 2>&1); rc=$?
check "missing dataset names the path" test $rc -ne 0 -a -n "$(echo "$out" | grep "$tmp/missing")"
for c in gen bench demo pack plan simulate model; do
  check "lade $c --help" "$lade" $c --help
done
check "lade settings lists keys" test "$("$lade" settings | grep -c default)" -ge 20
# the generic HTTP settings are http_*; their old s3_* names are aliases, named in the help, not listed
check "lade settings lists http_retries and names its alias" test -n "$("$lade" settings | grep '^http_retries ' | grep 'alias s3_retries')"
check "lade settings does not list the alias as a key" test "$("$lade" settings | grep -c '^s3_retries ')" -eq 0
check "bench accepts http_* settings and their s3_* aliases" "$lade" bench "$tmp/a" --batch-size 16 --set http_retries=3 \
  --set s3_timeout_ms=5000 --set s3_concurrency=4 --set http_max_concurrency=8 --json
out=$("$lade" bench "$tmp/a" --set s3_retries=101 2>&1); rc=$?
check "an alias out of range names the setting's range" test $rc -ne 0 -a -n "$(echo "$out" | grep 'http_retries' | grep '0..100')"
out=$("$lade" bench "$tmp/a" --batch-size 16 2>&1 </dev/null)
check "bench text output has the stage breakdown" test -n "$(echo "$out" | grep stages | grep transform)"

# a broken image in an ImageFolder tree: named in the error, or substituted with on_error=skip
# (a stray notes.txt is not listed at all: only image extensions are)
"$lade" gen jpeg "$tmp/j" --count 40 >/dev/null
# the ceiling: the bare read and whole-image decode rates of the same files, with the same threads
cat > "$tmp/ceil.py" <<'PY'
import json, sys
d = json.load(sys.stdin); c = d.get("ceiling"); mode = sys.argv[1]
if mode == "none": sys.exit(0 if c is None and d.get("copy_ceiling") is None and d["cpu"] else 1)
if mode == "copy":  # the copy ceiling of raw samples: these samples and payload bytes, a sane rate
    p = d["copy_ceiling"]
    ok = p["samples"] == int(sys.argv[2]) and p["bytes"] == int(sys.argv[3]) and p["threads"] == 2 and p["why"] == ""
    ok = ok and p["samples_per_s"] > 0 and p["pread_per_s"] > 0 and p["gb_per_s"] > 0
    ok = ok and abs(p["gb_per_s"] * 1e9 / p["samples_per_s"] - p["bytes"] / p["samples"]) < 1e-2 * p["bytes"] / p["samples"]
    sys.exit(0 if ok and abs(p["fraction"] - d["samples_per_s"] / p["samples_per_s"]) <= 1e-3 * max(1, p["fraction"]) else 1)
if mode == "nocopy": sys.exit(0 if d["copy_ceiling"]["samples_per_s"] == 0 and sys.argv[2] in d["copy_ceiling"]["why"] else 1)
ok = c["threads"] == 2 and d["cpu"] not in ("", "unknown CPU")
if mode == "notfiles": sys.exit(0 if ok and c["files"] == 0 and c["read_per_s"] == 0 and c["why"] else 1)
ok = ok and c["files"] == int(sys.argv[2]) and c["read_per_s"] > 0
ok = ok and abs(c["fraction_of_read"] - d["samples_per_s"] / c["read_per_s"]) <= 1e-3 * max(1, c["fraction_of_read"])
if mode == "decode": ok = ok and c["decode_per_s"] > 0 and c["fraction_of_decode"] > 0 and c["why"] == ""
else: ok = ok and c["decode_per_s"] == 0
sys.exit(0 if ok else 1)
PY
js=$("$lade" bench "$tmp/j" --transform imagenet-train --threads 2 --batch-size 8 --json)
check "bench --json: the ceiling of a JPEG folder (read and decode, 40 files, 2 threads)" \
  /usr/bin/python3 "$tmp/ceil.py" decode 40 <<<"$js"
js=$("$lade" bench "$tmp/a" --threads 2 --batch-size 16 --json)
check "bench --json: the ceiling of a .npy folder (read only, 256 of 300 files)" /usr/bin/python3 "$tmp/ceil.py" read 256 <<<"$js"
tar cf "$tmp/j.tar" -C "$tmp/j" . && js=$("$lade" bench "$tmp/j.tar" --transform imagenet-train --threads 2 --batch-size 8 --json)
check "bench --json: no ceiling for tar members, saying why" /usr/bin/python3 "$tmp/ceil.py" notfiles <<<"$js"
check "bench --json: no copy ceiling for JPEGs, saying why" /usr/bin/python3 "$tmp/ceil.py" nocopy decoding <<<"$js"
# the copy ceiling of raw samples: a memcpy of each sample's payload (8x8 float32: 256 bytes, not the
# .npy file's 384), from a folder of .npy files and from the same files as tar members
js=$("$lade" bench "$tmp/a" --threads 2 --batch-size 16 --json)
check "bench --json: the copy ceiling of a .npy folder (300 payloads of 256 bytes)" \
  /usr/bin/python3 "$tmp/ceil.py" copy 300 76800 <<<"$js"
"$lade" pack "$tmp/a" --to tar --shard-size 40KB "$tmp/atar" >/dev/null 2>&1
js=$("$lade" bench "$tmp/atar" --transform npy --threads 2 --batch-size 16 --json)
check "bench --json: the copy ceiling of .npy tar members, over shards (300 payloads of 256 bytes)" \
  /usr/bin/python3 "$tmp/ceil.py" copy 300 76800 <<<"$js"
out=$("$lade" bench "$tmp/atar" --transform npy --threads 2 --batch-size 16)
check "bench text output gives the copy ceiling and lade's fraction of it" \
  test -n "$(echo "$out" | grep '^copy ceiling memcpy' | grep 'lade at .* is at .*x of the copy')"
js=$("$lade" bench "$tmp/j" --transform imagenet-train --threads 2 --batch-size 8 --json --no-ceiling)
check "bench --no-ceiling measures none" /usr/bin/python3 "$tmp/ceil.py" none <<<"$js"
out=$("$lade" bench "$tmp/j" --transform imagenet-eval --threads 2 --batch-size 8)
check "bench text output names the CPU and the ceiling" test -n "$(echo "$out" | grep '^cpu ')" -a \
  -n "$(echo "$out" | grep '^ceiling ' | grep 'of the decode')"
check "bench text output: the stage account with the decoder's timed choices" test -n "$(echo "$out" | grep '^account ')" \
  -a -n "$(echo "$out" | grep 'lade horizontal pass')" -a -n "$(echo "$out" | grep "timed choices: .*rows per libjpeg call")"
# two epochs: the ceiling compares the second (steady state) with it; the account is in the JSON
cat > "$tmp/steady.py" <<'PY'
import json, sys
d = json.load(sys.stdin); s = d["steady"]; a = d["account"]; c = d["ceiling"]
ok = s["epoch"] == 1 and s["samples_per_s"] > 0 and abs(s["fraction_of_decode"] - s["samples_per_s"] / c["decode_per_s"]) < 1e-3
ok = ok and a["images"] == 40 and a["rounds"] == 3 and 0 < a["header_s"] and a["hpass_s"] > 0 and a["finish_s"] > 0
ok = ok and a["whole_s"] > 0 and 0 < a["rows_frac"] <= 1 and 0 < a["area_frac"] <= 1 and "rows per libjpeg call" in a["choices"]
ok = ok and isinstance(d["image_kernels"], str)  # "" here: 40 images per worker end before the trials do
sys.exit(0 if ok else 1)
PY
js=$("$lade" bench "$tmp/j" --transform imagenet-train --threads 2 --batch-size 8 --epochs 2 --json)
check "bench --json: steady-state ratio on epoch 1 and the stage account" /usr/bin/python3 "$tmp/steady.py" <<<"$js"
echo "not a picture" > "$tmp/j/class_03/notes.txt"
echo "not a picture" > "$tmp/j/class_03/notes.jpg"
out=$("$lade" bench "$tmp/j" --batch-size 8 --threads 2 2>&1); rc=$?
check "non-image file fails naming it" test $rc -ne 0 -a -n "$(echo "$out" | grep 'class_03/notes.jpg' | grep -i jpeg)"
js=$("$lade" bench "$tmp/j" --batch-size 8 --threads 2 --set on_error=skip --json)
check "on_error=skip substitutes it and counts it" test "$(echo "$js" | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["substituted"], d["samples"])')" = "1 41"
j1=$("$lade" bench "$tmp/j" --batch-size 8 --threads 1 --set on_error=skip --json | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["checksum"])')
check "skip is deterministic across thread counts" test "$j1" = "$(echo "$js" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["checksum"])')"
: > "$tmp/j/class_03/notes.jpg"
out=$("$lade" bench "$tmp/j" --batch-size 8 2>&1); rc=$?
check "empty file fails naming it" test $rc -ne 0 -a -n "$(echo "$out" | grep 'class_03/notes.jpg')"

# a file name with a newline cannot forge a line of output: control bytes are escaped in messages
rm -f "$tmp/j/class_03/notes.jpg"
bad_name=$'evil\nlade bench: all good.jpg'
echo "not a picture" > "$tmp/j/class_04/$bad_name"
out=$("$lade" bench "$tmp/j" --batch-size 8 --threads 1 2>&1); rc=$?
check "control bytes in a file name are escaped in the error" test $rc -ne 0 -a \
  "$(echo "$out" | grep -c '^lade bench: all good')" = 0 -a -n "$(echo "$out" | grep -F 'evil\x0alade bench: all good.jpg')"
rm -f "$tmp/j/class_04/$bad_name"

# lade ls: ImageFolder's files and order (folders by whole path: a, a-b, a.b, a/b), errors naming the class
mkdir -p "$tmp/ls/k/a/b" "$tmp/ls/k/a-b" "$tmp/ls/k/a.b" "$tmp/ls/m"
touch "$tmp/ls/k/a/b/x.jpg" "$tmp/ls/k/a-b/y.PNG" "$tmp/ls/k/a.b/z.jpeg" "$tmp/ls/k/a/w.webp" "$tmp/ls/k/notes.txt" "$tmp/ls/m/1.jpg"
want=$(printf '0\t0\tk\t%s\n1\t0\tk\t%s\n2\t0\tk\t%s\n3\t0\tk\t%s\n4\t1\tm\t%s' "$tmp/ls/k/a/w.webp" \
  "$tmp/ls/k/a-b/y.PNG" "$tmp/ls/k/a.b/z.jpeg" "$tmp/ls/k/a/b/x.jpg" "$tmp/ls/m/1.jpg")
check "lade ls lists ImageFolder's files in its order" test "$("$lade" ls "$tmp/ls")" = "$want"
check "lade ls --classes" test "$("$lade" ls "$tmp/ls" --classes | tr '\t\n' ' ;')" = "0 k;1 m;"
mkdir "$tmp/ls/n"
out=$("$lade" ls "$tmp/ls" 2>&1); rc=$?
check "lade ls names an empty class folder" test $rc -ne 0 -a -n "$(echo "$out" | grep "class folder 'n' has no images")"

# lade bench --plan: every plan kind runs, and each epoch's cache / peer / storage counts of this rank equal the
# plan's prediction (same planner); without a transport a peer-routed sample is read from storage and counted
"$lade" gen npy "$tmp/pl" --count 400 --shape 32 >/dev/null
for kind in regular+lru regular+belady distcache locality solar; do
  js=$("$lade" bench "$tmp/pl" --plan "$kind" --epochs 3 --batch-size 10 --set world_size=4 --set rank=2 \
    --set drop_last=true --set cache_mem_bytes=20000 --json)
  verdict=$(echo "$js" | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
ok = all(e["plan"] == sys.argv[1] and (e["cache"], e["peer"], e["storage"]) ==
         (e["predicted_cache"], e["predicted_peer"], e["predicted_storage"]) and e["fallbacks"] == 0 for e in d["epochs"])
hits = sum(e["cache"] for e in d["epochs"][1:])
print("ok" if ok and len(d["epochs"]) == 3 and hits > 0 else "bad: %s" % d["epochs"])' "$kind")
  check "lade bench --plan $kind: measured routes equal the plan's" test "$verdict" = ok
done
# warm starts (docs/plan.md "Warm restarts"): a planned kind's second run on the same cache_dir starts from what
# the first left (stopped in epoch 1 of 3: a farthest-next-use kind empties its cache as its run nears the end).
# lade bench predicts it; so do lade plan --warm and lade simulate --warm before it, given the folder (a copy taken
# between the runs) or a listing of its entries: each equals what the second run measures
for kind in regular+lru regular+belady distcache locality solar; do
  rm -rf "$tmp/wc" "$tmp/wc0"
  run=("$lade" bench "$tmp/pl" --plan "$kind" --epochs 3 --batch-size 10 --set drop_last=true --no-ceiling --json
       --set cache_dir="$tmp/wc" --set cache_disk_bytes=245760)
  if ! { "${run[@]}" --max-batches 60 >"$tmp/w1.json" && cp -a "$tmp/wc" "$tmp/wc0" && "${run[@]}" >"$tmp/w2.json"; }; then
    bad "warm start, $kind: lade bench failed"; continue
  fi
  c=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["plan_cache"])' "$tmp/w2.json")
  pargs=(--plan "$kind" --samples 400 --learners 1 --batch-size 10 --epochs 3 --cache "$c" --no-coalesce)
  find "$tmp/wc0" -type f | grep -E '/[0-9a-f]{16}$' | sed 's#.*/##' | while read -r h; do echo $((16#$h)); done \
    >"$tmp/wl.txt"
  if ! { "$lade" plan "${pargs[@]}" --warm "$tmp/wc0" --counts >"$tmp/wp.jsonl" &&
         "$lade" plan "${pargs[@]}" --warm "$tmp/wl.txt" --counts >"$tmp/wq.jsonl" &&
         "$lade" simulate "${pargs[@]}" --warm "$tmp/wc0" >"$tmp/ws.txt"; }; then
    bad "warm start, $kind: lade plan/simulate --warm failed"; continue
  fi
  verdict=$(/usr/bin/python3 - "$tmp/w1.json" "$tmp/w2.json" "$tmp/wp.jsonl" "$tmp/wq.jsonl" "$tmp/ws.txt" <<'PY'
import json, sys
w1, w2 = (json.load(open(f)) for f in sys.argv[1:3])
p = [json.loads(l) for l in open(sys.argv[3]) if '"rank"' in l]
q = [json.loads(l) for l in open(sys.argv[4]) if '"rank"' in l]
sim = [l.split() for l in open(sys.argv[5]) if l.split() and l.split()[0].isdigit()]
got = [(e["cache"], e["storage"]) for e in w2["epochs"]]
why = []
if not all((e["cache"], e["peer"], e["storage"]) == (e["predicted_cache"], e["predicted_peer"], e["predicted_storage"])
           and e["fallbacks"] == 0 for e in w1["epochs"][:1] + w2["epochs"]):  # the first run's epoch 1 is cut
    why.append("bench: measured != predicted: %s" % (w1["epochs"][:1] + w2["epochs"]))
if w1["warm_start"] != 0 or w2["warm_start"] == 0 or w2["epochs"][0]["cache"] == 0:
    why.append("warm_start %d then %d, epoch 0 hits %d" % (w1["warm_start"], w2["warm_start"], w2["epochs"][0]["cache"]))
if w2["epochs"][0]["storage"] >= w1["epochs"][0]["storage"]:
    why.append("the warm run's epoch 0 reads no less from storage")
if [(x["own"], x["storage"]) for x in p] != got: why.append("plan --warm DIR: %s, measured %s" % (p, got))
if p != q: why.append("plan --warm LISTING differs from DIR")
if [(int(r[3]), int(r[1])) for r in sim] != got: why.append("simulate --warm: %s, measured %s" % (sim, got))
print("; ".join(why) or "ok")
PY
)
  check "warm start, $kind: lade bench, plan --warm and simulate --warm predict the second run: $verdict" \
    test "$verdict" = ok
done
out=$("$lade" plan "${pargs[@]}" --samples 300 --warm "$tmp/wc0" --counts 2>&1); rc=$?
check "plan --warm: a cache folder of another dataset size is named" test $rc -eq 2 -a \
  -n "$(echo "$out" | grep -F "$tmp/wc0: no dataset of --samples 300" | grep '400 samples')"
out=$("$lade" plan "${pargs[@]}" --warm "$tmp/wc0"/*/ --counts 2>&1 >/dev/null); rc=$?
check "plan --warm takes the dataset's folder in a cache_dir too" test $rc -eq 0 -a -z "$out"
out=$("$lade" bench "$tmp/pl" --plan locality --set cache_mem_bytes=20000 --epochs 2 --batch-size 10)
check "lade bench --plan prints the plan section" test -n "$(echo "$out" | grep '^plan         locality')"
out=$("$lade" bench "$tmp/pl" --plan nonsense 2>&1); rc=$?
check "lade bench --plan names an unknown plan" test $rc -ne 0 -a -n "$(echo "$out" | grep -i "plan")"

rm -rf "$tmp"
echo "$pass passed, $fail failed"
test $fail -eq 0
