/* Unit tests of the CPU dense kernels: gemm, conv2d (forward, backward data,
 * backward filter + bias), linear and pool2d, each against a naive direct
 * reference written here in plain C with double accumulation, on small
 * random shapes covering stride, padding, dilation, groups, depthwise, 1x1,
 * non-square windows, ceil_mode, count_include_pad and global pooling; plus
 * hand-computed values and the shape/argument errors. Outputs are pre-filled
 * with NaN so a kernel that accumulates or skips an element fails. conv2d
 * runs under 1, 2 and 3 OpenMP threads (images in sequence, one chunk of
 * images per thread, uneven shares); max pooling's 2x2 stride-2 fast path is
 * checked for ties, NaN and the odd sizes it must leave to the general code. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <pipedream.h>

#define TOL 1e-4

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

/* U(-1, 1) from xorshift64*. */
static float rand_uniform(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t r = rng_state * 2685821657736338717ull;
    return (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *random_buffer(int64_t n)
{
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    assert_non_null(p);
    for (int64_t i = 0; i < n; i++)
        p[i] = rand_uniform();
    return p;
}

static double *zero_doubles(int64_t n)
{
    double *p = calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    assert_non_null(p);
    return p;
}

/* A device tensor holding `src`, or NaN everywhere when src is NULL. */
static pd_tensor *make_tensor(pd_device *dev, pd_shape shape, const float *src)
{
    pd_tensor *t = NULL;
    int64_t n = pd_shape_numel(&shape);

    assert_int_equal(pd_tensor_create(dev, PD_F32, &shape, &t), PD_OK);
    if (src) {
        assert_int_equal(pd_tensor_copy_from_host(t, src, (size_t)n * sizeof(float)), PD_OK);
    } else {
        float *nan_fill = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
        assert_non_null(nan_fill);
        for (int64_t i = 0; i < n; i++)
            nan_fill[i] = NAN;
        assert_int_equal(pd_tensor_copy_from_host(t, nan_fill, (size_t)n * sizeof(float)), PD_OK);
        free(nan_fill);
    }
    return t;
}

/* Fails with the worst element unless |got - ref| <= TOL * (1 + |ref|)
 * everywhere. */
static void expect_close(const pd_tensor *t, const double *ref, const char *what, const char *case_name)
{
    int64_t n = pd_tensor_numel(t), worst = -1;
    float *got = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    double worst_err = 0.0;

    assert_non_null(got);
    assert_int_equal(pd_tensor_copy_to_host(t, got, (size_t)n * sizeof(float)), PD_OK);
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - ref[i]) / (1.0 + fabs(ref[i]));
        if (!(err <= TOL) && (worst < 0 || !(err <= worst_err))) { /* NaN counts as worst */
            worst = i;
            worst_err = err;
        }
    }
    if (worst >= 0)
        fail_msg("%s (%s): element %lld is %.7g, reference %.7g", what, case_name, (long long)worst,
                 (double)got[worst], ref[worst]);
    free(got);
}

static int open_cpu(void **state)
{
    pd_device *dev = NULL;

    if (pd_device_open("cpu", &dev) != PD_OK)
        return -1;
    *state = dev;
    return 0;
}

static int close_cpu(void **state)
{
    pd_device_close(*state);
    return 0;
}

/* ---- gemm ---------------------------------------------------------------- */

/* C = alpha op(A) op(B) + beta C on matrices with padded leading dimensions;
 * the padding columns of C must stay untouched. */
static void check_gemm(pd_device *dev, int64_t m, int64_t n, int64_t k, bool ta, bool tb)
{
    const int64_t pad = 3;
    int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    float *a = random_buffer((ta ? k : m) * lda), *b = random_buffer((tb ? n : k) * ldb), *c = random_buffer(m * ldc);
    double *ref = zero_doubles(m * ldc);
    const float alpha = 0.75f, beta = -1.5f;

    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < ldc; j++) {
            double acc = 0.0;
            if (j >= n) {
                ref[i * ldc + j] = c[i * ldc + j];
                continue;
            }
            for (int64_t l = 0; l < k; l++)
                acc += (double)(ta ? a[l * lda + i] : a[i * lda + l]) * (tb ? b[j * ldb + l] : b[l * ldb + j]);
            ref[i * ldc + j] = alpha * acc + beta * (double)c[i * ldc + j];
        }
    assert_int_equal(dev->ops->gemm(dev, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), PD_OK);
    for (int64_t i = 0; i < m * ldc; i++)
        if (!(fabs(c[i] - ref[i]) <= TOL * (1.0 + fabs(ref[i]))))
            fail_msg("gemm m=%lld n=%lld k=%lld trans_a=%d trans_b=%d: element %lld is %g, reference %g",
                     (long long)m, (long long)n, (long long)k, ta, tb, (long long)i, (double)c[i], ref[i]);
    free(a);
    free(b);
    free(c);
    free(ref);
}

static void test_gemm_against_reference(void **state)
{
    /* small; and large enough to be split into column, then row blocks */
    static const int64_t sizes[][3] = {{7, 5, 9}, {40, 150, 100}, {150, 40, 100}};

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                check_gemm(*state, sizes[i][0], sizes[i][1], sizes[i][2], ta, tb);
}

/* k = 0 leaves beta * C; beta = 0 overwrites C even where it holds NaN. */
static void test_gemm_edge_cases(void **state)
{
    pd_device *dev = *state;
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1};
    float c[4] = {1, 2, 3, 4};

    assert_int_equal(dev->ops->gemm(dev, false, false, 2, 2, 0, 1.0f, a, 1, b, 2, 2.0f, c, 2), PD_OK);
    assert_true(c[0] == 2.0f && c[1] == 4.0f && c[2] == 6.0f && c[3] == 8.0f);
    for (int i = 0; i < 4; i++)
        c[i] = NAN;
    /* [1 2 3; 4 5 6] x [1 0; 0 1; 1 1] = [4 5; 10 11] */
    assert_int_equal(dev->ops->gemm(dev, false, false, 2, 2, 3, 1.0f, a, 3, b, 2, 0.0f, c, 2), PD_OK);
    assert_true(c[0] == 4.0f && c[1] == 5.0f && c[2] == 10.0f && c[3] == 11.0f);
    assert_int_equal(dev->ops->gemm(dev, false, false, 2, 2, 3, 1.0f, a, 2, b, 2, 0.0f, c, 2), PD_ESHAPE);
    assert_int_equal(dev->ops->gemm(dev, false, false, -1, 2, 3, 1.0f, a, 3, b, 2, 0.0f, c, 2), PD_EINVAL);
}

/* ---- conv2d -------------------------------------------------------------- */

typedef struct conv_case {
    const char *name;
    int64_t n, c, h, w, k;
    pd_conv2d_desc d;
    bool bias;
} conv_case;

#define CONV(kh, kw, sh, sw, ph, pw, dh, dw, g) {kh, kw, sh, sw, ph, pw, dh, dw, g}

