/* The `pipedream` command's shared pieces: exit codes, the one-line error
 * report, strict option parsing, the inputs plan and simulate share, and
 * one entry point per verb. */
#ifndef PD_CLI_H
#define PD_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <pipedream/kernels.h>
#include <pipedream/plan.h>
#include <pipedream/profile.h>
#include <pipedream/status.h>

/* Exit codes: success, a runtime failure, bad usage or a bad input file. */
enum { PD_CLI_OK = 0, PD_CLI_FAILURE = 1, PD_CLI_USAGE = 2 };

/* Prints "pipedream: <message>" as one line on stderr. */
void pd_cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The exit code for a failed library call: PD_CLI_USAGE when the status
 * blames what the user gave (a bad argument, a missing, unreadable or
 * malformed file, a shape that does not fit), PD_CLI_FAILURE otherwise. */
int pd_cli_exit_code(pd_status status);

/* Reports a failed library call as one line, "<context>: <its message>",
 * and returns its exit code (pd_cli_exit_code). */
int pd_cli_fail(const char *context, pd_status status);

/* Parse the whole of `text` as a decimal integer in [min, max] / a finite
 * number in [min, max]. On failure print one line naming `option` and the
 * text, and return -1; 0 on success. */
int pd_cli_parse_int64(const char *option, const char *text, int64_t min, int64_t max, int64_t *out);
int pd_cli_parse_double(const char *option, const char *text, double min, double max, double *out);

/* Parses --cost-model's `text`: "default" or "pipedream". On anything else
 * print one line naming `verb` and return -1; 0 on success. */
int pd_cli_parse_cost_model(const char *verb, const char *text, pd_plan_cost_model *out);

/* Checks --precision's `text` (NULL: f32) against --device's `device`:
 * f32, tf32 (a CUDA device only) or bf16. On anything
 * else print one line naming `verb` and return -1; 0 on success. */
int pd_cli_parse_precision(const char *verb, const char *text, const char *device, pd_precision *out);

/* The options naming a model, its input and how it is timed, shared by
 * `profile` and `bench step` (model_options.c): getopt_long values, the
 * table entries and the parsed values. */
enum {
    PD_CLI_MODEL_OPT_MODEL = 256,
    PD_CLI_MODEL_OPT_BATCH,
    PD_CLI_MODEL_OPT_CHANNELS,
    PD_CLI_MODEL_OPT_HEIGHT,
    PD_CLI_MODEL_OPT_WIDTH,
    PD_CLI_MODEL_OPT_CLASSES,
    PD_CLI_MODEL_OPT_WIDTH_MULT,
    PD_CLI_MODEL_OPT_DEVICE,
    PD_CLI_MODEL_OPT_PRECISION,
    PD_CLI_MODEL_OPT_WARMUP,
    PD_CLI_MODEL_OPT_ITERATIONS,
    PD_CLI_MODEL_OPT_SEED,
    PD_CLI_MODEL_OPT_END, /* a verb's own options start here */
};
#define PD_CLI_MODEL_OPTIONS                                              \
    {"model", required_argument, NULL, PD_CLI_MODEL_OPT_MODEL},           \
    {"batch", required_argument, NULL, PD_CLI_MODEL_OPT_BATCH},           \
    {"batch-size", required_argument, NULL, PD_CLI_MODEL_OPT_BATCH},      \
    {"channels", required_argument, NULL, PD_CLI_MODEL_OPT_CHANNELS},     \
    {"height", required_argument, NULL, PD_CLI_MODEL_OPT_HEIGHT},         \
    {"width", required_argument, NULL, PD_CLI_MODEL_OPT_WIDTH},           \
    {"classes", required_argument, NULL, PD_CLI_MODEL_OPT_CLASSES},       \
    {"width-mult", required_argument, NULL, PD_CLI_MODEL_OPT_WIDTH_MULT}, \
    {"device", required_argument, NULL, PD_CLI_MODEL_OPT_DEVICE},         \
    {"precision", required_argument, NULL, PD_CLI_MODEL_OPT_PRECISION},   \
    {"warmup", required_argument, NULL, PD_CLI_MODEL_OPT_WARMUP},         \
    {"iterations", required_argument, NULL, PD_CLI_MODEL_OPT_ITERATIONS}, \
    {"seed", required_argument, NULL, PD_CLI_MODEL_OPT_SEED}
typedef struct pd_cli_model_args {
    const char *model, *device, *precision; /* precision NULL: f32 */
    int64_t batch, channels, height, width, classes, warmup, iterations, seed;
    double width_mult;
} pd_cli_model_args;

/* Takes option `c` (value `arg`) into `a` when it is one of
 * PD_CLI_MODEL_OPTIONS and returns 1, setting *bad (after a one-line error
 * "<verb>: --option: ...") for a bad value; returns 0 for any other option. */
