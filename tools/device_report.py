#!/usr/bin/env python3
"""The report of tools/device-check.sh: reads the steps that
tools/device-run.sh left in --work (NAME.out, NAME.err, NAME.rc per step)
and writes, in --out:
  results.json  everything parsed: tests (TAP counts, failures; the
                device-memory channel cases), the backend-ops harness per
                backend and dtype with its tolerances, Fashion-MNIST on the
                GPU and the CPU, the 2-stage LeNet pipeline on both, every
                training-step run of ours and PyTorch's, the comparison, the
                verdict;
  bench.csv     ours against PyTorch per model and precision (samples/s,
                median ms per step, peak device bytes, the ratio);
  summary.md    the same as Markdown tables, then the verdict;
and prints summary.md. Exit status 0 when every check passed (in a dry run,
runs that are not implemented yet and a missing PyTorch are notes, not
failures), 1 otherwise.
"""
import argparse
import csv
import json
import os
import re
import sys

FMNIST_TOLERANCE = 0.01  # the GPU's test accuracy within 1 point of the CPU's
# The 2-stage LeNet pipeline (100 steps, lr 0.01): the GPU's test accuracy
# within 1 point of the CPU's and its last minibatch's loss within 0.05. On
# the CPU, changing only the rounding (OpenMP threads 1 -> 2) moved them by
# 0.0013 and 0.0022; even bf16 activations by 0.0056 and 0.0044.
PIPELINE_ACCURACY_TOLERANCE = 0.01
PIPELINE_LOSS_TOLERANCE = 0.05
PIPELINE_STEPS = 100
SKIP_PREFIX = re.compile(r"^#\s*SKIP\s*", re.I)
TAP_LINE = re.compile(r"^(not ok|ok)\b\s*(\d*)\s*(?:-\s*)?(.*)$")
GRAD_ERROR = re.compile(r"d\([^)]*\) ([0-9.]+(?:e[+-]?\d+)?)")
GRAD_BOUND = re.compile(r"relative error bound ([0-9.]+(?:e[+-]?\d+)?)")
DTYPE = re.compile(r"\b(bf16|f16|tf32|f32)\b")
NOT_IMPLEMENTED = re.compile(r"not implemented|unsupported|ENOTSUP", re.I)


def read(path, default=""):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return default


def last_line(text):
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-1][:400] if lines else ""


def step_state(work, name):
    """(status, rc, error) of one step: ok, budget, timeout, failed or missing."""
    rc_text = read(os.path.join(work, name + ".rc")).strip()
    err = last_line(read(os.path.join(work, name + ".err")))
    if not rc_text:
        return "missing", None, "the step did not run"
    if rc_text == "budget":
        return "skipped", None, "not started: the time budget was spent"
    rc = int(rc_text)
    if rc in (124, 137):
        limit = read(os.path.join(work, name + ".limit")).strip()
        return "timeout", rc, "killed after %s s" % (limit or "?")
    return ("ok" if rc == 0 else "failed"), rc, err


def last_json(text):
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


# ---- TAP ------------------------------------------------------------------

def parse_tap(text):
    t = {"planned": None, "ok": 0, "not_ok": 0, "skip": 0, "bail_out": None, "skip_all": None,
         "failures": [], "lines": []}
    for line in text.splitlines():
        m = re.match(r"^1\.\.(\d+)(?:\s*#\s*SKIP\s*(.*))?", line)
        if m:
            t["planned"] = int(m.group(1))
            if m.group(2) is not None or t["planned"] == 0:
                t["skip_all"] = (m.group(2) or "no tests").strip()
            continue
        if line.startswith("Bail out!"):
            t["bail_out"] = line[9:].strip()
            continue
        m = TAP_LINE.match(line)
        if not m:
            continue
        desc = m.group(3)
        skipped = re.search(r"#\s*SKIP", desc, re.I) is not None
        if m.group(1) == "ok":
            t["ok"] += 1
            t["skip"] += skipped
        else:
            t["not_ok"] += 1
            t["failures"].append(line[:300])
        t["lines"].append((m.group(1) == "ok", skipped, desc))
    return t


