/* Measuring a profile on a device: every node's forward and backward pass
 * timed on its own, in the order of a real training step, many times; the
 * medians are kept. Times come from the device's events (pd_device_ops
 * event_*: CUDA events on a GPU, the monotonic clock on the CPU) recorded
 * around each node, with the device synchronised after each, so that every
 * node starts on an idle stream and is timed alone. On an idle stream the
 * span between the events includes the gaps in which the GPU waits for the
 * host to launch the node's kernels (launch latency), as a host clock
 * around a synchronisation would, but not the host's wake-up from that
 * synchronisation, which a host clock adds to every node. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream/log.h>
#include <pipedream/profile.h>

#include "core/pd_rng.h"

/* How far the sum of the per-node medians may stray from the whole-step
 * median before a warning: separate timing adds a clock read and a device
 * synchronisation per node, and caches differ a little. */
#define STEP_SUM_FACTOR 1.5

/* A pair of device events timing one span at a time. */
typedef struct span_timer {
    pd_device *dev;
    pd_device_event *start, *stop;
} span_timer;

static void span_timer_destroy(span_timer *t)
{
    if (!t->dev)
        return;
    t->dev->ops->event_destroy(t->dev, t->start);
    t->dev->ops->event_destroy(t->dev, t->stop);
    *t = (span_timer){0};
}

static pd_status span_timer_create(pd_device *dev, span_timer *t)
{
    pd_status s;

    *t = (span_timer){.dev = dev};
    PD_CHECK_GOTO(dev->ops->event_create(dev, &t->start), s, fail);
    PD_CHECK_GOTO(dev->ops->event_create(dev, &t->stop), s, fail);
    return PD_OK;
fail:
    span_timer_destroy(t);
    return s;
}

static pd_status span_timer_start(span_timer *t) { return t->dev->ops->event_record(t->dev, t->start); }

/* Ends the span, waits for the device and gives its milliseconds. */
static pd_status span_timer_stop(span_timer *t, double *ms)
{
    PD_CHECK(t->dev->ops->event_record(t->dev, t->stop));
    PD_CHECK(t->dev->mem->synchronize(t->dev));
    return t->dev->ops->event_elapsed_ms(t->dev, t->start, t->stop, ms);
}

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of n samples (sorted in place). */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), compare_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static bool is_input_node(const pd_graph *g, int k) { return strcmp(pd_graph_node_type(g, k), "input") == 0; }

/* A loss of (logits [N,C], labels [N]): softmax_cross_entropy, S2VT's
 * masked_cross_entropy. */
static bool is_cross_entropy(const char *type)
{
    size_t n = strlen(type), k = strlen("cross_entropy");
    return n >= k && strcmp(type + n - k, "cross_entropy") == 0;
}

/* The number of valid values of the i32 input `node`: the smallest range
 * any consumer accepts (class count of a cross-entropy loss, vocabulary of
 * an embedding). */
static pd_status i32_value_range(pd_graph *g, int node, int64_t *range)
{
    int64_t r = INT64_MAX;

    for (int c = node + 1; c < pd_graph_size(g); c++) {
        const int *inputs;
        int n = pd_graph_node_inputs(g, c, &inputs);
        const char *type = pd_graph_node_type(g, c);
        for (int i = 0; i < n; i++) {
            int64_t accept;
            if (inputs[i] != node)
                continue;
            if (is_cross_entropy(type) && i == 1) {
                const pd_shape *logits = pd_graph_node_shape(g, inputs[0]);
                accept = logits->dim[logits->ndim - 1];
            } else if (strcmp(type, "embedding") == 0 && i == 0) {
                char weight[96];
                pd_param **params;
                int np = pd_graph_params(g, &params);
                accept = -1;
                snprintf(weight, sizeof(weight), "%s.weight", pd_graph_node_name(g, c));
                for (int p = 0; p < np; p++)
                    if (strcmp(params[p]->name, weight) == 0)
                        accept = params[p]->value.shape.dim[0];
                if (accept < 0)
                    return PD_ERROR(PD_ENOTSUP, "profile: embedding '%s' has no parameter '%s'",
                                    pd_graph_node_name(g, c), weight);
            } else {
                return PD_ERROR(PD_ENOTSUP,
                                "profile: input '%s' (i32) feeds '%s' (%s), whose valid values the profiler does "
                                "not know; profile it with real data",
                                pd_graph_node_name(g, node), pd_graph_node_name(g, c), type);
            }
            if (accept < r)
                r = accept;
        }
    }
    *range = r == INT64_MAX ? 1 : r;
    return PD_OK;
}

