/* Unit tests of the CPU batch-norm, LRN, dropout and softmax cross-entropy
 * kernels, through the device table, against hand-computed values and naive
 * double-precision references (whose gradients are themselves checked by
 * central differences); then the layers built on them, in small graphs. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <pipedream.h>

#include "core/pd_rng.h"

static pd_device *dev;

static int open_cpu(void **state)
{
    return pd_device_open("cpu", &dev) == PD_OK ? 0 : -1;
}

static int close_cpu(void **state)
{
    pd_device_close(dev);
    return 0;
}

/* A tensor on the CPU device holding `data` (or U(-1,1) values when NULL). */
static pd_tensor *tensor(pd_dtype dtype, pd_shape shape, const void *data, uint64_t seed)
{
    pd_tensor *t = NULL;

    assert_int_equal(pd_tensor_create(dev, dtype, &shape, &t), PD_OK);
    if (data) {
        memcpy(t->data, data, pd_tensor_nbytes(t));
    } else {
        pd_rng r;
        pd_rng_init(&r, seed);
        for (int64_t i = 0; i < pd_tensor_numel(t); i++)
            ((float *)t->data)[i] = pd_rng_range(&r, -1.0f, 1.0f);
    }
    return t;
}

static float *f32(const pd_tensor *t) { return t->data; }

/* |got - want| <= tol * max(1, |want|) element-wise. */
static void expect_close(const float *got, const double *want, int64_t n, double tol, const char *what)
{
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]);
        if (err > tol * fmax(1.0, fabs(want[i])))
            fail_msg("%s[%lld]: got %.9g, want %.9g", what, (long long)i, (double)got[i], want[i]);
    }
}

/* ---- softmax cross-entropy ------------------------------------------------ */

static void test_sce_hand_2x3(void **state)
{
    const float logits_v[] = {1, 2, 3, 1, 1, 1};
    const int32_t labels_v[] = {2, 0};
    pd_tensor *logits = tensor(PD_F32, pd_shape_make(2, (int64_t)2, (int64_t)3), logits_v, 0);
    pd_tensor *labels = tensor(PD_I32, pd_shape_make(1, (int64_t)2), labels_v, 0);
    pd_tensor *probs = tensor(PD_F32, pd_shape_make(2, (int64_t)2, (int64_t)3), NULL, 1);
    pd_tensor *loss = tensor(PD_F32, pd_shape_make(1, (int64_t)1), NULL, 2);
    pd_tensor *dlogits = tensor(PD_F32, pd_shape_make(2, (int64_t)2, (int64_t)3), NULL, 3);

    assert_int_equal(dev->ops->softmax_cross_entropy_forward(dev, logits, labels, probs, loss), PD_OK);
    /* row 0: e^{-2}, e^{-1}, 1 over 1.503214724; row 1: uniform. */
    const double want_p[] = {0.0900305732, 0.2447284711, 0.6652409558, 1.0 / 3, 1.0 / 3, 1.0 / 3};
    expect_close(f32(probs), want_p, 6, 1e-6, "probs");
    /* (-log 0.6652409558 + log 3) / 2 */
    const double want_loss = (0.4076059644 + 1.0986122887) / 2;
    expect_close(f32(loss), &want_loss, 1, 1e-6, "loss");

    assert_int_equal(dev->ops->softmax_cross_entropy_backward(dev, probs, labels, 2.0f, dlogits), PD_OK);
    /* dloss/N = 1: probs - onehot */
    const double want_d[] = {0.0900305732, 0.2447284711, 0.6652409558 - 1, 1.0 / 3 - 1, 1.0 / 3, 1.0 / 3};
    expect_close(f32(dlogits), want_d, 6, 1e-6, "dlogits");

    pd_tensor_destroy(logits);
    pd_tensor_destroy(labels);
    pd_tensor_destroy(probs);
    pd_tensor_destroy(loss);
    pd_tensor_destroy(dlogits);
}

static void test_sce_large_logits_stable(void **state)
{
    /* exp(1000) overflows float; the loss of label 1 is log(1 + e^-1000 + e^-2000) + 1000. */
    const float logits_v[] = {1000, 0, -1000};
    const int32_t labels_v[] = {1};
    pd_tensor *logits = tensor(PD_F32, pd_shape_make(2, (int64_t)1, (int64_t)3), logits_v, 0);
    pd_tensor *labels = tensor(PD_I32, pd_shape_make(1, (int64_t)1), labels_v, 0);
    pd_tensor *probs = tensor(PD_F32, pd_shape_make(2, (int64_t)1, (int64_t)3), NULL, 1);
    pd_tensor *loss = tensor(PD_F32, pd_shape_make(1, (int64_t)1), NULL, 2);

    assert_int_equal(dev->ops->softmax_cross_entropy_forward(dev, logits, labels, probs, loss), PD_OK);
    const double want_loss = 1000.0, want_p[] = {1, 0, 0};
    expect_close(f32(loss), &want_loss, 1, 1e-6, "loss");
    expect_close(f32(probs), want_p, 3, 1e-7, "probs");

    pd_tensor_destroy(logits);
    pd_tensor_destroy(labels);
    pd_tensor_destroy(probs);
    pd_tensor_destroy(loss);
}

