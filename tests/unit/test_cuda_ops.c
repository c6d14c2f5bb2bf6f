/* The CUDA backend against the CPU backend, entry by entry: the element-wise
 * entries, dropout and the optimizer steps must agree bit for bit (both
 * round every operation alike), dtype conversion bit for bit with the host's
 * pd_dtype_convert, sum and gemm within float rounding of an independent
 * double reference; plus argument errors, memory operations (no cudaMalloc
 * after a warm-up step, pinned staging memory), event timing and the
 * precision setting. Sizes cover
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

#include "test_tap.h"

static pd_device *cpu, *dut; /* dut: the device under test */
static bool dut_is_cuda;
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

/* gemm's relative tolerance: f32 by default, TF32's (inputs rounded to 10
 * mantissa bits) in check_precision. */
static double gemm_tolerance = 1e-5;
static bool gemm_bf16_operands; /* round A and B to bf16 values first */

/* Row-major C = alpha op(A) op(B) + beta C with padded leading dimensions,
 * against a double reference: |error| <= gemm_tolerance (|alpha| |A||B| +
 * |beta C|). */
/* Rounds n floats in place to the nearest bf16 values (as the graph's bf16
 * mode hands the kernels their operands). */
static void round_to_bf16(float *x, int64_t n)
{
    uint16_t *half = malloc((size_t)n * sizeof *half);

    if (!half)
        abort();
    MUST(pd_dtype_convert(PD_BF16, half, PD_F32, x, (size_t)n));
    MUST(pd_dtype_convert(PD_F32, x, PD_BF16, half, (size_t)n));
    free(half);
}

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
    if (gemm_bf16_operands)
        round_to_bf16(a, a_rows * lda), round_to_bf16(b, b_rows * ldb);
    buffer_make(&ga, dut, PD_F32, a_rows * lda, 0, a);
    buffer_make(&gb, dut, PD_F32, b_rows * ldb, 0, b);
    buffer_make(&gc, dut, PD_F32, m * ldc, 0, c);
    s = dut->ops->gemm(dut, ta, tb, m, n, k, alpha, ga.t.data, lda, gb.t.data, ldb, beta, gc.t.data, ldc);
    if (s == PD_ENOTSUP) {
        printf("ok %d - gemm # SKIP %s\n", ++tap_cases, pd_last_error());
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
            if (!(fabs(got[i * ldc + j] - want) <= gemm_tolerance * scale + 1e-30)) {
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

/* Allocations of one "step": each block filled with `value` by a kernel
 * queued on the stream, read back, and freed while later work may reuse it. */
static bool allocation_step(const int64_t *sizes, int n, float value)
{
    pd_tensor *t[8];
    bool good = true;

    for (int i = 0; i < n; i++) {
        pd_shape shape = pd_shape_make(1, sizes[i]);
        MUST(pd_tensor_create(dut, PD_F32, &shape, &t[i]));
        MUST(dut->ops->fill(dut, t[i], value + (float)i));
    }
    for (int i = 0; i < n; i++) {
        float *h = to_host(t[i]);
        for (int64_t j = 0; j < sizes[i] && good; j++)
            good = h[j] == value + (float)i;
        free(h);
        pd_tensor_destroy(t[i]);
    }
    return good;
}

/* After a warm-up step, the same allocations come from the cache: no raw
 * allocation (cudaMalloc), and blocks reused in stream order hold what the
 * new owner wrote. */
static void check_caching(void)
{
    const int64_t sizes[] = {1, 1000, 4099, 1 << 20, (1 << 22) + 5, 1000};
    const int n = (int)(sizeof(sizes) / sizeof(sizes[0]));
    pd_device_memory_stats before, after;
    bool good = allocation_step(sizes, n, 1.0f);

    MUST(dut->ops->memory_stats(dut, &before));
    for (int step = 0; step < 10; step++)
        good = allocation_step(sizes, n, 10.0f * (float)(step + 2)) && good;
    MUST(dut->ops->memory_stats(dut, &after));
    ok(good, "reused blocks hold what their new owner wrote");
    ok(after.raw_allocs == before.raw_allocs,
       "no raw allocation after a warm-up step (%llu before, %llu after; %llu bytes cached, peak %llu in use)",
       (unsigned long long)before.raw_allocs, (unsigned long long)after.raw_allocs,
       (unsigned long long)after.bytes_cached, (unsigned long long)after.peak_bytes_in_use);
    ok(after.cache_hits - before.cache_hits >= 10u * (unsigned)n && after.bytes_in_use == before.bytes_in_use,
       "every allocation of the 10 steps was a cache hit (%llu), nothing left in use",
       (unsigned long long)(after.cache_hits - before.cache_hits));
}

/* LeNet training steps (forward, backward, SGD) on the device: after the
 * first, no raw allocation (cudaMalloc) and no allocation request at all. */
static void check_training_steps(void)
{
    const pd_model_options mo = {.batch = 8, .channels = 1, .height = 28, .width = 28, .classes = 10,
                                 .width_multiplier = 1.0f};
    const pd_sgd_desc sgd = {.lr = 0.01f, .momentum = 0.9f};
    pd_device_memory_stats warm = {0}, after;
    pd_optimizer *opt = NULL;
    pd_graph *g = NULL;
    pd_model_io io;
    pd_status s;

    MUST(pd_graph_create(dut, 1, &g));
    MUST(pd_model_build("lenet", g, &mo, &io));
    MUST(pd_graph_allocate(g));
    MUST(pd_optimizer_create_sgd(g, &sgd, &opt));
    MUST(pd_tensor_zero(pd_graph_output(g, io.images)));
    MUST(pd_tensor_zero(pd_graph_output(g, io.labels)));
    for (int step = 0; step < 4; step++) {
        if ((s = pd_graph_forward(g, step, true)) != PD_OK ||
            (s = pd_graph_backward(g, step, io.loss, NULL)) != PD_OK || (s = pd_optimizer_step(opt)) != PD_OK)
            break;
        if (step == 0)
            MUST(dut->ops->memory_stats(dut, &warm));
    }
    if (s == PD_ENOTSUP) {
        printf("ok %d - lenet training steps # SKIP %s\n", ++tap_cases, pd_last_error());
    } else {
        MUST(dut->ops->memory_stats(dut, &after));
        ok(s == PD_OK && after.raw_allocs == warm.raw_allocs && after.allocs == warm.allocs,
           "lenet training steps after a warm-up step: %llu raw allocations before, %llu after (%llu bytes in use)",
           (unsigned long long)warm.raw_allocs, (unsigned long long)after.raw_allocs,
           (unsigned long long)after.bytes_in_use);
    }
    pd_optimizer_destroy(opt);
    pd_graph_destroy(g);
}

/* Events around a kernel give a positive time; an unrecorded one is refused. */
static void check_events(void)
{
    pd_shape shape = pd_shape_make(1, (int64_t)1 << 24);
    pd_device_event *start, *stop;
    pd_tensor *t;
    double ms = -1.0;
    pd_status s;

    MUST(pd_tensor_create(dut, PD_F32, &shape, &t));
    MUST(dut->ops->event_create(dut, &start));
    MUST(dut->ops->event_create(dut, &stop));
    s = dut->ops->event_elapsed_ms(dut, start, stop, &ms);
    ok(s == PD_ESTATE, "elapsed time of unrecorded events is refused: %s", pd_last_error());
    MUST(dut->mem->synchronize(dut));
    MUST(dut->ops->event_record(dut, start));
    for (int i = 0; i < 4; i++)
        MUST(dut->ops->fill(dut, t, (float)i));
    MUST(dut->ops->event_record(dut, stop));
    s = dut->ops->event_elapsed_ms(dut, start, stop, &ms);
    ok(s == PD_OK && ms > 0.0 && ms < 60e3, "event timer: 4 fills of 64 MiB took %.4f ms", ms);
    dut->ops->event_destroy(dut, start);
    dut->ops->event_destroy(dut, stop);
    dut->ops->event_destroy(dut, NULL);
    pd_tensor_destroy(t);
}

/* Host staging memory (pinned on a GPU) round-trips through the device. */
static void check_host_memory(void)
{
    const int64_t n = (1 << 20) + 7;
    pd_shape shape = pd_shape_make(1, n);
    float *in = NULL, *out = NULL;
    pd_tensor *t;
    bool same = true;

    MUST(dut->ops->host_alloc(dut, (size_t)n * sizeof(float), (void **)&in));
    MUST(dut->ops->host_alloc(dut, (size_t)n * sizeof(float), (void **)&out));
    for (int64_t i = 0; i < n; i++)
        in[i] = (float)i * 0.5f;
    MUST(pd_tensor_create(dut, PD_F32, &shape, &t));
    MUST(pd_tensor_copy_from_host(t, in, (size_t)n * sizeof(float)));
    MUST(pd_tensor_copy_to_host(t, out, (size_t)n * sizeof(float)));
    for (int64_t i = 0; i < n && same; i++)
        same = out[i] == in[i];
    ok(same, "host staging memory round-trips %lld floats", (long long)n);
    pd_tensor_destroy(t);
    dut->ops->host_free(dut, in);
    dut->ops->host_free(dut, out);
    dut->ops->host_free(dut, NULL);
}

/* --precision: tf32 on a GPU (gemm within TF32's rounding), refused on the
 * CPU; bf16 accepted everywhere (the graph stores bf16 and hands the kernels
 * bf16-valued operands: pd_graph_set_precision), and on such operands the
 * gemm is as exact as in strict f32 (on CUDA it runs on the TF32 tensor
 * cores, whose products of bf16 values are exact); f32 restores strict
 * results. */
static void check_precision(void)
{
    pd_status s = dut->ops->set_precision(dut, PD_PRECISION_BF16);

    ok(s == PD_OK, "bf16 is accepted: %s", s == PD_OK ? "ok" : pd_last_error());
    gemm_bf16_operands = true; /* f32 sums: tensor cores may round them differently, far below TF32's 4e-3 */
    gemm_tolerance = 3e-5;
    check_gemm(false, false, 64, 96, 128, 1.0f, 0.0f);
    check_gemm(true, true, 33, 17, 29, 0.75f, 0.5f);
    gemm_bf16_operands = false;
    s = dut->ops->set_precision(dut, PD_PRECISION_TF32);
    if (!dut_is_cuda) {
        ok(s == PD_ENOTSUP && strstr(pd_last_error(), "CUDA"), "tf32 needs a CUDA device: %s", pd_last_error());
        return;
    }
    ok(s == PD_OK, "tf32 math mode set");
    gemm_tolerance = 4e-3;
    check_gemm(false, false, 64, 96, 128, 1.0f, 0.0f);
    check_gemm(true, true, 33, 17, 29, 0.75f, 0.5f);
    gemm_tolerance = 1e-5;
    ok(dut->ops->set_precision(dut, PD_PRECISION_F32) == PD_OK, "back to strict f32");
    check_gemm(false, false, 64, 96, 128, 1.0f, 0.0f);
}

/* ---- layer entries in the device's own kernels, against the CPU's ---- */

static void destroy_tensors(pd_tensor **tensors, size_t n)
{
    for (size_t i = 0; i < n; i++)
        pd_tensor_destroy(tensors[i]);
}

/* Destroys the tensors listed. */
#define DESTROY(...) \
    destroy_tensors((pd_tensor *[]){__VA_ARGS__}, sizeof((pd_tensor *[]){__VA_ARGS__}) / sizeof(pd_tensor *))

/* A tensor of `shape` on dev, filled from host data if given. */
static pd_tensor *tensor_of(pd_device *dev, pd_dtype dtype, pd_shape shape, const void *host)
{
    pd_tensor *t;

    MUST(pd_tensor_create(dev, dtype, &shape, &t));
    if (host && pd_tensor_nbytes(t) > 0)
        MUST(pd_tensor_copy_from_host(t, host, pd_tensor_nbytes(t)));
    return t;
}

/* A device copy of a CPU tensor. */
static pd_tensor *device_copy(const pd_tensor *t)
{
    void *h = to_host(t);
    pd_tensor *d = tensor_of(dut, t->dtype, t->shape, h);

    free(h);
    return d;
}

/* True if |got - want| <= rel |want| + abs element by element (f32); prints
 * the first element that is not. */
static bool close_to(const pd_tensor *want, const pd_tensor *got, double rel, double abs_tol)
{
    int64_t n = pd_tensor_numel(want);
    float *a = to_host(want), *b = to_host(got);
    bool good = n == pd_tensor_numel(got);

    for (int64_t i = 0; good && i < n; i++) {
        if (!(fabs((double)a[i] - (double)b[i]) <= rel * fabs((double)a[i]) + abs_tol)) {
            printf("# element %lld: cpu %.9g, device %.9g\n", (long long)i, (double)a[i], (double)b[i]);
            good = false;
        }
    }
    free(a);
    free(b);
    return good;
}

static int32_t *random_ids(int64_t n, int limit)
{
    int32_t *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(*v));

    for (int64_t i = 0; i < n; i++) {
        v[i] = (int32_t)uniform(0.0f, (float)limit);
        if (v[i] >= limit)
            v[i] = limit - 1;
    }
    return v;
}

/* Linear forward and backward: products within gemm's rounding of the
 * CPU's, the bias gradient (a column sum in double) the same to a float
 * rounding and bit for bit the same on a second run; the entries with dx
 * and dbias left out. */
static void check_linear(int64_t n, int64_t k, int64_t m)
{
    float *hx = random_floats(n * k, -1.0f, 1.0f), *hw = random_floats(m * k, -1.0f, 1.0f);
    float *hb = random_floats(m, -1.0f, 1.0f), *hdy = random_floats(n * m, -1.0f, 1.0f);
    pd_shape sx = pd_shape_make(2, n, k), sw = pd_shape_make(2, m, k), sb = pd_shape_make(1, m),
             sy = pd_shape_make(2, n, m);
    pd_tensor *cx = tensor_of(cpu, PD_F32, sx, hx), *cw = tensor_of(cpu, PD_F32, sw, hw);
    pd_tensor *cb = tensor_of(cpu, PD_F32, sb, hb), *cdy = tensor_of(cpu, PD_F32, sy, hdy);
    pd_tensor *gx = tensor_of(dut, PD_F32, sx, hx), *gw = tensor_of(dut, PD_F32, sw, hw);
    pd_tensor *gb = tensor_of(dut, PD_F32, sb, hb), *gdy = tensor_of(dut, PD_F32, sy, hdy);
    pd_tensor *cy = tensor_of(cpu, PD_F32, sy, NULL), *gy = tensor_of(dut, PD_F32, sy, NULL);
    pd_tensor *cdx = tensor_of(cpu, PD_F32, sx, NULL), *gdx = tensor_of(dut, PD_F32, sx, NULL);
    pd_tensor *cdw = tensor_of(cpu, PD_F32, sw, NULL), *gdw = tensor_of(dut, PD_F32, sw, NULL);
    pd_tensor *cdb = tensor_of(cpu, PD_F32, sb, NULL), *gdb = tensor_of(dut, PD_F32, sb, NULL);
    pd_tensor *gdb2 = tensor_of(dut, PD_F32, sb, NULL);
    pd_status sc, sg;

    sc = cpu->ops->linear_forward(cpu, cx, cw, cb, cy);
    sg = dut->ops->linear_forward(dut, gx, gw, gb, gy);
    ok(sc == PD_OK && sg == PD_OK && close_to(cy, gy, 1e-5, 1e-6 * (double)k), "linear forward [%lld,%lld] -> %lld",
       (long long)n, (long long)k, (long long)m);
    sc = cpu->ops->linear_forward(cpu, cx, cw, NULL, cy);
    sg = dut->ops->linear_forward(dut, gx, gw, NULL, gy);
    ok(sc == PD_OK && sg == PD_OK && close_to(cy, gy, 1e-5, 1e-6 * (double)k),
       "linear forward without bias [%lld,%lld] -> %lld", (long long)n, (long long)k, (long long)m);
    sc = cpu->ops->linear_backward(cpu, cx, cw, cdy, cdx, cdw, cdb);
    sg = dut->ops->linear_backward(dut, gx, gw, gdy, gdx, gdw, gdb);
    ok(sc == PD_OK && sg == PD_OK && close_to(cdx, gdx, 1e-5, 1e-6 * (double)m) &&
           close_to(cdw, gdw, 1e-5, 1e-6 * (double)n) && close_to(cdb, gdb, 1e-6, 1e-6),
       "linear backward [%lld,%lld] -> %lld: dx, dw, dbias", (long long)n, (long long)k, (long long)m);
    sg = dut->ops->linear_backward(dut, gx, gw, gdy, NULL, gdw, gdb2);
    ok(sg == PD_OK && same_bits(gdb, gdb2) && close_to(cdw, gdw, 1e-5, 1e-6 * (double)n),
       "linear backward without dx: dbias repeats bit for bit");
    sg = dut->ops->linear_backward(dut, gx, gw, gdy, gdx, gdw, NULL);
    ok(sg == PD_OK && close_to(cdx, gdx, 1e-5, 1e-6 * (double)m), "linear backward without dbias");

    DESTROY(cx, cw, cb, cdy, gx, gw, gb, gdy, cy, gy, cdx, gdx, cdw, gdw, cdb, gdb, gdb2);
    free(hx);
    free(hw);
    free(hb);
    free(hdy);
}

/* Softmax cross-entropy: probs and loss within a few ulp of the CPU's (the
 * exponentials differ), the loss repeatable bit for bit; the backward pass
 * from the same probs bit for bit the CPU's; a label out of
 * range refused with its row before anything is written. Row 0 has logits
 * near 1e4: the maximum must be subtracted. */
static void check_softmax_cross_entropy(int64_t n, int64_t c)
{
    float *hx = random_floats(n * c, -8.0f, 8.0f), *nan = malloc((size_t)(n * c > 0 ? n * c : 1) * sizeof(float));
    int32_t *hl = random_ids(n, (int)c);
    pd_shape sx = pd_shape_make(2, n, c), sl = pd_shape_make(1, n), one = pd_shape_make(1, (int64_t)1);
    float loss[2] = {0.0f, 0.0f};
    pd_status sc, sg;

    for (int64_t j = 0; j < c && n > 0; j++)
        hx[j] += 1e4f;
    for (int64_t i = 0; i < n * c; i++)
        nan[i] = NAN;
    pd_tensor *cx = tensor_of(cpu, PD_F32, sx, hx), *gx = tensor_of(dut, PD_F32, sx, hx);
    pd_tensor *cl = tensor_of(cpu, PD_I32, sl, hl), *gl = tensor_of(dut, PD_I32, sl, hl);
    pd_tensor *cp = tensor_of(cpu, PD_F32, sx, NULL), *gp = tensor_of(dut, PD_F32, sx, NULL);
    pd_tensor *closs = tensor_of(cpu, PD_F32, one, NULL), *gloss = tensor_of(dut, PD_F32, one, NULL);
    pd_tensor *gloss2 = tensor_of(dut, PD_F32, one, NULL);
    pd_tensor *cg = tensor_of(cpu, PD_F32, sx, NULL), *gg = tensor_of(dut, PD_F32, sx, NULL);

    sc = cpu->ops->softmax_cross_entropy_forward(cpu, cx, cl, cp, closs);
    sg = dut->ops->softmax_cross_entropy_forward(dut, gx, gl, gp, gloss);
    bool same = sc == PD_OK && sg == PD_OK && close_to(cp, gp, 1e-5, 1e-7) && close_to(closs, gloss, 1e-6, 1e-7);
    sg = dut->ops->softmax_cross_entropy_forward(dut, gx, gl, gp, gloss2);
    MUST(pd_tensor_copy_to_host(gloss, &loss[0], sizeof(float)));
    MUST(pd_tensor_copy_to_host(gloss2, &loss[1], sizeof(float)));
    ok(same && sg == PD_OK && memcmp(&loss[0], &loss[1], sizeof(float)) == 0,
       "softmax_cross_entropy forward [%lld,%lld]: loss %.7g, repeatable", (long long)n, (long long)c,
       (double)loss[0]);

    pd_tensor *gp_cpu = device_copy(cp); /* the same probs on both sides */
    sc = cpu->ops->softmax_cross_entropy_backward(cpu, cp, cl, 0.7f, cg);
    sg = dut->ops->softmax_cross_entropy_backward(dut, gp_cpu, gl, 0.7f, gg);
    ok(sc == PD_OK && sg == PD_OK && same_bits(cg, gg), "softmax_cross_entropy backward [%lld,%lld]", (long long)n,
       (long long)c);

    if (n > 0) {
        hl[n - 1] = (int32_t)c;
        MUST(pd_tensor_copy_from_host(gl, hl, (size_t)n * sizeof(int32_t)));
        MUST(pd_tensor_copy_from_host(gp, nan, (size_t)(n * c) * sizeof(float)));
        pd_error_clear();
        sg = dut->ops->softmax_cross_entropy_forward(dut, gx, gl, gp, gloss);
        char row[64];
        snprintf(row, sizeof(row), "row %lld is %lld", (long long)(n - 1), (long long)c);
        float *probs = to_host(gp);
        ok(sg == PD_EINVAL && strstr(pd_last_error(), row) && isnan(probs[0]),
           "softmax_cross_entropy label %lld of %lld classes refused, nothing written: %s", (long long)c,
           (long long)c, pd_last_error());
        free(probs);
        hl[n - 1] = -1;
        MUST(pd_tensor_copy_from_host(gl, hl, (size_t)n * sizeof(int32_t)));
        sg = dut->ops->softmax_cross_entropy_backward(dut, gx, gl, 1.0f, gg);
        ok(sg == PD_EINVAL && strstr(pd_last_error(), "backward labels"), "softmax_cross_entropy label -1 refused: %s",
           pd_last_error());
    }

    DESTROY(cx, gx, cl, gl, cp, gp, closs, gloss, gloss2, cg, gg, gp_cpu);
    free(hx);
    free(hl);
    free(nan);
}

/* Concatenation of n parts of random bytes (any dtype) along `axis`, and
 * the split back with part `skip` (or none, -1) left out: bit for bit the
 * CPU's. widths: each part's extent along the axis; base: the other dims. */
static void check_concat(pd_dtype dtype, int ndim, const int64_t *base, int axis, int n, const int64_t *widths,
                         int skip)
{
    pd_tensor *cx[16], *gx[16], *cd[16], *gd[16], views[16];
    pd_shape whole = {.ndim = ndim};
    bool same = true;
    pd_status sc, sg;

    for (int d = 0; d < ndim; d++)
        whole.dim[d] = d == axis ? 0 : base[d];
    for (int i = 0; i < n; i++) {
        pd_shape s = whole;
        s.dim[axis] = widths[i];
        whole.dim[axis] += widths[i];
        int64_t bytes = pd_shape_numel(&s) * (int64_t)pd_dtype_size(dtype);
        unsigned char *h = malloc((size_t)(bytes > 0 ? bytes : 1));
        for (int64_t b = 0; b < bytes; b++)
            h[b] = (unsigned char)uniform(0.0f, 256.0f);
        cx[i] = tensor_of(cpu, dtype, s, h);
        gx[i] = tensor_of(dut, dtype, s, h);
        cd[i] = tensor_of(cpu, dtype, s, NULL);
        gd[i] = tensor_of(dut, dtype, s, NULL);
        free(h);
    }
    pd_tensor *cy = tensor_of(cpu, dtype, whole, NULL), *gy = tensor_of(dut, dtype, whole, NULL);
    sc = cpu->ops->concat_forward(cpu, axis, n, (const pd_tensor *const *)cx, cy);
    sg = dut->ops->concat_forward(dut, axis, n, (const pd_tensor *const *)gx, gy);
    ok(sc == PD_OK && sg == PD_OK && same_bits(cy, gy), "concat %s rank %d axis %d, %d parts", pd_dtype_name(dtype),
       ndim, axis, n);
    if (skip >= 0) {
        pd_tensor_view(&views[0], cpu, dtype, &cd[skip]->shape, NULL);
        pd_tensor_view(&views[1], dut, dtype, &gd[skip]->shape, NULL);
    }
    pd_tensor *cparts[16], *gparts[16];
    for (int i = 0; i < n; i++) {
        cparts[i] = i == skip ? &views[0] : cd[i];
        gparts[i] = i == skip ? &views[1] : gd[i];
    }
    sc = cpu->ops->concat_backward(cpu, axis, n, cy, cparts);
    sg = dut->ops->concat_backward(dut, axis, n, gy, gparts);
    for (int i = 0; i < n && sc == PD_OK && sg == PD_OK; i++)
        if (i != skip)
            same = same && same_bits(cd[i], gd[i]) && same_bits(cx[i], gd[i]);
    ok(sc == PD_OK && sg == PD_OK && same, "concat backward %s axis %d, %d parts, part %d skipped",
       pd_dtype_name(dtype), axis, n, skip);
    for (int i = 0; i < n; i++) {
        pd_tensor_destroy(cx[i]);
        pd_tensor_destroy(gx[i]);
        pd_tensor_destroy(cd[i]);
        pd_tensor_destroy(gd[i]);
    }
    pd_tensor_destroy(cy);
    pd_tensor_destroy(gy);
}

/* Embedding gather and scatter-add: bit for bit the CPU's, repeated ids
 * included (the device adds each id's rows in position order, as the CPU),
 * into a gradient table that starts as NaN; an id out of range refused. */
static void check_embedding(pd_shape ids_shape, int vocab, int64_t dim)
{
    int64_t n = pd_shape_numel(&ids_shape);
    int32_t *hid = random_ids(n, vocab);
    pd_shape st = pd_shape_make(2, (int64_t)vocab, dim), sy = ids_shape;
    float *ht = random_floats(vocab * dim, -1.0f, 1.0f), *hdy, *nan = malloc((size_t)(vocab * dim) * sizeof(float));
    pd_status sc, sg;

    sy.dim[sy.ndim++] = dim;
    hdy = random_floats(n * dim, -1.0f, 1.0f);
    for (int64_t i = 0; i < vocab * dim; i++)
        nan[i] = NAN;
    pd_tensor *cids = tensor_of(cpu, PD_I32, ids_shape, hid), *gids = tensor_of(dut, PD_I32, ids_shape, hid);
    pd_tensor *ct = tensor_of(cpu, PD_F32, st, ht), *gt = tensor_of(dut, PD_F32, st, ht);
    pd_tensor *cy = tensor_of(cpu, PD_F32, sy, NULL), *gy = tensor_of(dut, PD_F32, sy, NULL);
    pd_tensor *cdy = tensor_of(cpu, PD_F32, sy, hdy), *gdy = tensor_of(dut, PD_F32, sy, hdy);
    pd_tensor *cdt = tensor_of(cpu, PD_F32, st, NULL), *gdt = tensor_of(dut, PD_F32, st, nan);
    pd_tensor *gdt2 = tensor_of(dut, PD_F32, st, nan);

    sc = cpu->ops->embedding_forward(cpu, cids, ct, cy);
    sg = dut->ops->embedding_forward(dut, gids, gt, gy);
    ok(sc == PD_OK && sg == PD_OK && same_bits(cy, gy), "embedding forward %lld ids, vocab %d, dim %lld",
       (long long)n, vocab, (long long)dim);
    sc = cpu->ops->embedding_backward(cpu, cids, cdy, cdt);
    sg = dut->ops->embedding_backward(dut, gids, gdy, gdt);
    bool same = sc == PD_OK && sg == PD_OK && same_bits(cdt, gdt);
    sg = dut->ops->embedding_backward(dut, gids, gdy, gdt2);
    ok(same && sg == PD_OK && same_bits(gdt, gdt2), "embedding backward %lld ids, vocab %d, dim %lld: bit for bit, "
       "repeatable", (long long)n, vocab, (long long)dim);
    if (n > 0) {
        hid[n / 2] = vocab;
        MUST(pd_tensor_copy_from_host(gids, hid, (size_t)n * sizeof(int32_t)));
        pd_error_clear();
        sg = dut->ops->embedding_backward(dut, gids, gdy, gdt);
        ok(sg == PD_EINVAL && strstr(pd_last_error(), "outside the vocabulary"), "embedding id %d refused: %s", vocab,
           pd_last_error());
    }
    DESTROY(cids, gids, ct, gt, cy, gy, cdy, gdy, cdt, gdt, gdt2);
    free(hid);
    free(ht);
    free(hdy);
    free(nan);
}

/* One LSTM step forward and back (with and without dc) within a few ulp of
 * the CPU's (expf and tanhf differ), the backward pass from the CPU's act
 * and c on both sides. */
static void check_lstm_cell(int64_t n, int64_t hid)
{
    pd_shape sg4 = pd_shape_make(2, n, 4 * hid), sh = pd_shape_make(2, n, hid);
    float *hg = random_floats(n * 4 * hid, -3.0f, 3.0f), *hc = random_floats(n * hid, -2.0f, 2.0f);
    float *hdh = random_floats(n * hid, -1.0f, 1.0f), *hdc = random_floats(n * hid, -1.0f, 1.0f);
    pd_tensor *cgates = tensor_of(cpu, PD_F32, sg4, hg), *ggates = tensor_of(dut, PD_F32, sg4, hg);
    pd_tensor *ccp = tensor_of(cpu, PD_F32, sh, hc), *gcp = tensor_of(dut, PD_F32, sh, hc);
    pd_tensor *cact = tensor_of(cpu, PD_F32, sg4, NULL), *gact = tensor_of(dut, PD_F32, sg4, NULL);
    pd_tensor *cc = tensor_of(cpu, PD_F32, sh, NULL), *gc = tensor_of(dut, PD_F32, sh, NULL);
    pd_tensor *ch = tensor_of(cpu, PD_F32, sh, NULL), *gh = tensor_of(dut, PD_F32, sh, NULL);
    pd_tensor *cdh = tensor_of(cpu, PD_F32, sh, hdh), *gdh = tensor_of(dut, PD_F32, sh, hdh);
    pd_tensor *cdc = tensor_of(cpu, PD_F32, sh, hdc), *gdc = tensor_of(dut, PD_F32, sh, hdc);
    pd_tensor *cdg = tensor_of(cpu, PD_F32, sg4, NULL), *gdg = tensor_of(dut, PD_F32, sg4, NULL);
    pd_tensor *cdcp = tensor_of(cpu, PD_F32, sh, NULL), *gdcp = tensor_of(dut, PD_F32, sh, NULL);
    pd_status sc, sg;

    sc = cpu->ops->lstm_cell_forward(cpu, cgates, ccp, cact, cc, ch);
    sg = dut->ops->lstm_cell_forward(dut, ggates, gcp, gact, gc, gh);
    ok(sc == PD_OK && sg == PD_OK && close_to(cact, gact, 1e-6, 1e-7) && close_to(cc, gc, 1e-6, 2e-6) &&
           close_to(ch, gh, 1e-5, 1e-6),
       "lstm cell forward N=%lld H=%lld: act, c, h", (long long)n, (long long)hid);
    pd_tensor *gact_cpu = device_copy(cact), *gc_cpu = device_copy(cc);
    for (int with_dc = 0; with_dc < 2; with_dc++) {
        sc = cpu->ops->lstm_cell_backward(cpu, cact, ccp, cc, cdh, with_dc ? cdc : NULL, cdg, cdcp);
        sg = dut->ops->lstm_cell_backward(dut, gact_cpu, gcp, gc_cpu, gdh, with_dc ? gdc : NULL, gdg, gdcp);
        ok(sc == PD_OK && sg == PD_OK && close_to(cdg, gdg, 1e-5, 1e-6) && close_to(cdcp, gdcp, 1e-5, 1e-6),
           "lstm cell backward N=%lld H=%lld %s dc: dgates, dc_prev", (long long)n, (long long)hid,
           with_dc ? "with" : "without");
    }
    DESTROY(cgates, ggates, ccp, gcp, cact, gact, cc, gc, ch, gh, cdh, gdh, cdc, gdc, cdg, gdg, cdcp,
            gdcp, gact_cpu, gc_cpu);
    free(hg);
    free(hc);
    free(hdh);
    free(hdc);
}

static void check_layer_entries(void)
{
    const int64_t base4[4] = {2, 3, 4, 5}, w3[3] = {3, 2, 1}, w_last[3] = {1, 3, 2}, w_u8[2] = {3, 1};
    const int64_t base2[2] = {37, 6}, w_many[11] = {1, 2, 3, 1, 1, 2, 3, 1, 2, 1, 3}, w_rows[2] = {5, 9};

    check_linear(1000, 33, 70); /* more rows than one chunk of the bias gradient */
    check_linear(7, 16, 8);     /* the bias four at a time */
    check_linear(0, 5, 3);      /* no rows: zero gradients */
    check_softmax_cross_entropy(257, 37); /* a warp per row */
    check_softmax_cross_entropy(5, 1000); /* a block per row */
    check_softmax_cross_entropy(0, 10);
    check_concat(PD_F32, 4, base4, 1, 3, w3, 1);
    check_concat(PD_F32, 4, base4, 3, 3, w_last, 0);
    check_concat(PD_F32, 2, base2, 0, 2, w_rows, -1);
    check_concat(PD_F32, 2, base2, 1, 11, w_many, 7); /* more parts than one launch moves */
    check_concat(PD_U8, 4, base4, 2, 2, w_u8, -1);
    check_concat(PD_BF16, 4, base4, 1, 3, w3, 2);
    check_concat(PD_I32, 4, base4, 0, 2, w_u8, -1);
    check_embedding(pd_shape_make(2, (int64_t)50, (int64_t)100), 300, 37);
    check_embedding(pd_shape_make(1, (int64_t)4096), 3, 64); /* runs of ~1400 repeats */
    check_embedding(pd_shape_make(2, (int64_t)5, (int64_t)3), 1000, 8);
    check_embedding(pd_shape_make(2, (int64_t)0, (int64_t)4), 5, 3);
    check_lstm_cell(5, 37);
    check_lstm_cell(64, 256);
    check_lstm_cell(1, 1);
    if (dut_is_cuda) { /* a host tensor among device ones is named, not read */
        pd_shape sh = pd_shape_make(2, (int64_t)2, (int64_t)3), sg4 = pd_shape_make(2, (int64_t)2, (int64_t)12);
        pd_tensor *gates = tensor_of(dut, PD_F32, sg4, NULL), *act = tensor_of(dut, PD_F32, sg4, NULL);
        pd_tensor *host_c = tensor_of(cpu, PD_F32, sh, NULL), *c = tensor_of(dut, PD_F32, sh, NULL);
        pd_tensor *h = tensor_of(dut, PD_F32, sh, NULL);
        pd_status s = dut->ops->lstm_cell_forward(dut, gates, host_c, act, c, h);
        ok(s == PD_EINVAL && strstr(pd_last_error(), "lstm cell c_prev"), "lstm cell refuses a host c_prev: %s",
           pd_last_error());
        DESTROY(gates, act, host_c, c, h);
    }
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
    check_layer_entries();
    check_errors();
    check_memory();
    check_caching();
    check_training_steps();
    check_events();
    check_host_memory();
    check_precision();

    ok(dut->mem->synchronize(dut) == PD_OK, "no asynchronous fault on the stream");
    printf("1..%d\n", tap_cases);
    pd_device_close(dut);
    pd_device_close(cpu);
    return tap_failures ? 1 : 0;
}
