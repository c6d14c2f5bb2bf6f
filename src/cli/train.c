/* `pipedream train`: the command line over the single-process trainer
 * (include/pipedream/trainer.h): strict option parsing, progress on stderr
 * (a live bar on a terminal, a line every N steps otherwise), and the JSON
 * summary line on stdout. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <pipedream.h>
#include <pipedream/loader.h>
#include <pipedream/trainer.h>

#include "cli/pd_cli.h"

#define PROGRESS_SECONDS 2.0 /* default spacing of progress lines in a log */
#define BAR_SECONDS 0.25     /* refresh period of the live bar */
#define BAR_WIDTH 24
#define DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

static const char *const dataset_kinds[] = {"fashion-mnist", "mnist", "cifar10",        "imagenet",
                                            "synthetic",     "s2vt",  "s2vt-synthetic", NULL};

typedef struct train_args {
    pd_trainer_options t;
    const char *data, *dataset, *metrics_format; /* dataset NULL: the model's default */
    const char *precision;                       /* --precision; NULL: f32 */
    int64_t batch, channels, height, width, limit_train, limit_test, threads, log_every;
    double width_mult;
    bool quiet;
    pd_cli_pipeline_args pipeline; /* --plan: train_pipeline.c */
} train_args;

/* What the progress callback keeps between steps. */
typedef struct progress_state {
    bool quiet, bar;
    int64_t log_every, batch;
    double last_print;
    /* since the last progress line */
    double loss_sum;
    int64_t steps, correct, samples;
    double seconds;
} progress_state;