static const conv_case conv_cases[] = {
    {"3x3 pad 1", 2, 3, 7, 7, 4, CONV(3, 3, 1, 1, 1, 1, 1, 1, 1), true},
    {"3x3 stride 2 non-square input", 2, 4, 9, 8, 6, CONV(3, 3, 2, 2, 1, 1, 1, 1, 1), true},
    {"3x3 dilation 2 pad 2", 1, 3, 9, 9, 2, CONV(3, 3, 1, 1, 2, 2, 2, 2, 1), true},
    {"3x2 kernel stride 1x2 groups 2", 2, 4, 6, 7, 6, CONV(3, 2, 1, 2, 1, 0, 1, 1, 2), true},
    {"depthwise 3x3", 2, 4, 6, 6, 4, CONV(3, 3, 1, 1, 1, 1, 1, 1, 4), false},
    {"depthwise x2 stride 2 pad 2 dilation 2", 1, 2, 7, 6, 4, CONV(3, 3, 2, 2, 2, 2, 2, 2, 2), true},
    {"1x1 direct", 2, 5, 4, 6, 3, CONV(1, 1, 1, 1, 0, 0, 1, 1, 1), true},
    {"1x1 direct groups 2", 1, 6, 5, 5, 4, CONV(1, 1, 1, 1, 0, 0, 1, 1, 2), false},
    {"1x1 stride 2", 2, 3, 8, 5, 4, CONV(1, 1, 2, 2, 0, 0, 1, 1, 1), true},
    {"1x1 pad 1", 1, 3, 4, 4, 2, CONV(1, 1, 1, 1, 1, 1, 1, 1, 1), true},
    {"5x5 kernel covers input", 1, 2, 5, 5, 3, CONV(5, 5, 1, 1, 0, 0, 1, 1, 1), false},
    {"padding wider than kernel", 1, 2, 3, 4, 2, CONV(3, 3, 1, 2, 3, 3, 1, 1, 1), true},
    {"11x11 stride 4 pad 2 (AlexNet conv1 shape)", 1, 3, 23, 23, 4, CONV(11, 11, 4, 4, 2, 2, 1, 1, 1), true},
    /* large enough for the multi-threaded im2col/col2im paths */
    {"3x3 pad 1 threaded", 2, 8, 24, 20, 4, CONV(3, 3, 1, 1, 1, 1, 1, 1, 2), true},
    {"3x3 pad 1 one large image", 1, 8, 24, 20, 4, CONV(3, 3, 1, 1, 1, 1, 1, 1, 1), true},
    /* small images: several per chunk (an odd count, so chunks differ in size) */
    {"3x3 pad 1 chunks of images", 7, 3, 5, 4, 6, CONV(3, 3, 1, 1, 1, 1, 1, 1, 1), true},
    {"3x3 stride 2 dilation 2 chunks groups 2", 9, 4, 7, 6, 6, CONV(3, 3, 2, 2, 2, 2, 2, 2, 2), true},
    {"5x5 pad 2 chunks (row ends beyond the input)", 5, 2, 6, 5, 3, CONV(5, 5, 1, 1, 2, 2, 1, 1, 1), false},
    {"1x1 direct several images", 6, 4, 3, 3, 5, CONV(1, 1, 1, 1, 0, 0, 1, 1, 1), true},
    {"2x2 no padding chunks", 4, 3, 4, 5, 2, CONV(2, 2, 1, 1, 0, 0, 1, 1, 1), true},
};

/* The thread counts the conv2d cases run under: one (images in sequence),
 * two (the test environment's), three (shares of unequal size). */
static const int conv_threads[] = {1, 2, 3};

static int64_t ref_conv_out(int64_t in, int kernel, int stride, int pad, int dilation)
{
    return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

/* y = conv(x, w) + b, and from dy: dx, dw, db, in one pass of direct
 * (transposed) loops. */
static void ref_conv(const conv_case *cc, int64_t P, int64_t Q, const float *x, const float *w, const float *b,
                     const float *dy, double *y, double *dx, double *dw, double *db)
{
    const pd_conv2d_desc *d = &cc->d;
    int64_t cg = cc->c / d->groups, kg = cc->k / d->groups;

    for (int64_t n = 0; n < cc->n; n++)
        for (int64_t k = 0; k < cc->k; k++)
            for (int64_t p = 0; p < P; p++)
                for (int64_t q = 0; q < Q; q++) {
                    int64_t yi = ((n * cc->k + k) * P + p) * Q + q;
                    double acc = b ? b[k] : 0.0, g = dy[yi];
                    for (int64_t ci = 0; ci < cg; ci++)
                        for (int64_t r = 0; r < d->kernel_h; r++)
                            for (int64_t s = 0; s < d->kernel_w; s++) {
                                int64_t ih = p * d->stride_h - d->pad_h + r * d->dilation_h;
                                int64_t iw = q * d->stride_w - d->pad_w + s * d->dilation_w;
                                if (ih < 0 || ih >= cc->h || iw < 0 || iw >= cc->w)
                                    continue;
                                int64_t xi = ((n * cc->c + (k / kg) * cg + ci) * cc->h + ih) * cc->w + iw;
                                int64_t wi = ((k * cg + ci) * d->kernel_h + r) * d->kernel_w + s;
                                acc += (double)x[xi] * w[wi];
                                dx[xi] += g * w[wi];
                                dw[wi] += g * x[xi];
                            }
                    y[yi] = acc;
                    db[k] += g;
                }
}

/* The conv2d cases, run under `threads` OpenMP threads (named in failures). */
static void check_conv2d_cases(pd_device *dev, int threads)
{
    for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); i++) {
        const conv_case *cc = &conv_cases[i];
        char name[160];
        const pd_conv2d_desc *d = &cc->d;

        snprintf(name, sizeof(name), "%s, %d threads", cc->name, threads);
        int64_t P = ref_conv_out(cc->h, d->kernel_h, d->stride_h, d->pad_h, d->dilation_h);
        int64_t Q = ref_conv_out(cc->w, d->kernel_w, d->stride_w, d->pad_w, d->dilation_w);
        pd_shape xs = pd_shape_make(4, cc->n, cc->c, cc->h, cc->w);
        pd_shape ws = pd_shape_make(4, cc->k, cc->c / d->groups, (int64_t)d->kernel_h, (int64_t)d->kernel_w);
        pd_shape ys = pd_shape_make(4, cc->n, cc->k, P, Q), bs = pd_shape_make(1, cc->k);
        int64_t nx = pd_shape_numel(&xs), nw = pd_shape_numel(&ws), ny = pd_shape_numel(&ys);
        float *hx = random_buffer(nx), *hw = random_buffer(nw), *hb = random_buffer(cc->k), *hdy = random_buffer(ny);
        double *ry = zero_doubles(ny), *rdx = zero_doubles(nx), *rdw = zero_doubles(nw), *rdb = zero_doubles(cc->k);

        ref_conv(cc, P, Q, hx, hw, cc->bias ? hb : NULL, hdy, ry, rdx, rdw, rdb);

        pd_tensor *x = make_tensor(dev, xs, hx), *w = make_tensor(dev, ws, hw), *b = make_tensor(dev, bs, hb);
        pd_tensor *dy = make_tensor(dev, ys, hdy), *y = make_tensor(dev, ys, NULL), *dx = make_tensor(dev, xs, NULL);
        pd_tensor *dw = make_tensor(dev, ws, NULL), *db = make_tensor(dev, bs, NULL);

        assert_int_equal(dev->ops->conv2d_forward(dev, d, x, w, cc->bias ? b : NULL, y), PD_OK);
        expect_close(y, ry, "conv2d forward y", name);
        assert_int_equal(dev->ops->conv2d_backward_data(dev, d, dy, w, dx), PD_OK);
        expect_close(dx, rdx, "conv2d backward data dx", name);
        assert_int_equal(dev->ops->conv2d_backward_filter(dev, d, x, dy, dw, cc->bias ? db : NULL), PD_OK);
        expect_close(dw, rdw, "conv2d backward filter dw", name);
        if (cc->bias)
            expect_close(db, rdb, "conv2d backward filter dbias", name);

        pd_tensor_destroy(x);
        pd_tensor_destroy(w);
        pd_tensor_destroy(b);
        pd_tensor_destroy(dy);
        pd_tensor_destroy(y);
        pd_tensor_destroy(dx);
        pd_tensor_destroy(dw);
        pd_tensor_destroy(db);
        free(hx);
        free(hw);
        free(hb);
        free(hdy);
        free(ry);
        free(rdx);
        free(rdw);
        free(rdb);
    }
}