def test_result(work, name, gpu_expected):
    status, rc, err = step_state(work, name)
    tap = parse_tap(read(os.path.join(work, name + ".out")))
    ran = tap["ok"] + tap["not_ok"]
    problems = []
    if status != "ok" and status != "failed":
        problems.append("%s: %s" % (status, err))
    if tap["bail_out"]:
        problems.append("bailed out: " + tap["bail_out"])
    if tap["not_ok"]:
        problems.append("%d not ok" % tap["not_ok"])
    if status == "failed" and not tap["not_ok"] and not tap["bail_out"]:
        problems.append("exit %s: %s" % (rc, err))
    if tap["planned"] is not None and ran != tap["planned"] and status in ("ok", "failed"):
        problems.append("%d of %d planned tests reported" % (ran, tap["planned"]))
    if status in ("ok", "failed") and tap["planned"] is None:
        problems.append("no TAP plan in the output")
    if gpu_expected and (tap["skip_all"] or (tap["skip"] and any(
            s and d.startswith("cuda") for _, s, d in tap["lines"]))):
        problems.append("the CUDA device did not open (cases skipped)")
    return {"name": name, "status": status, "rc": rc, "verdict": test_verdict(status, problems),
            "planned": tap["planned"], "ok": tap["ok"] - tap["skip"], "not_ok": tap["not_ok"],
            "skipped": tap["skip"], "skip_all": tap["skip_all"], "bail_out": tap["bail_out"],
            "failures": tap["failures"][:30], "problems": problems, "notes": []}, tap


def test_verdict(status, problems):
    return "pass" if not problems else ("skipped" if status == "skipped" else "fail")


def transport_gpu_result(work, gpu_expected):
    """test_transport_gpu, judged per case: on the GPU the cuda pairs (slots
    in CUDA memory over shm and tcp) must run, and a skip of them is a
    problem; export_dmabuf may skip (dma_buf export depends on the kernel
    and the driver): its reason is a note, as is a descriptor it gave and
    the verbs pairs left out (no RDMA NIC there)."""
    name = "test_transport_gpu"
    t, tap = test_result(work, name, False)  # the cases below say what a skip means
    pairs, dmabuf = {}, None
    for passed, skipped, desc in tap["lines"]:
        text = SKIP_PREFIX.sub("", desc) if skipped else desc
        m = re.match(r"cuda slots over (\w+): (.*)", text)
        if m:
            pair = pairs.setdefault(m.group(1), {"ran": 0, "skipped": None, "path": None})
            if skipped:
                pair["skipped"] = m.group(2)
            else:
                pair["ran"] += 1
                path = re.search(r"took the (\S+) path", m.group(2))
                pair["path"] = path.group(1) if path else pair["path"]
        elif text.startswith("cuda: export_dmabuf"):
            dmabuf = {"status": "skipped" if skipped else ("ok" if passed else "failed"), "detail": text}
    t["cuda_pairs"], t["export_dmabuf"] = pairs, dmabuf
    if not gpu_expected or t["status"] not in ("ok", "failed"):
        return t
    for backend in ("shm", "tcp"):
        pair = pairs.get(backend)
        if not pair or not pair["ran"]:
            t["problems"].append("cuda slots over %s did not run on the GPU (%s)" % (
                backend, "skipped: " + pair["skipped"] if pair and pair["skipped"] else "no case reported"))
        else:
            t["notes"].append("cuda slots over %s: %d cases ran, path %s" % (backend, pair["ran"], pair["path"]))
    if dmabuf is None:
        t["problems"].append("no export_dmabuf case reported")
    elif dmabuf["status"] == "skipped":
        t["notes"].append("export_dmabuf skipped (depends on the kernel and driver): " + dmabuf["detail"])
    elif dmabuf["status"] == "ok":
        t["notes"].append(dmabuf["detail"])
    t["notes"] += [l[2:] for l in read(os.path.join(work, name + ".out")).splitlines() if l.startswith("# verbs:")]
    t["verdict"] = test_verdict(t["status"], t["problems"])
    return t


