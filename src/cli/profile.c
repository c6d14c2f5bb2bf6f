/* `pipedream profile`: measures a model's per-layer times and sizes on a
 * device and writes the profile the partitioner reads; or converts between
 * PipeDream's graph.txt profiles and `*.profile.json`. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream.h>
#include <pipedream/loader.h>
#include <pipedream/profile.h>

#include "cli/pd_cli.h"

typedef struct profile_args {
    pd_cli_model_args m;
    const char *output, *format, *import, *data;
    pd_precision math; /* parsed --precision */
    bool quiet;
} profile_args;

enum {
    OPT_FORMAT = PD_CLI_MODEL_OPT_END,
    OPT_IMPORT,
    OPT_DATA,
};

/* Defaults: LeNet on Fashion-MNIST's geometry. */
#define DEFAULT_WARMUP 5
#define DEFAULT_ITERATIONS 30

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: pipedream profile --model M [options] [-o FILE]\n"
            "       pipedream profile --import FILE [--model NAME] [--batch-size N] [-o FILE]\n"
            "\n"
            "Measures every layer of a model on a device: forward and backward time per\n"
            "minibatch (medians of --iterations timed repetitions after --warmup whole\n"
            "training steps; each layer timed on its own with the device's events: CUDA\n"
            "events on a GPU, the monotonic clock on the CPU; the device synchronised\n"
            "around it), output activation bytes and trainable weight bytes,\n"
            "with the graph's edges. A whole step is timed alongside, so the sum of the\n"
            "layers can be checked against it. The input nodes' forward time is the data\n"
            "loading time (PipeDream's convention): measured with --data, else 0 (random\n"
            "input). Prints a table to stdout and writes the profile with -o.\n"
            "\n"
            "With --import, reads a PipeDream graph.txt profile (or a .profile.json) instead\n"
            "and converts it.\n"
            "\n"
            "Options:\n"
            "  --model NAME         model to profile; one of:\n");
    for (int i = 0; pd_model_name(i); i++)
        fprintf(out, "                         %-13s %s\n", pd_model_name(i), pd_model_description(pd_model_name(i)));
    fprintf(out,
            "                       with --import: the profile's model name (default: the\n"
            "                       file's directory name for graph*.txt, else its name)\n"
            "  --batch-size N       minibatch size (default 64; with --import: the batch the\n"
            "                       file was measured with, default 0 = unknown)\n"
            "  --channels C         input channels (default 1, or the data set's)\n"
            "  --height H           input height (default 28, or the data set's)\n"
            "  --width W            input width (default 28, or the data set's)\n"
            "  --classes K          classes (default 10, or the data set's)\n"
            "  --width-mult F       width multiplier of every layer (default 1)\n"
            "  --device DEV         cpu, cuda or cuda:N (default cpu)\n"
            "  --precision P        f32 (default), tf32 (CUDA only) or bf16: each layer\n"
            "                       timed with bf16 activations as `train --precision\n"
            "                       bf16` runs it; activation bytes (what a stage cut\n"
            "                       sends) are then bf16's, half of f32's, and the\n"
            "                       profile's dtype is bf16\n"
            "  --warmup N           whole training steps before timing (default %d)\n"
            "  --iterations N       timed repetitions; medians are kept (default %d)\n"
            "  --seed N             parameter initialisation seed (default 1)\n"
            "  --data KIND[:DIR]    time the data loader as the input's forward time and\n"
            "                       profile on its minibatches: mnist, fashion-mnist,\n"
            "                       cifar10, imagenet (with :DIR) or synthetic\n"
            "  --import FILE        convert a graph.txt (or .profile.json) profile\n"
            "  -o, --output FILE    write the profile to FILE\n"
            "  --format FMT         json or graph.txt (default: graph.txt for an output\n"
            "                       named *.txt, else json)\n"
            "  -q, --quiet          no table on stdout\n"
            "  --help               this text\n",
            DEFAULT_WARMUP, DEFAULT_ITERATIONS);
}