static void test_sce_random_vs_reference(void **state)
{
    /* Large enough for the threaded path. */
    const int64_t n = 300, c = 70;
    pd_tensor *logits = tensor(PD_F32, pd_shape_make(2, n, c), NULL, 11);
    pd_tensor *labels = tensor(PD_I32, pd_shape_make(1, n), NULL, 0);
    pd_tensor *probs = tensor(PD_F32, pd_shape_make(2, n, c), NULL, 1);
    pd_tensor *loss = tensor(PD_F32, pd_shape_make(1, (int64_t)1), NULL, 2);
    pd_tensor *dlogits = tensor(PD_F32, pd_shape_make(2, n, c), NULL, 3);
    double *want_p = malloc((size_t)(n * c) * sizeof(double));
    double *want_d = malloc((size_t)(n * c) * sizeof(double));
    int32_t *lab = labels->data;
    double total = 0;

    for (int64_t i = 0; i < n * c; i++)
        f32(logits)[i] *= 8.0f;
    for (int64_t i = 0; i < n; i++)
        lab[i] = (int32_t)((i * 37) % c);
    for (int64_t i = 0; i < n; i++) {
        double z = 0;
        for (int64_t j = 0; j < c; j++)
            z += exp((double)f32(logits)[i * c + j]);
        for (int64_t j = 0; j < c; j++) {
            want_p[i * c + j] = exp((double)f32(logits)[i * c + j]) / z;
            want_d[i * c + j] = 0.5 * (want_p[i * c + j] - (j == lab[i])) / (double)n;
        }
        total += -log(want_p[i * c + lab[i]]);
    }
    const double want_loss = total / (double)n;

    assert_int_equal(dev->ops->softmax_cross_entropy_forward(dev, logits, labels, probs, loss), PD_OK);
    expect_close(f32(probs), want_p, n * c, 1e-6, "probs");
    expect_close(f32(loss), &want_loss, 1, 1e-6, "loss");
    assert_int_equal(dev->ops->softmax_cross_entropy_backward(dev, probs, labels, 0.5f, dlogits), PD_OK);
    expect_close(f32(dlogits), want_d, n * c, 1e-7, "dlogits");

    free(want_p);
    free(want_d);
    pd_tensor_destroy(logits);
    pd_tensor_destroy(labels);
    pd_tensor_destroy(probs);
    pd_tensor_destroy(loss);
    pd_tensor_destroy(dlogits);
}

static void test_sce_label_out_of_range(void **state)
{
    const float logits_v[] = {1, 2, 3, 1, 1, 1};
    const int32_t bad_high[] = {2, 3}, bad_low[] = {-1, 0};
    pd_tensor *logits = tensor(PD_F32, pd_shape_make(2, (int64_t)2, (int64_t)3), logits_v, 0);
    pd_tensor *labels = tensor(PD_I32, pd_shape_make(1, (int64_t)2), bad_high, 0);
    pd_tensor *probs = tensor(PD_F32, pd_shape_make(2, (int64_t)2, (int64_t)3), NULL, 1);
    pd_tensor *loss = tensor(PD_F32, pd_shape_make(1, (int64_t)1), NULL, 2);

    pd_error_clear();
    assert_int_equal(dev->ops->softmax_cross_entropy_forward(dev, logits, labels, probs, loss), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "row 1"));
    assert_non_null(strstr(pd_last_error(), "is 3"));
    assert_int_equal(dev->ops->softmax_cross_entropy_backward(dev, probs, labels, 1.0f, probs), PD_EINVAL);

    memcpy(labels->data, bad_low, sizeof(bad_low));
    pd_error_clear();
    assert_int_equal(dev->ops->softmax_cross_entropy_forward(dev, logits, labels, probs, loss), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "row 0"));
    assert_non_null(strstr(pd_last_error(), "is -1"));

    /* labels must be i32 [N] */
    pd_tensor *wrong = tensor(PD_F32, pd_shape_make(1, (int64_t)2), NULL, 4);
    assert_int_equal(dev->ops->softmax_cross_entropy_forward(dev, logits, wrong, probs, loss), PD_ESHAPE);

    pd_tensor_destroy(wrong);
    pd_tensor_destroy(logits);
    pd_tensor_destroy(labels);
    pd_tensor_destroy(probs);
    pd_tensor_destroy(loss);
}

/* ---- batch normalisation -------------------------------------------------- */

typedef struct bn_case {
    int64_t n, c, s; /* x viewed as [n, c, s] */
} bn_case;

/* y = (x - mean) / sqrt(var + eps) * gamma + beta with batch statistics, in double. */
static void bn_ref_forward(const bn_case *k, const double *x, const double *g, const double *b, double eps,
                           double *y, double *mean, double *var)
{
    for (int64_t c = 0; c < k->c; c++) {
        double m = 0, v = 0;
        for (int64_t n = 0; n < k->n; n++)
            for (int64_t s = 0; s < k->s; s++)
                m += x[(n * k->c + c) * k->s + s];
        m /= (double)(k->n * k->s);
        for (int64_t n = 0; n < k->n; n++)
            for (int64_t s = 0; s < k->s; s++)
                v += (x[(n * k->c + c) * k->s + s] - m) * (x[(n * k->c + c) * k->s + s] - m);
        v /= (double)(k->n * k->s);
        for (int64_t n = 0; n < k->n; n++)
            for (int64_t s = 0; s < k->s; s++) {
                int64_t i = (n * k->c + c) * k->s + s;
                y[i] = (x[i] - m) / sqrt(v + eps) * g[c] + b[c];
            }
        if (mean)
            mean[c] = m;
        if (var)
            var[c] = v;
    }
}