enum {
    OPT_MODEL = 256,
    OPT_DATA,
    OPT_DATASET,
    OPT_CHANNELS,
    OPT_HEIGHT,
    OPT_WIDTH,
    OPT_DEVICE,
    OPT_PRECISION,
    OPT_BATCH,
    OPT_STEPS,
    OPT_EPOCHS,
    OPT_OPTIMIZER,
    OPT_LR,
    OPT_MOMENTUM,
    OPT_WEIGHT_DECAY,
    OPT_NESTEROV,
    OPT_LR_SCHEDULE,
    OPT_LR_STEP_EPOCHS,
    OPT_LR_GAMMA,
    OPT_LR_POWER,
    OPT_WARMUP_STEPS,
    OPT_WIDTH_MULT,
    OPT_SEED,
    OPT_EVAL_EVERY,
    OPT_CHECKPOINT_DIR,
    OPT_CHECKPOINT_EVERY,
    OPT_RESUME,
    OPT_METRICS,
    OPT_METRICS_FORMAT,
    OPT_THREADS,
    OPT_LOG_EVERY,
    OPT_LIMIT_TRAIN,
    OPT_LIMIT_TEST,
    OPT_PLAN,
    OPT_PROFILE,
    OPT_SCHEDULE,
    OPT_MICROBATCHES,
    OPT_VERTICAL_SYNC,
    OPT_NP,
    OPT_TIMEOUT,
    OPT_TRANSPORT,
    OPT_PROGRESS_EVERY,
    OPT_LEVELS,
    OPT_OVERLAP_ALLREDUCE,
    OPT_BIND,
    OPT_WEIGHT_VERSIONS,
    OPT_ACCUMULATE,
    OPT_PROGRESS_THREAD,
    OPT_CHANNEL_MEMORY,
};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void pd_cli_train_usage(FILE *out)
{
    fprintf(out,
            "Usage: pipedream train [options]\n"
            "\n"
            "Trains a model in one process, evaluates it on the test split, and prints a\n"
            "JSON summary line on stdout. Progress goes to stderr: a live bar on a\n"
            "terminal, else a line every --log-every steps.\n"
            "\n"
            "Model:\n"
            "  --model NAME           model to train (default lenet); one of:\n");
    for (int i = 0; pd_model_name(i); i++)
        fprintf(out, "                           %-13s %s\n", pd_model_name(i), pd_model_description(pd_model_name(i)));
    fprintf(out,
            "  --width-mult F         scale every layer's width (default 1)\n"
            "  --device DEV           cpu, cuda or cuda:N (default cpu)\n"
            "  --precision P          f32 (default), tf32 (CUDA: gemm and convolutions on\n"
            "                         TF32 tensor cores, f32 storage) or bf16 (activations\n"
            "                         stored in bf16, weights rounded to bf16 per step, f32\n"
            "                         master weights and math; with --plan or --np the\n"
            "                         stage cut tensors travel in bf16, half the bytes)\n"
            "\n"
            "Data:\n"
            "  --dataset KIND         fashion-mnist (default), mnist, cifar10, imagenet or\n"
            "                         synthetic (the first two differ in normalisation);\n"
            "                         for --model s2vt (and only for it): s2vt (default with\n"
            "                         --data) or s2vt-synthetic (default without)\n"
            "  --data DIR             data directory (default " DEFAULT_DATA_DIR ");\n"
            "                         MNIST layout: <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz];\n"
            "                         s2vt: <dir>/{train,test}.{features,captions} (formats in\n"
            "                         include/pipedream/sequence.h), test = the held-out split\n"
            "                         s2vt-synthetic: captions of 8 templates, each with its\n"
            "                         own frame sequence, seen with noise; 50 minibatches of\n"
            "                         videos for training and 10 more, never trained on, as the\n"
            "                         test split; --channels (features per frame, 12), --height\n"
            "                         (frames, 5), --width (decoder steps, 5) set its shape.\n"
            "                         S2VT reports token accuracy (a caption's words and its\n"
            "                         end; the padding after it counts nowhere)\n"
            "  --channels N, --height N, --width N\n"
            "                         input geometry: (Fashion-)MNIST and CIFAR-10 are\n"
            "                         zero-padded to a larger size (e.g. 32 for vgg16),\n"
            "                         ImageNet is resized; 1-channel data can be replicated to 3\n"
            "  --limit-train N        use only the first N training samples\n"
            "  --limit-test N         use only the first N test samples\n"
            "  --threads N            ImageNet decoding threads (default min(4, cores))\n"
            "\n"
            "Training:\n"
            "  --batch-size N         minibatch size (default 64; --batch is an alias)\n"
            "  --epochs N             train N epochs (default 1; an epoch drops the last\n"
            "                         partial minibatch), or\n"
            "  --steps N              train N minibatches\n"
            "  --optimizer NAME       sgd (default), adam, or adamw (decoupled weight decay);\n"
            "                         Adam uses betas 0.9, 0.999 and eps 1e-8\n"
            "  --lr F                 (peak) learning rate (default 0.05)\n"
            "  --momentum F           SGD momentum (default 0.9)\n"
            "  --nesterov             Nesterov momentum\n"
            "  --weight-decay F       weight decay (default 0): L2 for sgd and adam,\n"
            "                         decoupled for adamw\n"
            "  --lr-schedule NAME     constant (default), step, poly or cosine (poly and\n"
            "                         cosine decay to 0 at the last step)\n"
            "  --lr-step-epochs N     step: multiply the lr by --lr-gamma every N epochs\n"
            "                         (default 30)\n"
            "  --lr-gamma F           step: the factor (default 0.1)\n"
            "  --lr-power F           poly: the power (default 1)\n"
            "  --warmup-steps N       linear warm-up from lr/N over the first N steps\n"
            "  --seed N               seed of initialisation, data order and dropout\n"
            "                         (default 1); runs with the same options are identical\n"
            "  --eval-every N         also evaluate on the test split every N steps\n"
            "\n"
            "Checkpoints:\n"
            "  --checkpoint-dir DIR   write DIR/step-NNNNNNNN.safetensors (PyTorch names,\n"
            "                         optimizer state, trainer state) and DIR/checkpoint.json\n"
            "                         after the last step\n"
            "  --checkpoint-every N   ... and every N steps\n"
            "  --resume PATH          continue from a checkpoint file, or from the latest\n"
            "                         in a checkpoint directory; the options must match the\n"
            "                         run that wrote it (--epochs/--steps may differ). The\n"
            "                         continued run is bit-identical to an uninterrupted one\n"
            "\n"
            "Output:\n"
            "  --metrics FILE         per-step metrics: iteration, epoch, seconds, loss,\n"
            "                         train_accuracy, samples_per_s, lr, test_accuracy (where\n"
            "                         evaluated, always on the last step)\n"
            "  --metrics-format FMT   csv (default) or jsonl (default when FILE ends in .jsonl)\n"
            "  --log-every N          progress line every N steps (default: every ~2 s)\n"
            "  --quiet                no progress or summary on stderr\n"
            "  --help                 this text\n"
            "\n");
    pd_cli_train_pipeline_usage(out);
    fprintf(out,
            "\n"
            "JSON summary fields: model, device, batch, steps, epochs, final_loss (the\n"
            "last step's), test_accuracy, test_samples, train_seconds (wall time in\n"
            "training steps), images_per_s (training samples over train_seconds),\n"
            "total_seconds (the whole command), checkpoint (the last one written, or null).\n");
}