static void test_conv2d_against_reference(void **state)
{
#ifdef _OPENMP
    const int saved = omp_get_max_threads();

    for (size_t t = 0; t < sizeof(conv_threads) / sizeof(conv_threads[0]); t++) {
        omp_set_num_threads(conv_threads[t]);
        check_conv2d_cases(*state, conv_threads[t]);
    }
    omp_set_num_threads(saved);
#else
    (void)conv_threads;
    check_conv2d_cases(*state, 1);
#endif
}

/* Input 1..9 (3x3), all-ones 2x2 filter, bias 0.5: sums of each 2x2 block. */
static void test_conv2d_hand_computed(void **state)
{
    pd_device *dev = *state;
    float hx[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, hw[4] = {1, 1, 1, 1}, hb[1] = {0.5f};
    double want[4] = {12.5, 16.5, 24.5, 28.5};
    pd_conv2d_desc d = CONV(2, 2, 1, 1, 0, 0, 1, 1, 1);
    pd_tensor *x = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)1, (int64_t)3, (int64_t)3), hx);
    pd_tensor *w = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)1, (int64_t)2, (int64_t)2), hw);
    pd_tensor *b = make_tensor(dev, pd_shape_make(1, (int64_t)1), hb);
    pd_tensor *y = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)1, (int64_t)2, (int64_t)2), NULL);

    assert_int_equal(dev->ops->conv2d_forward(dev, &d, x, w, b, y), PD_OK);
    expect_close(y, want, "conv2d forward y", "hand-computed 2x2 sums");
    pd_tensor_destroy(x);
    pd_tensor_destroy(w);
    pd_tensor_destroy(b);
    pd_tensor_destroy(y);
}

static void test_conv2d_errors(void **state)
{
    pd_device *dev = *state;
    pd_conv2d_desc d = CONV(3, 3, 1, 1, 1, 1, 1, 1, 2);
    pd_tensor *x = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)4, (int64_t)5, (int64_t)5), NULL);
    pd_tensor *w = make_tensor(dev, pd_shape_make(4, (int64_t)6, (int64_t)2, (int64_t)3, (int64_t)3), NULL);
    pd_tensor *w_full = make_tensor(dev, pd_shape_make(4, (int64_t)6, (int64_t)4, (int64_t)3, (int64_t)3), NULL);
    pd_tensor *y = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)6, (int64_t)5, (int64_t)5), NULL);
    pd_tensor *y_bad = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)6, (int64_t)3, (int64_t)3), NULL);
    pd_tensor *b_bad = make_tensor(dev, pd_shape_make(1, (int64_t)5), NULL);
    pd_tensor *x3 = make_tensor(dev, pd_shape_make(3, (int64_t)4, (int64_t)5, (int64_t)5), NULL);
    pd_tensor *dx_bad = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)4, (int64_t)5, (int64_t)4), NULL);

    assert_int_equal(dev->ops->conv2d_forward(dev, &d, x, w, NULL, y), PD_OK);
    assert_int_equal(dev->ops->conv2d_forward(dev, &d, x, w, NULL, y_bad), PD_ESHAPE);
    assert_int_equal(dev->ops->conv2d_forward(dev, &d, x, w_full, NULL, y), PD_ESHAPE); /* C/groups mismatch */
    assert_int_equal(dev->ops->conv2d_forward(dev, &d, x, w, b_bad, y), PD_ESHAPE);
    assert_int_equal(dev->ops->conv2d_forward(dev, &d, x3, w, NULL, y), PD_ESHAPE);
    assert_int_equal(dev->ops->conv2d_backward_data(dev, &d, y_bad, w, x), PD_ESHAPE);
    assert_int_equal(dev->ops->conv2d_backward_data(dev, &d, y, w, dx_bad), PD_ESHAPE);
    assert_int_equal(dev->ops->conv2d_backward_filter(dev, &d, x, y, w_full, NULL), PD_ESHAPE);
    assert_int_equal(dev->ops->conv2d_backward_filter(dev, &d, x, y, w, b_bad), PD_ESHAPE);
    assert_non_null(strstr(pd_last_error(), "dbias"));

    pd_conv2d_desc groups3 = d;
    groups3.groups = 3; /* divides the 6 output channels, not the 4 input ones */
    assert_int_equal(dev->ops->conv2d_forward(dev, &groups3, x, w, NULL, y), PD_ESHAPE);
    assert_non_null(strstr(pd_last_error(), "groups"));
    pd_conv2d_desc huge = CONV(9, 9, 1, 1, 1, 1, 1, 1, 2); /* 9 > 5 + 2 */
    assert_int_equal(dev->ops->conv2d_forward(dev, &huge, x, w, NULL, y), PD_ESHAPE);
    pd_conv2d_desc stride0 = d;
    stride0.stride_h = 0;
    assert_int_equal(dev->ops->conv2d_forward(dev, &stride0, x, w, NULL, y), PD_EINVAL);

    pd_tensor_destroy(x);
    pd_tensor_destroy(w);
    pd_tensor_destroy(w_full);
    pd_tensor_destroy(y);
    pd_tensor_destroy(y_bad);
    pd_tensor_destroy(b_bad);
    pd_tensor_destroy(x3);
    pd_tensor_destroy(dx_bad);
}

