/* Argument checks shared by every backend. */
#include "config.h"

#include <limits.h>

#include "kernels/pd_kernels_int.h"

pd_status pd_kernel_expect_f32(const pd_tensor *t, const pd_shape *shape, const char *what)
{
    if (!t)
        return PD_ERROR(PD_EINVAL, "%s: missing tensor", what);
    PD_CHECK(pd_tensor_expect(t, PD_F32, shape, what));
    if (!pd_tensor_is_contiguous(t))
        return PD_ERROR(PD_ESHAPE, "%s: tensor is not contiguous", what);
    return PD_OK;
}

pd_status pd_kernel_expect_same(const pd_tensor *a, const pd_tensor *b, const char *what)
{
    if (!a || !b)
        return PD_ERROR(PD_EINVAL, "%s: missing tensor", what);
    return pd_tensor_expect(b, a->dtype, &a->shape, what);
}

int64_t pd_window_output_size(int64_t in, int kernel, int stride, int pad, int dilation, bool ceil_mode)
{
    int64_t span = in + 2 * (int64_t)pad - (int64_t)dilation * (kernel - 1) - 1;
    int64_t out;

    if (stride <= 0 || kernel <= 0 || dilation <= 0 || span < 0)
        return 0;
    out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
    /* PyTorch: the last window must start inside the input or left padding. */
    if (ceil_mode && (out - 1) * stride >= in + pad)
        out--;
    return out;
}

static bool fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

pd_status pd_kernel_check_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a,
                               int64_t lda, const float *b, int64_t ldb, const float *c, int64_t ldc, bool *empty)
{
    int64_t a_cols = trans_a ? m : k; /* columns of A as stored */
    int64_t b_cols = trans_b ? k : n;

    if (!fits_int(m) || !fits_int(n) || !fits_int(k))
        return PD_ERROR(PD_EINVAL, "gemm: dimensions m=%lld n=%lld k=%lld must lie in [0, %d]", (long long)m,
                        (long long)n, (long long)k, INT_MAX);
    if (!fits_int(lda) || !fits_int(ldb) || !fits_int(ldc) || lda < (a_cols > 1 ? a_cols : 1) ||
        ldb < (b_cols > 1 ? b_cols : 1) || ldc < (n > 1 ? n : 1))
        return PD_ERROR(PD_ESHAPE, "gemm: leading dimensions lda=%lld ldb=%lld ldc=%lld too small for A %s [%lld,%lld], "
                        "B %s [%lld,%lld], C [%lld,%lld]", (long long)lda, (long long)ldb, (long long)ldc,
                        trans_a ? "stored transposed" : "stored", (long long)(trans_a ? k : m), (long long)a_cols,
                        trans_b ? "stored transposed" : "stored", (long long)(trans_b ? n : k), (long long)b_cols,
                        (long long)m, (long long)n);
    *empty = m == 0 || n == 0;
    if (!*empty && (!c || (k > 0 && (!a || !b))))
        return PD_ERROR(PD_EINVAL, "gemm: missing matrix pointer");
    return PD_OK;
}

pd_status pd_kernel_check_sgd(const pd_sgd_desc *desc, const pd_tensor *w, const pd_tensor *g,
                              const pd_tensor *momentum_buf)
{
    PD_CHECK(pd_kernel_expect_f32(w, w ? &w->shape : NULL, "sgd w"));
    PD_CHECK(pd_kernel_expect_f32(g, &w->shape, "sgd g"));
    if (!(desc->lr >= 0.0f) || !(desc->momentum >= 0.0f) || !(desc->weight_decay >= 0.0f))
        return PD_ERROR(PD_EINVAL, "sgd: lr, momentum and weight_decay must be >= 0, got %g, %g, %g",
                        (double)desc->lr, (double)desc->momentum, (double)desc->weight_decay);
    if (desc->nesterov && (desc->momentum <= 0.0f || desc->dampening != 0.0f))
        return PD_ERROR(PD_EINVAL, "sgd: nesterov needs momentum > 0 and dampening 0, got %g and %g",
                        (double)desc->momentum, (double)desc->dampening);
    if (desc->momentum != 0.0f)
        PD_CHECK(pd_kernel_expect_f32(momentum_buf, &w->shape, "sgd momentum buffer"));
    return PD_OK;
}

pd_status pd_kernel_check_adam(const pd_adam_desc *desc, const pd_tensor *w, const pd_tensor *g, const pd_tensor *m,
                               const pd_tensor *v)
{
    PD_CHECK(pd_kernel_expect_f32(w, w ? &w->shape : NULL, "adam w"));
    PD_CHECK(pd_kernel_expect_f32(g, &w->shape, "adam g"));
    PD_CHECK(pd_kernel_expect_f32(m, &w->shape, "adam m"));
    PD_CHECK(pd_kernel_expect_f32(v, &w->shape, "adam v"));
    if (desc->step < 1)
        return PD_ERROR(PD_EINVAL, "adam: step counts from 1, got %lld", (long long)desc->step);
    if (!(desc->lr >= 0.0f) || !(desc->eps >= 0.0f) || !(desc->weight_decay >= 0.0f))
        return PD_ERROR(PD_EINVAL, "adam: lr, eps and weight_decay must be >= 0, got %g, %g, %g", (double)desc->lr,
                        (double)desc->eps, (double)desc->weight_decay);
    if (!(desc->beta1 >= 0.0f && desc->beta1 < 1.0f) || !(desc->beta2 >= 0.0f && desc->beta2 < 1.0f))
        return PD_ERROR(PD_EINVAL, "adam: betas must be in [0,1), got %g and %g", (double)desc->beta1,
                        (double)desc->beta2);
    return PD_OK;
}