/* loss = sum(y * r): its gradient w.r.t. x (central differences on the double
 * reference), gamma and beta (closed forms sum(r*xhat), sum(r)). */
static void bn_ref_grads(const bn_case *k, const double *x, const double *g, const double *b, double eps,
                         const double *r, double *dx, double *dg, double *db)
{
    const int64_t total = k->n * k->c * k->s;
    double *xp = malloc((size_t)total * sizeof(double));
    double *y = malloc((size_t)total * sizeof(double));
    double mean[16], var[16];

    memcpy(xp, x, (size_t)total * sizeof(double));
    for (int64_t i = 0; i < total; i++) {
        const double h = 1e-5;
        double lp = 0, lm = 0;
        xp[i] = x[i] + h;
        bn_ref_forward(k, xp, g, b, eps, y, NULL, NULL);
        for (int64_t j = 0; j < total; j++)
            lp += y[j] * r[j];
        xp[i] = x[i] - h;
        bn_ref_forward(k, xp, g, b, eps, y, NULL, NULL);
        for (int64_t j = 0; j < total; j++)
            lm += y[j] * r[j];
        xp[i] = x[i];
        dx[i] = (lp - lm) / (2 * h);
    }
    bn_ref_forward(k, x, g, b, eps, y, mean, var);
    for (int64_t c = 0; c < k->c; c++) {
        dg[c] = db[c] = 0;
        for (int64_t n = 0; n < k->n; n++)
            for (int64_t s = 0; s < k->s; s++) {
                int64_t i = (n * k->c + c) * k->s + s;
                dg[c] += r[i] * (x[i] - mean[c]) / sqrt(var[c] + eps);
                db[c] += r[i];
            }
    }
    free(xp);
    free(y);
}

static double *to_double(const pd_tensor *t)
{
    double *d = malloc((size_t)pd_tensor_numel(t) * sizeof(double));
    for (int64_t i = 0; i < pd_tensor_numel(t); i++)
        d[i] = f32(t)[i];
    return d;
}

static void bn_check(const bn_case *k, pd_shape xs, bool grads)
{
    const pd_batchnorm_desc desc = {.eps = 1e-5f, .momentum = 0.1f};
    const int64_t total = k->n * k->c * k->s;
    pd_shape cs = pd_shape_make(1, k->c);
    pd_tensor *x = tensor(PD_F32, xs, NULL, 21), *dy = tensor(PD_F32, xs, NULL, 22);
    pd_tensor *y = tensor(PD_F32, xs, NULL, 23), *dx = tensor(PD_F32, xs, NULL, 24);
    pd_tensor *g = tensor(PD_F32, cs, NULL, 25), *b = tensor(PD_F32, cs, NULL, 26);
    pd_tensor *rm = tensor(PD_F32, cs, NULL, 27), *rv = tensor(PD_F32, cs, NULL, 28);
    pd_tensor *sm = tensor(PD_F32, cs, NULL, 29), *si = tensor(PD_F32, cs, NULL, 30);
    pd_tensor *dg = tensor(PD_F32, cs, NULL, 31), *db = tensor(PD_F32, cs, NULL, 32);

    /* A per-channel offset larger than the spread: a one-pass variance would lose digits. */
    for (int64_t i = 0; i < total; i++)
        f32(x)[i] = 3.0f * f32(x)[i] + 20.0f * (float)((i / k->s) % k->c);
    for (int64_t c = 0; c < k->c; c++)
        f32(rv)[c] = 1.0f + 0.5f * f32(rv)[c];
    double *xd = to_double(x), *gd = to_double(g), *bd = to_double(b), *rd = to_double(dy);
    double *rm0 = to_double(rm), *rv0 = to_double(rv);
    double *want_y = malloc((size_t)total * sizeof(double));
    double want_mean[16], want_var[16], want_invstd[16], want_rm[16], want_rv[16];

    bn_ref_forward(k, xd, gd, bd, desc.eps, want_y, want_mean, want_var);
    const double cnt = (double)(k->n * k->s);
    for (int64_t c = 0; c < k->c; c++) {
        want_invstd[c] = 1.0 / sqrt(want_var[c] + desc.eps);
        want_rm[c] = 0.9 * rm0[c] + 0.1 * want_mean[c];
        want_rv[c] = 0.9 * rv0[c] + 0.1 * want_var[c] * cnt / (cnt - 1);
    }

    assert_int_equal(dev->ops->batchnorm_forward_train(dev, &desc, x, g, b, rm, rv, y, sm, si), PD_OK);
    expect_close(f32(y), want_y, total, 2e-5, "bn y");
    expect_close(f32(sm), want_mean, k->c, 1e-6, "bn save_mean");
    expect_close(f32(si), want_invstd, k->c, 1e-6, "bn save_invstd");
    expect_close(f32(rm), want_rm, k->c, 1e-6, "bn running_mean");
    expect_close(f32(rv), want_rv, k->c, 1e-6, "bn running_var");

    /* eval with the updated running statistics */
    for (int64_t c = 0; c < k->c; c++) {
        for (int64_t n = 0; n < k->n; n++)
            for (int64_t s = 0; s < k->s; s++) {
                int64_t i = (n * k->c + c) * k->s + s;
                want_y[i] = (xd[i] - f32(rm)[c]) / sqrt((double)f32(rv)[c] + desc.eps) * gd[c] + bd[c];
            }
    }
    assert_int_equal(dev->ops->batchnorm_forward_eval(dev, &desc, x, g, b, rm, rv, y), PD_OK);
    expect_close(f32(y), want_y, total, 2e-5, "bn eval y");

    if (grads) {
        double *want_dx = malloc((size_t)total * sizeof(double)), want_dg[16], want_db[16];
        bn_ref_grads(k, xd, gd, bd, desc.eps, rd, want_dx, want_dg, want_db);
        assert_int_equal(dev->ops->batchnorm_backward(dev, &desc, x, dy, g, sm, si, dx, dg, db), PD_OK);
        expect_close(f32(dx), want_dx, total, 1e-4, "bn dx");
        expect_close(f32(dg), want_dg, k->c, 1e-5, "bn dgamma");
        expect_close(f32(db), want_db, k->c, 1e-5, "bn dbeta");
        /* dx may be skipped (input needs no gradient): parameter gradients unchanged */
        memset(dg->data, 0, pd_tensor_nbytes(dg));
        assert_int_equal(dev->ops->batchnorm_backward(dev, &desc, x, dy, g, sm, si, NULL, dg, db), PD_OK);
        expect_close(f32(dg), want_dg, k->c, 1e-5, "bn dgamma without dx");
        free(want_dx);
    }

    free(xd);
    free(gd);
    free(bd);
    free(rd);
    free(rm0);
    free(rv0);
    free(want_y);
    pd_tensor *all[] = {x, dy, y, dx, g, b, rm, rv, sm, si, dg, db};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pd_tensor_destroy(all[i]);
}

