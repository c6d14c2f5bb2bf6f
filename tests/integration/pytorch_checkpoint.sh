#!/bin/sh
# A pipedream checkpoint loads into the matching torchvision model: ResNet-50
# (width 1, 1000 classes, which fix every parameter shape; a 64x64 input keeps
# the one training step cheap) is trained for one step on synthetic images,
# and its checkpoint is read with a few lines of Python (no safetensors
# package needed) into torchvision.models.resnet50() with
# load_state_dict(strict=False). Asserted: no unexpected keys, no missing
# keys but BatchNorm's num_batches_tracked (pipedream keeps no such counter),
# every shape accepted, and the values PyTorch holds afterwards equal the
# file's bit for bit.
# Needs Debian's /usr/bin/python3 with torch and torchvision
# (apt install python3-torch python3-torchvision); skipped without them.
set -u

PIPEDREAM="${top_builddir:?top_builddir is not set}/src/cli/pipedream"
PYTHON=/usr/bin/python3

if ! [ -x "$PYTHON" ] || ! "$PYTHON" -c 'import torch, torchvision' 2>/dev/null; then
    echo "SKIP: $PYTHON cannot import torch and torchvision (apt install python3-torch python3-torchvision)"
    exit 77
fi
if ! "$PIPEDREAM" train --help | grep -qw resnet50; then
    echo "SKIP: this build has no resnet50 model"
    exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pd-pytorch-checkpoint.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

# Plain SGD keeps no optimizer state: the file holds the model alone (~100 MB).
"$PIPEDREAM" train --model resnet50 --dataset synthetic --height 64 --width 64 --batch-size 2 --steps 1 \
    --momentum 0 --lr 0.01 --limit-test 2 --quiet --checkpoint-dir "$tmp/ck" >"$tmp/summary.json"
status=$?
cat "$tmp/summary.json"
if [ $status -ne 0 ]; then
    echo "FAIL: pipedream train exited with status $status"
    exit 1
fi
ckpt="$tmp/ck/step-00000001.safetensors"
[ -r "$ckpt" ] || { echo "FAIL: no checkpoint $ckpt"; exit 1; }

"$PYTHON" - "$ckpt" <<'EOF'
import json, struct, sys

import torch
import torchvision

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32,
          "U8": torch.uint8, "I64": torch.int64}


def read_safetensors(path):
    """The format's reference layout: u64 header length, JSON header, data."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    metadata = header.pop("__metadata__", {})
    data = bytearray(blob[8 + n:])
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        t = torch.frombuffer(data[begin:end], dtype=DTYPES[info["dtype"]]) if end > begin else \
            torch.empty(0, dtype=DTYPES[info["dtype"]])
        tensors[name] = t.reshape(info["shape"]).clone()
    return tensors, metadata


tensors, metadata = read_safetensors(sys.argv[1])
assert metadata.get("format") == "pipedream-checkpoint", metadata.get("format")
assert metadata.get("model") == "resnet50", metadata.get("model")
state = json.loads(metadata["state"])
assert state["step"] == 1 and state["optimizer"]["kind"] == "sgd", state
model_state = {k: v for k, v in tensors.items() if not k.startswith("optimizer.")}
assert len(model_state) == len(tensors), "plain SGD should save no optimizer state"

model = torchvision.models.resnet50()
result = model.load_state_dict(model_state, strict=False)  # raises on any shape mismatch
missing = [k for k in result.missing_keys if not k.endswith(".num_batches_tracked")]
print("tensors in the file: %d; torchvision state dict: %d; missing: %d (all num_batches_tracked: %s); "
      "unexpected: %d" % (len(model_state), len(model.state_dict()), len(result.missing_keys), not missing,
                          len(result.unexpected_keys)))
if missing or result.unexpected_keys:
    print("FAIL: missing %s, unexpected %s" % (missing[:10], list(result.unexpected_keys)[:10]))
    sys.exit(1)

# What PyTorch holds now is what the file holds, bit for bit.
loaded = model.state_dict()
for name, value in model_state.items():
    if not torch.equal(loaded[name], value):
        print("FAIL: %s differs after loading" % name)
        sys.exit(1)
params = sum(p.numel() for p in model.parameters())
print("torchvision resnet50 accepted every tensor; %d parameters (torchvision: 25557032)" % params)
if params != 25557032:
    print("FAIL: parameter count")
    sys.exit(1)
# The trained weights are not torchvision's random initialisation: a forward
# pass in eval mode gives finite logits of the right shape.
model.eval()
with torch.no_grad():
    logits = model(torch.zeros(1, 3, 64, 64))
assert logits.shape == (1, 1000) and torch.isfinite(logits).all()
print("PASS")
EOF