/* ---- linear -------------------------------------------------------------- */

static void test_linear_against_reference(void **state)
{
    pd_device *dev = *state;
    static const int64_t shapes[][3] = {{1, 1, 1}, {4, 7, 5}, {3, 33, 17}, {8, 64, 10}}; /* N, K, M */

    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        int64_t N = shapes[i][0], K = shapes[i][1], M = shapes[i][2];
        float *hx = random_buffer(N * K), *hw = random_buffer(M * K), *hb = random_buffer(M),
              *hdy = random_buffer(N * M);
        double *ry = zero_doubles(N * M), *rdx = zero_doubles(N * K), *rdw = zero_doubles(M * K),
               *rdb = zero_doubles(M);
        char name[48];

        snprintf(name, sizeof(name), "N=%lld K=%lld M=%lld", (long long)N, (long long)K, (long long)M);
        for (int64_t n = 0; n < N; n++)
            for (int64_t m = 0; m < M; m++) {
                double acc = hb[m], g = hdy[n * M + m];
                for (int64_t k = 0; k < K; k++) {
                    acc += (double)hx[n * K + k] * hw[m * K + k];
                    rdx[n * K + k] += g * hw[m * K + k];
                    rdw[m * K + k] += g * hx[n * K + k];
                }
                ry[n * M + m] = acc;
                rdb[m] += g;
            }

        pd_tensor *x = make_tensor(dev, pd_shape_make(2, N, K), hx), *w = make_tensor(dev, pd_shape_make(2, M, K), hw);
        pd_tensor *b = make_tensor(dev, pd_shape_make(1, M), hb), *dy = make_tensor(dev, pd_shape_make(2, N, M), hdy);
        pd_tensor *y = make_tensor(dev, pd_shape_make(2, N, M), NULL), *dx = make_tensor(dev, pd_shape_make(2, N, K), NULL);
        pd_tensor *dw = make_tensor(dev, pd_shape_make(2, M, K), NULL), *db = make_tensor(dev, pd_shape_make(1, M), NULL);

        assert_int_equal(dev->ops->linear_forward(dev, x, w, b, y), PD_OK);
        expect_close(y, ry, "linear forward y", name);
        assert_int_equal(dev->ops->linear_backward(dev, x, w, dy, dx, dw, db), PD_OK);
        expect_close(dx, rdx, "linear backward dx", name);
        expect_close(dw, rdw, "linear backward dw", name);
        expect_close(db, rdb, "linear backward dbias", name);

        /* Without bias and without dx: y lacks b, dw is still written. */
        for (int64_t j = 0; j < N * M; j++)
            ry[j] -= hb[j % M];
        assert_int_equal(dev->ops->linear_forward(dev, x, w, NULL, y), PD_OK);
        expect_close(y, ry, "linear forward y without bias", name);
        pd_tensor_destroy(dw);
        dw = make_tensor(dev, pd_shape_make(2, M, K), NULL);
        assert_int_equal(dev->ops->linear_backward(dev, x, w, dy, NULL, dw, NULL), PD_OK);
        expect_close(dw, rdw, "linear backward dw without dx", name);

        pd_tensor_destroy(x);
        pd_tensor_destroy(w);
        pd_tensor_destroy(b);
        pd_tensor_destroy(dy);
        pd_tensor_destroy(y);
        pd_tensor_destroy(dx);
        pd_tensor_destroy(dw);
        pd_tensor_destroy(db);
        free(hx);
        free(hw);
        free(hb);
        free(hdy);
        free(ry);
        free(rdx);
        free(rdw);
        free(rdb);
    }
}

static void test_linear_errors(void **state)
{
    pd_device *dev = *state;
    pd_tensor *x = make_tensor(dev, pd_shape_make(2, (int64_t)3, (int64_t)4), NULL);
    pd_tensor *x3 = make_tensor(dev, pd_shape_make(3, (int64_t)3, (int64_t)2, (int64_t)2), NULL);
    pd_tensor *w = make_tensor(dev, pd_shape_make(2, (int64_t)5, (int64_t)4), NULL);
    pd_tensor *w_bad = make_tensor(dev, pd_shape_make(2, (int64_t)5, (int64_t)3), NULL);
    pd_tensor *y = make_tensor(dev, pd_shape_make(2, (int64_t)3, (int64_t)5), NULL);
    pd_tensor *y_bad = make_tensor(dev, pd_shape_make(2, (int64_t)3, (int64_t)4), NULL);
    pd_tensor *b_bad = make_tensor(dev, pd_shape_make(1, (int64_t)4), NULL);
    pd_tensor *xi = NULL;
    pd_shape xs = pd_shape_make(2, (int64_t)3, (int64_t)4);

    assert_int_equal(pd_tensor_create(dev, PD_I32, &xs, &xi), PD_OK);
    assert_int_equal(dev->ops->linear_forward(dev, x, w, NULL, y), PD_OK);
    assert_int_equal(dev->ops->linear_forward(dev, x3, w, NULL, y), PD_ESHAPE);
    assert_int_equal(dev->ops->linear_forward(dev, x, w_bad, NULL, y), PD_ESHAPE);
    assert_int_equal(dev->ops->linear_forward(dev, x, w, NULL, y_bad), PD_ESHAPE);
    assert_int_equal(dev->ops->linear_forward(dev, x, w, b_bad, y), PD_ESHAPE);
    assert_int_equal(dev->ops->linear_forward(dev, xi, w, NULL, y), PD_ESHAPE);
    assert_int_equal(dev->ops->linear_backward(dev, x, w, y_bad, NULL, w, NULL), PD_ESHAPE);
    assert_int_equal(dev->ops->linear_backward(dev, x, w, y, y, w, NULL), PD_ESHAPE); /* dx [3,5] */
    assert_int_equal(dev->ops->linear_backward(dev, x, w, y, NULL, w_bad, NULL), PD_ESHAPE);
    assert_int_equal(dev->ops->linear_backward(dev, x, w, y, NULL, w, b_bad), PD_ESHAPE);

    pd_tensor_destroy(x);
    pd_tensor_destroy(x3);
    pd_tensor_destroy(w);
    pd_tensor_destroy(w_bad);
    pd_tensor_destroy(y);
    pd_tensor_destroy(y_bad);
    pd_tensor_destroy(b_bad);
    pd_tensor_destroy(xi);
}

/* ---- pool2d -------------------------------------------------------------- */

typedef struct pool_case {
    const char *name;
    int64_t n, c, h, w;
    pd_pool2d_desc d;
} pool_case;

#define POOL(mode, kh, kw, sh, sw, ph, pw, ceil, cip) {mode, kh, kw, sh, sw, ph, pw, ceil, cip}