static void test_bn_2d(void **state)
{
    const bn_case k = {.n = 6, .c = 4, .s = 1};
    bn_check(&k, pd_shape_make(2, k.n, k.c), true);
}

static void test_bn_4d(void **state)
{
    const bn_case k = {.n = 3, .c = 3, .s = 6};
    bn_check(&k, pd_shape_make(4, k.n, k.c, (int64_t)2, (int64_t)3), true);
}

static void test_bn_4d_threaded(void **state)
{
    const bn_case k = {.n = 8, .c = 3, .s = 1600};
    bn_check(&k, pd_shape_make(4, k.n, k.c, (int64_t)40, (int64_t)40), false);
}

static void test_bn_running_two_steps(void **state)
{
    /* x = 1..4: mean 2.5, biased var 1.25, unbiased 5/3; then 2,4,6,8: mean 5, unbiased 20/3. */
    const pd_batchnorm_desc desc = {.eps = 1e-5f, .momentum = 0.1f};
    const float x1[] = {1, 2, 3, 4}, x2[] = {2, 4, 6, 8}, one = 1, zero = 0;
    pd_shape xs = pd_shape_make(2, (int64_t)4, (int64_t)1), cs = pd_shape_make(1, (int64_t)1);
    pd_tensor *x = tensor(PD_F32, xs, x1, 0), *y = tensor(PD_F32, xs, NULL, 1);
    pd_tensor *g = tensor(PD_F32, cs, &one, 0), *b = tensor(PD_F32, cs, &zero, 0);
    pd_tensor *rm = tensor(PD_F32, cs, &zero, 0), *rv = tensor(PD_F32, cs, &one, 0);
    pd_tensor *sm = tensor(PD_F32, cs, NULL, 2), *si = tensor(PD_F32, cs, NULL, 3);

    assert_int_equal(dev->ops->batchnorm_forward_train(dev, &desc, x, g, b, rm, rv, y, sm, si), PD_OK);
    const double rm1 = 0.25, rv1 = 0.9 + 0.1 * 5.0 / 3.0, invstd1 = 1 / sqrt(1.25 + 1e-5);
    const double y1[] = {-1.5 * invstd1, -0.5 * invstd1, 0.5 * invstd1, 1.5 * invstd1};
    expect_close(f32(rm), &rm1, 1, 1e-6, "running_mean after step 1");
    expect_close(f32(rv), &rv1, 1, 1e-6, "running_var after step 1");
    expect_close(f32(si), &invstd1, 1, 1e-6, "save_invstd after step 1");
    expect_close(f32(y), y1, 4, 1e-6, "y after step 1");

    memcpy(x->data, x2, sizeof(x2));
    assert_int_equal(dev->ops->batchnorm_forward_train(dev, &desc, x, g, b, rm, rv, y, sm, si), PD_OK);
    const double rm2 = 0.9 * rm1 + 0.1 * 5.0, rv2 = 0.9 * rv1 + 0.1 * 20.0 / 3.0, mean2 = 5;
    expect_close(f32(rm), &rm2, 1, 1e-6, "running_mean after step 2");
    expect_close(f32(rv), &rv2, 1, 1e-6, "running_var after step 2");
    expect_close(f32(sm), &mean2, 1, 1e-6, "save_mean after step 2");

    /* one value per channel cannot be normalised in training; bad eps is refused */
    pd_shape one_row = pd_shape_make(2, (int64_t)1, (int64_t)1);
    pd_tensor *x1v = tensor(PD_F32, one_row, x1, 0), *y1v = tensor(PD_F32, one_row, NULL, 0);
    assert_int_equal(dev->ops->batchnorm_forward_train(dev, &desc, x1v, g, b, rm, rv, y1v, sm, si), PD_EINVAL);
    const pd_batchnorm_desc bad = {.eps = 0.0f, .momentum = 0.1f};
    assert_int_equal(dev->ops->batchnorm_forward_train(dev, &bad, x, g, b, rm, rv, y, sm, si), PD_EINVAL);

    pd_tensor *all[] = {x, y, g, b, rm, rv, sm, si, x1v, y1v};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        pd_tensor_destroy(all[i]);
}