/* Looks `text` up in the NULL-terminated `names`; prints a usage error
 * naming `option` when it is not there. Returns 0 or -1. */
static int parse_choice(const char *option, const char *text, const char *const *names)
{
    char known[256] = "";

    for (int i = 0; names[i]; i++) {
        if (strcmp(text, names[i]) == 0)
            return 0;
        size_t used = strlen(known);
        snprintf(known + used, sizeof(known) - used, "%s%s", i ? ", " : "", names[i]);
    }
    pd_cli_error("train: %s: unknown value '%s' (known: %s)", option, text, known);
    return -1;
}

static int parse_enum_options(train_args *a, const char *optimizer, const char *schedule)
{
    static const char *const optimizers[] = {"sgd", "adam", "adamw", NULL};
    static const char *const schedules[] = {"constant", "step", "poly", "cosine", NULL};
    static const char *const formats[] = {"csv", "jsonl", NULL};

    if (parse_choice("--dataset", a->dataset, dataset_kinds) || parse_choice("--optimizer", optimizer, optimizers) ||
        parse_choice("--lr-schedule", schedule, schedules) ||
        (a->metrics_format && parse_choice("--metrics-format", a->metrics_format, formats)))
        return -1;
    a->t.optimizer = strcmp(optimizer, "sgd") == 0 ? PD_OPTIMIZER_SGD : PD_OPTIMIZER_ADAM;
    a->t.decoupled_weight_decay = strcmp(optimizer, "adamw") == 0;
    if (pd_lr_kind_parse(schedule, &a->t.lr_schedule) != PD_OK)
        return -1;
    const char *format = a->metrics_format;
    if (!format) {
        size_t len = a->t.metrics_path ? strlen(a->t.metrics_path) : 0;
        format = len >= 6 && strcmp(a->t.metrics_path + len - 6, ".jsonl") == 0 ? "jsonl" : "csv";
    }
    a->t.metrics_format = strcmp(format, "jsonl") == 0 ? PD_METRICS_JSONL : PD_METRICS_CSV;
    return 0;
}

/* Options that only make sense together. Returns 0 or -1 (reported). */
static int check_combinations(train_args *a, bool lr_step_set, bool lr_power_set)
{
    if (a->t.steps && a->t.epochs) {
        pd_cli_error("train: give --steps or --epochs, not both");
        return -1;
    }
    if (!a->t.steps && !a->t.epochs)
        a->t.epochs = 1;
    if (a->t.nesterov && (a->t.optimizer != PD_OPTIMIZER_SGD || a->t.momentum <= 0)) {
        pd_cli_error("train: --nesterov needs --optimizer sgd with --momentum > 0");
        return -1;
    }
    if ((lr_step_set && a->t.lr_schedule != PD_LR_STEP) || (lr_power_set && a->t.lr_schedule != PD_LR_POLY)) {
        pd_cli_error("train: %s needs --lr-schedule %s", lr_step_set ? "--lr-step-epochs/--lr-gamma" : "--lr-power",
                     lr_step_set ? "step" : "poly");
        return -1;
    }
    if (a->t.checkpoint_every && !a->t.checkpoint_dir) {
        pd_cli_error("train: --checkpoint-every needs --checkpoint-dir");
        return -1;
    }
    if (!pd_model_description(a->t.model)) {
        char known[256] = "";
        for (int i = 0; pd_model_name(i); i++) {
            size_t used = strlen(known);
            snprintf(known + used, sizeof(known) - used, "%s%s", i ? ", " : "", pd_model_name(i));
        }
        pd_cli_error("train: --model: unknown model '%s' (known: %s)", a->t.model, known);
        return -1;
    }
    if (pd_trainer_check_data(a->t.model, a->dataset) != PD_OK) {
        pd_cli_error("train: %s", pd_last_error());
        return -1;
    }
    /* S2VT's channels are features per frame; images have 1 or 3. */
    if (a->channels > 3 && strcmp(a->t.model, "s2vt") != 0) {
        pd_cli_error("train: --channels: %lld is out of range [1, 3] for images", (long long)a->channels);
        return -1;
    }
    struct stat st;
    if (strcmp(a->dataset, "synthetic") != 0 && strcmp(a->dataset, "s2vt-synthetic") != 0 &&
        (stat(a->data, &st) != 0 || !S_ISDIR(st.st_mode))) {
        pd_cli_error("train: --data: '%s' is not a directory", a->data);
        return -1;
    }
    if (a->t.resume && stat(a->t.resume, &st) != 0) {
        pd_cli_error("train: --resume: '%s': %s", a->t.resume, strerror(errno));
        return -1;
    }
    return 0;
}

