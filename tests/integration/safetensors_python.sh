#!/bin/sh
# Our safetensors files against Python's reference package (the one PyTorch
# and transformers use): numpy's loader reads what we write with identical
# values, the reference writer produces the same bytes as ours, and we read
# what Python writes (values compared exactly). Skips (77) without python3,
# safetensors and numpy.
tool="${top_builddir:-.}/tests/integration/st_tool"

if ! python3 -c 'import safetensors, numpy' 2>/dev/null; then
    echo "SKIP: needs python3 with the safetensors and numpy packages (pip install safetensors numpy)"
    exit 77
fi
if [ ! -x "$tool" ]; then
    echo "FAIL: $tool is not built"
    exit 1
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pd_st_python.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

python3 - "$tmp" "$tool" <<'EOF'
import json
import subprocess
import sys

import numpy as np
import safetensors
from safetensors.numpy import load_file, save, save_file

tmp, tool = sys.argv[1], sys.argv[2]
ST_NAME = {np.float32: "F32", np.float16: "F16", np.int32: "I32", np.uint8: "U8", np.int64: "I64"}
SPEC_NAME = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "I32": "int32", "U8": "uint8"}


def tool_run(*args, ok=True):
    p = subprocess.run([tool, *args], capture_output=True, text=True)
    if ok and p.returncode != 0:
        sys.exit(f"FAIL: st_tool {' '.join(args)}: {p.stderr.strip()}")
    return p


def raw_serialize(tensors, metadata):
    """The reference writer on raw bytes (name -> (dtype, shape, bytes)),
    through whichever API this safetensors version has."""
    keep, spec = [], {}
    for name, (dtype, shape, data) in tensors.items():
        if hasattr(safetensors, "TensorSpec"):
            buf = np.frombuffer(data, np.uint8).copy() if data else np.zeros(1, np.uint8)
            keep.append(buf)
            spec[name] = safetensors.TensorSpec(dtype=SPEC_NAME[dtype], shape=list(shape),
                                                data_ptr=buf.ctypes.data, data_len=len(data))
        else:
            spec[name] = {"dtype": dtype, "shape": list(shape), "data": data}
    return bytes(safetensors.serialize(spec, metadata=metadata))


def check(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")


# What st_tool writes (see st_tool.c).
expected = {
    "stage0.conv.weight": np.array([[0.5, -1.25, 3.0e-8], [1.0e30, -0.0, 65504.0]], dtype=np.float32),
    "stage0.half": np.array([[1.0, -3.0], [2.0**-24, 65504.0]], dtype=np.float16),
    "step": np.array(-2**31, dtype=np.int32),
    "ids": np.array([[7, -7], [123456, 2**31 - 1]], dtype=np.int32),
    "mask": np.array([0, 1, 254, 255], dtype=np.uint8),
    "empty": np.zeros((0, 5), dtype=np.float32),
}
bf16_bits = np.array([0x3F80, 0xC0A0, 0x7F80], dtype="<u2")  # 1, -5, inf

# 1. numpy's loader reads our file with identical values (bitwise: -0.0 too)
path = f"{tmp}/c_numpy.safetensors"
tool_run("write", path, "numpy")
got = load_file(path)
check(set(got) == set(expected), f"names {sorted(got)}")
for name, want in expected.items():
    g = got[name]
    check(g.dtype == want.dtype and g.shape == want.shape, f"{name}: {g.dtype} {g.shape}")
    check(g.tobytes() == want.tobytes(), f"{name}: values {g} != {want}")
with safetensors.safe_open(path, framework="np") as f:
    check(f.metadata() == {"format": "pt"}, f"metadata {f.metadata()}")
# ... and the reference writer produces the very same bytes
mine = open(path, "rb").read()
check(mine == save(expected, metadata={"format": "pt"}), "our bytes differ from safetensors.numpy.save")

# 2. with BF16 (numpy has none): the reference parser accepts the file, the
#    bytes are the reference writer's, the BF16 bits are ours
path = f"{tmp}/c_all.safetensors"
tool_run("write", path)
mine = open(path, "rb").read()
parsed = dict(safetensors.deserialize(mine))
check(set(parsed) == set(expected) | {"stage0.bias.bf16"}, f"names {sorted(parsed)}")
b = parsed["stage0.bias.bf16"]
check(b["dtype"] == "BF16" and list(b["shape"]) == [3] and bytes(b["data"]) == bf16_bits.tobytes(), f"bf16 {b}")
raw = {n: (ST_NAME[v.dtype.type], v.shape, v.tobytes()) for n, v in expected.items()}
raw["stage0.bias.bf16"] = ("BF16", (3,), bf16_bits.tobytes())
check(mine == raw_serialize(raw, {"format": "pt"}), "our bytes differ from safetensors.serialize with BF16")

# 3. we read what Python writes: random values of every numpy-able dtype, a
#    0-d and an empty tensor, an I64 tensor pipedream has no type for
rng = np.random.default_rng(1234)
py = {
    "w": rng.standard_normal((3, 4)).astype(np.float32),
    "h": (rng.standard_normal(5) * 100).astype(np.float16),
    "i": rng.integers(-2**31, 2**31 - 1, size=(2, 3), dtype=np.int32),
    "u": rng.integers(0, 256, size=7, dtype=np.uint8),
    "scalar": np.array(2.5, dtype=np.float32),
    "empty": np.zeros((2, 0), dtype=np.int32),
    "count": np.array([1, -2], dtype=np.int64),
}
meta = {"format": "pt", "source": "numpy"}
path = f"{tmp}/py.safetensors"
save_file(py, path, metadata=meta)
dump = json.loads(tool_run("dump", path).stdout)
check(dump["metadata"] == meta, f"metadata {dump['metadata']}")
check(sorted(t["name"] for t in dump["tensors"]) == sorted(py), "tensor names")
for t in dump["tensors"]:
    want = py[t["name"]]
    check(t["dtype"] == ST_NAME[want.dtype.type], f"{t['name']}: dtype {t['dtype']}")
    check(tuple(t["shape"]) == want.shape, f"{t['name']}: shape {t['shape']}")
    check(bytes.fromhex(t["hex"]) == want.tobytes(), f"{t['name']}: bytes")
    if want.dtype == np.int64:
        check(t["values"] is None, "I64 is listed as unsupported")
    else:
        vals = np.array(t["values"], dtype=object).reshape(want.shape)
        check(all(type(v) is (float if want.dtype.kind == "f" else int) for v in vals.flat), f"{t['name']}: types")
        check(np.array_equal(vals.astype(np.float64), want.astype(np.float64)), f"{t['name']}: values {vals} != {want}")

# 4. BF16 written by the reference writer
path = f"{tmp}/py_bf16.safetensors"
open(path, "wb").write(raw_serialize({"b": ("BF16", (3,), bf16_bits.tobytes())}, None))
dump = json.loads(tool_run("dump", path).stdout)
check(dump["tensors"][0]["values"] == [1.0, -5.0, None], f"bf16 values {dump['tensors'][0]['values']}")

# 5. a truncated file is refused with a message naming it
data = open(f"{tmp}/py.safetensors", "rb").read()
path = f"{tmp}/cut.safetensors"
open(path, "wb").write(data[:-3])
p = tool_run("dump", path, ok=False)
check(p.returncode == 1 and "cut.safetensors" in p.stderr, f"truncated file: rc {p.returncode}, {p.stderr}")

print(f"ok: safetensors {safetensors.__version__} and pipedream agree")
EOF