def cross_backend_tolerance(src):
    m = re.search(r"#define\s+CROSS_BACKEND_TOLERANCE\s+([0-9.eE+-]+)",
                  read(os.path.join(src, "tests", "backend_ops", "harness.c")))
    return float(m.group(1)) if m else None


def backend_ops_tolerances(tap, cross_tol):
    """Per backend and dtype: counts, the largest finite-difference gradient
    error seen and the bounds the cases state."""
    groups = {}
    for passed, skipped, desc in tap["lines"]:
        words = desc.split()
        if not words:
            continue
        backend = words[0]
        m = DTYPE.search(desc)
        dtype = m.group(1) if m else "f32"
        g = groups.setdefault((backend, dtype), {"backend": backend, "dtype": dtype, "cases": 0, "ok": 0,
                                                 "not_ok": 0, "skipped": 0, "max_gradient_error": None,
                                                 "worst_error_to_bound": None, "gradient_bounds": set(),
                                                 "layers": set()})
        g["cases"] += 1
        g["layers"].add(words[1].rstrip(":") if len(words) > 1 else "?")
        if skipped:
            g["skipped"] += 1
            continue
        g["ok" if passed else "not_ok"] += 1
        errors = [float(x) for x in GRAD_ERROR.findall(desc)]
        bounds = [float(b) for b in GRAD_BOUND.findall(desc)]
        if errors:
            e = max(errors)
            g["max_gradient_error"] = e if g["max_gradient_error"] is None else max(g["max_gradient_error"], e)
            if bounds and bounds[0] > 0:
                ratio = e / bounds[0]
                worst = g["worst_error_to_bound"]
                g["worst_error_to_bound"] = ratio if worst is None else max(worst, ratio)
        g["gradient_bounds"].update(bounds)
    rows = []
    for g in groups.values():
        g["gradient_bounds"] = sorted(g["gradient_bounds"])
        g["layers"] = sorted(g["layers"])
        g["cross_backend_tolerance"] = None if g["backend"] == "cpu" else cross_tol
        rows.append(g)
    return sorted(rows, key=lambda r: (r["backend"] != "cpu", r["backend"], r["dtype"]))


# ---- training runs ----------------------------------------------------------

def summary_run(work, name, keys):
    """One training step's state and the `keys` of its JSON summary line."""
    status, rc, err = step_state(work, name)
    summary = last_json(read(os.path.join(work, name + ".out"))) if status == "ok" else None
    run = {"status": status, "rc": rc, "error": None if status == "ok" else err}
    if summary:
        run.update({k: summary.get(k) for k in keys})
    elif status == "ok":
        run["status"], run["error"] = "failed", "no JSON summary on stdout"
    return run


def fmnist(work):
    if os.path.exists(os.path.join(work, "fmnist.missing")):
        return {"verdict": "skipped", "problems": [read(os.path.join(work, "fmnist.missing")).strip()]}
    res = {"data": read(os.path.join(work, "fmnist.data")).strip(), "runs": {}}
    problems = []
    for where in ("gpu", "cpu"):
        run = summary_run(work, "fmnist-" + where, ("device", "steps", "epochs", "final_loss", "test_accuracy",
                                                    "test_samples", "train_seconds", "images_per_s"))
        if run["status"] != "ok":
            problems.append("%s run %s: %s" % (where, run["status"], run["error"]))
        res["runs"][where] = run
    g, c = res["runs"]["gpu"].get("test_accuracy"), res["runs"]["cpu"].get("test_accuracy")
    if g is not None and c is not None:
        res["accuracy_difference"] = round(g - c, 6)
        res["tolerance"] = FMNIST_TOLERANCE
        if abs(g - c) > FMNIST_TOLERANCE:
            problems.append("test accuracy %.4f on the GPU, %.4f on the CPU: more than %.2f apart" % (
                g, c, FMNIST_TOLERANCE))
    elif not problems:
        problems.append("a test accuracy is missing")
    res["problems"] = problems
    res["verdict"] = "pass" if not problems else "fail"
    return res


def mean_last_losses(path, n=20):
    """The mean loss of the last n minibatches of a --metrics file."""
    losses = []
    for row in csv.DictReader(read(path).splitlines()):
        try:
            losses.append(float(row["loss"]))
        except (KeyError, TypeError, ValueError):
            continue
    return round(sum(losses[-n:]) / len(losses[-n:]), 6) if losses else None