/* ---- local response normalisation ----------------------------------------- */

/* The direct formula, with the window written as the set of channels c' whose
 * offset c' - c lies in [-size/2, (size-1)/2]. */
static void lrn_ref_forward(const pd_lrn_desc *d, const int64_t *dim, const double *x, double *y)
{
    const int64_t C = dim[1], S = dim[2] * dim[3];
    for (int64_t n = 0; n < dim[0]; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t s = 0; s < S; s++) {
                double sum = 0;
                for (int64_t cc = 0; cc < C; cc++) {
                    int64_t off = cc - c;
                    if (off >= -(d->size / 2) && off <= (d->size - 1) / 2)
                        sum += x[(n * C + cc) * S + s] * x[(n * C + cc) * S + s];
                }
                double scale = d->k + d->alpha / d->size * sum;
                y[(n * C + c) * S + s] = x[(n * C + c) * S + s] / pow(scale, d->beta);
            }
}

static void lrn_check(const pd_lrn_desc *d, pd_shape xs, bool grads)
{
    const int64_t total = pd_shape_numel(&xs);
    pd_tensor *x = tensor(PD_F32, xs, NULL, 41), *y = tensor(PD_F32, xs, NULL, 42);
    pd_tensor *dy = tensor(PD_F32, xs, NULL, 43), *dx = tensor(PD_F32, xs, NULL, 44);
    for (int64_t i = 0; i < total; i++)
        f32(x)[i] *= 2.0f;
    double *xd = to_double(x), *rd = to_double(dy);
    double *want = malloc((size_t)total * sizeof(double)), *yp = malloc((size_t)total * sizeof(double));

    lrn_ref_forward(d, xs.dim, xd, want);
    assert_int_equal(dev->ops->lrn_forward(dev, d, x, y), PD_OK);
    expect_close(f32(y), want, total, 2e-6, "lrn y");

    if (grads) {
        /* loss = sum(y * r), central differences on the double reference */
        for (int64_t i = 0; i < total; i++) {
            const double h = 1e-5, xi = xd[i];
            double lp = 0, lm = 0;
            xd[i] = xi + h;
            lrn_ref_forward(d, xs.dim, xd, yp);
            for (int64_t j = 0; j < total; j++)
                lp += yp[j] * rd[j];
            xd[i] = xi - h;
            lrn_ref_forward(d, xs.dim, xd, yp);
            for (int64_t j = 0; j < total; j++)
                lm += yp[j] * rd[j];
            xd[i] = xi;
            want[i] = (lp - lm) / (2 * h);
        }
        assert_int_equal(dev->ops->lrn_backward(dev, d, x, y, dy, dx), PD_OK);
        expect_close(f32(dx), want, total, 2e-5, "lrn dx");
    }

    free(xd);
    free(rd);
    free(want);
    free(yp);
    pd_tensor_destroy(x);
    pd_tensor_destroy(y);
    pd_tensor_destroy(dy);
    pd_tensor_destroy(dx);
}

static void test_lrn_odd_size(void **state)
{
    const pd_lrn_desc d = {.size = 5, .alpha = 0.5f, .beta = 0.75f, .k = 2.0f};
    lrn_check(&d, pd_shape_make(4, (int64_t)2, (int64_t)7, (int64_t)2, (int64_t)3), true);
}

static void test_lrn_even_size(void **state)
{
    /* size 4: two channels before, one after (PyTorch's padding) */
    const pd_lrn_desc d = {.size = 4, .alpha = 1.0f, .beta = 0.5f, .k = 1.0f};
    lrn_check(&d, pd_shape_make(4, (int64_t)2, (int64_t)6, (int64_t)3, (int64_t)2), true);
}

static void test_lrn_size_one_and_wide(void **state)
{
    const pd_lrn_desc one = {.size = 1, .alpha = 0.3f, .beta = 0.6f, .k = 1.5f};
    lrn_check(&one, pd_shape_make(4, (int64_t)1, (int64_t)3, (int64_t)2, (int64_t)2), true);
    /* a window wider than the channels */
    const pd_lrn_desc wide = {.size = 9, .alpha = 1e-2f, .beta = 0.75f, .k = 1.0f};
    lrn_check(&wide, pd_shape_make(4, (int64_t)2, (int64_t)3, (int64_t)2, (int64_t)2), true);
}

static void test_lrn_threaded(void **state)
{
    /* AlexNet's settings, forward on the threaded path; backward vs a smaller reference run. */
    const pd_lrn_desc d = {.size = 5, .alpha = 1e-4f, .beta = 0.75f, .k = 2.0f};
    lrn_check(&d, pd_shape_make(4, (int64_t)2, (int64_t)8, (int64_t)40, (int64_t)40), false);
    pd_shape xs = pd_shape_make(4, (int64_t)2, (int64_t)8, (int64_t)40, (int64_t)40);
    pd_tensor *x = tensor(PD_F32, xs, NULL, 1), *y = tensor(PD_F32, xs, NULL, 2);
    pd_tensor *bad = tensor(PD_F32, pd_shape_make(2, (int64_t)2, (int64_t)8), NULL, 3);
    const pd_lrn_desc zero = {.size = 0, .alpha = 1, .beta = 1, .k = 1};
    assert_int_equal(dev->ops->lrn_forward(dev, &zero, x, y), PD_EINVAL);
    assert_int_equal(dev->ops->lrn_forward(dev, &d, bad, bad), PD_ESHAPE);
    pd_tensor_destroy(x);
    pd_tensor_destroy(y);
    pd_tensor_destroy(bad);
}