static const pool_case pool_cases[] = {
    {"max 2x2 s2", 2, 3, 6, 6, POOL(PD_POOL_MAX, 2, 2, 2, 2, 0, 0, false, false)},
    /* the 2x2 stride-2 fast path next to the general code: odd sizes drop or
     * (ceil_mode) clip the last row and column */
    {"max 2x2 s2 odd input", 2, 2, 7, 5, POOL(PD_POOL_MAX, 2, 2, 2, 2, 0, 0, false, false)},
    {"max 2x2 s2 ceil odd input", 2, 2, 5, 7, POOL(PD_POOL_MAX, 2, 2, 2, 2, 0, 0, true, false)},
    {"max 2x2 s2 ceil even input", 1, 2, 6, 4, POOL(PD_POOL_MAX, 2, 2, 2, 2, 0, 0, true, false)},
    {"max 2x2 s2 p1 (general path)", 1, 2, 5, 6, POOL(PD_POOL_MAX, 2, 2, 2, 2, 1, 1, false, false)},
    {"max 2x2 s1 (general path)", 1, 2, 5, 4, POOL(PD_POOL_MAX, 2, 2, 1, 1, 0, 0, false, false)},
    {"max 3x3 s2 p1", 2, 3, 7, 7, POOL(PD_POOL_MAX, 3, 3, 2, 2, 1, 1, false, false)},
    {"max 3x3 s2 ceil", 2, 2, 6, 6, POOL(PD_POOL_MAX, 3, 3, 2, 2, 0, 0, true, false)},
    {"max 3x3 s2 p1 ceil non-square", 1, 2, 6, 7, POOL(PD_POOL_MAX, 3, 3, 2, 2, 1, 1, true, false)},
    {"max 3x2 s2x1 p1x0", 2, 2, 7, 5, POOL(PD_POOL_MAX, 3, 2, 2, 1, 1, 0, false, false)},
    {"max global 5x6", 2, 3, 5, 6, POOL(PD_POOL_MAX, 5, 6, 5, 6, 0, 0, false, false)},
    {"avg 3x3 s1 p1 count pad", 2, 3, 5, 5, POOL(PD_POOL_AVG, 3, 3, 1, 1, 1, 1, false, true)},
    {"avg 3x3 s1 p1 exclude pad", 2, 3, 5, 5, POOL(PD_POOL_AVG, 3, 3, 1, 1, 1, 1, false, false)},
    {"avg 3x3 s2 p1 ceil count pad", 1, 3, 6, 7, POOL(PD_POOL_AVG, 3, 3, 2, 2, 1, 1, true, true)},
    {"avg 3x3 s2 p1 ceil exclude pad", 1, 3, 6, 7, POOL(PD_POOL_AVG, 3, 3, 2, 2, 1, 1, true, false)},
    {"avg 2x2 s2 ceil odd input", 2, 2, 5, 5, POOL(PD_POOL_AVG, 2, 2, 2, 2, 0, 0, true, true)},
    {"avg 1x1 s2", 1, 2, 5, 4, POOL(PD_POOL_AVG, 1, 1, 2, 2, 0, 0, false, true)},
    {"avg global 6x5", 2, 4, 6, 5, POOL(PD_POOL_AVG, 6, 5, 6, 5, 0, 0, false, true)},
    /* large enough for the multi-threaded paths */
    {"max 3x3 s2 p1 threaded", 2, 8, 48, 45, POOL(PD_POOL_MAX, 3, 3, 2, 2, 1, 1, false, false)},
    {"max 2x2 s2 threaded", 2, 8, 48, 46, POOL(PD_POOL_MAX, 2, 2, 2, 2, 0, 0, false, false)},
    {"avg 2x2 s2 ceil threaded", 2, 8, 47, 48, POOL(PD_POOL_AVG, 2, 2, 2, 2, 0, 0, true, false)},
};

static int64_t ref_pool_out(int64_t in, int kernel, int stride, int pad, bool ceil_mode)
{
    int64_t span = in + 2 * pad - kernel, out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;

    if (ceil_mode && (out - 1) * stride >= in + pad)
        out--;
    return out;
}

/* y and dx from x and dy by PyTorch's definitions, visiting each window's
 * positions in order (padding skipped: -inf for max, outside the average). */
static void ref_pool(const pool_case *pc, int64_t P, int64_t Q, const float *x, const float *dy, double *y, double *dx)
{
    const pd_pool2d_desc *d = &pc->d;

    for (int64_t plane = 0; plane < pc->n * pc->c; plane++)
        for (int64_t p = 0; p < P; p++)
            for (int64_t q = 0; q < Q; q++) {
                int64_t hs = p * d->stride_h - d->pad_h, ws = q * d->stride_w - d->pad_w;
                int64_t yi = (plane * P + p) * Q + q, best = -1, count = 0;
                double sum = 0.0;

                for (int64_t i = 0; i < d->kernel_h; i++)
                    for (int64_t j = 0; j < d->kernel_w; j++) {
                        int64_t ih = hs + i, iw = ws + j;
                        if (ih < 0 || ih >= pc->h || iw < 0 || iw >= pc->w)
                            continue;
                        int64_t xi = (plane * pc->h + ih) * pc->w + iw;
                        if (best < 0 || x[xi] > x[best])
                            best = xi;
                        sum += x[xi];
                        count++;
                    }
                if (d->mode == PD_POOL_MAX) {
                    y[yi] = x[best];
                    dx[best] += dy[yi];
                    continue;
                }
                int64_t he = hs + d->kernel_h < pc->h + d->pad_h ? hs + d->kernel_h : pc->h + d->pad_h;
                int64_t we = ws + d->kernel_w < pc->w + d->pad_w ? ws + d->kernel_w : pc->w + d->pad_w;
                double divisor = d->count_include_pad ? (double)((he - hs) * (we - ws)) : (double)count;
                y[yi] = sum / divisor;
                for (int64_t ih = hs < 0 ? 0 : hs; ih < hs + d->kernel_h && ih < pc->h; ih++)
                    for (int64_t iw = ws < 0 ? 0 : ws; iw < ws + d->kernel_w && iw < pc->w; iw++)
                        dx[(plane * pc->h + ih) * pc->w + iw] += dy[yi] / divisor;
            }
}