def pipeline(work, mode):
    """The 2-stage 1f1b LeNet pipeline (2 ranks under mpirun) with both ranks
    on the GPU and on the CPU: both complete their 100 steps, and the final
    loss and test accuracy agree within the stated tolerances."""
    if os.path.exists(os.path.join(work, "pipeline.missing")):
        return {"verdict": "skipped", "problems": [read(os.path.join(work, "pipeline.missing")).strip()], "runs": {}}
    res = {"settings": "lenet on fashion-mnist, stages conv1-pool2 | flatten-loss, 1f1b, 2 ranks (mpirun -np 2), "
                       "batch 64, lr 0.01, momentum 0.9, %d steps, seed 1" % PIPELINE_STEPS,
           "tolerance": {"test_accuracy": PIPELINE_ACCURACY_TOLERANCE, "final_loss": PIPELINE_LOSS_TOLERANCE},
           "runs": {}}
    problems = []
    p_status, _, p_err = step_state(work, "pipeline-profile")
    if p_status != "ok":
        problems.append("profile %s: %s" % (p_status, p_err))
    for where in ("gpu", "cpu"):
        name = "pipeline-" + where
        if p_status != "ok":
            run = {"status": "skipped" if p_status == "skipped" else "not run",
                   "error": "the profile step %s" % p_status}
        else:
            run = summary_run(work, name, ("ranks", "stages", "batch", "minibatches", "final_loss", "test_accuracy",
                                           "test_samples", "train_seconds", "images_per_s"))
            run["mean_loss_last_20"] = mean_last_losses(os.path.join(work, name + ".csv"))
            if run["status"] == "ok" and (run.get("ranks"), run.get("stages"), run.get("minibatches")) != (
                    2, 2, PIPELINE_STEPS):
                run["status"], run["error"] = "failed", "ran %s ranks, %s stages, %s minibatches" % (
                    run.get("ranks"), run.get("stages"), run.get("minibatches"))
            if run["status"] == "ok" and where == "gpu" and mode == "device" and \
                    "the GPU is not used" in read(os.path.join(work, name + ".err")):
                run["status"], run["error"] = "failed", "a rank says the GPU is not used"
        if run["status"] != "ok":
            problems.append("%s run %s: %s" % (where, run["status"], run["error"]))
        res["runs"][where] = run
    gpu, cpu = res["runs"]["gpu"], res["runs"]["cpu"]
    for key, tolerance in (("test_accuracy", PIPELINE_ACCURACY_TOLERANCE), ("final_loss", PIPELINE_LOSS_TOLERANCE)):
        g, c = gpu.get(key), cpu.get(key)
        if g is None or c is None:
            continue
        res[key + "_difference"] = round(g - c, 6)
        if abs(g - c) > tolerance:
            problems.append("%s %.4f on the GPU, %.4f on the CPU: more than %.2f apart" % (key, g, c, tolerance))
    if not problems and (gpu.get("test_accuracy") is None or cpu.get("test_accuracy") is None):
        problems.append("a test accuracy is missing")
    res["problems"] = problems
    res["verdict"] = "pass" if not problems else "fail"
    return res


def smi_peak_mib(path):
    values = [int(v) for v in read(path).split() if v.isdigit()]
    return max(values) - values[0] if len(values) >= 2 else None


def ours_runs(work, configs, precisions):
    runs = []
    for precision in precisions:
        for model, batch, height, width in configs:
            name = "bench-%s-%s" % (model, precision)
            status, rc, err = step_state(work, name)
            rec = last_json(read(os.path.join(work, name + ".out"))) if status == "ok" else None
            base = {"impl": "pipedream", "model": model, "precision": precision, "batch": batch, "height": height,
                    "width": width}
            if rec is not None:
                base.update(rec)
                base["status"] = "ok" if rec.get("loss") is not None else "failed"
                base["error"] = None if rec.get("loss") is not None else "the loss is not finite"
            else:
                if status == "failed" and NOT_IMPLEMENTED.search(read(os.path.join(work, name + ".err"))):
                    status = "not implemented"
                elif status == "ok":
                    status, err = "failed", "no JSON line on stdout"
                base.update({"status": status, "error": err})
            base["smi_peak_mib"] = smi_peak_mib(os.path.join(work, name + ".smi"))
            runs.append(base)
    return runs