/* Fills *a from the command line. Returns -1 to go on, else an exit code. */
static int parse_args(int argc, char **argv, profile_args *a)
{
    static const struct option options[] = {
        PD_CLI_MODEL_OPTIONS,
        {"data", required_argument, NULL, OPT_DATA},
        {"import", required_argument, NULL, OPT_IMPORT},
        {"output", required_argument, NULL, 'o'},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c, bad = 0;

    *a = (profile_args){.m = {
                            .device = "cpu",
                            .batch = -1,
                            .warmup = DEFAULT_WARMUP,
                            .iterations = DEFAULT_ITERATIONS,
                            .seed = 1,
                            .width_mult = 1.0,
                        }};
    opterr = 0;
    while (!bad && (c = getopt_long(argc, argv, ":ho:q", options, NULL)) != -1) {
        if (pd_cli_model_option("profile", c, optarg, &a->m, &bad))
            continue;
        switch (c) {
        case OPT_DATA: a->data = optarg; break;
        case OPT_IMPORT: a->import = optarg; break;
        case 'o': a->output = optarg; break;
        case OPT_FORMAT: a->format = optarg; break;
        case 'q': a->quiet = true; break;
        case 'h': usage(stdout); return PD_CLI_OK;
        default: pd_cli_option_error("profile", c, argv, optind); return PD_CLI_USAGE;
        }
    }
    if (bad)
        return PD_CLI_USAGE;
    if (optind < argc) {
        pd_cli_error("profile: unexpected argument '%s' (see 'pipedream profile --help')", argv[optind]);
        return PD_CLI_USAGE;
    }
    if (!a->format) /* by the output's name: x.txt is graph.txt, anything else JSON */
        a->format = a->output && strlen(a->output) > 4 && strcmp(a->output + strlen(a->output) - 4, ".txt") == 0
                        ? "graph.txt"
                        : "json";
    if (strcmp(a->format, "json") != 0 && strcmp(a->format, "graph.txt") != 0) {
        pd_cli_error("profile: --format: '%s' is not json or graph.txt", a->format);
        return PD_CLI_USAGE;
    }
    if (a->output && !a->output[0]) {
        pd_cli_error("profile: -o: an empty file name");
        return PD_CLI_USAGE;
    }
    if (a->import && a->m.precision) {
        pd_cli_error("profile: --import converts a profile; --precision does not apply");
        return PD_CLI_USAGE;
    }
    if (pd_cli_parse_precision("profile", a->m.precision, a->m.device, &a->math))
        return PD_CLI_USAGE;
    if (a->import) {
        if (a->m.channels || a->m.height || a->m.width || a->m.classes || a->data || a->m.width_mult != 1.0) {
            pd_cli_error("profile: --import converts a profile; model shape and --data options do not apply");
            return PD_CLI_USAGE;
        }
        return -1;
    }
    if (!a->m.model) {
        pd_cli_error("profile: --model or --import is needed (see 'pipedream profile --help')");
        return PD_CLI_USAGE;
    }
    if (!pd_model_description(a->m.model)) {
        char known[512] = "";
        for (int i = 0; pd_model_name(i); i++) {
            size_t used = strlen(known);
            snprintf(known + used, sizeof(known) - used, "%s%s", i ? ", " : "", pd_model_name(i));
        }
        pd_cli_error("profile: --model: unknown model '%s' (known: %s)", a->m.model, known);
        return PD_CLI_USAGE;
    }
    return -1;
}

/* Reports a failed library call as one line and returns its exit code. */
static int fail(const char *context, pd_status s)
{
    const char *message = pd_last_error();
    size_t n = strlen(context);

    /* The library's profile messages start with "profile: " already. */
    if (strncmp(message, context, n) == 0 && message[n] == ':')
        pd_cli_error("%s", message);
    else
        pd_cli_error("%s: %s", context, message);
    return pd_cli_exit_code(s);
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* ---- the table ---- */

static void print_table(const pd_profile *p)
{
    const pd_profile_info *info = pd_profile_get_info(p);
    double fwd = 0, bwd = 0, act = 0;

    printf("profile of %s: batch %d, %s, device %s (%s)\n", info->model, info->batch, pd_dtype_name(info->dtype),
           info->device, info->source);
    printf("%-28s %-22s %10s %10s %14s %12s\n", "layer", "type", "fwd ms", "bwd ms", "activation KiB", "weight KiB");
    for (int i = 0; i < pd_profile_size(p); i++) {
        const pd_profile_node *n = pd_profile_node_at(p, i);
        printf("%-28s %-22s %10.4f %10.4f %14.1f %12.1f\n", n->name, n->type, n->fwd_ms, n->bwd_ms,
               (double)n->activation_bytes / 1024.0, (double)n->weight_bytes / 1024.0);
        if (strcmp(n->type, PD_PROFILE_INPUT_TYPE) != 0) {
            fwd += n->fwd_ms;
            bwd += n->bwd_ms;
        }
        act += (double)n->activation_bytes;
    }
    printf("%-28s %-22s %10.4f %10.4f %14.1f %12.1f\n", "total (inputs excluded)", "", fwd, bwd, act / 1024.0,
           (double)pd_profile_weight_bytes(p) / 1024.0);
    printf("layers fwd+bwd: %.4f ms per minibatch", fwd + bwd);
    if (info->iterations > 0)
        printf("; whole step (forward+backward): %.4f ms (layers/step %.3f); medians of %d iterations after %d "
               "warm-up steps",
               info->step_ms, info->step_ms > 0 ? (fwd + bwd) / info->step_ms : 0.0, info->iterations, info->warmup);
    printf("\ndata loading: %.4f ms per minibatch (%s)\n", pd_profile_data_loading_ms(p), info->data_note);
}

static int write_profile(const profile_args *a, const pd_profile *p)
{
    pd_status s;

    if (!a->output)
        return PD_CLI_OK;
    s = strcmp(a->format, "graph.txt") == 0 ? pd_profile_export_graph_txt(p, a->output)
                                            : pd_profile_write_json(p, a->output);
    if (s != PD_OK)
        return fail("profile: -o", s);
    return PD_CLI_OK;
}

/* ---- --import ---- */

static int run_import(const profile_args *a)
{
    char model[256];
    pd_profile *p;
    pd_status s;
    int code;

    if (ends_with(a->import, ".json")) {
        if (a->m.model || a->m.batch >= 0) {
            pd_cli_error("profile: --import of a .json profile keeps its model and batch; drop --model/--batch-size");
            return PD_CLI_USAGE;
        }
        s = pd_profile_read_json(a->import, &p);
    } else {
        if (a->m.model)
            snprintf(model, sizeof(model), "%s", a->m.model);
        else
            pd_cli_import_model_name(a->import, model, sizeof(model));
        s = pd_profile_import_graph_txt(a->import, model, a->m.batch > 0 ? (int)a->m.batch : 0, &p);
    }
    if (s != PD_OK)
        return fail("profile: --import", s);
    if (!a->quiet)
        print_table(p);
    code = write_profile(a, p);
    pd_profile_destroy(p);
    return code;
}

/* ---- measuring ---- */

/* A loader feeding the graph's "images" and "labels" inputs. */
typedef struct loader_feed {
    pd_loader *loader;
    pd_graph *g;
    int images, labels;
    float *host_images;
    int32_t *host_labels;
    size_t image_bytes, label_bytes;
} loader_feed;

static pd_status feed_minibatch(void *ctx, pd_graph *g)
{
    loader_feed *f = ctx;
    int valid;

    PD_CHECK(pd_loader_next(f->loader, f->host_images, f->host_labels, &valid));
    PD_CHECK(pd_tensor_copy_from_host(pd_graph_output(g, f->images), f->host_images, f->image_bytes));
    return pd_tensor_copy_from_host(pd_graph_output(g, f->labels), f->host_labels, f->label_bytes);
}

/* Opens the --data loader for the model's geometry (the data set's where
 * no option says otherwise) and fills in the model options. */
static int open_loader(const profile_args *a, pd_model_options *m, pd_loader **out)
{
    char kind[64];
    const char *colon = strchr(a->data, ':');
    size_t kind_len = colon ? (size_t)(colon - a->data) : strlen(a->data);
    pd_loader_options lo = {0};
    pd_loader_info info;
    pd_status s;

    if (kind_len == 0 || kind_len >= sizeof(kind)) {
        pd_cli_error("profile: --data: '%s' is not KIND[:DIR]", a->data);
        return PD_CLI_USAGE;
    }
    memcpy(kind, a->data, kind_len);
    kind[kind_len] = '\0';
    lo.kind = kind;
    lo.path = colon ? colon + 1 : NULL;
    lo.split = "train";
    lo.batch = m->batch;
    lo.train = true;
    lo.seed = (uint64_t)a->m.seed;
    lo.channels = (int)a->m.channels;
    lo.height = (int)a->m.height;
    lo.width = (int)a->m.width;
    lo.classes = (int)a->m.classes;
    if ((s = pd_loader_open(&lo, out)) != PD_OK)
        return fail("profile: --data", s);
    pd_loader_get_info(*out, &info);
    m->channels = info.channels;
    m->height = info.height;
    m->width = info.width;
    if (!a->m.classes)
        m->classes = info.classes;
    return -1;
}

static int run_measure(const profile_args *a)
{
    pd_model_options m = {
        .batch = a->m.batch > 0 ? (int)a->m.batch : 64,
        .channels = a->m.channels ? (int)a->m.channels : 1,
        .height = a->m.height ? (int)a->m.height : 28,
        .width = a->m.width ? (int)a->m.width : 28,
        .classes = a->m.classes ? (int)a->m.classes : 10,
        .width_multiplier = (float)a->m.width_mult,
    };
    pd_profile_options po = {.warmup = (int)a->m.warmup, .iterations = (int)a->m.iterations};
    loader_feed feed = {0};
    pd_device *dev = NULL;
    pd_graph *g = NULL;
    pd_profile *p = NULL;
    pd_model_io io;
    char note[512];
    pd_status s;
    int code = -1;

    if ((s = pd_device_open(a->m.device, &dev)) != PD_OK)
        return fail("profile: --device", s);
    if ((s = dev->ops->set_precision(dev, a->math)) != PD_OK) {
        code = fail("profile: --precision", s);
        goto release;
    }
    if (a->data && (code = open_loader(a, &m, &feed.loader)) >= 0)
        goto release;
    if ((s = pd_graph_create(dev, (uint64_t)a->m.seed, &g)) != PD_OK) {
        code = fail("profile", s);
        goto release;
    }
    if ((s = pd_graph_set_precision(g, a->math)) != PD_OK) {
        code = fail("profile: --precision", s);
        goto release;
    }
    if ((s = pd_model_build(a->m.model, g, &m, &io)) != PD_OK) {
        code = fail("profile: --model", s);
        goto release;
    }
    if ((s = pd_graph_allocate(g)) != PD_OK) {
        code = fail("profile", s);
        goto release;
    }
    if (feed.loader) {
        if (io.words >= 0) {
            pd_cli_error("profile: --data: model %s reads words too; its loader is not an image loader", a->m.model);
            code = PD_CLI_USAGE;
            goto release;
        }
        feed.images = io.images;
        feed.labels = io.labels;
        feed.image_bytes = pd_tensor_nbytes(pd_graph_output(g, io.images));
        feed.label_bytes = pd_tensor_nbytes(pd_graph_output(g, io.labels));
        feed.host_images = malloc(feed.image_bytes);
        feed.host_labels = malloc(feed.label_bytes);
        if (!feed.host_images || !feed.host_labels) {
            pd_cli_error("profile: out of host memory for minibatch buffers");
            code = PD_CLI_FAILURE;
            goto release;
        }
        snprintf(note, sizeof(note), "loader %s", a->data);
        po.feed = feed_minibatch;
        po.feed_ctx = &feed;
        po.feed_note = note;
    }
    if ((s = pd_profile_measure_graph(g, a->m.model, &po, &p)) != PD_OK) {
        code = fail("profile", s);
        goto release;
    }
    if (!a->quiet)
        print_table(p);
    code = write_profile(a, p);
release:
    pd_profile_destroy(p);
    free(feed.host_images);
    free(feed.host_labels);
    pd_graph_destroy(g);
    pd_loader_destroy(feed.loader);
    pd_device_close(dev);
    return code;
}

int pd_cli_profile(int argc, char **argv)
{
    profile_args a;
    int code;

    if ((code = parse_args(argc, argv, &a)) >= 0)
        return code;
    return a.import ? run_import(&a) : run_measure(&a);
}