/* ---- dropout --------------------------------------------------------------- */

static void test_dropout_mask(void **state)
{
    const int64_t n = 100000;
    const float p = 0.3f;
    pd_shape xs = pd_shape_make(1, n);
    pd_tensor *x = tensor(PD_F32, xs, NULL, 51), *y = tensor(PD_F32, xs, NULL, 52);
    pd_tensor *y2 = tensor(PD_F32, xs, NULL, 53), *y3 = tensor(PD_F32, xs, NULL, 54);
    pd_tensor *dx = tensor(PD_F32, xs, NULL, 55);

    for (int64_t i = 0; i < n; i++) /* no zeros in x: a zero output means dropped */
        f32(x)[i] = 0.5f + fabsf(f32(x)[i]);
    assert_int_equal(dev->ops->dropout_forward(dev, p, 1234, x, y), PD_OK);
    assert_int_equal(dev->ops->dropout_forward(dev, p, 1234, x, y2), PD_OK);
    assert_int_equal(dev->ops->dropout_forward(dev, p, 1235, x, y3), PD_OK);
    assert_memory_equal(y->data, y2->data, pd_tensor_nbytes(y));

    int64_t kept = 0, differ = 0;
    for (int64_t i = 0; i < n; i++) {
        bool keep = pd_rng_uniform(1234, (uint64_t)i) >= p; /* the cross-backend contract */
        if (keep) {
            kept++;
            assert_float_equal(f32(y)[i], f32(x)[i] / (1.0f - p), 1e-6f * f32(x)[i]);
        } else {
            assert_true(f32(y)[i] == 0.0f);
        }
        differ += (f32(y)[i] == 0.0f) != (f32(y3)[i] == 0.0f);
    }
    /* Bernoulli(1-p): within 3 sigma */
    const double sigma = sqrt((double)n * p * (1 - p));
    if (fabs((double)kept - (double)n * (1 - p)) > 3 * sigma)
        fail_msg("kept %lld of %lld, expected %.0f +- %.0f", (long long)kept, (long long)n, n * (1 - p), 3 * sigma);
    /* independent masks disagree on about 2p(1-p) = 42% of the elements */
    assert_true(differ > n / 3);

    /* backward: the same mask and scale from the seed */
    assert_int_equal(dev->ops->dropout_backward(dev, p, 1234, x, dx), PD_OK);
    assert_memory_equal(dx->data, y->data, pd_tensor_nbytes(y));

    pd_tensor_destroy(x);
    pd_tensor_destroy(y);
    pd_tensor_destroy(y2);
    pd_tensor_destroy(y3);
    pd_tensor_destroy(dx);
}

static void test_dropout_p0_and_errors(void **state)
{
    pd_shape xs = pd_shape_make(2, (int64_t)7, (int64_t)5);
    pd_tensor *x = tensor(PD_F32, xs, NULL, 61), *y = tensor(PD_F32, xs, NULL, 62);

    assert_int_equal(dev->ops->dropout_forward(dev, 0.0f, 99, x, y), PD_OK);
    assert_memory_equal(x->data, y->data, pd_tensor_nbytes(x));
    assert_int_equal(dev->ops->dropout_backward(dev, 0.0f, 99, x, y), PD_OK);
    assert_memory_equal(x->data, y->data, pd_tensor_nbytes(x));

    assert_int_equal(dev->ops->dropout_forward(dev, 1.0f, 99, x, y), PD_EINVAL);
    assert_int_equal(dev->ops->dropout_forward(dev, -0.1f, 99, x, y), PD_EINVAL);
    assert_int_equal(dev->ops->dropout_backward(dev, NAN, 99, x, y), PD_EINVAL);
    pd_tensor *small = tensor(PD_F32, pd_shape_make(1, (int64_t)3), NULL, 63);
    assert_int_equal(dev->ops->dropout_forward(dev, 0.5f, 99, x, small), PD_ESHAPE);

    pd_tensor_destroy(x);
    pd_tensor_destroy(y);
    pd_tensor_destroy(small);
}

/* ---- the layers on a graph ------------------------------------------------- */

static pd_param *find_param(pd_graph *g, const char *name)
{
    pd_param **params;
    int n = pd_graph_params(g, &params);
    for (int i = 0; i < n; i++)
        if (strcmp(params[i]->name, name) == 0)
            return params[i];
    fail_msg("no parameter %s", name);
    return NULL;
}