int pd_cli_model_option(const char *verb, int c, const char *arg, pd_cli_model_args *a, int *bad);

/* Reports a getopt_long failure (`ret` '?' or ':', with opterr = 0 and an
 * optstring starting with ':') as one line naming argv[optind - 1]: the
 * unknown or malformed option, or the option that lacks its argument.
 * `verb` NULL means the global options. */
void pd_cli_option_error(const char *verb, int ret, char *const *argv, int optind_value);

/* The model name of an imported profile file: its directory's for
 * graph*.txt ("vgg16/graph.txt" is vgg16), else the file name up to the
 * first dot (inputs.c, like what follows). */
void pd_cli_import_model_name(const char *path, char *buf, size_t size);

/* The inputs plan and simulate take alike: a profile, from --profile FILE
 * (.profile.json) or --graph-txt FILE with --batch-size N, and a cluster,
 * from --levels LEVELS or --cluster FILE. */
typedef struct pd_cli_inputs {
    const char *profile, *graph_txt, *levels, *cluster;
    int64_t batch; /* --batch-size; 0 when not given */
} pd_cli_inputs;

/* Their getopt_long codes (above a verb's own) and table entries. */
enum {
    PD_CLI_OPT_PROFILE = 1024,
    PD_CLI_OPT_GRAPH_TXT,
    PD_CLI_OPT_BATCH,
    PD_CLI_OPT_LEVELS,
    PD_CLI_OPT_CLUSTER,
};
#define PD_CLI_INPUT_OPTIONS                                        \
    {"profile", required_argument, NULL, PD_CLI_OPT_PROFILE},       \
    {"graph-txt", required_argument, NULL, PD_CLI_OPT_GRAPH_TXT},   \
    {"batch-size", required_argument, NULL, PD_CLI_OPT_BATCH},      \
    {"levels", required_argument, NULL, PD_CLI_OPT_LEVELS},         \
    {"cluster", required_argument, NULL, PD_CLI_OPT_CLUSTER}

/* Takes getopt_long's `option` with its `value` when it is one of the
 * inputs': 1 when taken, -1 when the value is bad (one line printed), 0
 * when it is no input option. */
int pd_cli_inputs_option(pd_cli_inputs *in, int option, const char *value);

/* Checks that the inputs go together: exactly one of --profile and
 * --graph-txt, --batch-size only with --graph-txt, not both --levels and
 * --cluster. Returns -1 to go on, else PD_CLI_USAGE after one line naming
 * `verb`. */
int pd_cli_inputs_check(const char *verb, const pd_cli_inputs *in);

/* Reads the profile: the .profile.json, or the graph.txt with the model
 * named by pd_cli_import_model_name and --batch-size (0: unknown). Returns
 * -1 with *out set (the caller destroys it), else an exit code after one
 * line "<verb>: --profile: ..." or "<verb>: --graph-txt: ...". */
int pd_cli_inputs_load_profile(const char *verb, const pd_cli_inputs *in, pd_profile **out);

/* Verbs: argv[0] is the verb's name; each returns an exit code. */
int pd_cli_train(int argc, char **argv);      /* train.c */
int pd_cli_models(int argc, char **argv);     /* models.c */
int pd_cli_model_info(int argc, char **argv); /* models.c */
int pd_cli_profile(int argc, char **argv);    /* profile.c */
int pd_cli_plan(int argc, char **argv);       /* plan.c */
int pd_cli_topo(int argc, char **argv);       /* topo.c */
int pd_cli_simulate(int argc, char **argv);   /* simulate.c */
int pd_cli_bench(int argc, char **argv);      /* bench_transport.c */
int pd_cli_bench_step(int argc, char **argv); /* bench_step.c: `bench step` */

/* Writes a verb's usage text. */
void pd_cli_train_usage(FILE *out);

/* `pipedream train --plan` (train_pipeline.c): the pipeline options of
 * the command line, and the run of this rank under mpirun (`np` > 0:
 * exec `mpirun -np np` on this command line without --np instead). */
typedef struct pd_cli_pipeline_args {
    const char *plan, *profile, *schedule, *transport, *levels, *bind;
    int64_t microbatches, np, timeout;
    int64_t weight_versions, accumulate; /* 0: not given */
    double progress; /* --progress-every seconds; 0: the runtime's default */
    const char *progress_thread; /* --progress-thread on|off; NULL: the runtime's default */
    const char *channel_memory;  /* --channel-memory host|device|auto; NULL: auto */
    bool vertical_sync, overlap_allreduce, quiet;
} pd_cli_pipeline_args;
struct pd_trainer_options;
int pd_cli_train_pipeline(int argc, char **argv, struct pd_trainer_options *t, const pd_cli_pipeline_args *pa);
void pd_cli_train_pipeline_usage(FILE *out);

#endif