/* Fills *a from the command line. Returns -1 to go on, else an exit code. */
static int parse_args(int argc, char **argv, train_args *a)
{
    static const struct option options[] = {
        {"model", required_argument, NULL, OPT_MODEL},
        {"data", required_argument, NULL, OPT_DATA},
        {"dataset", required_argument, NULL, OPT_DATASET},
        {"channels", required_argument, NULL, OPT_CHANNELS},
        {"height", required_argument, NULL, OPT_HEIGHT},
        {"width", required_argument, NULL, OPT_WIDTH},
        {"device", required_argument, NULL, OPT_DEVICE},
        {"precision", required_argument, NULL, OPT_PRECISION},
        {"batch-size", required_argument, NULL, OPT_BATCH},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"steps", required_argument, NULL, OPT_STEPS},
        {"epochs", required_argument, NULL, OPT_EPOCHS},
        {"optimizer", required_argument, NULL, OPT_OPTIMIZER},
        {"lr", required_argument, NULL, OPT_LR},
        {"momentum", required_argument, NULL, OPT_MOMENTUM},
        {"weight-decay", required_argument, NULL, OPT_WEIGHT_DECAY},
        {"nesterov", no_argument, NULL, OPT_NESTEROV},
        {"lr-schedule", required_argument, NULL, OPT_LR_SCHEDULE},
        {"lr-step-epochs", required_argument, NULL, OPT_LR_STEP_EPOCHS},
        {"lr-gamma", required_argument, NULL, OPT_LR_GAMMA},
        {"lr-power", required_argument, NULL, OPT_LR_POWER},
        {"warmup-steps", required_argument, NULL, OPT_WARMUP_STEPS},
        {"width-mult", required_argument, NULL, OPT_WIDTH_MULT},
        {"seed", required_argument, NULL, OPT_SEED},
        {"eval-every", required_argument, NULL, OPT_EVAL_EVERY},
        {"checkpoint-dir", required_argument, NULL, OPT_CHECKPOINT_DIR},
        {"checkpoint-every", required_argument, NULL, OPT_CHECKPOINT_EVERY},
        {"resume", required_argument, NULL, OPT_RESUME},
        {"metrics", required_argument, NULL, OPT_METRICS},
        {"metrics-format", required_argument, NULL, OPT_METRICS_FORMAT},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"log-every", required_argument, NULL, OPT_LOG_EVERY},
        {"limit-train", required_argument, NULL, OPT_LIMIT_TRAIN},
        {"limit-test", required_argument, NULL, OPT_LIMIT_TEST},
        {"plan", required_argument, NULL, OPT_PLAN},
        {"profile", required_argument, NULL, OPT_PROFILE},
        {"schedule", required_argument, NULL, OPT_SCHEDULE},
        {"microbatches", required_argument, NULL, OPT_MICROBATCHES},
        {"vertical-sync", no_argument, NULL, OPT_VERTICAL_SYNC},
        {"np", required_argument, NULL, OPT_NP},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"transport", required_argument, NULL, OPT_TRANSPORT},
        {"progress-every", required_argument, NULL, OPT_PROGRESS_EVERY},
        {"levels", required_argument, NULL, OPT_LEVELS},
        {"overlap-allreduce", no_argument, NULL, OPT_OVERLAP_ALLREDUCE},
        {"bind", required_argument, NULL, OPT_BIND},
        {"weight-versions", required_argument, NULL, OPT_WEIGHT_VERSIONS},
        {"accumulate", required_argument, NULL, OPT_ACCUMULATE},
        {"progress-thread", required_argument, NULL, OPT_PROGRESS_THREAD},
        {"channel-memory", required_argument, NULL, OPT_CHANNEL_MEMORY},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const int64_t big = INT64_C(1) << 40;
    const char *optimizer = "sgd", *schedule = "constant";
    bool lr_step_set = false, lr_power_set = false, data_set = false;
    int64_t seed = 1;
    char batch_option[16];
    int c, bad = 0, which = 0;

    *a = (train_args){
        .t = {.model = "lenet", .device = "cpu", .lr = 0.05, .momentum = 0.9},
        .data = DEFAULT_DATA_DIR,
        .batch = 64,
        .width_mult = 1.0,
    };
    opterr = 0;
    while (!bad && (c = getopt_long(argc, argv, ":hq", options, &which)) != -1) {
        switch (c) {
        case OPT_MODEL: a->t.model = optarg; break;
        case OPT_DATA:
            a->data = optarg;
            data_set = true;
            break;
        case OPT_DATASET: a->dataset = optarg; break;
        case OPT_DEVICE: a->t.device = optarg; break;
        case OPT_PRECISION: a->precision = optarg; break;
        case OPT_OPTIMIZER: optimizer = optarg; break;
        case OPT_LR_SCHEDULE: schedule = optarg; break;
        case OPT_CHECKPOINT_DIR: a->t.checkpoint_dir = optarg; break;
        case OPT_RESUME: a->t.resume = optarg; break;
        case OPT_METRICS: a->t.metrics_path = optarg; break;
        case OPT_METRICS_FORMAT: a->metrics_format = optarg; break;
        case OPT_NESTEROV: a->t.nesterov = true; break;
        case OPT_CHANNELS: bad = pd_cli_parse_int64("--channels", optarg, 1, 1 << 16, &a->channels); break;
        case OPT_HEIGHT: bad = pd_cli_parse_int64("--height", optarg, 1, 1 << 14, &a->height); break;
        case OPT_WIDTH: bad = pd_cli_parse_int64("--width", optarg, 1, 1 << 14, &a->width); break;
        case OPT_BATCH: /* named as the user spelt it */
            snprintf(batch_option, sizeof(batch_option), "--%s", options[which].name);
            bad = pd_cli_parse_int64(batch_option, optarg, 1, 1 << 16, &a->batch);
            break;
        case OPT_STEPS: bad = pd_cli_parse_int64("--steps", optarg, 1, big, &a->t.steps); break;
        case OPT_EPOCHS: bad = pd_cli_parse_int64("--epochs", optarg, 1, 1000000, &a->t.epochs); break;
        case OPT_LR: bad = pd_cli_parse_double("--lr", optarg, 1e-12, 1e3, &a->t.lr); break;
        case OPT_MOMENTUM: bad = pd_cli_parse_double("--momentum", optarg, 0, 0.999999, &a->t.momentum); break;
        case OPT_WEIGHT_DECAY:
            bad = pd_cli_parse_double("--weight-decay", optarg, 0, 1, &a->t.weight_decay);
            break;
        case OPT_LR_STEP_EPOCHS:
            bad = pd_cli_parse_int64("--lr-step-epochs", optarg, 1, 1000000, &a->t.lr_step_epochs);
            lr_step_set = true;
            break;
        case OPT_LR_GAMMA:
            bad = pd_cli_parse_double("--lr-gamma", optarg, 1e-12, 1, &a->t.lr_gamma);
            lr_step_set = true;
            break;
        case OPT_LR_POWER:
            bad = pd_cli_parse_double("--lr-power", optarg, 1e-6, 100, &a->t.lr_power);
            lr_power_set = true;
            break;
        case OPT_WARMUP_STEPS: bad = pd_cli_parse_int64("--warmup-steps", optarg, 0, big, &a->t.warmup_steps); break;
        case OPT_WIDTH_MULT: bad = pd_cli_parse_double("--width-mult", optarg, 1e-3, 64, &a->width_mult); break;
        case OPT_SEED: bad = pd_cli_parse_int64("--seed", optarg, 0, INT64_MAX, &seed); break;
        case OPT_EVAL_EVERY: bad = pd_cli_parse_int64("--eval-every", optarg, 1, big, &a->t.eval_every); break;
        case OPT_CHECKPOINT_EVERY:
            bad = pd_cli_parse_int64("--checkpoint-every", optarg, 1, big, &a->t.checkpoint_every);
            break;
        case OPT_THREADS: bad = pd_cli_parse_int64("--threads", optarg, 1, 256, &a->threads); break;
        case OPT_LOG_EVERY: bad = pd_cli_parse_int64("--log-every", optarg, 1, big, &a->log_every); break;
        case OPT_LIMIT_TRAIN: bad = pd_cli_parse_int64("--limit-train", optarg, 1, big, &a->limit_train); break;
        case OPT_LIMIT_TEST: bad = pd_cli_parse_int64("--limit-test", optarg, 1, big, &a->limit_test); break;
        case OPT_PLAN: a->pipeline.plan = optarg; break;
        case OPT_PROFILE: a->pipeline.profile = optarg; break;
        case OPT_SCHEDULE: a->pipeline.schedule = optarg; break;
        case OPT_TRANSPORT: a->pipeline.transport = optarg; break;
        case OPT_LEVELS: a->pipeline.levels = optarg; break;
        case OPT_OVERLAP_ALLREDUCE: a->pipeline.overlap_allreduce = true; break;
        case OPT_BIND: a->pipeline.bind = optarg; break;
        case OPT_PROGRESS_THREAD: a->pipeline.progress_thread = optarg; break;
        case OPT_CHANNEL_MEMORY: a->pipeline.channel_memory = optarg; break;
        case OPT_VERTICAL_SYNC: a->pipeline.vertical_sync = true; break;
        case OPT_MICROBATCHES:
            bad = pd_cli_parse_int64("--microbatches", optarg, 1, 1 << 20, &a->pipeline.microbatches);
            break;
        case OPT_WEIGHT_VERSIONS:
            bad = pd_cli_parse_int64("--weight-versions", optarg, 1, 1 << 16, &a->pipeline.weight_versions);
            break;
        case OPT_ACCUMULATE:
            bad = pd_cli_parse_int64("--accumulate", optarg, 1, 1 << 20, &a->pipeline.accumulate);
            break;
        case OPT_NP: bad = pd_cli_parse_int64("--np", optarg, 1, 1 << 16, &a->pipeline.np); break;
        case OPT_TIMEOUT: bad = pd_cli_parse_int64("--timeout", optarg, 1, 86400, &a->pipeline.timeout); break;
        case OPT_PROGRESS_EVERY:
            bad = pd_cli_parse_double("--progress-every", optarg, 0.1, 86400, &a->pipeline.progress);
            break;
        case 'q': a->quiet = true; break;
        case 'h': pd_cli_train_usage(stdout); return PD_CLI_OK;
        default: pd_cli_option_error("train", c, argv, optind); return PD_CLI_USAGE;
        }
    }
    if (bad)
        return PD_CLI_USAGE;
    if (optind < argc) {
        pd_cli_error("train: unexpected argument '%s' (see 'pipedream train --help')", argv[optind]);
        return PD_CLI_USAGE;
    }
    if (!a->dataset) /* S2VT reads captions, the others images */
        a->dataset = strcmp(a->t.model, "s2vt") != 0 ? "fashion-mnist" : data_set ? "s2vt" : "s2vt-synthetic";
    if (parse_enum_options(a, optimizer, schedule) || check_combinations(a, lr_step_set, lr_power_set) ||
        pd_cli_parse_precision("train", a->precision, a->t.device, &a->t.precision))
        return PD_CLI_USAGE;

    a->t.seed = (uint64_t)seed;
    a->t.model_options.width_multiplier = (float)a->width_mult;
    a->t.train_data = (pd_loader_options){
        .kind = a->dataset,
        .path = a->data,
        .split = "train",
        .batch = (int)a->batch,
        .channels = (int)a->channels,
        .height = (int)a->height,
        .width = (int)a->width,
        .limit = a->limit_train,
        .threads = (int)a->threads,
    };
    a->t.eval_data = a->t.train_data;
    a->t.eval_data.split = "test";
    a->t.eval_data.limit = a->limit_test;
    return -1;
}

