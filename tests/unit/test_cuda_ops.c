/* The CUDA backend against the CPU backend, entry by entry: the element-wise
 * entries, dropout and the optimizer steps must agree bit for bit (both
 * round every operation alike), dtype conversion bit for bit with the host's
 * pd_dtype_convert, sum and gemm within float rounding of an independent
 * double reference; plus argument errors and memory operations. Sizes cover
 * the float4 path, its scalar tail and unaligned views (the scalar path).
 * Plain TAP (no cmocka: the GPU machines may lack it); skips without a CUDA
 * device. PD_TEST_DEVICE names another device to check against the CPU
 * (e.g. "cpu", which checks this program itself). */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream.h>

static pd_device *cpu, *dut; /* dut: the device under test */
static bool dut_is_cuda;
static int cases, failures;

static void ok(bool pass, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ok(bool pass, const char *fmt, ...)
{
    va_list ap;

    printf("%s %d - ", pass ? "ok" : "not ok", ++cases);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    if (!pass) {
        failures++;
        printf("# last error: %s\n", pd_last_error());
    }
    fflush(stdout);
}

/* A setup step that must work: otherwise nothing after it means anything. */
#define MUST(expr)                                                                            \
    do {                                                                                      \
        pd_status must_s_ = (expr);                                                           \
        if (must_s_ != PD_OK) {                                                               \
            printf("Bail out! %s failed: %s: %s\n", #expr, pd_strerror(must_s_), pd_last_error()); \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static uint64_t rng_state = 0x243f6a8885a308d3ULL;

static float uniform(float lo, float hi) /* xorshift64*, 24 bits */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return lo + (hi - lo) * (float)((rng_state * 0x2545f4914f6cdd1dULL) >> 40) * (1.0f / 16777216.0f);
}

static float *random_floats(int64_t n, float lo, float hi)
{
    float *h = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!h) {
        printf("Bail out! out of host memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++)
        h[i] = uniform(lo, hi);
    return h;
}

/* A tensor of n elements on `dev` at `offset` elements into a larger buffer
 * (offset 1 makes f32 data unaligned for float4), filled from host if given. */
typedef struct buffer {
    pd_tensor *base;
    pd_tensor t;
} buffer;

static void buffer_make(buffer *b, pd_device *dev, pd_dtype dtype, int64_t n, int offset, const void *host)
{
    pd_shape all = pd_shape_make(1, n + offset), shape = pd_shape_make(1, n);

    MUST(pd_tensor_create(dev, dtype, &all, &b->base));
    pd_tensor_view(&b->t, dev, dtype, &shape, (char *)b->base->data + (size_t)offset * pd_dtype_size(dtype));
    if (host && n > 0)
        MUST(pd_tensor_copy_from_host(&b->t, host, (size_t)n * pd_dtype_size(dtype)));
}

static void buffer_free(buffer *b) { pd_tensor_destroy(b->base); }

/* The tensor's bytes on the host (caller frees). */
static void *to_host(const pd_tensor *t)
{
    size_t bytes = pd_tensor_nbytes(t);
    void *h = malloc(bytes ? bytes : 1);

    if (!h) {
        printf("Bail out! out of host memory\n");
        exit(1);
    }
    if (bytes)
        MUST(pd_tensor_copy_to_host(t, h, bytes));
    return h;
}

/* True if the two tensors hold the same bytes; prints the first difference. */
static bool same_bits(const pd_tensor *want, const pd_tensor *got)
{
    size_t bytes = pd_tensor_nbytes(want);
    unsigned char *a = to_host(want), *b = to_host(got);
    bool same = bytes == pd_tensor_nbytes(got) && memcmp(a, b, bytes) == 0;

    if (!same && want->dtype == PD_F32 && bytes == pd_tensor_nbytes(got)) {
        for (size_t i = 0; i < bytes / 4; i++) {
            float x, y;
            memcpy(&x, a + 4 * i, 4);
            memcpy(&y, b + 4 * i, 4);
            if (memcmp(&x, &y, 4) != 0) {
                printf("# first difference at %zu: cpu %.9g, device %.9g\n", i, (double)x, (double)y);
                break;
            }
        }
    }
    free(a);
    free(b);
    return same;
}

/* fill, axpby, add, relu and dropout on both devices, compared bit for bit. */
static void check_elementwise(int64_t n, int offset)
{
    float *hx = random_floats(n, -1.0f, 1.0f), *hy = random_floats(n, -1.0f, 1.0f);
    float *nan = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    buffer cx, cy, co, gx, gy, go;
    pd_status sc, sg;

    for (int64_t i = 0; i < n; i++)
        nan[i] = NAN;
    buffer_make(&cx, cpu, PD_F32, n, 0, hx);
    buffer_make(&cy, cpu, PD_F32, n, 0, hy);
    buffer_make(&co, cpu, PD_F32, n, 0, NULL);
    buffer_make(&gx, dut, PD_F32, n, offset, hx);
    buffer_make(&gy, dut, PD_F32, n, offset, hy);
    buffer_make(&go, dut, PD_F32, n, offset, NULL);

    sc = cpu->ops->fill(cpu, &co.t, 0.37f);
    sg = dut->ops->fill(dut, &go.t, 0.37f);
    ok(sc == PD_OK && sg == PD_OK && same_bits(&co.t, &go.t), "fill n=%lld offset=%d", (long long)n, offset);

    sc = cpu->ops->add(cpu, &cx.t, &cy.t, &co.t);
    sg = dut->ops->add(dut, &gx.t, &gy.t, &go.t);
    ok(sc == PD_OK && sg == PD_OK && same_bits(&co.t, &go.t), "add n=%lld offset=%d", (long long)n, offset);

    MUST(pd_tensor_copy(&co.t, &cy.t));
    MUST(pd_tensor_copy(&go.t, &gy.t));
    sc = cpu->ops->axpby(cpu, 1.5f, &cx.t, -0.3f, &co.t);
    sg = dut->ops->axpby(dut, 1.5f, &gx.t, -0.3f, &go.t);
    ok(sc == PD_OK && sg == PD_OK && same_bits(&co.t, &go.t), "axpby n=%lld offset=%d", (long long)n, offset);

    if (n > 0) {
        MUST(pd_tensor_copy_from_host(&co.t, nan, (size_t)n * sizeof(float)));
        MUST(pd_tensor_copy_from_host(&go.t, nan, (size_t)n * sizeof(float)));
    }
    sc = cpu->ops->axpby(cpu, -0.7f, &cx.t, 0.0f, &co.t);
    sg = dut->ops->axpby(dut, -0.7f, &gx.t, 0.0f, &go.t);
    ok(sc == PD_OK && sg == PD_OK && same_bits(&co.t, &go.t), "axpby beta=0 over NaN n=%lld offset=%d",
       (long long)n, offset);

    sc = cpu->ops->relu_forward(cpu, &cx.t, &co.t);
    sg = dut->ops->relu_forward(dut, &gx.t, &go.t);
    ok(sc == PD_OK && sg == PD_OK && same_bits(&co.t, &go.t), "relu forward n=%lld offset=%d", (long long)n,
       offset);
    /* relu backward from y = relu(x) in co/go, dy = y-data into x's place. */
    sc = cpu->ops->relu_backward(cpu, &co.t, &cy.t, &cx.t);
    sg = dut->ops->relu_backward(dut, &go.t, &gy.t, &gx.t);
    ok(sc == PD_OK && sg == PD_OK && same_bits(&cx.t, &gx.t), "relu backward n=%lld offset=%d", (long long)n,
       offset);

    for (int pass = 0; pass < 2; pass++) {
        const float ps[] = {0.0f, 0.3f, 0.9f};
        for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
            uint64_t seed = 0x5eed0000u + i;
            if (pass == 0) {
                sc = cpu->ops->dropout_forward(cpu, ps[i], seed, &cy.t, &co.t);
                sg = dut->ops->dropout_forward(dut, ps[i], seed, &gy.t, &go.t);
            } else {
                sc = cpu->ops->dropout_backward(cpu, ps[i], seed, &cy.t, &co.t);
                sg = dut->ops->dropout_backward(dut, ps[i], seed, &gy.t, &go.t);
            }
            ok(sc == PD_OK && sg == PD_OK && same_bits(&co.t, &go.t), "dropout %s p=%g n=%lld offset=%d",
               pass ? "backward" : "forward", (double)ps[i], (long long)n, offset);
        }
    }

    buffer_free(&cx);
    buffer_free(&cy);
    buffer_free(&co);
    buffer_free(&gx);
    buffer_free(&gy);
    buffer_free(&go);
    free(hx);
    free(hy);
    free(nan);
}

/* Converts host data of `from` into `to` on the device and compares with
 * pd_dtype_convert on the host, bit for bit. */
static void check_convert_case(pd_dtype from, pd_dtype to, const void *host, int64_t n, int offset,
                               const char *what)
{
    size_t out_bytes = (size_t)n * pd_dtype_size(to);
    void *want = malloc(out_bytes ? out_bytes : 1), *got;
    buffer x, y;
    pd_status s;

    MUST(pd_dtype_convert(to, want, from, host, (size_t)n));
    buffer_make(&x, dut, from, n, offset, host);
    buffer_make(&y, dut, to, n, offset, NULL);
    s = dut->ops->convert(dut, &x.t, &y.t);
    got = to_host(&y.t);
    ok(s == PD_OK && memcmp(want, got, out_bytes) == 0, "convert %s -> %s, %s (n=%lld offset=%d)",
       pd_dtype_name(from), pd_dtype_name(to), what, (long long)n, offset);
    if (s == PD_OK && memcmp(want, got, out_bytes) != 0) {
        size_t w = pd_dtype_size(to);
        for (int64_t i = 0; i < n; i++) {
            if (memcmp((char *)want + (size_t)i * w, (char *)got + (size_t)i * w, w) != 0) {
                printf("# first difference at element %lld\n", (long long)i);
                break;
            }
        }
    }
    free(want);
    free(got);
    buffer_free(&x);
    buffer_free(&y);
}

static void check_convert(void)
{
    /* Rounding ties, subnormals, overflow, signed zeros, inf and NaN. */
    static const float special[] = {
        0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f,
        0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-26f, 3 * 0x1p-25f, 0x1p-14f, 0x1.ffcp-15f, 65504.0f, 65519.0f,
        65520.0f, 1e6f, -1e6f, 3.0e38f, 0x1p-126f, 0x1p-149f, 0x1.fffffep127f, 1e-8f, 2.5f, 3.5f, -2.5f,
        254.5f, 255.5f, 256.0f, 300.0f, -3.0f, -0.5f, 0.4999999f, 123456.5f, 16777217.0f, 2.1e9f, -2.1e9f,
        INFINITY, -INFINITY, NAN, -NAN,
    };
    const int64_t ns = (int64_t)(sizeof(special) / sizeof(special[0]));
    const int64_t n = 4099;
    float *r = random_floats(n, -300.0f, 300.0f);
    float in_range[sizeof(special) / sizeof(special[0])];
    uint16_t *halves = malloc(65536 * sizeof(uint16_t)), *finite_halves = malloc(65536 * sizeof(uint16_t));
    int32_t ints[7] = {0, 1, -1, 16777217, -16777219, 2147483647, -2147483647 - 1};
    uint8_t bytes[256];
    int64_t nr = 0, nfinite = 0;

    for (int i = 0; i < 65536; i++)
        halves[i] = (uint16_t)i;
    for (int i = 0; i < 256; i++)
        bytes[i] = (uint8_t)i;
    /* f32 -> integer is defined only in range (C leaves NaN, inf and
     * +-2^31 and beyond to the machine): leave those out. */
    for (int64_t i = 0; i < ns; i++)
        if (!isnan(special[i]) && fabsf(special[i]) < 2.0e9f)
            in_range[nr++] = special[i];
    for (int i = 0; i < 65536; i++)
        if (((i >> 10) & 0x1f) != 0x1f)
            finite_halves[nfinite++] = (uint16_t)i;
    for (int offset = 0; offset < 2; offset++) {
        check_convert_case(PD_F32, PD_BF16, special, ns, offset, "special values");
        check_convert_case(PD_F32, PD_F16, special, ns, offset, "special values");
        check_convert_case(PD_F32, PD_I32, in_range, nr, offset, "special values in range");
        check_convert_case(PD_F32, PD_U8, in_range, nr, offset, "special values in range");
        check_convert_case(PD_F32, PD_BF16, r, n, offset, "random");
        check_convert_case(PD_F32, PD_F16, r, n, offset, "random");
        check_convert_case(PD_F32, PD_I32, r, n, offset, "random");
        check_convert_case(PD_F32, PD_U8, r, n, offset, "random");
        check_convert_case(PD_F32, PD_F32, r, n, offset, "copy");
        check_convert_case(PD_BF16, PD_F32, halves, 65536, offset, "every bit pattern");
        check_convert_case(PD_F16, PD_F32, halves, 65536, offset, "every bit pattern");
        check_convert_case(PD_BF16, PD_F16, halves, 65536, offset, "every bit pattern");
        check_convert_case(PD_F16, PD_U8, finite_halves, nfinite, offset, "every finite bit pattern");
        check_convert_case(PD_F16, PD_I32, finite_halves, nfinite, offset, "every finite bit pattern");
        check_convert_case(PD_I32, PD_F32, ints, 7, offset, "extremes");
        check_convert_case(PD_I32, PD_BF16, ints, 7, offset, "extremes");
        check_convert_case(PD_U8, PD_F32, bytes, 256, offset, "every value");
        check_convert_case(PD_U8, PD_F16, bytes, 256, offset, "every value");
    }
    free(r);
    free(halves);
    free(finite_halves);
}

/* Sum against a double reference, within float rounding; twice the same bits. */
static void check_sum(int64_t n, int offset)
{
    float *h = random_floats(n, -1.0f, 1.0f);
    pd_shape one = pd_shape_make(1, (int64_t)1);
    double want = 0.0, scale = 0.0;
    float got[2] = {0.0f, 0.0f};
    pd_tensor *out;
    buffer x;
    pd_status s = PD_OK;

    for (int64_t i = 0; i < n; i++) {
        want += h[i];
        scale += fabs(h[i]);
    }
    buffer_make(&x, dut, PD_F32, n, offset, h);
    MUST(pd_tensor_create(dut, PD_F32, &one, &out));
    for (int rep = 0; rep < 2 && s == PD_OK; rep++) {
        s = dut->ops->sum(dut, &x.t, out);
        if (s == PD_OK)
            MUST(pd_tensor_copy_to_host(out, &got[rep], sizeof(float)));
    }
    ok(s == PD_OK && fabs((double)got[0] - want) <= 1e-6 * scale + 1e-30 &&
           memcmp(&got[0], &got[1], sizeof(float)) == 0,
       "sum n=%lld offset=%d: %.9g (reference %.9g), repeatable", (long long)n, offset, (double)got[0], want);
    pd_tensor_destroy(out);
    buffer_free(&x);
    free(h);
}

/* Three SGD steps (the first with first_step and a NaN momentum buffer that
 * must not be read), w and buffer compared bit for bit after each. */
static void check_sgd(pd_sgd_desc desc, const char *what, int offset)
{
    const int64_t n = 10007;
    float *w = random_floats(n, -1.0f, 1.0f), *nan = malloc((size_t)n * sizeof(float));
    buffer cw, cb, cg, gw, gb, gg;
    bool same = true;
    pd_status sc = PD_OK, sg = PD_OK;

    for (int64_t i = 0; i < n; i++)
        nan[i] = NAN;
    buffer_make(&cw, cpu, PD_F32, n, 0, w);
    buffer_make(&gw, dut, PD_F32, n, offset, w);
    buffer_make(&cb, cpu, PD_F32, n, 0, nan);
    buffer_make(&gb, dut, PD_F32, n, offset, nan);
    buffer_make(&cg, cpu, PD_F32, n, 0, NULL);
    buffer_make(&gg, dut, PD_F32, n, offset, NULL);
    for (int step = 0; step < 3 && same && sc == PD_OK && sg == PD_OK; step++) {
        float *g = random_floats(n, -2.0f, 2.0f);
        MUST(pd_tensor_copy_from_host(&cg.t, g, (size_t)n * sizeof(float)));
        MUST(pd_tensor_copy_from_host(&gg.t, g, (size_t)n * sizeof(float)));
        desc.first_step = step == 0;
        sc = cpu->ops->sgd_update(cpu, &desc, &cw.t, &cg.t, desc.momentum != 0.0f ? &cb.t : NULL);
        sg = dut->ops->sgd_update(dut, &desc, &gw.t, &gg.t, desc.momentum != 0.0f ? &gb.t : NULL);
        same = sc == PD_OK && sg == PD_OK && same_bits(&cw.t, &gw.t) &&
               (desc.momentum == 0.0f || same_bits(&cb.t, &gb.t));
        free(g);
    }
    ok(same, "sgd %s offset=%d: 3 steps", what, offset);
    buffer_free(&cw);
    buffer_free(&cb);
    buffer_free(&cg);
    buffer_free(&gw);
    buffer_free(&gb);
    buffer_free(&gg);
    free(w);
    free(nan);
}

/* Three Adam steps from zero moments, w, m and v compared bit for bit. */
static void check_adam(pd_adam_desc desc, const char *what, int offset)
{
    const int64_t n = 10007;
    float *w = random_floats(n, -1.0f, 1.0f);
    buffer cw, cm, cv, cg, gw, gm, gv, gg;
    bool same = true;
    pd_status sc = PD_OK, sg = PD_OK;

    buffer_make(&cw, cpu, PD_F32, n, 0, w);
    buffer_make(&gw, dut, PD_F32, n, offset, w);
    buffer_make(&cm, cpu, PD_F32, n, 0, NULL);
    buffer_make(&gm, dut, PD_F32, n, offset, NULL);
    buffer_make(&cv, cpu, PD_F32, n, 0, NULL);
    buffer_make(&gv, dut, PD_F32, n, offset, NULL);
    buffer_make(&cg, cpu, PD_F32, n, 0, NULL);
    buffer_make(&gg, dut, PD_F32, n, offset, NULL);
    MUST(pd_tensor_zero(&cm.t));
    MUST(pd_tensor_zero(&gm.t));
    MUST(pd_tensor_zero(&cv.t));
    MUST(pd_tensor_zero(&gv.t));
    for (int step = 1; step <= 3 && same && sc == PD_OK && sg == PD_OK; step++) {
        float *g = random_floats(n, -2.0f, 2.0f);
        MUST(pd_tensor_copy_from_host(&cg.t, g, (size_t)n * sizeof(float)));
        MUST(pd_tensor_copy_from_host(&gg.t, g, (size_t)n * sizeof(float)));
        desc.step = step;
        sc = cpu->ops->adam_update(cpu, &desc, &cw.t, &cg.t, &cm.t, &cv.t);
        sg = dut->ops->adam_update(dut, &desc, &gw.t, &gg.t, &gm.t, &gv.t);
        same = sc == PD_OK && sg == PD_OK && same_bits(&cw.t, &gw.t) && same_bits(&cm.t, &gm.t) &&
               same_bits(&cv.t, &gv.t);
        free(g);
    }
    ok(same, "adam %s offset=%d: 3 steps", what, offset);
    buffer_free(&cw);
    buffer_free(&cm);
    buffer_free(&cv);
    buffer_free(&cg);
    buffer_free(&gw);
    buffer_free(&gm);
    buffer_free(&gv);
    buffer_free(&gg);
    free(w);
}

/* Row-major C = alpha op(A) op(B) + beta C with padded leading dimensions,
 * against a double reference: |error| <= 1e-5 (|alpha| |A||B| + |beta C|). */
static void check_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, float beta)
{
    const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 2, ldc = n + 1;
    const int64_t a_rows = ta ? k : m, b_rows = tb ? n : k;
    float *a = random_floats(a_rows * lda, -1.0f, 1.0f), *b = random_floats(b_rows * ldb, -1.0f, 1.0f);
    float *c = random_floats(m * ldc, -1.0f, 1.0f), *got;
    buffer ga, gb, gc;
    bool good = true;
    pd_status s;

    if (beta == 0.0f)
        for (int64_t i = 0; i < m * ldc; i++)
            c[i] = NAN; /* must not be read */
    buffer_make(&ga, dut, PD_F32, a_rows * lda, 0, a);
    buffer_make(&gb, dut, PD_F32, b_rows * ldb, 0, b);
    buffer_make(&gc, dut, PD_F32, m * ldc, 0, c);
    s = dut->ops->gemm(dut, ta, tb, m, n, k, alpha, ga.t.data, lda, gb.t.data, ldb, beta, gc.t.data, ldc);
    if (s == PD_ENOTSUP) {
        printf("ok %d - gemm # SKIP %s\n", ++cases, pd_last_error());
        goto done;
    }
    got = to_host(&gc.t);
    for (int64_t i = 0; i < m && good; i++) {
        for (int64_t j = 0; j < n && good; j++) {
            double want = 0.0, scale = 0.0;
            for (int64_t p = 0; p < k; p++) {
                double x = ta ? a[p * lda + i] : a[i * lda + p];
                double y = tb ? b[j * ldb + p] : b[p * ldb + j];
                want += x * y;
                scale += fabs(x * y);
            }
            want *= alpha;
            scale *= fabs(alpha);
            if (beta != 0.0f) {
                want += (double)beta * c[i * ldc + j];
                scale += fabs((double)beta * c[i * ldc + j]);
            }
            if (!(fabs(got[i * ldc + j] - want) <= 1e-5 * scale + 1e-30)) {
                printf("# C[%lld,%lld] = %.9g, reference %.9g\n", (long long)i, (long long)j,
                       (double)got[i * ldc + j], want);
                good = false;
            }
        }
        /* The padding past n columns is not C's: untouched. */
        for (int64_t j = n; j < ldc && good; j++)
            good = memcmp(&got[i * ldc + j], &c[i * ldc + j], sizeof(float)) == 0;
    }
    ok(s == PD_OK && good, "gemm%s%s m=%lld n=%lld k=%lld alpha=%g beta=%g", ta ? " A^T" : "", tb ? " B^T" : "",
       (long long)m, (long long)n, (long long)k, (double)alpha, (double)beta);
    free(got);
done:
    buffer_free(&ga);
    buffer_free(&gb);
    buffer_free(&gc);
    free(a);
    free(b);
    free(c);
}

static void check_errors(void)
{
    pd_shape s4 = pd_shape_make(1, (int64_t)4), s5 = pd_shape_make(1, (int64_t)5);
    pd_tensor *a, *b, *host;
    pd_adam_desc adam = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 0};
    pd_conv2d_desc conv = {0};
    pd_status s;

    MUST(pd_tensor_create_zero(dut, PD_F32, &s4, &a));
    MUST(pd_tensor_create_zero(dut, PD_F32, &s5, &b));
    MUST(pd_tensor_create_zero(cpu, PD_F32, &s4, &host));
    ok(dut->ops->add(dut, a, b, a) == PD_ESHAPE, "add of [4] and [5] is a shape error");
    ok(dut->ops->dropout_forward(dut, 1.0f, 1, a, a) == PD_EINVAL, "dropout p=1 is invalid");
    ok(dut->ops->adam_update(dut, &adam, a, a, a, a) == PD_EINVAL, "adam step 0 is invalid");
    if (dut_is_cuda) {
        s = dut->ops->fill(dut, host, 1.0f);
        ok(s == PD_EINVAL, "a host tensor is refused: %s", pd_last_error());
        s = dut->ops->conv2d_forward(dut, &conv, a, a, NULL, a);
        ok(s == PD_ENOTSUP && strstr(pd_last_error(), dut->name), "a missing entry says so: %s", pd_last_error());
    }
    ok(dut->mem->synchronize(dut) == PD_OK, "the stream is healthy after the refused calls");
    pd_tensor_destroy(a);
    pd_tensor_destroy(b);
    pd_tensor_destroy(host);
}

/* Device-to-device copy and zero through the tensor API. */
static void check_memory(void)
{
    const int64_t n = 1000;
    float *h = random_floats(n, -1.0f, 1.0f), *got;
    pd_shape s = pd_shape_make(2, (int64_t)10, (int64_t)100);
    pd_tensor *x, *y;
    bool zero = true;
    pd_status st;

    MUST(pd_tensor_create(dut, PD_F32, &s, &x));
    MUST(pd_tensor_create(dut, PD_F32, &s, &y));
    MUST(pd_tensor_copy_from_host(x, h, (size_t)n * sizeof(float)));
    st = pd_tensor_copy(y, x);
    got = to_host(y);
    ok(st == PD_OK && memcmp(got, h, (size_t)n * sizeof(float)) == 0, "device-to-device copy");
    free(got);
    ok(pd_tensor_zero(y) == PD_OK, "zero");
    got = to_host(y);
    for (int64_t i = 0; i < n; i++)
        zero = zero && got[i] == 0.0f;
    ok(zero, "zeroed memory reads back as zeros");
    free(got);
    free(h);
    pd_tensor_destroy(x);
    pd_tensor_destroy(y);
}

int main(void)
{
    const char *name = getenv("PD_TEST_DEVICE") ? getenv("PD_TEST_DEVICE") : "cuda";
    const int64_t sizes[] = {0, 1, 5, 4099, (1 << 20) + 3};
    pd_status s;

    MUST(pd_device_open("cpu", &cpu));
    s = pd_device_open(name, &dut);
    if (s == PD_ENOTSUP || s == PD_EDEVICE) {
        printf("1..0 # SKIP %s\n", pd_last_error());
        pd_device_close(cpu);
        return 0;
    }
    MUST(s);
    dut_is_cuda = dut->kind == PD_DEVICE_CUDA;
    printf("# %s against cpu\n", dut->name);

    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        for (int offset = 0; offset < 2; offset++) {
            check_elementwise(sizes[i], offset);
            check_sum(sizes[i], offset);
        }
    check_convert();
    for (int offset = 0; offset < 2; offset++) {
        check_sgd((pd_sgd_desc){.lr = 0.1f}, "plain", offset);
        check_sgd((pd_sgd_desc){.lr = 0.1f, .weight_decay = 1e-2f}, "weight decay", offset);
        check_sgd((pd_sgd_desc){.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f}, "momentum", offset);
        check_sgd((pd_sgd_desc){.lr = 0.05f, .momentum = 0.9f, .dampening = 0.1f}, "momentum dampening", offset);
        check_sgd((pd_sgd_desc){.lr = 0.05f, .momentum = 0.9f, .weight_decay = 5e-4f, .nesterov = true}, "nesterov",
                  offset);
        check_adam((pd_adam_desc){.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f}, "plain", offset);
        check_adam((pd_adam_desc){.lr = 1e-2f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 1e-2f},
                   "L2", offset);
        check_adam((pd_adam_desc){.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 1e-1f,
                                  .decoupled = true},
                   "decoupled (AdamW)", offset);
    }
    for (int t = 0; t < 4; t++) {
        check_gemm(t & 1, t & 2, 33, 17, 29, 0.75f, 0.5f);
        check_gemm(t & 1, t & 2, 64, 96, 128, 1.0f, 0.0f);
        check_gemm(t & 1, t & 2, 1, 1, 1, -2.0f, 1.0f);
    }
    check_gemm(false, false, 5, 7, 0, 1.0f, 0.5f);
    check_gemm(false, false, 5, 7, 0, 1.0f, 0.0f);
    check_gemm(true, false, 6, 4, 3, 0.0f, -2.0f);
    check_gemm(false, true, 6, 4, 3, 0.0f, 0.0f);
    check_errors();
    check_memory();

    ok(dut->mem->synchronize(dut) == PD_OK, "no asynchronous fault on the stream");
    printf("1..%d\n", cases);
    pd_device_close(dut);
    pd_device_close(cpu);
    return failures ? 1 : 0;
}