/* Writes valid random values into every input node: f32 uniform in
 * [-1, 1), i32 uniform over the values the consumers accept. */
static pd_status fill_inputs(pd_graph *g, uint64_t seed)
{
    pd_rng rng;

    pd_rng_init(&rng, pd_rng_mix64(seed ^ 0x70726f66696c65ULL));
    for (int k = 0; k < pd_graph_size(g); k++) {
        pd_tensor *t = pd_graph_output(g, k);
        size_t n = (size_t)pd_tensor_numel(t);
        void *host;
        int64_t range = 0;
        pd_status s;

        if (!is_input_node(g, k))
            continue;
        if (t->dtype == PD_I32)
            PD_CHECK(i32_value_range(g, k, &range));
        else if (t->dtype != PD_F32)
            return PD_ERROR(PD_ENOTSUP, "profile: input '%s' is %s; synthetic values are made for f32 and i32 only",
                            pd_graph_node_name(g, k), pd_dtype_name(t->dtype));
        host = malloc(n ? n * 4 : 1);
        if (!host)
            return PD_ERROR(PD_ENOMEM, "profile: out of host memory for input '%s'", pd_graph_node_name(g, k));
        for (size_t i = 0; i < n; i++) {
            if (t->dtype == PD_I32)
                ((int32_t *)host)[i] = (int32_t)(pd_rng_next(&rng) % (uint64_t)range);
            else
                ((float *)host)[i] = pd_rng_range(&rng, -1.0f, 1.0f);
        }
        s = pd_tensor_copy_from_host(t, host, n * 4);
        free(host);
        PD_CHECK(s);
    }
    return PD_OK;
}

/* Samples of one measurement, [node][iteration] and [iteration]. */
typedef struct samples {
    int nodes, iterations;
    double *fwd, *bwd, *step, *load;
} samples;

static void samples_free(samples *s)
{
    free(s->fwd);
    free(s->bwd);
    free(s->step);
    free(s->load);
}

static pd_status samples_alloc(samples *s, int nodes, int iterations)
{
    size_t cells = (size_t)nodes * (size_t)iterations;

    *s = (samples){.nodes = nodes, .iterations = iterations};
    s->fwd = calloc(cells, sizeof(double));
    s->bwd = calloc(cells, sizeof(double));
    s->step = calloc((size_t)iterations, sizeof(double));
    s->load = calloc((size_t)iterations, sizeof(double));
    if (!s->fwd || !s->bwd || !s->step || !s->load) {
        samples_free(s);
        return PD_ERROR(PD_ENOMEM, "profile: out of host memory for %d x %d samples", nodes, iterations);
    }
    return PD_OK;
}

/* A whole training step without an optimizer update. */
static pd_status whole_step(pd_graph *g, int64_t minibatch)
{
    PD_CHECK(pd_graph_forward(g, minibatch, true));
    return pd_graph_backward(g, minibatch, pd_graph_size(g) - 1, NULL);
}

/* Times one node's forward or backward pass (the device is idle before). */
static pd_status time_node(pd_graph *g, span_timer *t, int k, int64_t minibatch, bool backward, double *ms)
{
    PD_CHECK(span_timer_start(t));
    PD_CHECK(pd_graph_run_node(g, k, minibatch, backward));
    return span_timer_stop(t, ms);
}

/* Iteration `it`: the data (if fed), a whole step, then each node forward
 * in order and backward in reverse order, each timed on its own. */