static void test_pool2d_against_reference(void **state)
{
    pd_device *dev = *state;

    for (size_t i = 0; i < sizeof(pool_cases) / sizeof(pool_cases[0]); i++) {
        const pool_case *pc = &pool_cases[i];
        const pd_pool2d_desc *d = &pc->d;
        int64_t P = ref_pool_out(pc->h, d->kernel_h, d->stride_h, d->pad_h, d->ceil_mode);
        int64_t Q = ref_pool_out(pc->w, d->kernel_w, d->stride_w, d->pad_w, d->ceil_mode);
        pd_shape xs = pd_shape_make(4, pc->n, pc->c, pc->h, pc->w), ys = pd_shape_make(4, pc->n, pc->c, P, Q);
        int64_t nx = pd_shape_numel(&xs), ny = pd_shape_numel(&ys);
        float *hx = random_buffer(nx), *hdy = random_buffer(ny);
        double *ry = zero_doubles(ny), *rdx = zero_doubles(nx);

        ref_pool(pc, P, Q, hx, hdy, ry, rdx);

        pd_tensor *x = make_tensor(dev, xs, hx), *dy = make_tensor(dev, ys, hdy);
        pd_tensor *y = make_tensor(dev, ys, NULL), *dx = make_tensor(dev, xs, NULL);

        assert_int_equal(dev->ops->pool2d_forward(dev, d, x, y), PD_OK);
        expect_close(y, ry, "pool2d forward y", pc->name);
        assert_int_equal(dev->ops->pool2d_backward(dev, d, x, y, dy, dx), PD_OK);
        expect_close(dx, rdx, "pool2d backward dx", pc->name);

        pd_tensor_destroy(x);
        pd_tensor_destroy(dy);
        pd_tensor_destroy(y);
        pd_tensor_destroy(dx);
        free(hx);
        free(hdy);
        free(ry);
        free(rdx);
    }
}

/* Runs pooling on one 1x1xHxW plane and compares y (and dx if want_dx). */
static void pool_hand_case(pd_device *dev, const char *name, const pd_pool2d_desc *d, int64_t h, int64_t w,
                           const float *hx, int64_t p, int64_t q, const double *want_y, const float *hdy,
                           const double *want_dx)
{
    pd_tensor *x = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)1, h, w), hx);
    pd_tensor *y = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)1, p, q), NULL);

    assert_int_equal(dev->ops->pool2d_forward(dev, d, x, y), PD_OK);
    expect_close(y, want_y, "pool2d forward y", name);
    if (want_dx) {
        pd_tensor *dy = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)1, p, q), hdy);
        pd_tensor *dx = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)1, h, w), NULL);
        assert_int_equal(dev->ops->pool2d_backward(dev, d, x, y, dy, dx), PD_OK);
        expect_close(dx, want_dx, "pool2d backward dx", name);
        pd_tensor_destroy(dy);
        pd_tensor_destroy(dx);
    }
    pd_tensor_destroy(x);
    pd_tensor_destroy(y);
}

/* Values PyTorch gives for the same calls. */
static void test_pool2d_hand_computed(void **state)
{
    pd_device *dev = *state;
    const float ramp[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

    /* AvgPool2d(2, 2, ceil_mode=True) on 3x3: the edge windows average what they cover. */
    pd_pool2d_desc avg_ceil = POOL(PD_POOL_AVG, 2, 2, 2, 2, 0, 0, true, true);
    double avg_ceil_y[4] = {3.0, 4.5, 7.5, 9.0};
    pool_hand_case(dev, "avg 2x2 ceil 3x3", &avg_ceil, 3, 3, ramp, 2, 2, avg_ceil_y, NULL, NULL);

    /* AvgPool2d(3, 2, 1) on 3x3: count_include_pad divides by 9, else by the 4 covered. */
    pd_pool2d_desc avg_pad = POOL(PD_POOL_AVG, 3, 3, 2, 2, 1, 1, false, true);
    double avg_pad_y[4] = {12.0 / 9, 16.0 / 9, 24.0 / 9, 28.0 / 9};
    float dy1[4] = {9, 9, 9, 9};
    double avg_pad_dx[9] = {1, 2, 1, 2, 4, 2, 1, 2, 1};
    pool_hand_case(dev, "avg 3x3 s2 p1 count pad", &avg_pad, 3, 3, ramp, 2, 2, avg_pad_y, dy1, avg_pad_dx);
    avg_pad.count_include_pad = false;
    double avg_nopad_y[4] = {3.0, 4.0, 6.0, 7.0};
    pool_hand_case(dev, "avg 3x3 s2 p1 exclude pad", &avg_pad, 3, 3, ramp, 2, 2, avg_nopad_y, NULL, NULL);

    /* MaxPool2d pads with -inf: all-negative input keeps its maximum. */
    const float negative[4] = {-1, -2, -3, -4};
    pd_pool2d_desc max_pad = POOL(PD_POOL_MAX, 3, 3, 1, 1, 1, 1, false, false);
    double max_pad_y[4] = {-1, -1, -1, -1};
    float dy2[4] = {1, 2, 3, 4};
    double max_pad_dx[4] = {10, 0, 0, 0};
    pool_hand_case(dev, "max pads with -inf", &max_pad, 2, 2, negative, 2, 2, max_pad_y, dy2, max_pad_dx);

    /* Ties: each window's gradient goes to its first (row-major) element. */
    const float zeros[9] = {0};
    pd_pool2d_desc max_tie = POOL(PD_POOL_MAX, 2, 2, 1, 1, 0, 0, false, false);
    double tie_y[4] = {0, 0, 0, 0}, tie_dx[9] = {1, 2, 0, 3, 4, 0, 0, 0, 0};
    pool_hand_case(dev, "max ties go to the first", &max_tie, 3, 3, zeros, 2, 2, tie_y, dy2, tie_dx);

    /* The 2x2 stride-2 fast path: ties, the first maximum in row-major order
     * winning wherever it is (-0 and +0 tie), on 5x7 with ceil_mode, so that
     * a clipped 5th row and 7th column go to the general code, ties too. */
    pd_pool2d_desc max_2x2 = POOL(PD_POOL_MAX, 2, 2, 2, 2, 0, 0, true, false);
    const float ties[35] = {
        5,     5, 1, 5,  1, 1,     7, /* windows (5 5; 2 2) (1 5; 5 5) (1 1; 5 5) (7; 7) */
        2,     2, 5, 5,  5, 5,     7,
        -0.0f, 0, 3, 1,  1, 1,     -1, /* (-0 0; 0 0) (3 1; 3 3) (1 1; 1 4) (-1; -1) */
        0,     0, 3, 3,  1, 4,     -1,
        6,     6, -2, -2, 0, -0.0f, 2, /* (6 6) (-2 -2) (0 -0) (2) */
    };
    double ties_y[12] = {5, 5, 5, 7, 0, 3, 4, -1, 6, -2, 0, 2};
    float dy12[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    double ties_dx[35] = {
        1, 0, 0, 2,  0, 0,  4, /**/ 0, 0, 0, 0,  3, 0, 0, /**/ 5, 0, 6, 0, 0, 0, 8,
        0, 0, 0, 0,  0, 7,  0, /**/ 9, 0, 10, 0, 11, 0, 12,
    };
    pool_hand_case(dev, "max 2x2 s2 ties (fast path and clipped edge)", &max_2x2, 5, 7, ties, 3, 4, ties_y, dy12,
                   ties_dx);
}

/* NaN counts as a window's maximum and the window's first NaN wins, in the
 * 2x2 stride-2 fast path (the first two windows) as in the general code
 * (the clipped third, ceil_mode). */
static void test_pool2d_nan(void **state)
{
    pd_device *dev = *state;
    const pd_pool2d_desc d = POOL(PD_POOL_MAX, 2, 2, 2, 2, 0, 0, true, false);
    const float x[10] = {
        NAN, 9, 1,    NAN, NAN, /* windows (NaN 9; 3 4) (1 NaN; -NaN 8) (NaN; -NaN) */
        3,   4, -NAN, 8,   -NAN,
    };
    const float dy[3] = {1, 2, 3}, want_dx[10] = {1, 0, 0, 2, 3, 0, 0, 0, 0, 0};
    float y[3], dx[10];
    pd_tensor *tx = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)1, (int64_t)2, (int64_t)5), x);
    pd_tensor *ty = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)1, (int64_t)1, (int64_t)3), NULL);
    pd_tensor *tdy = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)1, (int64_t)1, (int64_t)3), dy);
    pd_tensor *tdx = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)1, (int64_t)2, (int64_t)5), NULL);

    assert_int_equal(dev->ops->pool2d_forward(dev, &d, tx, ty), PD_OK);
    assert_int_equal(pd_tensor_copy_to_host(ty, y, sizeof(y)), PD_OK);
    for (int i = 0; i < 3; i++)
        if (!isnan(y[i]) || signbit(y[i])) /* the first NaN is +NaN, a later one -NaN */
            fail_msg("max pool of a window holding NaN: y[%d] is %g, not the first (+)NaN", i, (double)y[i]);
    assert_int_equal(dev->ops->pool2d_backward(dev, &d, tx, ty, tdy, tdx), PD_OK);
    assert_int_equal(pd_tensor_copy_to_host(tdx, dx, sizeof(dx)), PD_OK);
    for (int i = 0; i < 10; i++)
        if (dx[i] != want_dx[i])
            fail_msg("max pool backward with NaN: dx[%d] is %g, expected %g", i, (double)dx[i], (double)want_dx[i]);
    pd_tensor_destroy(tx);
    pd_tensor_destroy(ty);
    pd_tensor_destroy(tdy);
    pd_tensor_destroy(tdx);
}

