#!/bin/sh
# `pipedream models` lists the paper's five models; `pipedream model-info`
# prints VGG-16's torchvision parameter count and its FLOPs (torchvision's
# 15.47 GMACs = 30.94 GFLOPs with a multiply-add counted as 2, plus ~0.03 for
# biases, ReLUs, pooling and the loss), consistent text/JSON/CSV totals, and
# bad options exit 2 with one line.
set -u

PIPEDREAM="${top_builddir:?top_builddir is not set}/src/cli/pipedream"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pd-model-info.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
    echo "FAIL: $*"
    failures=$((failures + 1))
}

if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP: python3 is needed to parse the JSON output"
    exit 77
fi

# models: every paper model, one line each.
"$PIPEDREAM" models >"$tmp/models" 2>"$tmp/err" || fail "pipedream models exited $?: $(cat "$tmp/err")"
cat "$tmp/models"
for m in vgg16 alexnet resnet50 inception_v3 s2vt mlp lenet; do
    grep -q "^$m " "$tmp/models" || fail "pipedream models does not list $m"
done

# model-info text: the totals.
"$PIPEDREAM" model-info --model vgg16 >"$tmp/vgg16.txt" 2>"$tmp/err" ||
    fail "model-info vgg16 exited $?: $(cat "$tmp/err")"
tail -n 3 "$tmp/vgg16.txt"
grep -q '^parameters   138357544 trainable' "$tmp/vgg16.txt" || fail "vgg16: parameter total is not 138357544"
gflops=$(sed -n 's/^forward *\([0-9.]*\) GFLOPs per sample.*/\1/p' "$tmp/vgg16.txt")
python3 -c "import sys; g = float(sys.argv[1]); sys.exit(0 if 30.94 <= g <= 31.0 else 1)" "${gflops:-0}" ||
    fail "vgg16: '${gflops}' GFLOPs per sample, expected 30.94..31.0 (2 x 15.47 G multiply-adds)"
grep -q '^  41  loss ' "$tmp/vgg16.txt" || fail "vgg16: node 41 is not the loss"

# JSON: parses, and agrees with the per-layer rows and with torchvision.
"$PIPEDREAM" model-info --model vgg16 --batch 4 --format json >"$tmp/vgg16.json" 2>"$tmp/err" ||
    fail "model-info --format json exited $?: $(cat "$tmp/err")"
python3 -c 'import json,sys; json.load(sys.stdin)' <"$tmp/vgg16.json" || fail "model-info JSON does not parse"
python3 - "$tmp/vgg16.json" <<'EOF' || fail "model-info JSON content"
import json, sys
d = json.load(open(sys.argv[1]))
layers, t = d["layers"], d["totals"]
assert d["model"] == "vgg16" and d["batch"] == 4 and d["height"] == 224, d
assert t["params"] == 138357544 == sum(l["params"] for l in layers), t
assert t["flops_per_batch"] == sum(l["flops"] for l in layers), t
assert abs(t["flops_per_sample"] * 4 - t["flops_per_batch"]) < 1, t
conv = [l for l in layers if l["type"] == "conv2d"]
assert len(conv) == 13 and conv[0]["name"] == "features.0", conv[0]
# features.0: 64x224x224 outputs of 3x3x3 multiply-adds plus the bias, batch 4.
assert conv[0]["flops"] == 4 * 64 * 224 * 224 * (2 * 27 + 1), conv[0]
assert conv[0]["activation_bytes"] == 4 * 64 * 224 * 224 * 4, conv[0]
assert conv[0]["shape"] == [4, 64, 224, 224] and conv[0]["dtype"] == "f32", conv[0]
macs = sum(l["flops"] - l["shape"][0] * l["shape"][1] * (l["shape"][2] * l["shape"][3] if len(l["shape"]) == 4 else 1)
           for l in layers if l["type"] in ("conv2d", "linear")) / 2 / 4
assert abs(macs / 1e9 - 15.47) < 0.005, macs
print("vgg16 JSON: %d layers, %.4f GMACs per sample" % (len(layers), macs / 1e9))
EOF

# CSV: a header, one row per node and the totals row.
"$PIPEDREAM" model-info --model resnet50 --format csv >"$tmp/resnet50.csv" 2>"$tmp/err" ||
    fail "model-info --format csv exited $?: $(cat "$tmp/err")"
python3 - "$tmp/resnet50.csv" <<'EOF' || fail "model-info CSV content"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
total = rows[-1]
assert total["name"] == "total" and int(total["params"]) == 25557032, total
assert sum(int(r["params"]) for r in rows[:-1]) == 25557032
assert sum(int(r["flops"]) for r in rows[:-1]) == int(total["flops"])
print("resnet50 CSV: %d nodes, %.3f GFLOPs" % (len(rows) - 1, int(total["flops"]) / 1e9))
EOF

# Options change the model: Fashion-MNIST-sized VGG-16 at width 1/8.
"$PIPEDREAM" model-info --model vgg16 --channels 1 --height 32 --width 32 --classes 10 --width-mult 0.125 \
    >"$tmp/small.txt" 2>"$tmp/err" || fail "model-info small vgg16 exited $?: $(cat "$tmp/err")"
grep -q '^parameters   531490 trainable' "$tmp/small.txt" || fail "small vgg16: $(grep '^parameters' "$tmp/small.txt")"

# Bad input: exit 2, one line on stderr.
bad() {
    "$PIPEDREAM" model-info "$@" >"$tmp/out" 2>"$tmp/err"
    got=$?
    echo "model-info $* -> $got: $(cat "$tmp/err")"
    [ "$got" -eq 2 ] || fail "model-info $*: exit status $got, expected 2"
    [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "model-info $*: not one line on stderr"
}
bad
bad --model
bad --model no-such-model
bad --model vgg16 --batch 0
bad --model vgg16 --batch 2x
bad --model vgg16 --width-mult -1
bad --model vgg16 --classes 1
bad --model vgg16 --format xml
bad --model vgg16 --height 300 --width 300
bad --model vgg16 --height 16
bad --model alexnet --height 32 --width 32
bad --model inception_v3 --height 74 --width 74
bad --model vgg16 --no-such-option
bad --model vgg16 stray
bad --model vgg16 --batch 1048576 --width-mult 64
"$PIPEDREAM" models stray >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] || fail "models stray: exit status is not 2"

if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "all model-info checks passed"
exit 0
