/* test_backend_ops: runs every case of the case table on every backend this
 * build has (see bo.h). Usage: test_backend_ops [-b BACKEND] [-l LAYER] [-v]. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bo.h"
#include "core/pd_rng.h"

#define DEFAULT_EPS 1e-2f
#define DEFAULT_TOLERANCE 1e-3
#define CROSS_BACKEND_TOLERANCE 1e-3
#define MAX_SAMPLES 48
#define MINIBATCH 7

typedef struct group {
    const bo_case *cases;
    size_t count;
} group;

/* A host copy of one tensor whose gradient is checked. */
typedef struct checked {
    char name[128];
    pd_tensor *value; /* on the device: an input's output or a parameter */
    float *host;      /* its values */
    float *grad;      /* the analytic gradient */
    int64_t n;
} checked;

/* What a case produced on one backend, kept from the CPU run for comparing. */
typedef struct result {
    float *output;
    int64_t n_output;
    int n_checked;
    checked items[16];
} result;

static bool verbose;

static pd_status fill_inputs(pd_graph *g, const bo_case *c, uint64_t seed)
{
    pd_rng rng;

    pd_rng_init(&rng, seed);
    for (int node = 0; node < pd_graph_size(g); node++) {
        if (strcmp(pd_graph_node_type(g, node), "input") != 0)
            continue;
        pd_tensor *t = pd_graph_output(g, node);
        int64_t n = pd_tensor_numel(t);
        pd_status s;
        if (t->dtype == PD_I32) {
            int32_t *v = malloc((size_t)n * sizeof(*v));
            for (int64_t i = 0; i < n; i++)
                v[i] = (int32_t)(pd_rng_next(&rng) % (uint64_t)(c->int_range > 0 ? c->int_range : 1));
            s = pd_tensor_copy_from_host(t, v, (size_t)n * sizeof(*v));
            free(v);
        } else {
            float *v = malloc((size_t)n * sizeof(*v));
            for (int64_t i = 0; i < n; i++) {
                switch (c->fill) {
                case BO_FILL_UNIFORM: v[i] = pd_rng_range(&rng, -1.0f, 1.0f); break;
                case BO_FILL_AWAY_FROM_ZERO: {
                    float m = pd_rng_range(&rng, 0.1f, 1.0f);
                    v[i] = (pd_rng_next(&rng) & 1) ? m : -m;
                    break;
                }
                case BO_FILL_DISTINCT: v[i] = 0.05f * (float)(i - n / 2); break;
                }
            }
            if (c->fill == BO_FILL_DISTINCT) /* Fisher-Yates: distinct values, random order */
                for (int64_t i = n - 1; i > 0; i--) {
                    int64_t j = (int64_t)(pd_rng_next(&rng) % (uint64_t)(i + 1));
                    float tmp = v[i];
                    v[i] = v[j];
                    v[j] = tmp;
                }
            s = pd_tensor_copy_from_host(t, v, (size_t)n * sizeof(*v));
            free(v);
        }
        if (s != PD_OK)
            return s;
    }
    return PD_OK;
}

/* loss = sum(out * r), in double. */
static pd_status projected_loss(pd_graph *g, int out, const float *r, double *loss)
{
    pd_tensor *t = pd_graph_output(g, out);
    int64_t n = pd_tensor_numel(t);
    float *v = malloc((size_t)n * sizeof(*v));
    double sum = 0.0;

    PD_CHECK(pd_graph_forward(g, MINIBATCH, true));
    pd_status s = pd_tensor_copy_to_host(t, v, (size_t)n * sizeof(*v));
    for (int64_t i = 0; s == PD_OK && i < n; i++)
        sum += (double)v[i] * r[i];
    free(v);
    *loss = sum;
    return s;
}

static void free_result(result *res)
{
    free(res->output);
    for (int i = 0; i < res->n_checked; i++) {
        free(res->items[i].host);
        free(res->items[i].grad);
    }
    memset(res, 0, sizeof(*res));
}