static void test_pool2d_errors(void **state)
{
    pd_device *dev = *state;
    pd_pool2d_desc d = POOL(PD_POOL_MAX, 2, 2, 2, 2, 0, 0, false, false);
    pd_tensor *x = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)2, (int64_t)4, (int64_t)4), NULL);
    pd_tensor *y = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)2, (int64_t)2, (int64_t)2), NULL);
    pd_tensor *y_bad = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)2, (int64_t)3, (int64_t)3), NULL);
    pd_tensor *x3 = make_tensor(dev, pd_shape_make(3, (int64_t)2, (int64_t)4, (int64_t)4), NULL);
    pd_tensor *dx_bad = make_tensor(dev, pd_shape_make(4, (int64_t)1, (int64_t)3, (int64_t)4, (int64_t)4), NULL);

    assert_int_equal(dev->ops->pool2d_forward(dev, &d, x, y), PD_OK);
    assert_int_equal(dev->ops->pool2d_forward(dev, &d, x, y_bad), PD_ESHAPE);
    assert_int_equal(dev->ops->pool2d_forward(dev, &d, x3, y), PD_ESHAPE);
    assert_int_equal(dev->ops->pool2d_backward(dev, &d, x, y, y_bad, x), PD_ESHAPE);
    assert_int_equal(dev->ops->pool2d_backward(dev, &d, x, y, y, dx_bad), PD_ESHAPE);
    pd_pool2d_desc too_much_pad = POOL(PD_POOL_AVG, 2, 2, 2, 2, 2, 2, false, true);
    assert_int_equal(dev->ops->pool2d_forward(dev, &too_much_pad, x, y), PD_EINVAL);
    pd_pool2d_desc too_big = POOL(PD_POOL_AVG, 5, 5, 1, 1, 0, 0, false, true);
    assert_int_equal(dev->ops->pool2d_forward(dev, &too_big, x, y), PD_ESHAPE);

    pd_tensor_destroy(x);
    pd_tensor_destroy(y);
    pd_tensor_destroy(y_bad);
    pd_tensor_destroy(x3);
    pd_tensor_destroy(dx_bad);
}

/* ---- layers: output shapes, parameters, validation ------------------------ */

static void expect_shape(const pd_shape *got, pd_shape want, const char *what)
{
    char a[96], b[96];

    if (!pd_shape_equal(got, &want))
        fail_msg("%s: shape %s, expected %s", what, pd_shape_format(got, a, sizeof(a)),
                 pd_shape_format(&want, b, sizeof(b)));
}

/* A parameter's name, shape and PyTorch-default bound 1/sqrt(fan_in). */
static void expect_param(pd_param *p, const char *name, pd_shape shape, double fan_in)
{
    assert_string_equal(p->name, name);
    expect_shape(&p->value.shape, shape, name);
    assert_true(p->trainable);
    assert_int_equal(p->init, PD_INIT_UNIFORM);
    assert_true(fabs(p->init_a - 1.0 / sqrt(fan_in)) < 1e-6);
}

static void test_layer_shapes_and_params(void **state)
{
    pd_device *dev = *state;
    pd_graph *g = NULL;
    pd_param **params;
    const pd_shape image = pd_shape_make(4, (int64_t)2, (int64_t)6, (int64_t)9, (int64_t)8);
    const pd_conv2d_desc conv = CONV(3, 3, 2, 2, 1, 1, 1, 1, 2);
    const pd_pool2d_desc global = POOL(PD_POOL_AVG, 0, 0, 0, 0, 0, 0, false, false);
    const pd_pool2d_desc ceil_pool = POOL(PD_POOL_MAX, 3, 3, 2, 2, 1, 1, true, false);
    int x, c, p, q, f, fc;

    assert_int_equal(pd_graph_create(dev, 1, &g), PD_OK);
    assert_int_equal(pd_graph_input(g, "x", PD_F32, &image, false, &x), PD_OK);
    assert_int_equal(pd_graph_conv2d(g, "conv", x, 4, &conv, true, &c), PD_OK);
    expect_shape(pd_graph_node_shape(g, c), pd_shape_make(4, (int64_t)2, (int64_t)4, (int64_t)5, (int64_t)4), "conv");
    assert_int_equal(pd_graph_pool2d(g, "pool", c, &ceil_pool, &q), PD_OK);
    expect_shape(pd_graph_node_shape(g, q), pd_shape_make(4, (int64_t)2, (int64_t)4, (int64_t)3, (int64_t)3),
                 "max pool 3x3 s2 p1 ceil_mode on 5x4");
    assert_int_equal(pd_graph_pool2d(g, "gap", c, &global, &p), PD_OK);
    expect_shape(pd_graph_node_shape(g, p), pd_shape_make(4, (int64_t)2, (int64_t)4, (int64_t)1, (int64_t)1),
                 "global pool");
    assert_int_equal(pd_graph_flatten(g, "flatten", p, &f), PD_OK);
    assert_int_equal(pd_graph_linear(g, "fc", f, 10, false, &fc), PD_OK);
    expect_shape(pd_graph_node_shape(g, fc), pd_shape_make(2, (int64_t)2, (int64_t)10), "linear");

    assert_int_equal(pd_graph_params(g, &params), 3);
    expect_param(params[0], "conv.weight", pd_shape_make(4, (int64_t)4, (int64_t)3, (int64_t)3, (int64_t)3), 27);
    expect_param(params[1], "conv.bias", pd_shape_make(1, (int64_t)4), 27);
    expect_param(params[2], "fc.weight", pd_shape_make(2, (int64_t)10, (int64_t)4), 4);
    assert_int_equal(pd_graph_param_count(g), 4 * 27 + 4 + 40);

    /* Initial values fill U(-bound, bound). */
    assert_int_equal(pd_graph_allocate(g), PD_OK);
    float w[108], largest = 0.0f;
    assert_int_equal(pd_tensor_copy_to_host(&params[0]->value, w, sizeof(w)), PD_OK);
    for (int i = 0; i < 108; i++) {
        assert_true(fabsf(w[i]) <= params[0]->init_a);
        largest = fabsf(w[i]) > largest ? fabsf(w[i]) : largest;
    }
    assert_true(largest > 0.8f * params[0]->init_a);
    pd_graph_destroy(g);
}

