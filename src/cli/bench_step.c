/* `pipedream bench step`: the steady-state speed of whole training steps of
 * a model of the zoo on one device: forward, loss, backward and an SGD
 * update on one fixed random minibatch already on the device (data loading
 * left out), each step timed with the device's events after a warm-up; one
 * JSON line on stdout, the shape tools/torch_step_bench.py prints for
 * PyTorch's models. */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pipedream.h>

#include "cli/pd_cli.h"
#include "core/pd_rng.h"

#define DEFAULT_WARMUP 3
#define DEFAULT_ITERATIONS 10
#define BENCH_LR 0.01f
#define BENCH_MOMENTUM 0.9f

typedef struct step_args {
    pd_cli_model_args m;
    pd_precision math; /* parsed --precision */
} step_args;

/* What a run keeps; released by release(). */
typedef struct step_run {
    pd_device *dev;
    pd_graph *g;
    pd_optimizer *opt;
    pd_model_io io;
    pd_device_event *start, *stop;
    double *step_ms;
    double setup_ms; /* device open to the first step */
} step_run;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: pipedream bench step --model M [--batch B] [--height H] [--width W]\n"
            "                            [--device D] [--precision P] [--warmup N] [--iterations N]\n"
            "\n"
            "Times whole training steps of a model on one device: forward, softmax\n"
            "cross-entropy, backward and one SGD update (lr %g, momentum %g), on one\n"
            "fixed minibatch of random images and labels copied to the device once (no\n"
            "data loading). --warmup steps run first, untimed; each of the --iterations\n"
            "steps after them is timed alone with the device's events (CUDA events on a\n"
            "GPU, a monotonic clock on the CPU), the device synchronised at its end.\n"
            "Prints one JSON line on stdout:\n"
            "  impl, model, device, precision, batch, channels, height, width, classes,\n"
            "  width_mult, parameters, warmup, iterations, ms_per_step_median,\n"
            "  ms_per_step_min, ms_per_step_max, samples_per_s (batch over the median\n"
            "  step), peak_device_bytes (the most the device's allocator had handed out at\n"
            "  once: parameters, gradients, activations, optimizer state, scratch and\n"
            "  workspaces; the CUDA context not counted), setup_s (opening the device,\n"
            "  building, allocating and initialising the model, filling the minibatch),\n"
            "  loss (the last step's; null when not finite).\n"
            "\n"
            "Options:\n"
            "  --model NAME       the model (see 'pipedream models'; not s2vt)\n"
            "  --batch N          minibatch size (default 64; --batch-size is an alias)\n"
            "  --channels C       input channels (default 3)\n"
            "  --height H         input height (default 224)\n"
            "  --width W          input width (default 224)\n"
            "  --classes K        classes (default 1000)\n"
            "  --width-mult F     width multiplier of every layer (default 1)\n"
            "  --device DEV       cpu, cuda or cuda:N (default cpu)\n"
            "  --precision P      f32 (default), tf32 (CUDA only) or bf16 (activations\n"
            "                     stored in bf16, f32 compute and master weights)\n"
            "  --warmup N         untimed steps first (default %d)\n"
            "  --iterations N     timed steps (default %d)\n"
            "  --seed N           seed of the parameters and the random minibatch (default 1)\n"
            "  --help             this text\n",
            (double)BENCH_LR, (double)BENCH_MOMENTUM, DEFAULT_WARMUP, DEFAULT_ITERATIONS);
}