static pd_status add_checked(result *res, const char *name, pd_tensor *value, const pd_tensor *grad)
{
    checked *c;

    if (res->n_checked >= (int)(sizeof(res->items) / sizeof(res->items[0])))
        return PD_ERROR(PD_EINVAL, "too many checked tensors");
    c = &res->items[res->n_checked++];
    snprintf(c->name, sizeof(c->name), "%s", name);
    c->value = value;
    c->n = pd_tensor_numel(value);
    c->host = malloc((size_t)c->n * sizeof(float) + 1);
    c->grad = malloc((size_t)c->n * sizeof(float) + 1);
    PD_CHECK(pd_tensor_copy_to_host(value, c->host, (size_t)c->n * sizeof(float)));
    return pd_tensor_copy_to_host(grad, c->grad, (size_t)c->n * sizeof(float));
}

/* Relative error of the analytic gradient against central differences on
 * up to MAX_SAMPLES elements (all of a small tensor). */
static pd_status gradient_error(pd_graph *g, int out, const float *r, checked *c, float eps, uint64_t seed,
                                double *error)
{
    pd_rng rng;
    double diff2 = 0.0, num2 = 0.0, ana2 = 0.0;
    int64_t samples = c->n < MAX_SAMPLES ? c->n : MAX_SAMPLES;
    size_t bytes = (size_t)c->n * sizeof(float);

    pd_rng_init(&rng, seed);
    for (int64_t s = 0; s < samples; s++) {
        int64_t i = c->n <= MAX_SAMPLES ? s : (int64_t)(pd_rng_next(&rng) % (uint64_t)c->n);
        float saved = c->host[i];
        double plus, minus;

        c->host[i] = saved + eps;
        PD_CHECK(pd_tensor_copy_from_host(c->value, c->host, bytes));
        PD_CHECK(projected_loss(g, out, r, &plus));
        c->host[i] = saved - eps;
        PD_CHECK(pd_tensor_copy_from_host(c->value, c->host, bytes));
        PD_CHECK(projected_loss(g, out, r, &minus));
        c->host[i] = saved;
        double numeric = (plus - minus) / (2.0 * (double)eps);
        double analytic = c->grad[i];
        diff2 += (numeric - analytic) * (numeric - analytic);
        num2 += numeric * numeric;
        ana2 += analytic * analytic;
        if (verbose)
            printf("#   %s[%lld]: analytic %.6g numeric %.6g\n", c->name, (long long)i, analytic, numeric);
    }
    PD_CHECK(pd_tensor_copy_from_host(c->value, c->host, bytes));
    double scale = sqrt(num2 > ana2 ? num2 : ana2);
    *error = scale > 1e-12 ? sqrt(diff2) / scale : sqrt(diff2);
    return PD_OK;
}

/* Builds, runs and gradient-checks one case; fills `res` for comparisons and
 * appends a summary to `summary`. *passed says whether every check held. */