static void test_layer_batchnorm(void **state)
{
    const pd_batchnorm_desc desc = {.eps = 1e-5f, .momentum = 0.25f};
    const float xv[] = {1, 10, 2, 20, 3, 30, 6, 60}; /* [4,2]: channel means 3 and 30 */
    pd_shape xs = pd_shape_make(2, (int64_t)4, (int64_t)2);
    pd_graph *g;
    int x, bn;
    float host[8];

    assert_int_equal(pd_graph_create(dev, 5, &g), PD_OK);
    assert_int_equal(pd_graph_input(g, "x", PD_F32, &xs, false, &x), PD_OK);
    assert_int_equal(pd_graph_batchnorm(g, "bn", x, &desc, &bn), PD_OK);
    assert_int_equal(pd_graph_param_count(g), 4); /* weight and bias; running stats are buffers */
    assert_int_equal(pd_graph_allocate(g), PD_OK);
    pd_param *w = find_param(g, "bn.weight"), *b = find_param(g, "bn.bias");
    pd_param *rm = find_param(g, "bn.running_mean"), *rv = find_param(g, "bn.running_var");
    assert_true(w->trainable && b->trainable && !rm->trainable && !rv->trainable);
    assert_true(f32(&w->value)[1] == 1.0f && f32(&b->value)[1] == 0.0f);
    assert_true(f32(&rm->value)[1] == 0.0f && f32(&rv->value)[1] == 1.0f);

    assert_int_equal(pd_tensor_copy_from_host(pd_graph_output(g, x), xv, sizeof(xv)), PD_OK);
    assert_int_equal(pd_graph_forward(g, 0, true), PD_OK);
    /* channel 0: mean 3, unbiased var (4+1+0+9)/3 */
    const double want_rm[] = {0.25 * 3, 0.25 * 30};
    const double want_rv[] = {0.75 + 0.25 * 14.0 / 3, 0.75 + 0.25 * 1400.0 / 3};
    expect_close(f32(&rm->value), want_rm, 2, 1e-6, "running_mean");
    expect_close(f32(&rv->value), want_rv, 2, 1e-6, "running_var");

    /* evaluation normalises with the running statistics, not the batch's */
    assert_int_equal(pd_graph_forward(g, 1, false), PD_OK);
    assert_int_equal(pd_tensor_copy_to_host(pd_graph_output(g, bn), host, sizeof(host)), PD_OK);
    double want[8];
    for (int i = 0; i < 8; i++)
        want[i] = (xv[i] - want_rm[i % 2]) / sqrt(want_rv[i % 2] + 1e-5);
    expect_close(host, want, 8, 1e-5, "eval y");
    pd_graph_destroy(g);
}

static void test_layer_dropout(void **state)
{
    pd_shape xs = pd_shape_make(2, (int64_t)16, (int64_t)32);
    const size_t bytes = 16 * 32 * sizeof(float);
    float *in = malloc(bytes), *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    pd_graph *g;
    int x, d;

    for (int i = 0; i < 16 * 32; i++)
        in[i] = 1.0f + (float)i;
    assert_int_equal(pd_graph_create(dev, 5, &g), PD_OK);
    assert_int_equal(pd_graph_input(g, "x", PD_F32, &xs, true, &x), PD_OK);
    assert_int_equal(pd_graph_dropout(g, "drop", x, 0.5f, &d), PD_OK);
    assert_int_equal(pd_graph_allocate(g), PD_OK);
    assert_int_equal(pd_tensor_copy_from_host(pd_graph_output(g, x), in, bytes), PD_OK);

    assert_int_equal(pd_graph_forward(g, 3, true), PD_OK);
    assert_int_equal(pd_tensor_copy_to_host(pd_graph_output(g, d), a, bytes), PD_OK);
    assert_int_equal(pd_graph_forward(g, 4, true), PD_OK);
    assert_int_equal(pd_tensor_copy_to_host(pd_graph_output(g, d), b, bytes), PD_OK);
    assert_int_equal(pd_graph_forward(g, 3, true), PD_OK);
    assert_int_equal(pd_tensor_copy_to_host(pd_graph_output(g, d), c, bytes), PD_OK);
    assert_memory_equal(a, c, bytes); /* the minibatch fixes the mask */
    assert_memory_not_equal(a, b, bytes);

    /* backward of minibatch 3 with dy = x: the forward's output again */
    assert_int_equal(pd_graph_backward(g, 3, d, pd_graph_output(g, x)), PD_OK);
    assert_int_equal(pd_tensor_copy_to_host(pd_graph_grad(g, x), b, bytes), PD_OK);
    assert_memory_equal(a, b, bytes);

    assert_int_equal(pd_graph_forward(g, 3, false), PD_OK); /* evaluation: identity */
    assert_int_equal(pd_tensor_copy_to_host(pd_graph_output(g, d), a, bytes), PD_OK);
    assert_memory_equal(a, in, bytes);

    pd_graph_destroy(g);
    free(in);
    free(a);
    free(b);
    free(c);
}