def torch_runs(work, configs, precisions):
    status, rc, err = step_state(work, "torch")
    seen = {}
    for line in read(os.path.join(work, "torch.out")).splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        seen[(rec.get("model"), rec.get("precision"))] = rec
    runs = []
    for precision in precisions:
        for model, batch, height, width in configs:
            rec = seen.get((model, precision))
            if rec is None:
                why = {"ok": "no record", "skipped": err, "timeout": "the process was " + err}.get(status, err)
                rec = {"impl": "pytorch", "model": model, "precision": precision, "batch": batch, "height": height,
                       "width": width, "status": status if status in ("skipped", "timeout") else "failed",
                       "error": why}
            runs.append(rec)
    return runs, {"status": status, "rc": rc, "error": err}


def group_runs(runs):
    """The runs that did not end ok, grouped by (impl, status, error):
    one line for the eight runs a missing PyTorch skips."""
    groups = {}
    for b in runs:
        if b.get("status") != "ok":
            key = (b["impl"], b.get("status"), b.get("error"))
            groups.setdefault(key, []).append("%s %s" % (b["model"], b["precision"]))
    return groups


def compare(ours, theirs):
    rows = []
    index = {(r["model"], r["precision"]): r for r in theirs}
    for o in ours:
        t = index.get((o["model"], o["precision"]), {})
        row = {"model": o["model"], "batch": o["batch"], "height": o["height"], "width": o["width"],
               "precision": o["precision"], "ours_status": o["status"], "ours_samples_per_s": o.get("samples_per_s"),
               "ours_ms_median": o.get("ms_per_step_median"), "ours_peak_device_bytes": o.get("peak_device_bytes"),
               "ours_smi_peak_mib": o.get("smi_peak_mib"), "torch_status": t.get("status", "missing"),
               "torch_samples_per_s": t.get("samples_per_s"), "torch_ms_median": t.get("ms_per_step_median"),
               "torch_peak_device_bytes": t.get("peak_device_bytes"), "ratio": None}
        if o["status"] == "ok" and t.get("status") == "ok" and t.get("samples_per_s"):
            row["ratio"] = round(o["samples_per_s"] / t["samples_per_s"], 4)
        rows.append(row)
    return rows


# ---- output -------------------------------------------------------------------

def fmt(v, spec="%.1f"):
    if v is None:
        return "-"
    return spec % v if isinstance(v, float) else str(v)


def mib(v):
    return "-" if v is None else "%.0f" % (v / 1048576.0)


def md_table(out, headers, rows):
    """Appends a Markdown table to the list of lines `out`."""
    out.append("| " + " | ".join(headers) + " |")
    out.append("|" + " --- |" * len(headers))
    for row in rows:
        out.append("| " + " | ".join(str(x) for x in row) + " |")