static pd_status run_case(pd_device *dev, const bo_case *c, uint64_t seed, result *res, char *summary,
                          size_t summary_size, bool *passed)
{
    pd_graph *g = NULL;
    int out = -1;
    float *r = NULL;
    float eps = c->eps > 0 ? c->eps : DEFAULT_EPS;
    double tolerance = c->tolerance > 0 ? c->tolerance : DEFAULT_TOLERANCE;
    size_t used = 0;
    pd_status s;
    pd_rng rng;

    *passed = true;
    summary[0] = '\0';
    PD_CHECK(pd_graph_create(dev, seed, &g));
    PD_CHECK_GOTO(c->build(g, c->arg, &out), s, done);
    PD_CHECK_GOTO(pd_graph_allocate(g), s, done);
    PD_CHECK_GOTO(fill_inputs(g, c, seed + 1), s, done);

    pd_tensor *y = pd_graph_output(g, out);
    int64_t n_out = pd_tensor_numel(y);
    r = malloc((size_t)n_out * sizeof(*r));
    pd_rng_init(&rng, seed + 2);
    for (int64_t i = 0; i < n_out; i++)
        r[i] = pd_rng_range(&rng, -1.0f, 1.0f);
    {
        pd_tensor *seed_t = NULL;
        double loss;
        PD_CHECK_GOTO(pd_tensor_create(dev, PD_F32, &y->shape, &seed_t), s, done);
        s = pd_tensor_copy_from_host(seed_t, r, (size_t)n_out * sizeof(*r));
        if (s == PD_OK)
            s = projected_loss(g, out, r, &loss);
        if (s == PD_OK)
            s = pd_graph_backward(g, MINIBATCH, out, seed_t);
        pd_tensor_destroy(seed_t);
        if (s != PD_OK)
            goto done;
    }
    res->n_output = n_out;
    res->output = malloc((size_t)n_out * sizeof(float));
    PD_CHECK_GOTO(pd_tensor_copy_to_host(y, res->output, (size_t)n_out * sizeof(float)), s, done);

    for (int node = 0; node < pd_graph_size(g); node++) {
        if (strcmp(pd_graph_node_type(g, node), "input") != 0 || pd_graph_output(g, node)->dtype != PD_F32)
            continue;
        pd_tensor *grad = pd_graph_grad(g, node);
        if (!grad)
            continue; /* an input created without requires_grad */
        char name[128];
        snprintf(name, sizeof(name), "d(%s)", pd_graph_node_name(g, node));
        PD_CHECK_GOTO(add_checked(res, name, pd_graph_output(g, node), grad), s, done);
    }
    pd_param **params;
    int n_params = pd_graph_params(g, &params);
    for (int i = 0; i < n_params; i++) {
        if (!params[i]->trainable)
            continue;
        char name[128];
        snprintf(name, sizeof(name), "d(%s)", params[i]->name);
        PD_CHECK_GOTO(add_checked(res, name, &params[i]->value, &params[i]->grad), s, done);
    }
    for (int i = 0; i < res->n_checked; i++) {
        double error;
        PD_CHECK_GOTO(gradient_error(g, out, r, &res->items[i], eps, seed + 10 + (uint64_t)i, &error), s, done);
        if (error >= tolerance || isnan(error))
            *passed = false;
        if (used < summary_size)
            used += (size_t)snprintf(summary + used, summary_size - used, "%s%s %.1e", used ? ", " : "",
                                     res->items[i].name, error);
    }
    if (used < summary_size)
        snprintf(summary + used, summary_size - used, "%s(relative error bound %.0e)", used ? " " : "",
                 tolerance);
    s = PD_OK;
done:
    free(r);
    pd_graph_destroy(g);
    return s;
}

static double max_relative_difference(const float *a, const float *b, int64_t n)
{
    double diff2 = 0.0, ref2 = 0.0;

    for (int64_t i = 0; i < n; i++) {
        diff2 += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        ref2 += (double)a[i] * a[i];
    }
    return ref2 > 1e-24 ? sqrt(diff2 / ref2) : sqrt(diff2);
}

/* Another backend's results against the CPU's: outputs and gradients. */
static bool same_as_reference(const result *ref, const result *res, char *why, size_t size)
{
    if (ref->n_output != res->n_output || ref->n_checked != res->n_checked) {
        snprintf(why, size, "different output size or gradient count than the cpu");
        return false;
    }
    double e = max_relative_difference(ref->output, res->output, ref->n_output);
    if (e > CROSS_BACKEND_TOLERANCE) {
        snprintf(why, size, "output differs from the cpu's by %.1e", e);
        return false;
    }
    for (int i = 0; i < ref->n_checked; i++) {
        e = max_relative_difference(ref->items[i].grad, res->items[i].grad, ref->items[i].n);
        if (e > CROSS_BACKEND_TOLERANCE) {
            snprintf(why, size, "%s differs from the cpu's by %.1e", ref->items[i].name, e);
            return false;
        }
    }
    return true;
}

