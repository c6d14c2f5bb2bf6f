/* `pipedream train`: single-process training of a registered model on an
 * MNIST-layout data set, with honest progress (measured wall time), a
 * metrics CSV, and a final test-set evaluation in inference mode. */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <pipedream.h>
#include <pipedream/data.h>
#include <pipedream/models.h>

#include "cli/pd_cli.h"

#define PROGRESS_SECONDS 2.0
#define DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

typedef struct train_args {
    const char *model, *data, *device, *metrics;
    int64_t batch, steps, epochs, seed, eval_every, log_every, limit_train, limit_test;
    double lr, momentum, weight_decay;
    bool quiet;
} train_args;

/* What a run holds; run_release frees it in reverse order of creation. */
typedef struct train_run {
    train_args args;
    FILE *metrics;
    pd_device *dev;
    pd_dataset *train_set, *test_set;
    pd_graph *g;
    pd_model_io io;
    pd_optimizer *opt;
    pd_batches *train_batches, *test_batches;
    float *images;   /* host [B,1,H,W] */
    int32_t *labels; /* host [B] */
    float *logits;   /* host [B,classes] */
    int classes;
    int64_t steps;
    double program_start, train_start;
    double step_seconds; /* wall time inside training steps, evaluations excluded */
    float final_loss;    /* of the last step */
    int64_t test_correct, test_seen; /* the last evaluation */
    double eval_seconds;             /* its wall time */
} train_run;

enum {
    OPT_MODEL = 256,
    OPT_DATA,
    OPT_DEVICE,
    OPT_BATCH,
    OPT_STEPS,
    OPT_EPOCHS,
    OPT_LR,
    OPT_MOMENTUM,
    OPT_WEIGHT_DECAY,
    OPT_SEED,
    OPT_EVAL_EVERY,
    OPT_LOG_EVERY,
    OPT_METRICS,
    OPT_LIMIT_TRAIN,
    OPT_LIMIT_TEST,
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
            "Trains a model in one process on an MNIST-layout data set\n"
            "(<dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]), then reports the\n"
            "test-set accuracy. Progress goes to stderr; a JSON summary line to stdout.\n"
            "\n"
            "Options:\n"
            "  --model NAME         model to train (default lenet); one of:\n");
    for (int i = 0; pd_model_name(i); i++)
        fprintf(out, "                         %-8s %s\n", pd_model_name(i), pd_model_description(pd_model_name(i)));
    fprintf(out,
            "  --data DIR           data set directory (default " DEFAULT_DATA_DIR ")\n"
            "  --device DEV         cpu, cuda or cuda:N (default cpu)\n"
            "  --batch N            minibatch size (default 64)\n"
            "  --steps N            train N minibatches, or\n"
            "  --epochs N           train N epochs (default 1; an epoch drops the last\n"
            "                       partial minibatch)\n"
            "  --lr F               learning rate (default 0.05)\n"
            "  --momentum F         SGD momentum (default 0.9)\n"
            "  --weight-decay F     L2 weight decay (default 0)\n"
            "  --seed N             seed of initialisation and shuffling (default 1)\n"
            "  --eval-every N       also evaluate on the test set every N steps\n"
            "  --log-every N        progress line every N steps (default: every ~2 s)\n"
            "  --metrics FILE.csv   per-step CSV: iteration,epoch,seconds,loss,\n"
            "                       train_accuracy,images_per_s,test_accuracy (the last\n"
            "                       is filled where the test set was evaluated, always on\n"
            "                       the final row)\n"
            "  --limit-train N      use only the first N training samples\n"
            "  --limit-test N       use only the first N test samples\n"
            "  --quiet              no progress or summary on stderr\n"
            "  --help               this text\n"
            "\n"
            "JSON summary fields: model, device, batch, steps, epochs, final_loss (the\n"
            "last step's), test_accuracy, test_samples, train_seconds (wall time in\n"
            "training steps), images_per_s (training images over train_seconds),\n"
            "total_seconds (the whole command).\n");
}