static pd_status measure_iteration(pd_graph *g, const pd_profile_options *opts, span_timer *t, int64_t minibatch,
                                   int it, samples *s)
{
    const int n = s->nodes;

    PD_CHECK(t->dev->mem->synchronize(t->dev));
    if (opts->feed) {
        PD_CHECK(span_timer_start(t));
        PD_CHECK(opts->feed(opts->feed_ctx, g));
        PD_CHECK(span_timer_stop(t, &s->load[it]));
    }
    PD_CHECK(span_timer_start(t));
    PD_CHECK(whole_step(g, minibatch));
    PD_CHECK(span_timer_stop(t, &s->step[it]));

    for (int k = 0; k < n; k++)
        PD_CHECK(time_node(g, t, k, minibatch, false, &s->fwd[(size_t)k * (size_t)s->iterations + (size_t)it]));
    for (int k = n - 1; k >= 0; k--)
        PD_CHECK(time_node(g, t, k, minibatch, true, &s->bwd[(size_t)k * (size_t)s->iterations + (size_t)it]));
    return PD_OK;
}

/* "conv2d [64,6,28,28]": the type and output shape. */
static void describe(const pd_graph *g, int k, char *buf, size_t size)
{
    char shape[96];

    snprintf(buf, size, "%s %s", pd_graph_node_type(g, k), pd_shape_format(pd_graph_node_shape(g, k), shape,
                                                                             sizeof(shape)));
}

/* Appends the graph's nodes with the medians of their samples (which are
 * sorted in place). */
static pd_status add_nodes(pd_profile *p, const pd_graph *g, samples *s, bool fed)
{
    const int iters = s->iterations;
    bool first_input = true;

    for (int k = 0; k < s->nodes; k++) {
        char description[160];
        const int *inputs;
        pd_profile_node node = {
            .name = pd_graph_node_name(g, k),
            .type = pd_graph_node_type(g, k),
            .description = description,
            .activation_bytes = (int64_t)pd_graph_node_activation_bytes(g, k),
            /* parameters are f32 (pd_layer_declare_param) */
            .weight_bytes = pd_graph_node_param_count(g, k) * (int64_t)pd_dtype_size(PD_F32),
            .flops = pd_graph_node_flops(g, k),
        };

        node.n_inputs = pd_graph_node_inputs(g, k, &inputs);
        node.inputs = inputs;
        describe(g, k, description, sizeof(description));
        if (is_input_node(g, k)) {
            /* PipeDream's convention: an input's forward time is its loading. */
            node.fwd_ms = first_input && fed ? median(s->load, iters) : 0.0;
            first_input = false;
        } else {
            node.fwd_ms = median(s->fwd + (size_t)k * (size_t)iters, iters);
            node.bwd_ms = median(s->bwd + (size_t)k * (size_t)iters, iters);
        }
        PD_CHECK(pd_profile_add_node(p, &node, NULL));
    }
    return PD_OK;
}

/* The dtype the graph stores its activations in: bf16 when any computed
 * node's output is bf16 (a graph in --precision bf16), else f32. */
static pd_dtype activation_dtype(pd_graph *g)
{
    for (int k = 0; k < pd_graph_size(g); k++) {
        const pd_tensor *t = pd_graph_output(g, k);
        if (!is_input_node(g, k) && t && t->dtype == PD_BF16)
            return PD_BF16;
    }
    return PD_F32;
}

static pd_status check_graph(pd_graph *g, const char *model, const pd_profile_options *opts)
{
    int n = pd_graph_size(g);

    if (!model || !model[0])
        return PD_ERROR(PD_EINVAL, "profile: a model name is needed");
    if (!opts || opts->warmup < 0 || opts->iterations < 1)
        return PD_ERROR(PD_EINVAL, "profile: warmup %d must be >= 0 and iterations %d >= 1", opts ? opts->warmup : 0,
                        opts ? opts->iterations : 0);
    if (n < 2 || !pd_graph_output(g, 0))
        return PD_ERROR(PD_ESTATE, "profile: the graph must be allocated and hold an input and a loss");
    if (!is_input_node(g, 0))
        return PD_ERROR(PD_EINVAL, "profile: node 0 ('%s') is not an input", pd_graph_node_name(g, 0));
    if (pd_shape_numel(pd_graph_node_shape(g, n - 1)) != 1)
        return PD_ERROR(PD_EINVAL, "profile: the last node ('%s') must be a scalar loss", pd_graph_node_name(g, n - 1));
    return PD_OK;
}