int main(int argc, char **argv)
{
    const char *only_backend = NULL, *only_layer = NULL;
    const group groups[] = {
        {bo_cases_basic, bo_cases_basic_count},
        {bo_cases_conv_pool, bo_cases_conv_pool_count},
        {bo_cases_norm_loss, bo_cases_norm_loss_count},
        {bo_cases_sequence, bo_cases_sequence_count},
    };
    const int n_groups = (int)(sizeof(groups) / sizeof(groups[0]));
    const char *const *backends;
    int n_backends = pd_device_backends(&backends);
    int opt, test = 0, failures = 0, total = 0;

    while ((opt = getopt(argc, argv, "b:l:v")) != -1) {
        switch (opt) {
        case 'b': only_backend = optarg; break;
        case 'l': only_layer = optarg; break;
        case 'v': verbose = true; break;
        default: fprintf(stderr, "usage: %s [-b BACKEND] [-l LAYER] [-v]\n", argv[0]); return 2;
        }
    }
    for (int gi = 0; gi < n_groups; gi++)
        for (size_t ci = 0; ci < groups[gi].count; ci++)
            if (!only_layer || strcmp(only_layer, groups[gi].cases[ci].layer) == 0)
                total++;
    int n_run_backends = 0;
    for (int b = 0; b < n_backends; b++)
        if (!only_backend || strcmp(only_backend, backends[b]) == 0)
            n_run_backends++;
    printf("1..%d\n", total * n_run_backends);
    fflush(stdout);

    /* CPU results of every case, for comparing the other backends with. */
    result *reference = calloc((size_t)(total ? total : 1), sizeof(*reference));
    for (int b = 0; b < n_backends; b++) {
        if (only_backend && strcmp(only_backend, backends[b]) != 0)
            continue;
        pd_device *dev = NULL;
        pd_status open_status = pd_device_open(backends[b], &dev);
        char open_error[512];
        snprintf(open_error, sizeof(open_error), "%s", pd_last_error());
        int index = 0;
        for (int gi = 0; gi < n_groups; gi++) {
            for (size_t ci = 0; ci < groups[gi].count; ci++) {
                const bo_case *c = &groups[gi].cases[ci];
                if (only_layer && strcmp(only_layer, c->layer) != 0)
                    continue;
                test++;
                result res = {0};
                char summary[1024], why[256];
                bool passed;
                if (open_status != PD_OK) {
                    printf("ok %d - %s %s %s # SKIP no %s device: %s\n", test, backends[b], c->layer, c->name,
                           backends[b], open_error);
                    index++;
                    continue;
                }
                pd_error_clear();
                pd_status s = run_case(dev, c, 1000 + (uint64_t)index, &res, summary, sizeof(summary), &passed);
                if (s != PD_OK) {
                    printf("not ok %d - %s %s %s: %s: %s\n", test, backends[b], c->layer, c->name, pd_strerror(s),
                           pd_last_error());
                    failures++;
                    free_result(&res);
                } else if (!passed) {
                    printf("not ok %d - %s %s %s: %s\n", test, backends[b], c->layer, c->name, summary);
                    failures++;
                    free_result(&res);
                } else if (strcmp(backends[b], "cpu") != 0 && reference[index].output &&
                           !same_as_reference(&reference[index], &res, why, sizeof(why))) {
                    printf("not ok %d - %s %s %s: %s\n", test, backends[b], c->layer, c->name, why);
                    failures++;
                    free_result(&res);
                } else {
                    printf("ok %d - %s %s %s: %s\n", test, backends[b], c->layer, c->name, summary);
                    if (strcmp(backends[b], "cpu") == 0)
                        reference[index] = res;
                    else
                        free_result(&res);
                }
                fflush(stdout);
                index++;
            }
        }
        pd_device_close(dev);
    }
    for (int i = 0; i < total; i++)
        free_result(&reference[i]);
    free(reference);
    return failures ? 1 : 0;
}