/* Each call must fail with PD_ESHAPE and a message naming `word`. */
static void expect_layer_error(pd_status s, const char *word)
{
    assert_int_equal(s, PD_ESHAPE);
    if (!strstr(pd_last_error(), word))
        fail_msg("error message \"%s\" does not mention \"%s\"", pd_last_error(), word);
}

static void test_layer_validation(void **state)
{
    pd_device *dev = *state;
    pd_graph *g = NULL;
    const pd_shape image = pd_shape_make(4, (int64_t)2, (int64_t)6, (int64_t)5, (int64_t)5);
    const pd_shape flat = pd_shape_make(2, (int64_t)2, (int64_t)6);
    const pd_shape seq = pd_shape_make(3, (int64_t)2, (int64_t)6, (int64_t)5);
    pd_conv2d_desc conv = CONV(3, 3, 1, 1, 1, 1, 1, 1, 1);
    pd_pool2d_desc pool = POOL(PD_POOL_MAX, 3, 3, 2, 2, 1, 1, false, false);
    int x, xf, xs, out;

    assert_int_equal(pd_graph_create(dev, 1, &g), PD_OK);
    assert_int_equal(pd_graph_input(g, "x", PD_F32, &image, true, &x), PD_OK);
    assert_int_equal(pd_graph_input(g, "flat", PD_F32, &flat, true, &xf), PD_OK);
    assert_int_equal(pd_graph_input(g, "seq", PD_F32, &seq, true, &xs), PD_OK);

    conv.groups = 4; /* does not divide 6 input channels */
    expect_layer_error(pd_graph_conv2d(g, "c", x, 8, &conv, true, &out), "groups");
    conv.groups = 3; /* divides 6 but not 4 output channels */
    expect_layer_error(pd_graph_conv2d(g, "c", x, 4, &conv, true, &out), "groups");
    conv.groups = 1;
    conv.stride_w = 0;
    expect_layer_error(pd_graph_conv2d(g, "c", x, 4, &conv, true, &out), "stride");
    conv.stride_w = 1;
    conv.dilation_h = 0;
    expect_layer_error(pd_graph_conv2d(g, "c", x, 4, &conv, true, &out), "dilation");
    conv.dilation_h = 1;
    conv.pad_h = -1;
    expect_layer_error(pd_graph_conv2d(g, "c", x, 4, &conv, true, &out), "padding");
    conv.pad_h = 1;
    expect_layer_error(pd_graph_conv2d(g, "c", x, 0, &conv, true, &out), "output channels");
    conv.kernel_h = conv.kernel_w = 9; /* 9 > 5 + 2 */
    expect_layer_error(pd_graph_conv2d(g, "c", x, 4, &conv, true, &out), "kernel");
    conv.kernel_h = conv.kernel_w = 3;
    expect_layer_error(pd_graph_conv2d(g, "c", xs, 4, &conv, true, &out), "[N,C,H,W]");
    assert_int_equal(pd_graph_conv2d(g, "c", x, 4, &conv, true, &out), PD_OK);

    expect_layer_error(pd_graph_linear(g, "fc", x, 3, true, &out), "2-D");
    expect_layer_error(pd_graph_linear(g, "fc", xf, 0, true, &out), "output features");
    assert_int_equal(pd_graph_linear(g, "fc", xf, 3, true, &out), PD_OK);

    pool.pad_h = 2; /* more than half the 3x3 kernel */
    expect_layer_error(pd_graph_pool2d(g, "p", x, &pool, &out), "padding");
    pool.pad_h = 1;
    pool.stride_h = 0;
    expect_layer_error(pd_graph_pool2d(g, "p", x, &pool, &out), "stride");
    pool.stride_h = 2;
    pool.kernel_w = 0; /* only 0x0 means global */
    expect_layer_error(pd_graph_pool2d(g, "p", x, &pool, &out), "kernel");
    pool.kernel_h = 0;
    expect_layer_error(pd_graph_pool2d(g, "p", x, &pool, &out), "global");
    pool.pad_h = pool.pad_w = 0;
    assert_int_equal(pd_graph_pool2d(g, "p", x, &pool, &out), PD_OK);
    pool = (pd_pool2d_desc)POOL(PD_POOL_AVG, 7, 7, 1, 1, 0, 0, false, true); /* larger than 5x5 */
    expect_layer_error(pd_graph_pool2d(g, "p2", x, &pool, &out), "kernel");
    pool.kernel_h = pool.kernel_w = 3;
    pool.mode = (pd_pool_mode)7;
    expect_layer_error(pd_graph_pool2d(g, "p2", x, &pool, &out), "mode");
    expect_layer_error(pd_graph_pool2d(g, "p2", xf, &pool, &out), "[N,C,H,W]");
    pd_graph_destroy(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_against_reference), cmocka_unit_test(test_gemm_edge_cases),
        cmocka_unit_test(test_conv2d_against_reference), cmocka_unit_test(test_conv2d_hand_computed),
        cmocka_unit_test(test_conv2d_errors), cmocka_unit_test(test_linear_against_reference),
        cmocka_unit_test(test_linear_errors), cmocka_unit_test(test_pool2d_against_reference),
        cmocka_unit_test(test_pool2d_hand_computed), cmocka_unit_test(test_pool2d_nan),
        cmocka_unit_test(test_pool2d_errors),
        cmocka_unit_test(test_layer_shapes_and_params), cmocka_unit_test(test_layer_validation),
    };
    return cmocka_run_group_tests(tests, open_cpu, close_cpu);
}
