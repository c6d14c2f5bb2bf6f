#!/bin/sh
# The H200 script (tools/device-check.sh) in its dry run on this build: every
# step on the CPU at tiny sizes, then its results checked: the files that
# come back from the device (eight: the tool's limit), the TAP counts of the
# three test programs (test_transport_gpu's cuda cases skipped), eight runs
# of ours (f32 timed, bf16 timed or "not implemented"), eight of PyTorch's
# (timed, or skipped when torch is not installed), Fashion-MNIST and the
# 2-stage LeNet pipeline (mpirun -np 2) on both "devices" (the CPU twice:
# the same seed gives the same accuracy and loss; the pipeline is recorded
# as not run without MPI or mpirun), the CSV and the Markdown.
# Then with a budget too small for anything: every step recorded as skipped
# and the script failing; and a bad option refused. About 20-40 s on 2 cores.
set -u

top_srcdir=${top_srcdir:?top_srcdir is not set}
top_builddir=${top_builddir:?top_builddir is not set}
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP: python3 is not installed (the script's report needs it)"
    exit 77
fi
for p in src/cli/pipedream tests/unit/test_cuda_ops tests/unit/test_transport_gpu tests/backend_ops/test_backend_ops; do
    if [ ! -x "$top_builddir/$p" ]; then
        echo "FAIL: $top_builddir/$p is not built"
        exit 1
    fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pd-device-script.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
data=/usr/share/datasets/fashion-mnist
[ -r "$data/train-images-idx3-ubyte.gz" ] || data=$tmp/no-data # the script then records fmnist as skipped
script=$top_srcdir/tools/device-check.sh

BUILD_DIR=$top_builddir OUT=$tmp/out WORK=$tmp/work DATA=$data BUDGET_S=200 \
    bash "$script" --dry-run --no-build >"$tmp/run.log" 2>&1
status=$?
tail -n 25 "$tmp/run.log"
if [ $status -ne 0 ]; then
    echo "FAIL: the dry run exited with status $status (0 expected)"
    exit 1
fi

# What comes back from the device: at most 8 files, none deeper.
for f in device-check.log summary.md bench.csv results.json test_cuda_ops.tap test_transport_gpu.tap backend_ops.tap \
    logs.tar.gz; do
    if [ ! -s "$tmp/out/$f" ]; then
        echo "FAIL: $f is missing or empty in OUT"
        exit 1
    fi
done
n=$(find "$tmp/out" -type f | wc -l)
if [ "$n" -gt 8 ]; then
    echo "FAIL: $n files in OUT; the device tool brings back 8 at most"
    exit 1
fi
tar tzf "$tmp/out/logs.tar.gz" | grep -q 'bench-vgg16-f32.out' || {
    echo "FAIL: logs.tar.gz lacks the runs' outputs"
    exit 1
}
# The pipeline runs where the build has MPI and mpirun is installed.
pipeline=no
if [ -d "$data" ] && grep -q '^#define HAVE_MPI 1' "$top_builddir/config.h" && command -v mpirun >/dev/null 2>&1; then
    pipeline=yes
    tar tzf "$tmp/out/logs.tar.gz" | grep -q 'pipeline-gpu.csv' || {
        echo "FAIL: logs.tar.gz lacks the pipeline's metrics"
        exit 1
    }
fi

python3 - "$tmp/out" "$data" "$pipeline" <<'EOF' || exit 1
import csv, json, os, sys
out, data, pipeline = sys.argv[1], sys.argv[2], sys.argv[3] == "yes"
r = json.load(open(os.path.join(out, "results.json")))
def check(cond, what):
    if not cond:
        print("FAIL: " + what)
        sys.exit(1)
check(r["mode"] == "dry", "mode is %r, not dry" % r["mode"])
# transport_gpu_mpi runs where the pipeline step can (MPI in the build, mpirun).
mpi_run = bool(r["pipeline"]["runs"])
check([t["name"] for t in r["tests"]] == ["test_cuda_ops", "test_transport_gpu"] + ["transport_gpu_mpi"] * mpi_run
      + ["backend_ops"], "tests %r" % [t["name"] for t in r["tests"]])
for t in r["tests"]:
    check(t["verdict"] == "pass" and t["ok"] > 0 and t["not_ok"] == 0,
          "%s: verdict %s, %d ok, %d not ok" % (t["name"], t["verdict"], t["ok"], t["not_ok"]))
tg = r["tests"][1]
check(tg["skipped"] == 3 and set(tg["cuda_pairs"]) == {"shm", "tcp"} and tg["export_dmabuf"]["status"] == "skipped"
      and not any(p["ran"] for p in tg["cuda_pairs"].values()),
      "test_transport_gpu: without a GPU its 3 cuda cases skip: %r" % tg)
cpu = [g for g in r["backend_ops"] if g["backend"] == "cpu"]
check(cpu and all(g["ok"] > 0 and g["not_ok"] == 0 and g["gradient_bounds"] for g in cpu),
      "backend-ops: no passing cpu group with its bounds: %r" % cpu)
models = {"vgg16", "resnet50", "alexnet", "inception_v3"}
check(len(r["bench"]) == 8 and {b["model"] for b in r["bench"]} == models, "8 runs of ours expected")
for b in r["bench"]:
    if b["precision"] == "f32" or b["status"] == "ok":
        check(b["status"] == "ok" and b["samples_per_s"] > 0 and b["ms_per_step_median"] > 0
              and b["peak_device_bytes"] > 0 and b["iterations"] == 3,
              "ours %s %s: %r" % (b["model"], b["precision"], b))
    else:
        check(b["status"] == "not implemented", "ours %s %s: %s (%s)" % (b["model"], b["precision"], b["status"],
                                                                        b.get("error")))
check(len(r["torch"]) == 8, "8 PyTorch records expected")
for b in r["torch"]:
    check(b["status"] in ("ok", "skipped"), "pytorch %s %s: %s (%s)" % (b["model"], b["precision"], b["status"],
                                                                      b.get("error")))
fm = r["fmnist"]
if os.path.isdir(data):
    g, c = fm["runs"]["gpu"], fm["runs"]["cpu"]
    check(fm["verdict"] == "pass" and g["status"] == "ok" and c["status"] == "ok", "fmnist: %r" % fm)
    check(g["test_accuracy"] == c["test_accuracy"] and g["test_accuracy"] > 0.3,
          "fmnist: accuracies %r and %r on the same device and seed" % (g["test_accuracy"], c["test_accuracy"]))
else:
    check(fm["verdict"] == "skipped", "fmnist without data: %r" % fm)
pl = r["pipeline"]
if pipeline:
    g, c = pl["runs"]["gpu"], pl["runs"]["cpu"]
    check(pl["verdict"] == "pass" and g["status"] == "ok" and c["status"] == "ok", "pipeline: %r" % pl)
    for key in ("test_accuracy", "final_loss", "mean_loss_last_20"):
        check(g[key] == c[key] and g[key] > 0, "pipeline: %s %r and %r on the same device and seed" % (
            key, g[key], c[key]))
    check(g["ranks"] == 2 and g["stages"] == 2 and g["minibatches"] == 100 and g["test_accuracy"] > 0.3
          and g["images_per_s"] > 0 and c["images_per_s"] > 0, "pipeline: %r" % g)
else:
    check(pl["verdict"] == "skipped" and pl["problems"], "pipeline without data or MPI: %r" % pl)
check(r["verdict"]["result"] == "pass", "verdict %r" % r["verdict"])
rows = list(csv.DictReader(open(os.path.join(out, "bench.csv"))))
check(len(rows) == 8 and {"model", "precision", "ours_samples_per_s", "torch_samples_per_s", "ratio"} <= set(rows[0]),
      "bench.csv: %d rows, columns %r" % (len(rows), list(rows[0]) if rows else None))
check(all(float(x["ours_samples_per_s"]) > 0 for x in rows if x["precision"] == "f32"), "bench.csv: f32 samples/s")
md = open(os.path.join(out, "summary.md")).read()
check("DRY RUN" in md and "## Verdict: pass" in md and md.count("| vgg16 |") == 2 and "| test_transport_gpu |" in md
      and "## Pipeline" in md, "summary.md lacks its tables")
print("ok: results.json, bench.csv and summary.md parse and agree")
EOF

# A budget spent before the first step: nothing runs, each step says so.
BUILD_DIR=$top_builddir OUT=$tmp/out2 WORK=$tmp/work2 DATA=$data BUDGET_S=5 \
    bash "$script" --dry-run --no-build >"$tmp/run2.log" 2>&1
status=$?
if [ $status -ne 1 ]; then
    tail -n 20 "$tmp/run2.log"
    echo "FAIL: with no budget left the script exited with $status (1 expected)"
    exit 1
fi
python3 - "$tmp/out2/results.json" <<'EOF' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
states = [t["status"] for t in r["tests"]] + [b["status"] for b in r["bench"]] + [b["status"] for b in r["torch"]]
states += [run["status"] for run in r["pipeline"]["runs"].values()]
if set(states) != {"skipped"} or r["verdict"]["result"] != "FAIL":
    print("FAIL: without budget, statuses %r, verdict %r" % (sorted(set(states)), r["verdict"]["result"]))
    sys.exit(1)
print("ok: a spent budget skips every step and fails the check")
EOF

bash "$script" --bogus >"$tmp/usage.log" 2>&1
status=$?
if [ $status -ne 2 ] || ! grep -q "unknown option '--bogus'" "$tmp/usage.log"; then
    cat "$tmp/usage.log"
    echo "FAIL: a bad option gave status $status"
    exit 1
fi
echo "PASS"