def markdown(r):
    dry = r["mode"] == "dry"
    out = []
    out.append("# Device check: %s" % ("DRY RUN on the CPU (tiny sizes; no GPU numbers)" if dry else "H200 run"))
    out.append("")
    st = dict(r["settings"])
    out.append("Command: `%s`; %s; revision %s." % (st.pop("command", "?"), st.pop("date", "?"),
                                                   st.pop("revision", "?")))
    out.append("")
    out.append("Settings: %s." % ", ".join("%s %s" % kv for kv in st.items()))
    if r["environment"]:
        out.append("")
        out.append("```")
        out.extend(r["environment"].rstrip().splitlines())
        out.append("```")
    out.append("")
    out.append("## Tests")
    out.append("")
    md_table(out, ["program", "verdict", "ok", "not ok", "skipped", "planned", "notes"],
             [(t["name"], t["verdict"], t["ok"], t["not_ok"], t["skipped"], fmt(t["planned"]),
               "; ".join(t["problems"] + t["notes"]) or "-") for t in r["tests"]])
    for t in r["tests"]:
        for f in t["failures"][:10]:
            out.append("- %s: `%s`" % (t["name"], f))
    out.append("")
    out.append("Backend-ops harness per backend and dtype (gradients against central differences; other "
               "backends' outputs and gradients against the CPU's, relative L2):")
    out.append("")
    md_table(out, ["backend", "dtype", "cases", "ok", "not ok", "skipped", "max gradient error", "gradient bounds",
                   "worst error / its bound", "tolerance vs cpu"],
             [(g["backend"], g["dtype"], g["cases"], g["ok"], g["not_ok"], g["skipped"],
               fmt(g["max_gradient_error"], "%.1e"), ", ".join("%.0e" % b for b in g["gradient_bounds"]) or "-",
               fmt(g["worst_error_to_bound"], "%.2f"),
               fmt(g["cross_backend_tolerance"], "%.0e") if g["backend"] != "cpu" else "(reference)")
              for g in r["backend_ops"]])
    out.append("")
    out.append("## Fashion-MNIST: LeNet on the %s and on the CPU (seed 1)" % ("CPU standing in for the GPU"
                                                                           if dry else "GPU"))
    out.append("")
    fm = r["fmnist"]
    if "runs" in fm:
        md_table(out, ["run", "status", "device", "steps", "test accuracy", "final loss", "images/s"],
                 [(where, run["status"], run.get("device", "-"), fmt(run.get("steps")),
                   fmt(run.get("test_accuracy"), "%.4f"), fmt(run.get("final_loss"), "%.4f"),
                   fmt(run.get("images_per_s"), "%.0f")) for where, run in fm["runs"].items()])
    out.append("")
    out.append("Verdict: %s%s" % (fm["verdict"], (" (" + "; ".join(fm["problems"]) + ")") if fm["problems"] else
                                  " (accuracies within %.2f)" % FMNIST_TOLERANCE))
    out.append("")
    out.append("## Pipeline: LeNet in 2 stages (1f1b), 2 ranks under mpirun, on the %s and on the CPU" % (
        "CPU standing in for the GPU" if dry else "GPU"))
    out.append("")
    pl = r["pipeline"]
    if pl.get("settings"):
        out.append("Settings: %s." % pl["settings"])
        out.append("")
    if pl["runs"]:
        md_table(out, ["run", "status", "ranks", "stages", "steps", "test accuracy", "final loss",
                       "mean loss, last 20", "samples/s"],
                 [(where, run["status"], fmt(run.get("ranks")), fmt(run.get("stages")), fmt(run.get("minibatches")),
                   fmt(run.get("test_accuracy"), "%.4f"), fmt(run.get("final_loss"), "%.4f"),
                   fmt(run.get("mean_loss_last_20"), "%.4f"), fmt(run.get("images_per_s"), "%.0f"))
                  for where, run in pl["runs"].items()])
        out.append("")
    out.append("Verdict: %s%s" % (pl["verdict"], (" (" + "; ".join(pl["problems"]) + ")") if pl["problems"] else
                                  " (test accuracies within %.2f, final losses within %.2f)" % (
                                      PIPELINE_ACCURACY_TOLERANCE, PIPELINE_LOSS_TOLERANCE)))
    out.append("")
    out.append("## Training steps: ours against PyTorch (samples/s, median step)")
    out.append("")
    md_table(out, ["model", "batch", "input", "precision", "ours", "ours samples/s", "ours ms",
                   "ours MiB (alloc / smi)", "PyTorch", "PyTorch samples/s", "PyTorch ms", "PyTorch MiB", "ratio"],
             [(c["model"], c["batch"], "%sx%s" % (c["height"], c["width"]), c["precision"], c["ours_status"],
               fmt(c["ours_samples_per_s"]), fmt(c["ours_ms_median"], "%.2f"),
               "%s / %s" % (mib(c["ours_peak_device_bytes"]), fmt(c["ours_smi_peak_mib"])), c["torch_status"],
               fmt(c["torch_samples_per_s"]), fmt(c["torch_ms_median"], "%.2f"), mib(c["torch_peak_device_bytes"]),
               fmt(c["ratio"], "%.3f")) for c in r["comparison"]])
    out.append("")
    out.append("## Verdict: %s" % r["verdict"]["result"])
    for p in r["verdict"]["problems"]:
        out.append("- FAIL: " + p)
    for n in r["verdict"]["notes"]:
        out.append("- note: " + n)
    return "\n".join(out) + "\n"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", required=True, help="the steps' directory (device-run.sh's PD_WORK)")
    p.add_argument("--out", required=True, help="where results.json, bench.csv and summary.md go")
    p.add_argument("--src", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."),
                   help="the source tree (for the harness's stated tolerance)")
    a = p.parse_args(argv)
    settings = dict(l.split("=", 1) for l in read(os.path.join(a.work, "settings.txt")).split("\n") if "=" in l)
    if not settings:
        p.error("%s holds no settings.txt: not a device-run.sh work directory" % a.work)
    mode = settings.get("mode", "device")
    configs = []
    for line in read(os.path.join(a.work, "configs.txt")).split():
        m, b, h, w = line.split(":")
        configs.append((m, int(b), int(h), int(w)))
    precisions = ["f32", "bf16"]
    gpu_expected = mode == "device"

    tests, taps = [], {}
    for name in ("test_cuda_ops", "backend_ops"):
        t, tap = test_result(a.work, name, gpu_expected)
        tests.append(t)
        taps[name] = tap
    tests.insert(1, transport_gpu_result(a.work, gpu_expected))
    if os.path.exists(os.path.join(a.work, "transport_gpu_mpi.rc")):  # run with the pipeline's mpirun
        t, tap = test_result(a.work, "transport_gpu_mpi", False)
        t["notes"] += [l[2:] for l in read(os.path.join(a.work, "transport_gpu_mpi.out")).splitlines()
                       if l.startswith("# mpi:") or l.startswith("# cuda slots over mpi")]
        tests.insert(2, t)
    ours = ours_runs(a.work, configs, precisions)
    theirs, torch_step = torch_runs(a.work, configs, precisions)
    r = {
        "mode": mode, "settings": settings, "environment": read(os.path.join(a.work, "environment.txt")),
        "nvidia_smi": read(os.path.join(a.work, "nvidia-smi.csv")), "tests": tests,
        "backend_ops": backend_ops_tolerances(taps["backend_ops"], cross_backend_tolerance(a.src)),
        "fmnist": fmnist(a.work), "pipeline": pipeline(a.work, mode), "bench": ours, "torch": theirs, "torch_step": torch_step,
    }
    r["comparison"] = compare(ours, theirs)

    problems, notes = [], []
    for t in tests:
        problems += ["%s: %s" % (t["name"], x) for x in t["problems"]]
        notes += ["%s: %s" % (t["name"], x) for x in t["notes"]]
    for key, label in (("fmnist", "fashion-mnist"), ("pipeline", "pipeline")):
        if r[key]["verdict"] != "pass":
            (problems if not (mode == "dry" and r[key]["verdict"] == "skipped") else notes).extend(
                label + ": " + x for x in r[key]["problems"])
    torch_missing = torch_step["rc"] == 3
    for (impl, status, error), runs in group_runs(ours + theirs).items():
        what = "%s %s: %s (%s)" % (impl, ", ".join(runs), status, error)
        excused = mode == "dry" and ((impl == "pipedream" and status == "not implemented") or
                                     (impl == "pytorch" and torch_missing))
        (notes if excused else problems).append(what)
    if mode == "dry":
        notes.append("dry run: the CPU stands in for the GPU; no number here is a GPU measurement")
    r["verdict"] = {"result": "pass" if not problems else "FAIL", "problems": problems, "notes": notes}

    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(r, f, indent=1, default=list)
    with open(os.path.join(a.out, "bench.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(r["comparison"][0].keys()) if r["comparison"] else ["model"])
        w.writeheader()
        for row in r["comparison"]:
            w.writerow({k: ("" if v is None else v) for k, v in row.items()})
    md = markdown(r)
    with open(os.path.join(a.out, "summary.md"), "w") as f:
        f.write(md)
    sys.stdout.write(md)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