static void format_duration(double seconds, char *buf, size_t size)
{
    long long s = isfinite(seconds) && seconds >= 0 ? (long long)(seconds + 0.5) : 0;

    if (s >= 3600)
        snprintf(buf, size, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, size, "%lld:%02lld", s / 60, s % 60);
}

/* The live bar: one line redrawn in place. */
static void draw_bar(const pd_trainer_progress *p, const progress_state *ps)
{
    char eta[32];
    double done = (double)p->step / (double)p->total_steps;
    int filled = (int)(done * BAR_WIDTH);
    char bar[BAR_WIDTH + 1];

    for (int i = 0; i < BAR_WIDTH; i++)
        bar[i] = i < filled ? '=' : i == filled ? '>' : ' ';
    bar[BAR_WIDTH] = '\0';
    format_duration(p->eta_seconds, eta, sizeof(eta));
    fprintf(stderr, "\r\033[K[%s] %3.0f%%  step %lld/%lld  epoch %.2f  loss %.4f  %.0f samples/s  ETA %s", bar,
            100.0 * done, (long long)p->step, (long long)p->total_steps, p->epoch, ps->loss_sum / (double)ps->steps,
            p->samples_per_s, eta);
    fflush(stderr);
}

static void print_line(const pd_trainer_progress *p, const progress_state *ps)
{
    char eta[32];

    format_duration(p->eta_seconds, eta, sizeof(eta));
    fprintf(stderr, "step %lld/%lld  epoch %.2f  loss %.4f  acc %.1f%%  lr %.4g  %.0f samples/s  ETA %s\n",
            (long long)p->step, (long long)p->total_steps, p->epoch, ps->loss_sum / (double)ps->steps,
            100.0 * (double)ps->correct / (double)ps->samples, p->lr, (double)ps->samples / ps->seconds, eta);
}