pd_status pd_profile_measure_graph(pd_graph *g, const char *model, const pd_profile_options *opts, pd_profile **out)
{
    samples s = {0};
    span_timer t = {0};
    pd_profile *p = NULL;
    char note[512];
    pd_status st = PD_OK;

    PD_CHECK(check_graph(g, model, opts));
    pd_device *dev = pd_graph_output(g, 0)->device;

    if (opts->feed)
        PD_CHECK(opts->feed(opts->feed_ctx, g));
    else
        PD_CHECK(fill_inputs(g, 0x5eed));
    for (int w = 0; w < opts->warmup; w++)
        PD_CHECK(whole_step(g, w));
    PD_CHECK(samples_alloc(&s, pd_graph_size(g), opts->iterations));
    PD_CHECK_GOTO(span_timer_create(dev, &t), st, release);
    for (int it = 0; it < opts->iterations; it++)
        PD_CHECK_GOTO(measure_iteration(g, opts, &t, (int64_t)opts->warmup + it, it, &s), st, release);

    if (opts->feed)
        snprintf(note, sizeof(note), "%s: median time to produce one minibatch into the input nodes, as the first "
                 "input's forward time", opts->feed_note ? opts->feed_note : "loader");
    else
        snprintf(note, sizeof(note), "synthetic input (random values written once): data loading not measured, 0 ms");
    const pd_profile_info info = {
        .model = model,
        .batch = (int)pd_graph_node_shape(g, 0)->dim[0],
        .dtype = activation_dtype(g),
        .device = dev->name,
        .source = "measured",
        .warmup = opts->warmup,
        .iterations = opts->iterations,
        .step_ms = median(s.step, opts->iterations),
        .data_note = note,
    };
    PD_CHECK_GOTO(pd_profile_create(&info, &p), st, release);
    PD_CHECK_GOTO(add_nodes(p, g, &s, opts->feed != NULL), st, release);

    double sum = pd_profile_compute_ms(p), step = info.step_ms;
    if (sum > STEP_SUM_FACTOR * step || step > STEP_SUM_FACTOR * sum)
        PD_LOG_WARNF("profile %s: the per-layer times add up to %.3f ms but a whole step takes %.3f ms (ratio %.2f)",
                     model, sum, step, step > 0 ? sum / step : INFINITY);
    else
        PD_LOG_DEBUGF("profile %s: per-layer sum %.3f ms, whole step %.3f ms", model, sum, step);
    *out = p;
    p = NULL;
release:
    pd_profile_destroy(p);
    span_timer_destroy(&t);
    samples_free(&s);
    return st;
}

pd_status pd_profile_measure(const char *model, const pd_model_options *model_opts, pd_device *dev, uint64_t seed,
                             const pd_profile_options *opts, pd_profile **out)
{
    pd_graph *g;
    pd_model_io io;
    pd_status s;

    if (!opts)
        return PD_ERROR(PD_EINVAL, "profile: no options");
    PD_CHECK(pd_graph_create(dev, seed, &g));
    PD_CHECK_GOTO(pd_graph_set_precision(g, opts->precision), s, destroy);
    PD_CHECK_GOTO(pd_model_build(model, g, model_opts, &io), s, destroy);
    if (io.loss != pd_graph_size(g) - 1) {
        s = PD_ERROR(PD_ENOTSUP, "profile: model %s's loss is node %d, not the last node", model, io.loss);
        goto destroy;
    }
    PD_CHECK_GOTO(pd_graph_allocate(g), s, destroy);
    s = pd_profile_measure_graph(g, model, opts, out);
destroy:
    pd_graph_destroy(g);
    return s;
}
