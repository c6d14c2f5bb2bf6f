/* `pipedream models` and `pipedream model-info`: the zoo's registry, and one
 * model's layers with their output shapes, parameters, forward FLOPs and
 * activation bytes, as text, JSON or CSV. Building a graph allocates no
 * tensor memory, so paper-size models are described instantly. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include <pipedream.h>
#include <pipedream/models.h>

#include "cli/pd_cli.h"

#define MIB (1024.0 * 1024.0)
/* Input elements x width multiplier^2 beyond which FLOP counts (up to ~2^18
 * per input element at width 1, for VGG-16) could overflow int64. */
#define PROBLEM_LIMIT 1099511627776.0

typedef enum { FORMAT_TEXT, FORMAT_JSON, FORMAT_CSV } info_format;

/* Each model's paper input; any other model gets DEFAULT_INPUT. */
static const struct paper_input {
    const char *model;
    int channels, height, width, classes;
} paper_inputs[] = {
    {"lenet", 1, 28, 28, 10},
    {"mlp", 1, 28, 28, 10},
    {"inception_v3", 3, 299, 299, 1000},
    /* S2VT: 4096 features per frame, 80 frames, 20 words, 10000 words. */
    {"s2vt", 4096, 80, 20, 10000},
};
static const struct paper_input default_input = {NULL, 3, 224, 224, 1000};

enum { OPT_MODEL = 256, OPT_BATCH, OPT_CHANNELS, OPT_HEIGHT, OPT_WIDTH, OPT_CLASSES, OPT_WIDTH_MULT, OPT_FORMAT };

static void models_usage(FILE *out)
{
    fprintf(out, "Usage: pipedream models\n"
                 "\n"
                 "Lists the models of the zoo: one line each, name and description.\n");
}

int pd_cli_models(int argc, char **argv)
{
    static const struct option options[] = {
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        if (c == 'h') {
            models_usage(stdout);
            return PD_CLI_OK;
        }
        pd_cli_option_error("models", c, argv, optind);
        return PD_CLI_USAGE;
    }
    if (optind < argc) {
        pd_cli_error("models: unexpected argument '%s' (see 'pipedream models --help')", argv[optind]);
        return PD_CLI_USAGE;
    }
    for (int i = 0; pd_model_name(i); i++)
        printf("%-14s %s\n", pd_model_name(i), pd_model_description(pd_model_name(i)));
    return PD_CLI_OK;
}

static void model_info_usage(FILE *out)
{
    fprintf(out,
            "Usage: pipedream model-info --model NAME [options]\n"
            "\n"
            "Describes a model of the zoo layer by layer without running it: id, name,\n"
            "type, output shape, trainable parameters, forward FLOPs, output activation\n"
            "bytes and input ids; then the totals. FLOPs count a multiply-add as 2\n"
            "(torchvision's \"GFLOPS\" are multiply-adds: VGG-16's 15.47 are 30.9 here).\n"
            "\n"
            "Options:\n"
            "  --model NAME       the model (see 'pipedream models')\n"
            "  --batch N          minibatch size (default 1)\n"
            "  --channels C       input channels    (defaults: the model's paper input,\n"
            "  --height H         input height       listed below)\n"
            "  --width W          input width\n"
            "  --classes K        number of classes\n"
            "  --width-mult F     width multiplier in (0, 64] (default 1)\n"
            "  --format FMT       text (default), json or csv\n"
            "  --help             this text\n"
            "\n"
            "Paper inputs (channels x height x width, classes):\n");
    for (size_t i = 0; i < sizeof(paper_inputs) / sizeof(paper_inputs[0]); i++)
        fprintf(out, "  %-14s %dx%dx%d, %d\n", paper_inputs[i].model, paper_inputs[i].channels, paper_inputs[i].height,
                paper_inputs[i].width, paper_inputs[i].classes);
    fprintf(out,
            "  %-14s %dx%dx%d, %d\n"
            "(S2VT reads channels as features per frame, height as frames, width as\n"
            "words, classes as the vocabulary.)\n"
            "\n",
            "others", default_input.channels, default_input.height, default_input.width, default_input.classes);
    fprintf(out,
            "JSON: {model, batch, channels, height, width, classes, width_multiplier,\n"
            "layers: [{id, name, type, dtype, shape, params, flops, activation_bytes,\n"
            "inputs}], totals: {params, flops_per_batch, flops_per_sample,\n"
            "activation_bytes}}. CSV: a header, one row per layer (shape as NxCxHxW,\n"
            "inputs separated by ';'), and a last row named 'total' with the sums.\n"
            "Activation bytes are per node output for the whole batch; their total is\n"
            "the sum over nodes.\n");
}