static void on_progress(const pd_trainer_progress *p, void *user)
{
    progress_state *ps = user;
    const bool last = p->step == p->total_steps;
    const double now = now_seconds();

    if (ps->quiet)
        return;
    ps->loss_sum += (double)p->loss;
    ps->steps++;
    ps->correct += (int64_t)llround(p->train_accuracy * (double)ps->batch);
    ps->samples += ps->batch;
    ps->seconds += p->step_seconds;

    bool show;
    if (ps->bar)
        show = last || p->evaluated || now - ps->last_print >= BAR_SECONDS;
    else
        show = last || (ps->log_every ? p->step % ps->log_every == 0 : now - ps->last_print >= PROGRESS_SECONDS);
    if (show) {
        if (ps->bar)
            draw_bar(p, ps);
        else
            print_line(p, ps);
        ps->last_print = now;
        /* The bar averages over its refresh window like the lines do. */
        ps->loss_sum = 0;
        ps->steps = ps->correct = ps->samples = 0;
        ps->seconds = 0;
    }
    if (p->evaluated && !last) {
        if (ps->bar)
            fputc('\n', stderr);
        fprintf(stderr, "step %lld: test accuracy %.2f%% (%lld/%lld)\n", (long long)p->step,
                100.0 * p->eval_accuracy, (long long)p->eval_correct, (long long)p->eval_samples);
    }
    if (last && ps->bar)
        fputc('\n', stderr);
}