static void test_layer_softmax_cross_entropy(void **state)
{
    const float logits_v[] = {1, 2, 3, 1, 1, 1};
    const int32_t labels_v[] = {2, 0};
    pd_shape ls = pd_shape_make(2, (int64_t)2, (int64_t)3), ys = pd_shape_make(1, (int64_t)2);
    pd_shape one = pd_shape_make(1, (int64_t)1);
    pd_graph *g;
    pd_tensor *seed = NULL;
    int logits, labels, loss;
    float host[6], three = 3.0f;

    assert_int_equal(pd_graph_create(dev, 5, &g), PD_OK);
    assert_int_equal(pd_graph_input(g, "logits", PD_F32, &ls, true, &logits), PD_OK);
    assert_int_equal(pd_graph_input(g, "labels", PD_I32, &ys, false, &labels), PD_OK);
    assert_int_equal(pd_graph_softmax_cross_entropy(g, "loss", logits, labels, &loss), PD_OK);
    assert_true(pd_shape_equal(pd_graph_node_shape(g, loss), &one));
    assert_int_equal(pd_graph_allocate(g), PD_OK);
    assert_int_equal(pd_tensor_copy_from_host(pd_graph_output(g, logits), logits_v, sizeof(logits_v)), PD_OK);
    assert_int_equal(pd_tensor_copy_from_host(pd_graph_output(g, labels), labels_v, sizeof(labels_v)), PD_OK);

    assert_int_equal(pd_graph_forward(g, 0, true), PD_OK);
    const double want_loss = (0.4076059644 + 1.0986122887) / 2;
    expect_close(f32(pd_graph_output(g, loss)), &want_loss, 1, 1e-6, "loss");
    /* dloss = 3 (a seed gradient), N = 2: 1.5 * (probs - onehot) */
    assert_int_equal(pd_tensor_create(dev, PD_F32, &one, &seed), PD_OK);
    assert_int_equal(pd_tensor_copy_from_host(seed, &three, sizeof(three)), PD_OK);
    assert_int_equal(pd_graph_backward(g, 0, loss, seed), PD_OK);
    assert_int_equal(pd_tensor_copy_to_host(pd_graph_grad(g, logits), host, sizeof(host)), PD_OK);
    const double want_d[] = {1.5 * 0.0900305732, 1.5 * 0.2447284711, 1.5 * (0.6652409558 - 1),
                             1.5 * (1.0 / 3 - 1), 1.5 / 3, 1.5 / 3};
    expect_close(host, want_d, 6, 1e-6, "dlogits");
    assert_null(pd_graph_grad(g, labels));

    /* a bad label is reported by the forward pass */
    const int32_t bad[] = {0, 7};
    assert_int_equal(pd_tensor_copy_from_host(pd_graph_output(g, labels), bad, sizeof(bad)), PD_OK);
    assert_int_equal(pd_graph_forward(g, 1, true), PD_EINVAL);
    pd_tensor_destroy(seed);
    pd_graph_destroy(g);
}

static void test_layer_setup_errors(void **state)
{
    pd_shape s4 = pd_shape_make(4, (int64_t)2, (int64_t)3, (int64_t)4, (int64_t)4);
    pd_shape s3 = pd_shape_make(3, (int64_t)2, (int64_t)3, (int64_t)4), s1 = pd_shape_make(1, (int64_t)2);
    pd_graph *g;
    int x, x3, lab, out;

    assert_int_equal(pd_graph_create(dev, 5, &g), PD_OK);
    assert_int_equal(pd_graph_input(g, "x", PD_F32, &s4, true, &x), PD_OK);
    assert_int_equal(pd_graph_input(g, "x3", PD_F32, &s3, true, &x3), PD_OK);
    assert_int_equal(pd_graph_input(g, "lab", PD_I32, &s1, false, &lab), PD_OK);

    assert_int_equal(pd_graph_dropout(g, "d", x, 1.0f, &out), PD_ESHAPE);
    assert_non_null(strstr(pd_last_error(), "[0,1)"));
    assert_int_equal(pd_graph_batchnorm(g, "bn", x, &(pd_batchnorm_desc){.eps = 0, .momentum = 0.1f}, &out),
                     PD_ESHAPE);
    assert_non_null(strstr(pd_last_error(), "eps"));
    assert_int_equal(pd_graph_batchnorm(g, "bn", x, &(pd_batchnorm_desc){.eps = 1e-5f, .momentum = 1.5f}, &out),
                     PD_ESHAPE);
    assert_non_null(strstr(pd_last_error(), "momentum"));
    assert_int_equal(pd_graph_batchnorm(g, "bn", x3, &(pd_batchnorm_desc){.eps = 1e-5f, .momentum = 0.1f}, &out),
                     PD_ESHAPE);
    assert_int_equal(pd_graph_lrn(g, "lrn", x, &(pd_lrn_desc){.size = 0, .alpha = 1, .beta = 1, .k = 1}, &out),
                     PD_ESHAPE);
    assert_non_null(strstr(pd_last_error(), "size"));
    assert_int_equal(pd_graph_lrn(g, "lrn", x3, &(pd_lrn_desc){.size = 3, .alpha = 1, .beta = 1, .k = 1}, &out),
                     PD_ESHAPE);
    /* logits must be [N,C] f32, labels [N] i32 */
    assert_int_equal(pd_graph_softmax_cross_entropy(g, "loss", x, lab, &out), PD_ESHAPE);
    assert_int_equal(pd_graph_softmax_cross_entropy(g, "loss", lab, lab, &out), PD_ESHAPE);
    assert_int_equal(pd_graph_size(g), 3); /* nothing was added */
    pd_graph_destroy(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sce_hand_2x3),
        cmocka_unit_test(test_sce_large_logits_stable),
        cmocka_unit_test(test_sce_random_vs_reference),
        cmocka_unit_test(test_sce_label_out_of_range),
        cmocka_unit_test(test_bn_2d),
        cmocka_unit_test(test_bn_4d),
        cmocka_unit_test(test_bn_4d_threaded),
        cmocka_unit_test(test_bn_running_two_steps),
        cmocka_unit_test(test_lrn_odd_size),
        cmocka_unit_test(test_lrn_even_size),
        cmocka_unit_test(test_lrn_size_one_and_wide),
        cmocka_unit_test(test_lrn_threaded),
        cmocka_unit_test(test_dropout_mask),
        cmocka_unit_test(test_dropout_p0_and_errors),
        cmocka_unit_test(test_layer_batchnorm),
        cmocka_unit_test(test_layer_dropout),
        cmocka_unit_test(test_layer_softmax_cross_entropy),
        cmocka_unit_test(test_layer_setup_errors),
    };
    return cmocka_run_group_tests(tests, open_cpu, close_cpu);
}