typedef struct info_args {
    const char *model;
    pd_model_options opts;
    info_format format;
} info_args;

static int parse_format(const char *text, info_format *out)
{
    static const char *const names[] = {"text", "json", "csv"};

    for (int i = 0; i < 3; i++)
        if (strcmp(text, names[i]) == 0) {
            *out = (info_format)i;
            return 0;
        }
    pd_cli_error("model-info: --format: '%s' is not one of text, json, csv", text);
    return -1;
}

/* Fills *a from the command line. Returns -1 to go on, else an exit code. */
static int parse_info_args(int argc, char **argv, info_args *a)
{
    static const struct option options[] = {
        {"model", required_argument, NULL, OPT_MODEL},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"channels", required_argument, NULL, OPT_CHANNELS},
        {"height", required_argument, NULL, OPT_HEIGHT},
        {"width", required_argument, NULL, OPT_WIDTH},
        {"classes", required_argument, NULL, OPT_CLASSES},
        {"width-mult", required_argument, NULL, OPT_WIDTH_MULT},
        {"format", required_argument, NULL, OPT_FORMAT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const int64_t big = 1 << 20;
    int64_t batch = 1, channels = 0, height = 0, width = 0, classes = 0;
    double width_mult = 1.0;
    int c, bad = 0;

    *a = (info_args){.format = FORMAT_TEXT};
    opterr = 0;
    while (!bad && (c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        switch (c) {
        case OPT_MODEL: a->model = optarg; break;
        case OPT_BATCH: bad = pd_cli_parse_int64("--batch", optarg, 1, big, &batch); break;
        case OPT_CHANNELS: bad = pd_cli_parse_int64("--channels", optarg, 1, big, &channels); break;
        case OPT_HEIGHT: bad = pd_cli_parse_int64("--height", optarg, 1, big, &height); break;
        case OPT_WIDTH: bad = pd_cli_parse_int64("--width", optarg, 1, big, &width); break;
        case OPT_CLASSES: bad = pd_cli_parse_int64("--classes", optarg, 2, big, &classes); break;
        case OPT_WIDTH_MULT: bad = pd_cli_parse_double("--width-mult", optarg, 1e-6, 64, &width_mult); break;
        case OPT_FORMAT: bad = parse_format(optarg, &a->format); break;
        case 'h': model_info_usage(stdout); return PD_CLI_OK;
        default: pd_cli_option_error("model-info", c, argv, optind); return PD_CLI_USAGE;
        }
    }
    if (bad)
        return PD_CLI_USAGE;
    if (optind < argc) {
        pd_cli_error("model-info: unexpected argument '%s' (see 'pipedream model-info --help')", argv[optind]);
        return PD_CLI_USAGE;
    }
    if (!a->model) {
        pd_cli_error("model-info: --model NAME is required (see 'pipedream models')");
        return PD_CLI_USAGE;
    }
    const struct paper_input *paper = &default_input;
    for (size_t i = 0; i < sizeof(paper_inputs) / sizeof(paper_inputs[0]); i++)
        if (strcmp(paper_inputs[i].model, a->model) == 0)
            paper = &paper_inputs[i];
    const double m = width_mult;
    if ((double)batch * (double)(channels ? channels : paper->channels) * (double)(height ? height : paper->height) *
            (double)(width ? width : paper->width) * m * m > PROBLEM_LIMIT) {
        pd_cli_error("model-info: batch x channels x height x width x width-mult^2 exceeds 2^40; the counts "
                     "would overflow 64 bits");
        return PD_CLI_USAGE;
    }
    a->opts = (pd_model_options){
        .batch = (int)batch,
        .channels = channels ? (int)channels : paper->channels,
        .height = height ? (int)height : paper->height,
        .width = width ? (int)width : paper->width,
        .classes = classes ? (int)classes : paper->classes,
        .width_multiplier = (float)width_mult,
    };
    return -1;
}

/* Sums over the nodes. */
typedef struct info_totals {
    int64_t params, flops;
    size_t activation_bytes;
} info_totals;

static info_totals sum_nodes(const pd_graph *g)
{
    info_totals t = {0, 0, 0};

    for (int k = 0; k < pd_graph_size(g); k++) {
        t.params += pd_graph_node_param_count(g, k);
        t.flops += pd_graph_node_flops(g, k);
        t.activation_bytes += pd_graph_node_activation_bytes(g, k);
    }
    return t;
}

static void print_text(const info_args *a, const pd_graph *g)
{
    const pd_model_options *o = &a->opts;
    info_totals t = sum_nodes(g);
    int name_width = 4, type_width = 4, shape_width = 6;
    char shape[96];

    for (int k = 0; k < pd_graph_size(g); k++) {
        int n = (int)strlen(pd_graph_node_name(g, k)), ty = (int)strlen(pd_graph_node_type(g, k));
        int sh = (int)strlen(pd_shape_format(pd_graph_node_shape(g, k), shape, sizeof(shape)));
        name_width = n > name_width ? n : name_width;
        type_width = ty > type_width ? ty : type_width;
        shape_width = sh > shape_width ? sh : shape_width;
    }
    printf("%s: input %dx%dx%dx%d, %d classes, width multiplier %g\n\n", a->model, o->batch, o->channels, o->height,
           o->width, o->classes, (double)o->width_multiplier);
    printf("%4s  %-*s  %-*s  %-5s %-*s %12s %16s %14s  %s\n", "id", name_width, "name", type_width, "type", "dtype",
           shape_width, "output", "params", "flops", "activation_B", "inputs");
    for (int k = 0; k < pd_graph_size(g); k++) {
        const int *inputs;
        int n = pd_graph_node_inputs(g, k, &inputs);
        printf("%4d  %-*s  %-*s  %-5s %-*s %12lld %16lld %14zu  ", k, name_width, pd_graph_node_name(g, k), type_width,
               pd_graph_node_type(g, k), pd_dtype_name(pd_graph_node_dtype(g, k)), shape_width,
               pd_shape_format(pd_graph_node_shape(g, k), shape, sizeof(shape)),
               (long long)pd_graph_node_param_count(g, k), (long long)pd_graph_node_flops(g, k),
               pd_graph_node_activation_bytes(g, k));
        for (int i = 0; i < n; i++)
            printf("%s%d", i ? "," : "", inputs[i]);
        putchar('\n');
    }
    printf("\nparameters   %lld trainable (%.1f MiB as f32)\n", (long long)t.params, (double)t.params * 4 / MIB);
    printf("forward      %.3f GFLOPs per sample, %.3f GFLOPs per batch of %d (a multiply-add counts 2)\n",
           (double)t.flops / o->batch / 1e9, (double)t.flops / 1e9, o->batch);
    printf("activations  %.2f MiB per batch (sum of the node outputs)\n", (double)t.activation_bytes / MIB);
}

static void print_csv(const pd_graph *g)
{
    info_totals t = sum_nodes(g);

    printf("id,name,type,dtype,shape,params,flops,activation_bytes,inputs\n");
    for (int k = 0; k < pd_graph_size(g); k++) {
        const pd_shape *s = pd_graph_node_shape(g, k);
        const int *inputs;
        int n = pd_graph_node_inputs(g, k, &inputs);
        printf("%d,%s,%s,%s,", k, pd_graph_node_name(g, k), pd_graph_node_type(g, k),
               pd_dtype_name(pd_graph_node_dtype(g, k)));
        for (int d = 0; d < s->ndim; d++)
            printf("%s%lld", d ? "x" : "", (long long)s->dim[d]);
        printf(",%lld,%lld,%zu,", (long long)pd_graph_node_param_count(g, k), (long long)pd_graph_node_flops(g, k),
               pd_graph_node_activation_bytes(g, k));
        for (int i = 0; i < n; i++)
            printf("%s%d", i ? ";" : "", inputs[i]);
        putchar('\n');
    }
    printf(",total,,,,%lld,%lld,%zu,\n", (long long)t.params, (long long)t.flops, t.activation_bytes);
}

static int print_json(const info_args *a, const pd_graph *g)
{
    const pd_model_options *o = &a->opts;
    info_totals t = sum_nodes(g);
    json_t *root = json_object(), *layers = json_array(), *totals = json_object();
    int failed = !root || !layers || !totals;

    for (int k = 0; !failed && k < pd_graph_size(g); k++) {
        const pd_shape *s = pd_graph_node_shape(g, k);
        json_t *layer = json_object(), *shape = json_array(), *inputs = json_array();
        const int *ids;
        int n = pd_graph_node_inputs(g, k, &ids);
        failed = !layer || !shape || !inputs;
        for (int d = 0; !failed && d < s->ndim; d++)
            failed = json_array_append_new(shape, json_integer(s->dim[d])) != 0;
        for (int i = 0; !failed && i < n; i++)
            failed = json_array_append_new(inputs, json_integer(ids[i])) != 0;
        failed = failed || json_object_set_new(layer, "id", json_integer(k)) ||
                 json_object_set_new(layer, "name", json_string(pd_graph_node_name(g, k))) ||
                 json_object_set_new(layer, "type", json_string(pd_graph_node_type(g, k))) ||
                 json_object_set_new(layer, "dtype", json_string(pd_dtype_name(pd_graph_node_dtype(g, k)))) ||
                 json_object_set_new(layer, "shape", shape) ||
                 json_object_set_new(layer, "params", json_integer(pd_graph_node_param_count(g, k))) ||
                 json_object_set_new(layer, "flops", json_integer(pd_graph_node_flops(g, k))) ||
                 json_object_set_new(layer, "activation_bytes",
                                     json_integer((json_int_t)pd_graph_node_activation_bytes(g, k))) ||
                 json_object_set_new(layer, "inputs", inputs) || json_array_append_new(layers, layer);
    }
    failed = failed || json_object_set_new(root, "model", json_string(a->model)) ||
             json_object_set_new(root, "batch", json_integer(o->batch)) ||
             json_object_set_new(root, "channels", json_integer(o->channels)) ||
             json_object_set_new(root, "height", json_integer(o->height)) ||
             json_object_set_new(root, "width", json_integer(o->width)) ||
             json_object_set_new(root, "classes", json_integer(o->classes)) ||
             json_object_set_new(root, "width_multiplier", json_real(o->width_multiplier)) ||
             json_object_set_new(root, "layers", layers) ||
             json_object_set_new(totals, "params", json_integer(t.params)) ||
             json_object_set_new(totals, "flops_per_batch", json_integer(t.flops)) ||
             json_object_set_new(totals, "flops_per_sample", json_real((double)t.flops / o->batch)) ||
             json_object_set_new(totals, "activation_bytes", json_integer((json_int_t)t.activation_bytes)) ||
             json_object_set_new(root, "totals", totals) || json_dumpf(root, stdout, JSON_INDENT(1)) != 0;
    json_decref(root);
    if (failed) {
        pd_cli_error("model-info: out of memory writing JSON");
        return PD_CLI_FAILURE;
    }
    putchar('\n');
    return PD_CLI_OK;
}

int pd_cli_model_info(int argc, char **argv)
{
    info_args a;
    pd_device *dev = NULL;
    pd_graph *g = NULL;
    pd_model_io io;
    pd_status s;
    int rc = parse_info_args(argc, argv, &a);

    if (rc >= 0)
        return rc;
    /* The graph is only built, never allocated: the device is a formality. */
    if ((s = pd_device_open("cpu", &dev)) != PD_OK || (s = pd_graph_create(dev, 1, &g)) != PD_OK ||
        (s = pd_model_build(a.model, g, &a.opts, &io)) != PD_OK) {
        pd_cli_error("model-info: %s", pd_last_error());
        rc = pd_cli_exit_code(s);
        goto release;
    }
    rc = PD_CLI_OK;
    switch (a.format) {
    case FORMAT_TEXT: print_text(&a, g); break;
    case FORMAT_CSV: print_csv(g); break;
    case FORMAT_JSON: rc = print_json(&a, g); break;
    }
release:
    pd_graph_destroy(g);
    pd_device_close(dev);
    return rc;
}