/* Writes `text` as a JSON string literal, or null. */
static void write_json_string(FILE *out, const char *text)
{
    if (!text) {
        fputs("null", out);
        return;
    }
    fputc('"', out);
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\')
            fprintf(out, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(out, "\\u%04x", *c);
        else
            fputc(*c, out);
    }
    fputc('"', out);
}

/* A number, or null when it is not finite (JSON has no NaN). */
static void write_json_number(FILE *out, const char *format, double v)
{
    if (isfinite(v))
        fprintf(out, format, v);
    else
        fputs("null", out);
}

static int print_summary(const train_args *a, const pd_trainer_info *info, const pd_trainer_result *r, double total)
{
    printf("{\"model\":");
    write_json_string(stdout, a->t.model);
    printf(",\"device\":");
    write_json_string(stdout, info->device);
    printf(",\"batch\":%d,\"steps\":%lld,\"epochs\":%.4f,\"final_loss\":", info->model_options.batch,
           (long long)r->steps, r->epochs);
    write_json_number(stdout, "%.6f", (double)r->final_loss);
    printf(",\"test_accuracy\":");
    write_json_number(stdout, "%.6f", r->eval_accuracy);
    printf(",\"test_samples\":%lld,\"train_seconds\":%.3f,\"images_per_s\":", (long long)r->eval_samples,
           r->train_seconds);
    write_json_number(stdout, "%.1f", r->samples_per_s);
    printf(",\"total_seconds\":%.3f,\"checkpoint\":", total);
    write_json_string(stdout, r->checkpoint);
    printf("}\n");
    if (ferror(stdout) || fflush(stdout) != 0) {
        pd_cli_error("train: writing the JSON summary failed: %s", strerror(errno));
        return PD_CLI_FAILURE;
    }
    return PD_CLI_OK;
}