/* Fills *a from the command line. Returns -1 to go on, else an exit code. */
static int parse_args(int argc, char **argv, step_args *a)
{
    static const struct option options[] = {
        PD_CLI_MODEL_OPTIONS,
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c, bad = 0;

    *a = (step_args){.m = {
                         .device = "cpu",
                         .precision = "f32",
                         .batch = 64,
                         .channels = 3,
                         .height = 224,
                         .width = 224,
                         .classes = 1000,
                         .warmup = DEFAULT_WARMUP,
                         .iterations = DEFAULT_ITERATIONS,
                         .seed = 1,
                         .width_mult = 1.0,
                     }};
    opterr = 0;
    while (!bad && (c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        if (pd_cli_model_option("bench step", c, optarg, &a->m, &bad))
            continue;
        switch (c) {
        case 'h': usage(stdout); return PD_CLI_OK;
        default: pd_cli_option_error("bench step", c, argv, optind); return PD_CLI_USAGE;
        }
    }
    if (bad)
        return PD_CLI_USAGE;
    if (optind < argc) {
        pd_cli_error("bench step: unexpected argument '%s' (see 'pipedream bench step --help')", argv[optind]);
        return PD_CLI_USAGE;
    }
    if (!a->m.model) {
        pd_cli_error("bench step: --model is needed (see 'pipedream bench step --help')");
        return PD_CLI_USAGE;
    }
    if (!pd_model_description(a->m.model)) {
        pd_cli_error("bench step: --model: unknown model '%s' (see 'pipedream models')", a->m.model);
        return PD_CLI_USAGE;
    }
    if (strcmp(a->m.model, "s2vt") == 0) {
        pd_cli_error("bench step: --model s2vt reads captions, not images; bench step times image models");
        return PD_CLI_USAGE;
    }
    if (pd_cli_parse_precision("bench step", a->m.precision, a->m.device, &a->math) != 0)
        return PD_CLI_USAGE;
    return -1;
}

/* Random images in [-1, 1) and labels in [0, classes) into the model's
 * input tensors, once. */
static pd_status fill_minibatch(step_run *r, uint64_t seed)
{
    pd_tensor *images = pd_graph_output(r->g, r->io.images), *labels = pd_graph_output(r->g, r->io.labels);
    const int64_t n_images = pd_tensor_numel(images), n_labels = pd_tensor_numel(labels);
    const int64_t classes = pd_graph_node_shape(r->g, r->io.logits)->dim[1];
    float *x = malloc((size_t)n_images * sizeof(*x));
    int32_t *y = malloc((size_t)n_labels * sizeof(*y));
    pd_status s;
    pd_rng rng;

    if (!x || !y) {
        s = PD_ERROR(PD_ENOMEM, "bench step: out of host memory for the minibatch (%lld values)",
                     (long long)n_images);
        goto release;
    }
    pd_rng_init(&rng, seed);
    for (int64_t i = 0; i < n_images; i++)
        x[i] = pd_rng_range(&rng, -1.0f, 1.0f);
    for (int64_t i = 0; i < n_labels; i++)
        y[i] = (int32_t)(pd_rng_next(&rng) % (uint64_t)classes);
    s = pd_tensor_copy_from_host(images, x, (size_t)n_images * sizeof(*x));
    if (s == PD_OK)
        s = pd_tensor_copy_from_host(labels, y, (size_t)n_labels * sizeof(*y));
release:
    free(x);
    free(y);
    return s;
}

/* One training step between two events, finished on the device when it
 * returns; *ms is its time on the device. */
static pd_status train_step(step_run *r, int64_t step, double *ms)
{
    pd_device *dev = r->dev;

    PD_CHECK(dev->ops->event_record(dev, r->start));
    PD_CHECK(pd_graph_forward(r->g, step, true));
    PD_CHECK(pd_graph_backward(r->g, step, r->io.loss, NULL));
    PD_CHECK(pd_optimizer_step(r->opt));
    PD_CHECK(dev->ops->event_record(dev, r->stop));
    PD_CHECK(dev->mem->synchronize(dev));
    return dev->ops->event_elapsed_ms(dev, r->start, r->stop, ms);
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void print_result(const step_args *a, step_run *r, const pd_device_memory_stats *memory, float loss)
{
    const int64_t n = a->m.iterations;
    double median;

    qsort(r->step_ms, (size_t)n, sizeof(*r->step_ms), compare_doubles);
    median = n % 2 ? r->step_ms[n / 2] : 0.5 * (r->step_ms[n / 2 - 1] + r->step_ms[n / 2]);
    printf("{\"impl\":\"pipedream\",\"model\":\"%s\",\"device\":\"%s\",\"precision\":\"%s\",\"batch\":%lld,"
           "\"channels\":%lld,\"height\":%lld,\"width\":%lld,\"classes\":%lld,\"width_mult\":%g,\"parameters\":%lld,"
           "\"warmup\":%lld,\"iterations\":%lld,\"ms_per_step_median\":%.4f,\"ms_per_step_min\":%.4f,"
           "\"ms_per_step_max\":%.4f,\"samples_per_s\":%.2f,\"peak_device_bytes\":%llu,\"setup_s\":%.3f,\"loss\":",
           a->m.model, r->dev->name, a->m.precision, (long long)a->m.batch, (long long)a->m.channels,
           (long long)a->m.height, (long long)a->m.width, (long long)a->m.classes, a->m.width_mult, (long long)pd_graph_param_count(r->g),
           (long long)a->m.warmup, (long long)n, median, r->step_ms[0], r->step_ms[n - 1],
           median > 0 ? (double)a->m.batch * 1e3 / median : 0.0, (unsigned long long)memory->peak_bytes_in_use,
           r->setup_ms * 1e-3);
    if (isfinite(loss))
        printf("%.6g}\n", (double)loss);
    else
        printf("null}\n");
    fflush(stdout);
}

static int run(const step_args *a)
{
    const pd_model_options m = {
        .batch = (int)a->m.batch,
        .channels = (int)a->m.channels,
        .height = (int)a->m.height,
        .width = (int)a->m.width,
        .classes = (int)a->m.classes,
        .width_multiplier = (float)a->m.width_mult,
    };
    const pd_sgd_desc sgd = {.lr = BENCH_LR, .momentum = BENCH_MOMENTUM};
    const double setup_start = now_ms();
    step_run r = {0};
    pd_device_memory_stats memory;
    float loss = NAN;
    pd_status s;
    int code = PD_CLI_OK;

    if (!(r.step_ms = malloc((size_t)a->m.iterations * sizeof(*r.step_ms)))) {
        pd_cli_error("bench step: out of host memory");
        return PD_CLI_FAILURE;
    }
    if ((s = pd_device_open(a->m.device, &r.dev)) != PD_OK) {
        code = pd_cli_fail("bench step: --device", s);
        goto release;
    }
    if ((s = r.dev->ops->set_precision(r.dev, a->math)) != PD_OK) {
        code = pd_cli_fail("bench step: --precision", s);
        goto release;
    }
    if ((s = r.dev->ops->event_create(r.dev, &r.start)) != PD_OK ||
        (s = r.dev->ops->event_create(r.dev, &r.stop)) != PD_OK ||
        (s = pd_graph_create(r.dev, (uint64_t)a->m.seed, &r.g)) != PD_OK ||
        (s = pd_model_build(a->m.model, r.g, &m, &r.io)) != PD_OK ||
        (s = pd_graph_set_precision(r.g, a->math)) != PD_OK || (s = pd_graph_allocate(r.g)) != PD_OK ||
        (s = pd_optimizer_create_sgd(r.g, &sgd, &r.opt)) != PD_OK ||
        (s = fill_minibatch(&r, (uint64_t)a->m.seed + 1)) != PD_OK) {
        code = pd_cli_fail("bench step", s);
        goto release;
    }
    r.setup_ms = now_ms() - setup_start;
    for (int64_t step = 0; step < a->m.warmup + a->m.iterations; step++) {
        double ms;
        if ((s = train_step(&r, step, &ms)) != PD_OK) {
            code = pd_cli_fail(step < a->m.warmup ? "bench step: warm-up" : "bench step", s);
            goto release;
        }
        if (step >= a->m.warmup)
            r.step_ms[step - a->m.warmup] = ms;
    }
    if ((s = pd_tensor_copy_to_host(pd_graph_output(r.g, r.io.loss), &loss, sizeof(loss))) != PD_OK ||
        (s = r.dev->ops->memory_stats(r.dev, &memory)) != PD_OK) {
        code = pd_cli_fail("bench step: after the steps", s);
        goto release;
    }
    print_result(a, &r, &memory, loss);
release:
    pd_optimizer_destroy(r.opt);
    pd_graph_destroy(r.g);
    if (r.dev) {
        r.dev->ops->event_destroy(r.dev, r.start);
        r.dev->ops->event_destroy(r.dev, r.stop);
    }
    pd_device_close(r.dev);
    free(r.step_ms);
    return code;
}

int pd_cli_bench_step(int argc, char **argv)
{
    step_args a;
    int code;

    if ((code = parse_args(argc, argv, &a)) >= 0)
        return code;
    return run(&a);
}
