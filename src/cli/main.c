/* The `pipedream` command: global options, verb dispatch, and the helpers
 * every verb shares (one-line errors, strict option parsing). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream.h>

#include "cli/pd_cli.h"

void pd_cli_error(const char *fmt, ...)
{
    char message[2048];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    /* One line, whatever the message holds. */
    for (char *c = message; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
    fprintf(stderr, "pipedream: %s\n", message);
}

int pd_cli_exit_code(pd_status status)
{
    switch (status) {
    case PD_EINVAL:
    case PD_EIO:
    case PD_EFORMAT:
    case PD_ESHAPE:
    case PD_ENOTFOUND:
    case PD_ENOTSUP:
        return PD_CLI_USAGE;
    default:
        return PD_CLI_FAILURE;
    }
}

int pd_cli_fail(const char *context, pd_status status)
{
    pd_cli_error("%s: %s", context, pd_last_error());
    return pd_cli_exit_code(status);
}

void pd_cli_option_error(const char *verb, int ret, char *const *argv, int optind_value)
{
    const char *option = optind_value > 0 ? argv[optind_value - 1] : "?";
    const char *what = ret == ':' ? "needs a value" : "is unknown or malformed";

    if (verb)
        pd_cli_error("%s: option '%s' %s (see 'pipedream %s --help')", verb, option, what, verb);
    else
        pd_cli_error("option '%s' %s (see 'pipedream --help')", option, what);
}

/* strtoll/strtod skip leading blanks; a strict parse does not. */
static bool starts_like_a_number(const char *text) { return text[0] != '\0' && !isspace((unsigned char)text[0]); }

int pd_cli_parse_int64(const char *option, const char *text, int64_t min, int64_t max, int64_t *out)
{
    char *end;
    long long v;

    errno = 0;
    v = starts_like_a_number(text) ? strtoll(text, &end, 10) : 0;
    if (!starts_like_a_number(text) || *end != '\0') {
        pd_cli_error("%s: '%s' is not an integer", option, text);
        return -1;
    }
    if (errno == ERANGE || v < min || v > max) {
        pd_cli_error("%s: %s is out of range [%lld, %lld]", option, text, (long long)min, (long long)max);
        return -1;
    }
    *out = v;
    return 0;
}

int pd_cli_parse_double(const char *option, const char *text, double min, double max, double *out)
{
    char *end;
    double v;

    errno = 0;
    v = starts_like_a_number(text) ? strtod(text, &end) : 0;
    if (!starts_like_a_number(text) || *end != '\0') {
        pd_cli_error("%s: '%s' is not a number", option, text);
        return -1;
    }
    if (!isfinite(v)) {
        pd_cli_error("%s: '%s' is not a finite number", option, text);
        return -1;
    }
    if (errno == ERANGE || v < min || v > max) {
        pd_cli_error("%s: %s is out of range [%g, %g]", option, text, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

int pd_cli_parse_cost_model(const char *verb, const char *text, pd_plan_cost_model *out)
{
    if (strcmp(text, "default") == 0) {
        *out = PD_PLAN_COST_DEFAULT;
    } else if (strcmp(text, "pipedream") == 0) {
        *out = PD_PLAN_COST_PIPEDREAM;
    } else {
        pd_cli_error("%s: --cost-model: '%s' is not default or pipedream", verb, text);
        return -1;
    }
    return 0;
}

int pd_cli_parse_precision(const char *verb, const char *text, const char *device, pd_precision *out)
{
    pd_precision p = PD_PRECISION_F32;

    if (text && pd_precision_parse(text, &p) != PD_OK) {
        pd_cli_error("%s: --precision: '%s' is not f32, tf32 or bf16", verb, text);
        return -1;
    }
    if (p == PD_PRECISION_TF32 && strncmp(device, "cuda", 4) != 0) {
        pd_cli_error("%s: --precision tf32 needs a CUDA device (--device cuda or cuda:N)", verb);
        return -1;
    }
    *out = p;
    return 0;
}

/* The verbs, in the order --help lists them. */
static const struct verb {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} verbs[] = {
    {"train", "train a model on a data set (single process)", pd_cli_train},
    {"models", "list the models of the zoo", pd_cli_models},
    {"model-info", "a model's layers, shapes, parameters, FLOPs and activation bytes", pd_cli_model_info},
    {"profile", "measure per-layer compute times and sizes on a device", pd_cli_profile},
    {"plan", "partition a model's layers into pipeline stages over the workers", pd_cli_plan},
    {"topo", "discover the machine's topology and write the cluster file", pd_cli_topo},
    {"simulate", "check a plan's schedule and predict its throughput; compare with DP, GPipe", pd_cli_simulate},
    {"bench", "measure the transport (bench transport) or a training step (bench step)", pd_cli_bench},
};

static void usage(FILE *out)
{
    fprintf(out, "Usage: pipedream [--help] [--version] <verb> [options]\n"
                 "\n"
                 "Pipeline-parallel DNN training (PipeDream) in C.\n"
                 "\n"
                 "Verbs:\n");
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
        fprintf(out, "  %-11s %s\n", verbs[i].name, verbs[i].summary);
    fprintf(out, "\n"
                 "'pipedream <verb> --help' describes a verb's options.\n"
                 "Exit status: 0 success, 1 runtime failure, 2 bad usage or bad input file.\n");
}

static void version(void)
{
    const char *const *backends;
    int n = pd_device_backends(&backends);

    printf("pipedream %s (devices:", PACKAGE_VERSION);
    for (int i = 0; i < n; i++)
        printf(" %s", backends[i]);
    printf(")\n");
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    int c;

    opterr = 0;
    /* '+': stop at the verb, whose options are its own. */
    while ((c = getopt_long(argc, argv, "+:hV", options, NULL)) != -1) {
        switch (c) {
        case 'h': usage(stdout); return PD_CLI_OK;
        case 'V': version(); return PD_CLI_OK;
        default:
            pd_cli_option_error(NULL, c, argv, optind);
            return PD_CLI_USAGE;
        }
    }
    if (optind >= argc) {
        pd_cli_error("no verb given (see 'pipedream --help')");
        return PD_CLI_USAGE;
    }
    const char *verb = argv[optind];
    int verb_argc = argc - optind;
    char **verb_argv = argv + optind;

    optind = 0; /* glibc: re-initialise getopt for the verb's own parse */
    for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
        if (strcmp(verb, verbs[i].name) == 0)
            return verbs[i].run(verb_argc, verb_argv);
    if (strcmp(verb, "help") == 0) {
        usage(stdout);
        return PD_CLI_OK;
    }
    pd_cli_error("unknown verb '%s' (see 'pipedream --help')", verb);
    return PD_CLI_USAGE;
}