static void print_start(const train_args *a, const pd_trainer_info *info)
{
    const pd_model_options *m = &info->model_options;

    fprintf(stderr,
            "training %s (%lld parameters, input %dx%dx%d) on %s: %lld training / %lld test samples, batch %d, "
            "%lld steps (%.2f epochs)\n",
            a->t.model, (long long)info->parameters, m->channels, m->height, m->width, info->device,
            (long long)info->train.samples, (long long)info->eval.samples, m->batch, (long long)info->total_steps,
            (double)info->total_steps / (double)info->train.batches_per_epoch);
    if (info->start_step)
        fprintf(stderr, "resuming at step %lld from %s\n", (long long)info->start_step, a->t.resume);
}

int pd_cli_train(int argc, char **argv)
{
    const double program_start = now_seconds();
    train_args a;
    progress_state ps = {0};
    pd_trainer *trainer = NULL;
    pd_trainer_info info;
    pd_trainer_result r;
    pd_status s;
    int code;

    if ((code = parse_args(argc, argv, &a)) >= 0)
        return code;
    if (a.pipeline.plan || a.pipeline.profile || a.pipeline.np || a.pipeline.levels) {
        a.pipeline.quiet = a.quiet;
        return pd_cli_train_pipeline(argc, argv, &a.t, &a.pipeline);
    }
    if (a.pipeline.weight_versions || a.pipeline.accumulate || a.pipeline.channel_memory) {
        pd_cli_error("train: --weight-versions, --accumulate and --channel-memory are for pipeline training (--plan "
                     "or --np)");
        return PD_CLI_USAGE;
    }
    a.t.progress = on_progress;
    a.t.progress_user = &ps;
    if ((s = pd_trainer_create(&a.t, &trainer)) != PD_OK) {
        pd_cli_error("train: %s", pd_last_error());
        return pd_cli_exit_code(s);
    }
    pd_trainer_get_info(trainer, &info);
    ps = (progress_state){
        .quiet = a.quiet,
        .bar = isatty(STDERR_FILENO) != 0,
        .log_every = a.log_every,
        .batch = info.model_options.batch,
        .last_print = now_seconds(),
    };
    if (!a.quiet)
        print_start(&a, &info);
    s = pd_trainer_run(trainer);
    pd_trainer_get_result(trainer, &r);
    if (s != PD_OK) {
        if (ps.bar && !a.quiet)
            fputc('\n', stderr);
        pd_cli_error("train: %s", pd_last_error());
        code = pd_cli_exit_code(s);
        goto destroy;
    }
    double total = now_seconds() - program_start;
    if (!a.quiet) {
        fprintf(stderr, "trained %lld steps (%.2f epochs) in %.1f s: %.0f samples/s, final loss %.4f\n",
                (long long)r.run_steps, r.epochs, r.train_seconds, r.samples_per_s, (double)r.final_loss);
        fprintf(stderr, "test accuracy %.2f%% (%lld/%lld) in %.1f s; total %.1f s\n", 100.0 * r.eval_accuracy,
                (long long)r.eval_correct, (long long)r.eval_samples, r.eval_seconds, total);
        if (r.checkpoint)
            fprintf(stderr, "checkpoint %s\n", r.checkpoint);
    }
    code = print_summary(&a, &info, &r, total);
destroy:
    pd_trainer_destroy(trainer);
    return code;
}