/* Fills *a from the command line. Returns -1 to go on, else an exit code. */
static int parse_args(int argc, char **argv, train_args *a)
{
    static const struct option options[] = {
        {"model", required_argument, NULL, OPT_MODEL},
        {"data", required_argument, NULL, OPT_DATA},
        {"device", required_argument, NULL, OPT_DEVICE},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"steps", required_argument, NULL, OPT_STEPS},
        {"epochs", required_argument, NULL, OPT_EPOCHS},
        {"lr", required_argument, NULL, OPT_LR},
        {"momentum", required_argument, NULL, OPT_MOMENTUM},
        {"weight-decay", required_argument, NULL, OPT_WEIGHT_DECAY},
        {"seed", required_argument, NULL, OPT_SEED},
        {"eval-every", required_argument, NULL, OPT_EVAL_EVERY},
        {"log-every", required_argument, NULL, OPT_LOG_EVERY},
        {"metrics", required_argument, NULL, OPT_METRICS},
        {"limit-train", required_argument, NULL, OPT_LIMIT_TRAIN},
        {"limit-test", required_argument, NULL, OPT_LIMIT_TEST},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const int64_t big = INT64_C(1) << 40;
    int c, bad = 0;

    *a = (train_args){
        .model = "lenet",
        .data = DEFAULT_DATA_DIR,
        .device = "cpu",
        .batch = 64,
        .seed = 1,
        .lr = 0.05,
        .momentum = 0.9,
    };
    opterr = 0;
    while (!bad && (c = getopt_long(argc, argv, ":hq", options, NULL)) != -1) {
        switch (c) {
        case OPT_MODEL: a->model = optarg; break;
        case OPT_DATA: a->data = optarg; break;
        case OPT_DEVICE: a->device = optarg; break;
        case OPT_METRICS: a->metrics = optarg; break;
        case OPT_BATCH: bad = pd_cli_parse_int64("--batch", optarg, 1, 1 << 16, &a->batch); break;
        case OPT_STEPS: bad = pd_cli_parse_int64("--steps", optarg, 1, big, &a->steps); break;
        case OPT_EPOCHS: bad = pd_cli_parse_int64("--epochs", optarg, 1, 1000000, &a->epochs); break;
        case OPT_LR: bad = pd_cli_parse_double("--lr", optarg, 1e-12, 1e3, &a->lr); break;
        case OPT_MOMENTUM: bad = pd_cli_parse_double("--momentum", optarg, 0, 0.999999, &a->momentum); break;
        case OPT_WEIGHT_DECAY:
            bad = pd_cli_parse_double("--weight-decay", optarg, 0, 1, &a->weight_decay);
            break;
        case OPT_SEED: bad = pd_cli_parse_int64("--seed", optarg, 0, INT64_MAX, &a->seed); break;
        case OPT_EVAL_EVERY: bad = pd_cli_parse_int64("--eval-every", optarg, 1, big, &a->eval_every); break;
        case OPT_LOG_EVERY: bad = pd_cli_parse_int64("--log-every", optarg, 1, big, &a->log_every); break;
        case OPT_LIMIT_TRAIN: bad = pd_cli_parse_int64("--limit-train", optarg, 1, big, &a->limit_train); break;
        case OPT_LIMIT_TEST: bad = pd_cli_parse_int64("--limit-test", optarg, 1, big, &a->limit_test); break;
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
    if (a->steps && a->epochs) {
        pd_cli_error("train: give --steps or --epochs, not both");
        return PD_CLI_USAGE;
    }
    if (!a->steps && !a->epochs)
        a->epochs = 1;
    if (!pd_model_description(a->model)) {
        char known[256] = "";
        for (int i = 0; pd_model_name(i); i++) {
            size_t used = strlen(known);
            snprintf(known + used, sizeof(known) - used, "%s%s", i ? ", " : "", pd_model_name(i));
        }
        pd_cli_error("train: --model: unknown model '%s' (known: %s)", a->model, known);
        return PD_CLI_USAGE;
    }
    struct stat st;
    if (stat(a->data, &st) != 0 || !S_ISDIR(st.st_mode)) {
        pd_cli_error("train: --data: '%s' is not a directory", a->data);
        return PD_CLI_USAGE;
    }
    return -1;
}

/* Reports a failed library call as one line and returns its exit code. */
static int fail(const char *context, pd_status s)
{
    pd_cli_error("%s%s%s", context ? context : "", context ? ": " : "", pd_last_error());
    return pd_cli_exit_code(s);
}

static void run_release(train_run *r)
{
    free(r->logits);
    free(r->labels);
    free(r->images);
    pd_batches_destroy(r->test_batches);
    pd_batches_destroy(r->train_batches);
    pd_optimizer_destroy(r->opt);
    pd_graph_destroy(r->g);
    pd_dataset_destroy(r->test_set);
    pd_dataset_destroy(r->train_set);
    pd_device_close(r->dev);
    if (r->metrics)
        fclose(r->metrics);
}

/* Opens the device, loads both splits, makes the iterators, builds and
 * allocates the model and its optimizer, and the host minibatch buffers.
 * Returns -1 or an exit code. */
static int run_setup(train_run *r)
{
    const train_args *a = &r->args;
    pd_status s;

    if ((s = pd_device_open(a->device, &r->dev)) != PD_OK)
        return fail("train: --device", s);
    if ((s = pd_dataset_load_mnist(a->data, "train", a->limit_train, &r->train_set)) != PD_OK)
        return fail("train: training data", s);
    if ((s = pd_dataset_load_mnist(a->data, "t10k", a->limit_test, &r->test_set)) != PD_OK)
        return fail("train: test data", s);
    if (r->test_set->height != r->train_set->height || r->test_set->width != r->train_set->width) {
        pd_cli_error("train: test images are %dx%d but training images are %dx%d in %s", r->test_set->height,
                     r->test_set->width, r->train_set->height, r->train_set->width, a->data);
        return PD_CLI_USAGE;
    }
    r->classes = r->train_set->classes;
    if (r->train_set->count < a->batch) {
        pd_cli_error("train: --batch %lld is larger than the %lld training samples", (long long)a->batch,
                     (long long)r->train_set->count);
        return PD_CLI_USAGE;
    }

    const pd_batches_options train_order = {
        .batch = (int)a->batch, .shuffle = true, .seed = (uint64_t)a->seed, .drop_last = true,
        .mean = PD_FASHION_MNIST_MEAN, .std = PD_FASHION_MNIST_STD,
    };
    pd_batches_options test_order = train_order;
    test_order.shuffle = false;
    test_order.drop_last = false;
    if ((s = pd_batches_create(r->train_set, &train_order, &r->train_batches)) != PD_OK)
        return fail("train: training data", s);
    if ((s = pd_batches_create(r->test_set, &test_order, &r->test_batches)) != PD_OK)
        return fail("train: test data", s);
    r->steps = a->steps ? a->steps : a->epochs * pd_batches_per_epoch(r->train_batches);

    const pd_model_options model = {
        .batch = (int)a->batch, .channels = 1, .height = r->train_set->height, .width = r->train_set->width,
        .classes = r->classes, .width_multiplier = 1.0f,
    };
    if ((s = pd_graph_create(r->dev, (uint64_t)a->seed, &r->g)) != PD_OK)
        return fail("train", s);
    if ((s = pd_model_build(a->model, r->g, &model, &r->io)) != PD_OK)
        return fail("train: --model", s);
    if ((s = pd_graph_allocate(r->g)) != PD_OK)
        return fail("train", s);
    const pd_sgd_desc sgd = {
        .lr = (float)a->lr, .momentum = (float)a->momentum, .weight_decay = (float)a->weight_decay,
    };
    if ((s = pd_optimizer_create_sgd(r->g, &sgd, &r->opt)) != PD_OK)
        return fail("train", s);

    size_t plane = (size_t)r->train_set->height * (size_t)r->train_set->width;
    r->images = malloc((size_t)a->batch * plane * sizeof(*r->images));
    r->labels = malloc((size_t)a->batch * sizeof(*r->labels));
    r->logits = malloc((size_t)a->batch * (size_t)r->classes * sizeof(*r->logits));
    if (!r->images || !r->labels || !r->logits) {
        pd_cli_error("train: out of host memory for minibatch buffers");
        return PD_CLI_FAILURE;
    }
    return -1;
}

/* Copies a minibatch from the host buffers into the model's inputs. */
static pd_status feed(train_run *r)
{
    pd_tensor *images = pd_graph_output(r->g, r->io.images), *labels = pd_graph_output(r->g, r->io.labels);

    PD_CHECK(pd_tensor_copy_from_host(images, r->images, pd_tensor_nbytes(images)));
    return pd_tensor_copy_from_host(labels, r->labels, pd_tensor_nbytes(labels));
}

/* Fetches the logits and counts the rows among the first `valid` whose
 * arg-max (first maximum) is the label. */
static pd_status count_correct(train_run *r, int valid, int64_t *correct)
{
    const pd_tensor *logits = pd_graph_output(r->g, r->io.logits);
    int64_t hits = 0;

    PD_CHECK(pd_tensor_copy_to_host(logits, r->logits, pd_tensor_nbytes(logits)));
    for (int i = 0; i < valid; i++) {
        const float *row = r->logits + (size_t)i * (size_t)r->classes;
        int best = 0;
        for (int k = 1; k < r->classes; k++)
            if (row[k] > row[best])
                best = k;
        hits += best == r->labels[i];
    }
    *correct = hits;
    return PD_OK;
}

/* One training step on the next minibatch. */
static pd_status train_step(train_run *r, int64_t step, float *loss, int64_t *correct)
{
    int valid;

    PD_CHECK(pd_batches_next(r->train_batches, r->images, r->labels, &valid));
    PD_CHECK(feed(r));
    PD_CHECK(pd_graph_forward(r->g, step, true));
    PD_CHECK(count_correct(r, valid, correct));
    PD_CHECK(pd_tensor_copy_to_host(pd_graph_output(r->g, r->io.loss), loss, sizeof(*loss)));
    if (!isfinite(*loss))
        return PD_ERROR(PD_ESTATE, "training diverged at step %lld: the loss is %g (try a lower --lr)",
                        (long long)step + 1, (double)*loss);
    PD_CHECK(pd_graph_backward(r->g, step, r->io.loss, NULL));
    return pd_optimizer_step(r->opt);
}

/* Accuracy over one pass of the test set in inference mode. */
static pd_status evaluate(train_run *r, int64_t *correct, int64_t *seen)
{
    int64_t hits = 0, count = 0;

    for (int64_t b = 0; b < pd_batches_per_epoch(r->test_batches); b++) {
        int valid;
        int64_t batch_hits;
        PD_CHECK(pd_batches_next(r->test_batches, r->images, r->labels, &valid));
        PD_CHECK(feed(r));
        PD_CHECK(pd_graph_forward(r->g, b, false));
        PD_CHECK(count_correct(r, valid, &batch_hits));
        hits += batch_hits;
        count += valid;
    }
    *correct = hits;
    *seen = count;
    return PD_OK;
}

static void format_duration(double seconds, char *buf, size_t size)
{
    long long s = (long long)(seconds + 0.5);

    if (s >= 3600)
        snprintf(buf, size, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, size, "%lld:%02lld", s / 60, s % 60);
}

/* Losses and hits since the last progress line. */
typedef struct progress_window {
    double loss_sum, seconds, last_print;
    int64_t steps, correct, images;
} progress_window;

static void progress_line(const train_run *r, int64_t done, progress_window *w)
{
    char eta[32];
    double per_step = r->step_seconds / (double)done;

    format_duration(per_step * (double)(r->steps - done), eta, sizeof(eta));
    fprintf(stderr, "step %lld/%lld  epoch %.2f  loss %.3f  acc %.1f%%  %.0f img/s  ETA %s\n", (long long)done,
            (long long)r->steps, (double)done / (double)pd_batches_per_epoch(r->train_batches),
            w->loss_sum / (double)w->steps, 100.0 * (double)w->correct / (double)w->images,
            (double)w->images / w->seconds, eta);
    *w = (progress_window){.last_print = now_seconds()};
}

/* Evaluates on the test set, keeping the result and its time in r. */
static pd_status run_evaluation(train_run *r)
{
    double start = now_seconds();

    PD_CHECK(evaluate(r, &r->test_correct, &r->test_seen));
    r->eval_seconds = now_seconds() - start;
    return PD_OK;
}

/* The training steps, evaluating every --eval-every steps and after the
 * last. Returns -1 or an exit code. */
static int train_loop(train_run *r)
{
    const train_args *a = &r->args;
    progress_window w = {.last_print = now_seconds()};
    pd_status s;

    if (r->metrics)
        fprintf(r->metrics, "iteration,epoch,seconds,loss,train_accuracy,images_per_s,test_accuracy\n");
    r->train_start = now_seconds();
    for (int64_t step = 0; step < r->steps; step++) {
        const int64_t done = step + 1;
        float loss;
        int64_t correct;
        double t0 = now_seconds();

        if ((s = train_step(r, step, &loss, &correct)) != PD_OK)
            return fail("train", s);
        double seconds = now_seconds() - t0;
        r->step_seconds += seconds;
        r->final_loss = loss;
        w.loss_sum += loss;
        w.seconds += seconds;
        w.steps++;
        w.correct += correct;
        w.images += a->batch;

        bool last = done == r->steps;
        double test_accuracy = NAN;
        if (last || (a->eval_every && done % a->eval_every == 0)) {
            if ((s = run_evaluation(r)) != PD_OK)
                return fail("train: evaluation", s);
            test_accuracy = (double)r->test_correct / (double)r->test_seen;
            if (!a->quiet && !last)
                fprintf(stderr, "step %lld: test accuracy %.2f%% (%lld/%lld)\n", (long long)done,
                        100.0 * test_accuracy, (long long)r->test_correct, (long long)r->test_seen);
        }
        if (r->metrics) {
            fprintf(r->metrics, "%lld,%.6f,%.6f,%.6f,%.6f,%.1f,", (long long)done,
                    (double)done / (double)pd_batches_per_epoch(r->train_batches), now_seconds() - r->train_start,
                    (double)loss, (double)correct / (double)a->batch, (double)a->batch / seconds);
            if (isnan(test_accuracy))
                fputc('\n', r->metrics);
            else
                fprintf(r->metrics, "%.6f\n", test_accuracy);
        }
        if (!a->quiet &&
            (last || (a->log_every ? done % a->log_every == 0 : now_seconds() - w.last_print >= PROGRESS_SECONDS)))
            progress_line(r, done, &w);
    }
    return -1;
}

/* Writes `text` as a JSON string literal. */
static void write_json_string(FILE *out, const char *text)
{
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

/* The JSON summary line on stdout. */
static int print_summary(const train_run *r, double epochs, double accuracy, double images_per_s, double total)
{
    printf("{\"model\":");
    write_json_string(stdout, r->args.model);
    printf(",\"device\":");
    write_json_string(stdout, r->dev->name);
    printf(",\"batch\":%lld,\"steps\":%lld,\"epochs\":%.4f,\"final_loss\":%.6f,\"test_accuracy\":%.6f,"
           "\"test_samples\":%lld,\"train_seconds\":%.3f,\"images_per_s\":%.1f,\"total_seconds\":%.3f}\n",
           (long long)r->args.batch, (long long)r->steps, epochs, (double)r->final_loss, accuracy,
           (long long)r->test_seen, r->step_seconds, images_per_s, total);
    if (ferror(stdout) || fflush(stdout) != 0) {
        pd_cli_error("train: writing the JSON summary failed: %s", strerror(errno));
        return PD_CLI_FAILURE;
    }
    return PD_CLI_OK;
}

int pd_cli_train(int argc, char **argv)
{
    train_run r = {.program_start = now_seconds(), .final_loss = NAN};
    int code;

    if ((code = parse_args(argc, argv, &r.args)) >= 0)
        return code;
    if (r.args.metrics && !(r.metrics = fopen(r.args.metrics, "w"))) {
        pd_cli_error("train: --metrics: cannot write '%s': %s", r.args.metrics, strerror(errno));
        return PD_CLI_USAGE;
    }
    if ((code = run_setup(&r)) >= 0)
        goto release;
    if (!r.args.quiet)
        fprintf(stderr, "training %s (%lld parameters) on %s: %lld training / %lld test samples, batch %lld, "
                "%lld steps\n", r.args.model, (long long)pd_graph_param_count(r.g), r.dev->name,
                (long long)r.train_set->count, (long long)r.test_set->count, (long long)r.args.batch,
                (long long)r.steps);
    if ((code = train_loop(&r)) >= 0)
        goto release;
    if (r.metrics) {
        FILE *f = r.metrics;
        r.metrics = NULL;
        if (ferror(f) | fclose(f)) {
            pd_cli_error("train: --metrics: writing '%s' failed: %s", r.args.metrics, strerror(errno));
            code = PD_CLI_FAILURE;
            goto release;
        }
    }

    double total = now_seconds() - r.program_start;
    double images_per_s = (double)(r.steps * r.args.batch) / r.step_seconds;
    double accuracy = (double)r.test_correct / (double)r.test_seen;
    double epochs = (double)r.steps / (double)pd_batches_per_epoch(r.train_batches);
    if (!r.args.quiet) {
        fprintf(stderr, "trained %lld steps (%.2f epochs) in %.1f s: %.0f img/s, final loss %.4f\n",
                (long long)r.steps, epochs, r.step_seconds, images_per_s, (double)r.final_loss);
        fprintf(stderr, "test accuracy %.2f%% (%lld/%lld) in %.1f s; total %.1f s\n", 100.0 * accuracy,
                (long long)r.test_correct, (long long)r.test_seen, r.eval_seconds, total);
    }
    code = print_summary(&r, epochs, accuracy, images_per_s, total);

release:
    run_release(&r);
    return code;
}
