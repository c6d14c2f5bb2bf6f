#!/usr/bin/env python3
"""PyTorch's reference for `pipedream bench step`: whole training steps of
torchvision's models (forward, cross-entropy, backward, SGD with momentum)
on one fixed random minibatch already on the device, timed step by step
after a warm-up, one JSON line per (model, precision) on stdout with the
keys `pipedream bench step` prints (impl "pytorch"), plus status, error,
torch and memory_format.

Precisions: f32 is strict float32 (TF32 off for matmuls and cuDNN), tf32
turns TF32 on, bf16 runs forward and loss under torch.autocast(bfloat16)
with float32 weights (the master copy) and float32 optimizer state.

Timing: CUDA events around each step (host clock on the CPU), the step
synchronised at its end; ms_per_step_median over --iterations steps after
--warmup untimed ones; samples_per_s is batch over that median. cuDNN's
benchmark mode is on, so its algorithm search falls in the warm-up.
peak_device_bytes is torch.cuda.max_memory_allocated() over the config
(parameters, gradients, optimizer state, activations; the caching
allocator's reserve and the CUDA context not counted), null on the CPU.

Inception-v3 is built with aux_logits=False: pipedream's inception_v3 has
no auxiliary head either (a tuple output would be reduced to its logits).

Exit status: 0 when every config ran or was skipped for the budget, 1 when
one failed, 2 for bad usage, 3 when torch or torchvision cannot be imported
(one JSON line per config says so).
"""
import argparse
import json
import math
import statistics
import sys
import time

MODELS = ("vgg16", "resnet50", "alexnet", "inception_v3")
PRECISIONS = ("f32", "tf32", "bf16")


def parse_config(text):
    """MODEL:BATCH:HEIGHT:WIDTH"""
    parts = text.split(":")
    if len(parts) != 4 or parts[0] not in MODELS:
        raise argparse.ArgumentTypeError(
            "'%s' is not MODEL:BATCH:HEIGHT:WIDTH with MODEL one of %s" % (text, ", ".join(MODELS)))
    try:
        batch, height, width = (int(p) for p in parts[1:])
    except ValueError:
        raise argparse.ArgumentTypeError("'%s': BATCH, HEIGHT and WIDTH must be integers" % text)
    if min(batch, height, width) < 1:
        raise argparse.ArgumentTypeError("'%s': BATCH, HEIGHT and WIDTH must be positive" % text)
    return parts[0], batch, height, width


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", type=parse_config, required=True,
                   help="MODEL:BATCH:HEIGHT:WIDTH, repeatable (models: %s)" % ", ".join(MODELS))
    p.add_argument("--precision", default="f32,bf16",
                   help="comma-separated list of f32, tf32, bf16 (default f32,bf16)")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--iterations", type=int, default=10, help="timed steps (default 10)")
    p.add_argument("--classes", type=int, default=1000, help="classes (default 1000)")
    p.add_argument("--seed", type=int, default=1, help="seed of the parameters and the minibatch")
    p.add_argument("--channels-last", action="store_true", help="NHWC memory format (default NCHW)")
    p.add_argument("--budget-s", type=float, default=0,
                   help="skip the configs that would start after this many seconds (0: no limit)")
    a = p.parse_args(argv)
    a.precisions = [x for x in a.precision.split(",") if x]
    bad = [x for x in a.precisions if x not in PRECISIONS]
    if bad or not a.precisions:
        p.error("--precision: '%s' is not a list of f32, tf32, bf16" % a.precision)
    if a.warmup < 0 or a.iterations < 1 or a.classes < 2:
        p.error("--warmup must be >= 0, --iterations >= 1, --classes >= 2")
    return a


def emit(record):
    print(json.dumps(record, sort_keys=False), flush=True)


def base_record(a, model, batch, height, width, precision):
    return {"impl": "pytorch", "model": model, "device": a.device, "precision": precision, "batch": batch,
            "channels": 3, "height": height, "width": width, "classes": a.classes, "width_mult": 1,
            "warmup": a.warmup, "iterations": a.iterations,
            "memory_format": "channels_last" if a.channels_last else "contiguous"}


def build_model(torchvision, name, classes):
    if name == "inception_v3":
        return torchvision.models.inception_v3(weights=None, aux_logits=False, init_weights=True,
                                               num_classes=classes)
    return getattr(torchvision.models, name)(weights=None, num_classes=classes)


def run_config(torch, torchvision, a, model_name, batch, height, width, precision):
    """Returns the record of one measured config (raises on failure)."""
    rec = base_record(a, model_name, batch, height, width, precision)
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(a.seed)
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)

    memory_format = torch.channels_last if a.channels_last else torch.contiguous_format
    model = build_model(torchvision, model_name, a.classes).to(device, memory_format=memory_format)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(a.seed + 1)
    x = (torch.rand(batch, 3, height, width, generator=gen) * 2 - 1).to(device, memory_format=memory_format)
    y = torch.randint(0, a.classes, (batch,), generator=gen).to(device)
    bf16 = precision == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=bf16):
            out = model(x)
            if isinstance(out, tuple):  # InceptionOutputs / GoogLeNetOutputs
                out = out[0]
            loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    times = []
    loss = None
    for _ in range(a.iterations):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            loss = step()
            times.append((time.perf_counter() - t0) * 1e3)
    loss_value = float(loss.detach().float().cpu())
    median = statistics.median(times)
    rec.update({
        "parameters": sum(p.numel() for p in model.parameters()),
        "ms_per_step_median": round(median, 4), "ms_per_step_min": round(min(times), 4),
        "ms_per_step_max": round(max(times), 4),
        "samples_per_s": round(batch * 1e3 / median, 2) if median > 0 else 0.0,
        "peak_device_bytes": int(torch.cuda.max_memory_allocated(device)) if cuda else None,
        "loss": loss_value if math.isfinite(loss_value) else None,
        "status": "ok", "torch": torch.__version__,
    })
    del model, opt, x, y
    return rec


def main(argv):
    a = parse_args(argv)
    configs = [(c, p) for c in a.config for p in a.precisions]
    try:
        import torch
        import torchvision
    except Exception as e:  # ImportError, or a broken install
        print("torch_step_bench.py: cannot import torch/torchvision: %s" % e, file=sys.stderr)
        for (m, b, h, w), prec in configs:
            rec = base_record(a, m, b, h, w, prec)
            rec.update({"status": "skipped", "error": "cannot import torch/torchvision: %s" % e})
            emit(rec)
        return 3
    start = time.monotonic()
    failed = False
    for (m, b, h, w), prec in configs:
        if a.budget_s > 0 and time.monotonic() - start > a.budget_s:
            rec = base_record(a, m, b, h, w, prec)
            rec.update({"status": "skipped", "error": "time budget of %g s spent" % a.budget_s})
            emit(rec)
            continue
        try:
            emit(run_config(torch, torchvision, a, m, b, h, w, prec))
        except Exception as e:  # out of memory, an unsupported op: record it and go on
            failed = True
            rec = base_record(a, m, b, h, w, prec)
            rec.update({"status": "failed", "error": ("%s: %s" % (type(e).__name__, e)).splitlines()[0][:500]})
            emit(rec)
        # Outside the handler, whose traceback held the failed config's tensors.
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
