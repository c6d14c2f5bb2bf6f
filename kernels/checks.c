/* Argument checks shared by every backend. */
#include "config.h"

#include <limits.h>
#include <stdio.h>

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

/* Checks the descriptor, the input-side tensor x (dx in backward_data) and
 * the filter w (dw in backward_filter), and derives the sizes. */
static pd_status check_conv2d(const char *op, const pd_conv2d_desc *d, const pd_tensor *x, const char *x_name,
                              const pd_tensor *w, const char *w_name, pd_conv2d_dims *dims)
{
    char buf[96];

    if (!d || !x || !w)
        return PD_ERROR(PD_EINVAL, "%s: missing descriptor or tensor", op);
    if (d->kernel_h <= 0 || d->kernel_w <= 0 || d->stride_h <= 0 || d->stride_w <= 0 || d->pad_h < 0 ||
        d->pad_w < 0 || d->dilation_h <= 0 || d->dilation_w <= 0 || d->groups <= 0)
        return PD_ERROR(PD_EINVAL,
                        "%s: bad descriptor kernel %dx%d stride %dx%d pad %dx%d dilation %dx%d groups %d "
                        "(kernel, stride, dilation, groups must be positive, padding non-negative)",
                        op, d->kernel_h, d->kernel_w, d->stride_h, d->stride_w, d->pad_h, d->pad_w, d->dilation_h,
                        d->dilation_w, d->groups);
    PD_CHECK(pd_kernel_expect_f32(x, &x->shape, x_name));
    PD_CHECK(pd_kernel_expect_f32(w, &w->shape, w_name));
    if (x->shape.ndim != 4 || x->shape.dim[1] <= 0 || x->shape.dim[2] <= 0 || x->shape.dim[3] <= 0)
        return PD_ERROR(PD_ESHAPE, "%s: %s must be [N,C,H,W] with C, H, W > 0, got %s", op, x_name,
                        pd_shape_format(&x->shape, buf, sizeof(buf)));
    if (w->shape.ndim != 4 || w->shape.dim[0] <= 0)
        return PD_ERROR(PD_ESHAPE, "%s: %s must be [K,C/groups,R,S] with K > 0, got %s", op, w_name,
                        pd_shape_format(&w->shape, buf, sizeof(buf)));
    dims->n = x->shape.dim[0];
    dims->c = x->shape.dim[1];
    dims->h = x->shape.dim[2];
    dims->w = x->shape.dim[3];
    dims->k = w->shape.dim[0];
    if (dims->c % d->groups != 0 || dims->k % d->groups != 0)
        return PD_ERROR(PD_ESHAPE, "%s: groups %d must divide input channels %lld and output channels %lld", op,
                        d->groups, (long long)dims->c, (long long)dims->k);
    pd_shape want_w =
        pd_shape_make(4, dims->k, dims->c / d->groups, (int64_t)d->kernel_h, (int64_t)d->kernel_w);
    PD_CHECK(pd_kernel_expect_f32(w, &want_w, w_name));
    dims->p = pd_window_output_size(dims->h, d->kernel_h, d->stride_h, d->pad_h, d->dilation_h, false);
    dims->q = pd_window_output_size(dims->w, d->kernel_w, d->stride_w, d->pad_w, d->dilation_w, false);
    if (dims->p <= 0 || dims->q <= 0)
        return PD_ERROR(PD_ESHAPE, "%s: dilated kernel %dx%d (dilation %dx%d) exceeds padded input %lldx%lld", op,
                        d->kernel_h, d->kernel_w, d->dilation_h, d->dilation_w, (long long)(dims->h + 2 * d->pad_h),
                        (long long)(dims->w + 2 * d->pad_w));
    return PD_OK;
}

pd_status pd_kernel_check_conv2d_forward(const pd_conv2d_desc *d, const pd_tensor *x, const pd_tensor *w,
                                         const pd_tensor *bias, const pd_tensor *y, pd_conv2d_dims *dims)
{
    PD_CHECK(check_conv2d("conv2d forward", d, x, "conv2d x", w, "conv2d w", dims));
    pd_shape want_y = pd_shape_make(4, dims->n, dims->k, dims->p, dims->q), want_bias = pd_shape_make(1, dims->k);
    PD_CHECK(pd_kernel_expect_f32(y, &want_y, "conv2d forward y"));
    if (bias)
        PD_CHECK(pd_kernel_expect_f32(bias, &want_bias, "conv2d forward bias"));
    return PD_OK;
}

pd_status pd_kernel_check_conv2d_backward_data(const pd_conv2d_desc *d, const pd_tensor *dy, const pd_tensor *w,
                                               const pd_tensor *dx, pd_conv2d_dims *dims)
{
    PD_CHECK(check_conv2d("conv2d backward data", d, dx, "conv2d dx", w, "conv2d w", dims));
    pd_shape want_dy = pd_shape_make(4, dims->n, dims->k, dims->p, dims->q);
    return pd_kernel_expect_f32(dy, &want_dy, "conv2d backward data dy");
}

pd_status pd_kernel_check_conv2d_backward_filter(const pd_conv2d_desc *d, const pd_tensor *x, const pd_tensor *dy,
                                                 const pd_tensor *dw, const pd_tensor *dbias, pd_conv2d_dims *dims)
{
    PD_CHECK(check_conv2d("conv2d backward filter", d, x, "conv2d x", dw, "conv2d dw", dims));
    pd_shape want_dy = pd_shape_make(4, dims->n, dims->k, dims->p, dims->q), want_bias = pd_shape_make(1, dims->k);
    PD_CHECK(pd_kernel_expect_f32(dy, &want_dy, "conv2d backward filter dy"));
    if (dbias)
        PD_CHECK(pd_kernel_expect_f32(dbias, &want_bias, "conv2d backward filter dbias"));
    return PD_OK;
}

/* Checks a pooling descriptor and x [N,C,H,W], and derives the sizes. */
static pd_status check_pool2d(const char *op, const pd_pool2d_desc *d, const pd_tensor *x, pd_pool2d_dims *dims)
{
    char buf[96];

    if (!d || !x)
        return PD_ERROR(PD_EINVAL, "%s: missing descriptor or tensor", op);
    if (d->mode != PD_POOL_MAX && d->mode != PD_POOL_AVG)
        return PD_ERROR(PD_EINVAL, "%s: unknown pooling mode %d", op, (int)d->mode);
    if (d->kernel_h <= 0 || d->kernel_w <= 0 || d->stride_h <= 0 || d->stride_w <= 0 || d->pad_h < 0 ||
        d->pad_w < 0 || d->pad_h > d->kernel_h / 2 || d->pad_w > d->kernel_w / 2)
        return PD_ERROR(PD_EINVAL,
                        "%s: bad descriptor kernel %dx%d stride %dx%d pad %dx%d (kernel and stride must be "
                        "positive, padding between 0 and half the kernel)",
                        op, d->kernel_h, d->kernel_w, d->stride_h, d->stride_w, d->pad_h, d->pad_w);
    PD_CHECK(pd_kernel_expect_f32(x, &x->shape, "pool2d x"));
    if (x->shape.ndim != 4 || x->shape.dim[1] <= 0 || x->shape.dim[2] <= 0 || x->shape.dim[3] <= 0)
        return PD_ERROR(PD_ESHAPE, "%s: pool2d x must be [N,C,H,W] with C, H, W > 0, got %s", op,
                        pd_shape_format(&x->shape, buf, sizeof(buf)));
    dims->n = x->shape.dim[0];
    dims->c = x->shape.dim[1];
    dims->h = x->shape.dim[2];
    dims->w = x->shape.dim[3];
    dims->p = pd_window_output_size(dims->h, d->kernel_h, d->stride_h, d->pad_h, 1, d->ceil_mode);
    dims->q = pd_window_output_size(dims->w, d->kernel_w, d->stride_w, d->pad_w, 1, d->ceil_mode);
    if (dims->p <= 0 || dims->q <= 0)
        return PD_ERROR(PD_ESHAPE, "%s: kernel %dx%d exceeds padded input %lldx%lld", op, d->kernel_h, d->kernel_w,
                        (long long)(dims->h + 2 * d->pad_h), (long long)(dims->w + 2 * d->pad_w));
    return PD_OK;
}

pd_status pd_kernel_check_pool2d_forward(const pd_pool2d_desc *d, const pd_tensor *x, const pd_tensor *y,
                                         pd_pool2d_dims *dims)
{
    PD_CHECK(check_pool2d("pool2d forward", d, x, dims));
    pd_shape want_y = pd_shape_make(4, dims->n, dims->c, dims->p, dims->q);
    return pd_kernel_expect_f32(y, &want_y, "pool2d forward y");
}

pd_status pd_kernel_check_pool2d_backward(const pd_pool2d_desc *d, const pd_tensor *x, const pd_tensor *y,
                                          const pd_tensor *dy, const pd_tensor *dx, pd_pool2d_dims *dims)
{
    PD_CHECK(check_pool2d("pool2d backward", d, x, dims));
    pd_shape want_y = pd_shape_make(4, dims->n, dims->c, dims->p, dims->q);
    PD_CHECK(pd_kernel_expect_f32(y, &want_y, "pool2d backward y"));
    PD_CHECK(pd_kernel_expect_f32(dy, &want_y, "pool2d backward dy"));
    return pd_kernel_expect_f32(dx, &x->shape, "pool2d backward dx");
}

/* Checks an LRN descriptor and x [N,C,H,W] (named `what`), and derives the sizes. */
static pd_status check_lrn(const pd_lrn_desc *desc, const pd_tensor *x, const char *what, pd_lrn_dims *dims)
{
    PD_CHECK(pd_kernel_expect_f32(x, x ? &x->shape : NULL, what));
    if (x->shape.ndim != 4)
        return PD_ERROR(PD_ESHAPE, "%s: expected [N,C,H,W], got rank %d", what, x->shape.ndim);
    if (!desc || desc->size < 1)
        return PD_ERROR(PD_EINVAL, "%s: size must be >= 1, got %d", what, desc ? desc->size : 0);
    dims->n = x->shape.dim[0];
    dims->c = x->shape.dim[1];
    dims->spatial = x->shape.dim[2] * x->shape.dim[3];
    return PD_OK;
}

pd_status pd_kernel_check_lrn_forward(const pd_lrn_desc *desc, const pd_tensor *x, const pd_tensor *y,
                                      pd_lrn_dims *dims)
{
    PD_CHECK(check_lrn(desc, x, "lrn forward x", dims));
    return pd_kernel_expect_f32(y, &x->shape, "lrn forward y");
}

pd_status pd_kernel_check_lrn_backward(const pd_lrn_desc *desc, const pd_tensor *x, const pd_tensor *y,
                                       const pd_tensor *dy, const pd_tensor *dx, pd_lrn_dims *dims)
{
    PD_CHECK(check_lrn(desc, x, "lrn backward x", dims));
    PD_CHECK(pd_kernel_expect_f32(y, &x->shape, "lrn backward y"));
    PD_CHECK(pd_kernel_expect_f32(dy, &x->shape, "lrn backward dy"));
    return pd_kernel_expect_f32(dx, &x->shape, "lrn backward dx");
}

/* Checks x [N,C,...] of a batch normalisation and derives the sizes. */
static pd_status check_batchnorm_x(const pd_tensor *x, const char *what, pd_batchnorm_dims *dims)
{
    PD_CHECK(pd_kernel_expect_f32(x, x ? &x->shape : NULL, what));
    if (x->shape.ndim < 2)
        return PD_ERROR(PD_ESHAPE, "%s: expected [N,C] or [N,C,H,W], got rank %d", what, x->shape.ndim);
    dims->n = x->shape.dim[0];
    dims->c = x->shape.dim[1];
    dims->spatial = 1;
    for (int i = 2; i < x->shape.ndim; i++)
        dims->spatial *= x->shape.dim[i];
    return PD_OK;
}

static pd_status check_batchnorm_desc(const pd_batchnorm_desc *desc, const char *what)
{
    if (!desc)
        return PD_ERROR(PD_EINVAL, "%s: missing descriptor", what);
    if (!(desc->eps > 0.0f))
        return PD_ERROR(PD_EINVAL, "%s: eps must be > 0, got %g", what, (double)desc->eps);
    if (!(desc->momentum >= 0.0f && desc->momentum <= 1.0f))
        return PD_ERROR(PD_EINVAL, "%s: momentum must be in [0,1], got %g", what, (double)desc->momentum);
    return PD_OK;
}

pd_status pd_kernel_check_batchnorm_train(const pd_batchnorm_desc *desc, const pd_tensor *x, const pd_tensor *gamma,
                                          const pd_tensor *beta, const pd_tensor *running_mean,
                                          const pd_tensor *running_var, const pd_tensor *y,
                                          const pd_tensor *save_mean, const pd_tensor *save_invstd,
                                          pd_batchnorm_dims *dims)
{
    PD_CHECK(check_batchnorm_desc(desc, "batchnorm forward"));
    PD_CHECK(check_batchnorm_x(x, "batchnorm forward x", dims));
    pd_shape cs = pd_shape_make(1, dims->c);
    PD_CHECK(pd_kernel_expect_f32(gamma, &cs, "batchnorm forward gamma"));
    PD_CHECK(pd_kernel_expect_f32(beta, &cs, "batchnorm forward beta"));
    PD_CHECK(pd_kernel_expect_f32(running_mean, &cs, "batchnorm forward running_mean"));
    PD_CHECK(pd_kernel_expect_f32(running_var, &cs, "batchnorm forward running_var"));
    PD_CHECK(pd_kernel_expect_f32(save_mean, &cs, "batchnorm forward save_mean"));
    PD_CHECK(pd_kernel_expect_f32(save_invstd, &cs, "batchnorm forward save_invstd"));
    PD_CHECK(pd_kernel_expect_f32(y, &x->shape, "batchnorm forward y"));
    if (dims->n * dims->spatial < 2)
        return PD_ERROR(PD_EINVAL, "batchnorm forward: training needs more than one value per channel, got %lld",
                        (long long)(dims->n * dims->spatial));
    return PD_OK;
}

pd_status pd_kernel_check_batchnorm_eval(const pd_batchnorm_desc *desc, const pd_tensor *x, const pd_tensor *gamma,
                                         const pd_tensor *beta, const pd_tensor *running_mean,
                                         const pd_tensor *running_var, const pd_tensor *y, pd_batchnorm_dims *dims)
{
    PD_CHECK(check_batchnorm_desc(desc, "batchnorm eval"));
    PD_CHECK(check_batchnorm_x(x, "batchnorm eval x", dims));
    pd_shape cs = pd_shape_make(1, dims->c);
    PD_CHECK(pd_kernel_expect_f32(gamma, &cs, "batchnorm eval gamma"));
    PD_CHECK(pd_kernel_expect_f32(beta, &cs, "batchnorm eval beta"));
    PD_CHECK(pd_kernel_expect_f32(running_mean, &cs, "batchnorm eval running_mean"));
    PD_CHECK(pd_kernel_expect_f32(running_var, &cs, "batchnorm eval running_var"));
    return pd_kernel_expect_f32(y, &x->shape, "batchnorm eval y");
}

pd_status pd_kernel_check_batchnorm_backward(const pd_batchnorm_desc *desc, const pd_tensor *x, const pd_tensor *dy,
                                             const pd_tensor *gamma, const pd_tensor *save_mean,
                                             const pd_tensor *save_invstd, const pd_tensor *dx,
                                             const pd_tensor *dgamma, const pd_tensor *dbeta, pd_batchnorm_dims *dims)
{
    PD_CHECK(check_batchnorm_desc(desc, "batchnorm backward"));
    PD_CHECK(check_batchnorm_x(x, "batchnorm backward x", dims));
    pd_shape cs = pd_shape_make(1, dims->c);
    PD_CHECK(pd_kernel_expect_f32(dy, &x->shape, "batchnorm backward dy"));
    PD_CHECK(pd_kernel_expect_f32(gamma, &cs, "batchnorm backward gamma"));
    PD_CHECK(pd_kernel_expect_f32(save_mean, &cs, "batchnorm backward save_mean"));
    PD_CHECK(pd_kernel_expect_f32(save_invstd, &cs, "batchnorm backward save_invstd"));
    if (dx)
        PD_CHECK(pd_kernel_expect_f32(dx, &x->shape, "batchnorm backward dx"));
    if (dgamma)
        PD_CHECK(pd_kernel_expect_f32(dgamma, &cs, "batchnorm backward dgamma"));
    if (dbeta)
        PD_CHECK(pd_kernel_expect_f32(dbeta, &cs, "batchnorm backward dbeta"));
    return PD_OK;
}

/* Checks x [N,K] and w [M,K] of a fully connected layer and derives the sizes. */
static pd_status check_linear(const char *op, const pd_tensor *x, const pd_tensor *w, pd_linear_dims *dims)
{
    char buf[96];

    if (!x || !w)
        return PD_ERROR(PD_EINVAL, "%s: missing x or w", op);
    PD_CHECK(pd_kernel_expect_f32(x, &x->shape, "linear x"));
    PD_CHECK(pd_kernel_expect_f32(w, &w->shape, "linear w"));
    if (x->shape.ndim != 2)
        return PD_ERROR(PD_ESHAPE, "%s: x must be 2-D [N,K], got %s", op, pd_shape_format(&x->shape, buf, sizeof(buf)));
    if (w->shape.ndim != 2 || w->shape.dim[1] != x->shape.dim[1])
        return PD_ERROR(PD_ESHAPE, "%s: w must be [M,%lld] to match x's features, got %s", op,
                        (long long)x->shape.dim[1], pd_shape_format(&w->shape, buf, sizeof(buf)));
    dims->n = x->shape.dim[0];
    dims->k = x->shape.dim[1];
    dims->m = w->shape.dim[0];
    return PD_OK;
}

pd_status pd_kernel_check_linear_forward(const pd_tensor *x, const pd_tensor *w, const pd_tensor *bias,
                                         const pd_tensor *y, pd_linear_dims *dims)
{
    PD_CHECK(check_linear("linear forward", x, w, dims));
    pd_shape want_y = pd_shape_make(2, dims->n, dims->m), want_bias = pd_shape_make(1, dims->m);
    PD_CHECK(pd_kernel_expect_f32(y, &want_y, "linear forward y"));
    if (bias)
        PD_CHECK(pd_kernel_expect_f32(bias, &want_bias, "linear forward bias"));
    return PD_OK;
}

pd_status pd_kernel_check_linear_backward(const pd_tensor *x, const pd_tensor *w, const pd_tensor *dy,
                                          const pd_tensor *dx, const pd_tensor *dw, const pd_tensor *dbias,
                                          pd_linear_dims *dims)
{
    PD_CHECK(check_linear("linear backward", x, w, dims));
    pd_shape want_dy = pd_shape_make(2, dims->n, dims->m), want_bias = pd_shape_make(1, dims->m);
    PD_CHECK(pd_kernel_expect_f32(dy, &want_dy, "linear backward dy"));
    PD_CHECK(pd_kernel_expect_f32(dw, &w->shape, "linear backward dw"));
    if (dx)
        PD_CHECK(pd_kernel_expect_f32(dx, &x->shape, "linear backward dx"));
    if (dbias)
        PD_CHECK(pd_kernel_expect_f32(dbias, &want_bias, "linear backward dbias"));
    return PD_OK;
}

/* Checks logits-like [N,C] f32 and labels [N] i32, and derives the sizes. */
static pd_status check_sce(const pd_tensor *scores, const pd_tensor *labels, const char *what_scores,
                           const char *what_labels, pd_sce_dims *dims)
{
    PD_CHECK(pd_kernel_expect_f32(scores, scores ? &scores->shape : NULL, what_scores));
    if (scores->shape.ndim != 2)
        return PD_ERROR(PD_ESHAPE, "%s: expected [N,C], got rank %d", what_scores, scores->shape.ndim);
    if (!labels)
        return PD_ERROR(PD_EINVAL, "%s: missing tensor", what_labels);
    pd_shape ls = pd_shape_make(1, scores->shape.dim[0]);
    PD_CHECK(pd_tensor_expect(labels, PD_I32, &ls, what_labels));
    dims->n = scores->shape.dim[0];
    dims->classes = scores->shape.dim[1];
    return PD_OK;
}

pd_status pd_kernel_check_sce_forward(const pd_tensor *logits, const pd_tensor *labels, const pd_tensor *probs,
                                      const pd_tensor *loss, pd_sce_dims *dims)
{
    pd_shape one = pd_shape_make(1, (int64_t)1);

    PD_CHECK(check_sce(logits, labels, "softmax_cross_entropy forward logits", PD_SCE_FORWARD_LABELS, dims));
    PD_CHECK(pd_kernel_expect_f32(probs, &logits->shape, "softmax_cross_entropy forward probs"));
    return pd_kernel_expect_f32(loss, &one, "softmax_cross_entropy forward loss");
}

pd_status pd_kernel_check_sce_backward(const pd_tensor *probs, const pd_tensor *labels, const pd_tensor *dlogits,
                                       pd_sce_dims *dims)
{
    PD_CHECK(check_sce(probs, labels, "softmax_cross_entropy backward probs", PD_SCE_BACKWARD_LABELS, dims));
    return pd_kernel_expect_f32(dlogits, &probs->shape, "softmax_cross_entropy backward dlogits");
}

int64_t pd_kernel_first_outside(const int32_t *ids, int64_t n, int64_t limit)
{
    for (int64_t p = 0; p < n; p++)
        if (ids[p] < 0 || ids[p] >= limit)
            return p;
    return n;
}

pd_status pd_kernel_label_outside(const char *what_labels, int64_t row, int32_t label, int64_t classes)
{
    return PD_ERROR(PD_EINVAL, "%s: label of row %lld is %d, outside [0,%lld)", what_labels, (long long)row,
                    (int)label, (long long)classes);
}

/* Checks that the parts fit `whole` along `axis`; `what` names the kernel
 * and `part` the parts ("x", "dx"). */
static pd_status check_concat(const char *what, const char *part, int axis, int n, const pd_tensor *const *parts,
                              const pd_tensor *whole)
{
    char want[96], got[96];
    int64_t total = 0;

    if (!whole)
        return PD_ERROR(PD_EINVAL, "%s: missing concatenated tensor", what);
    pd_shape_format(&whole->shape, want, sizeof(want));
    if (n < 1 || !parts)
        return PD_ERROR(PD_EINVAL, "%s: needs at least one %s, got %d", what, part, parts ? n : 0);
    if (axis < 0 || axis >= whole->shape.ndim)
        return PD_ERROR(PD_EINVAL, "%s: axis %d outside [0, %d) of %s", what, axis, whole->shape.ndim, want);
    if (!pd_tensor_is_contiguous(whole))
        return PD_ERROR(PD_ESHAPE, "%s: the concatenated tensor %s is not contiguous", what, want);
    if (!whole->data && pd_tensor_numel(whole) > 0)
        return PD_ERROR(PD_EINVAL, "%s: the concatenated tensor %s has no data", what, want);
    for (int i = 0; i < n; i++) {
        const pd_tensor *p = parts[i];
        if (!p)
            return PD_ERROR(PD_EINVAL, "%s: %s[%d] is missing", what, part, i);
        pd_shape_format(&p->shape, got, sizeof(got));
        if (p->dtype != whole->dtype)
            return PD_ERROR(PD_ESHAPE, "%s: %s[%d] is %s, the concatenated tensor %s", what, part, i,
                            pd_dtype_name(p->dtype), pd_dtype_name(whole->dtype));
        if (p->shape.ndim != whole->shape.ndim)
            return PD_ERROR(PD_ESHAPE, "%s: %s[%d] %s has rank %d, the concatenated tensor %s rank %d", what, part,
                            i, got, p->shape.ndim, want, whole->shape.ndim);
        for (int d = 0; d < whole->shape.ndim; d++)
            if (d != axis && p->shape.dim[d] != whole->shape.dim[d])
                return PD_ERROR(PD_ESHAPE, "%s: %s[%d] %s differs from the concatenated %s in dimension %d "
                                "(concatenating along axis %d)", what, part, i, got, want, d, axis);
        if (!pd_tensor_is_contiguous(p))
            return PD_ERROR(PD_ESHAPE, "%s: %s[%d] %s is not contiguous", what, part, i, got);
        total += p->shape.dim[axis];
    }
    if (total != whole->shape.dim[axis])
        return PD_ERROR(PD_ESHAPE, "%s: the %s parts span %lld along axis %d, the concatenated tensor %s has %lld",
                        what, part, (long long)total, axis, want, (long long)whole->shape.dim[axis]);
    return PD_OK;
}

pd_status pd_kernel_check_concat_forward(int axis, int n, const pd_tensor *const *xs, const pd_tensor *y)
{
    PD_CHECK(check_concat("concat", "x", axis, n, xs, y));
    for (int i = 0; i < n; i++)
        if (!xs[i]->data && pd_tensor_numel(xs[i]) > 0)
            return PD_ERROR(PD_EINVAL, "concat: x[%d] has no data", i);
    return PD_OK;
}

pd_status pd_kernel_check_concat_backward(int axis, int n, const pd_tensor *dy, pd_tensor *const *dxs)
{
    return check_concat("concat backward", "dx", axis, n, (const pd_tensor *const *)dxs, dy);
}

pd_status pd_kernel_check_embedding(const char *what, const pd_tensor *ids, const pd_tensor *table,
                                    const pd_tensor *rows, const char *rows_name, pd_embedding_dims *dims)
{
    pd_shape want;
    char got[96];

    if (!table)
        return PD_ERROR(PD_EINVAL, "%s: missing table", what);
    if (table->dtype != PD_F32 || table->shape.ndim != 2 || !pd_tensor_is_contiguous(table))
        return PD_ERROR(PD_ESHAPE, "%s: the table must be a contiguous f32 [V,D], got %s %s", what,
                        pd_dtype_name(table->dtype), pd_shape_format(&table->shape, got, sizeof(got)));
    if (!ids)
        return PD_ERROR(PD_EINVAL, "%s: missing ids", what);
    if (ids->dtype != PD_I32 || !pd_tensor_is_contiguous(ids))
        return PD_ERROR(PD_ESHAPE, "%s: ids must be a contiguous i32 tensor, got %s %s", what,
                        pd_dtype_name(ids->dtype), pd_shape_format(&ids->shape, got, sizeof(got)));
    if (ids->shape.ndim >= PD_MAX_DIMS)
        return PD_ERROR(PD_ESHAPE, "%s: ids of rank %d leave no room for the embedding dimension (rank <= %d)",
                        what, ids->shape.ndim, PD_MAX_DIMS);
    dims->ids = pd_tensor_numel(ids);
    dims->vocab = table->shape.dim[0];
    dims->dim = table->shape.dim[1];
    want = ids->shape;
    want.dim[want.ndim++] = dims->dim;
    return pd_kernel_expect_f32(rows, &want, rows_name);
}

pd_status pd_kernel_id_outside(const char *what, const pd_tensor *ids, int64_t position, int32_t id, int64_t vocab)
{
    int64_t coord[PD_MAX_DIMS], rest = position;
    char where[160] = "";
    size_t len = 0;

    for (int d = ids->shape.ndim - 1; d >= 0; d--) { /* a non-empty tensor has no zero dims */
        coord[d] = rest % ids->shape.dim[d];
        rest /= ids->shape.dim[d];
    }
    for (int d = 0; d < ids->shape.ndim && len < sizeof(where); d++)
        len += (size_t)snprintf(where + len, sizeof(where) - len, "%s%lld", d ? "," : "", (long long)coord[d]);
    return PD_ERROR(PD_EINVAL, "%s: ids[%s] = %d lies outside the vocabulary [0, %lld)", what, where, id,
                    (long long)vocab);
}

/* Checks c_prev [N,H] and a gates-shaped [N,4H] tensor, and derives the sizes. */
static pd_status check_lstm_cell(const char *what, const pd_tensor *c_prev, const pd_tensor *gates_like,
                                 const char *gates_name, pd_lstm_cell_dims *dims)
{
    char got[96];

    if (!c_prev)
        return PD_ERROR(PD_EINVAL, "%s: missing c_prev", what);
    if (c_prev->shape.ndim != 2)
        return PD_ERROR(PD_ESHAPE, "%s: c_prev must be [N,H], got %s", what,
                        pd_shape_format(&c_prev->shape, got, sizeof(got)));
    dims->n = c_prev->shape.dim[0];
    dims->hidden = c_prev->shape.dim[1];
    pd_shape gshape = pd_shape_make(2, dims->n, 4 * dims->hidden);
    return pd_kernel_expect_f32(gates_like, &gshape, gates_name);
}

pd_status pd_kernel_check_lstm_cell_forward(const pd_tensor *gates, const pd_tensor *c_prev, const pd_tensor *act,
                                            const pd_tensor *c, const pd_tensor *h, pd_lstm_cell_dims *dims)
{
    PD_CHECK(check_lstm_cell("lstm cell", c_prev, gates, "lstm cell gates", dims));
    PD_CHECK(pd_kernel_expect_f32(c_prev, &c_prev->shape, "lstm cell c_prev"));
    PD_CHECK(pd_kernel_expect_f32(act, &gates->shape, "lstm cell act"));
    PD_CHECK(pd_kernel_expect_f32(c, &c_prev->shape, "lstm cell c"));
    return pd_kernel_expect_f32(h, &c_prev->shape, "lstm cell h");
}

pd_status pd_kernel_check_lstm_cell_backward(const pd_tensor *act, const pd_tensor *c_prev, const pd_tensor *c,
                                             const pd_tensor *dh, const pd_tensor *dc, const pd_tensor *dgates,
                                             const pd_tensor *dc_prev, pd_lstm_cell_dims *dims)
{
    PD_CHECK(check_lstm_cell("lstm cell backward", c_prev, act, "lstm cell backward act", dims));
    PD_CHECK(pd_kernel_expect_f32(c_prev, &c_prev->shape, "lstm cell backward c_prev"));
    PD_CHECK(pd_kernel_expect_f32(c, &c_prev->shape, "lstm cell backward c"));
    PD_CHECK(pd_kernel_expect_f32(dh, &c_prev->shape, "lstm cell backward dh"));
    if (dc)
        PD_CHECK(pd_kernel_expect_f32(dc, &c_prev->shape, "lstm cell backward dc"));
    PD_CHECK(pd_kernel_expect_f32(dgates, &act->shape, "lstm cell backward dgates"));
    return pd_kernel_expect_f32(dc_prev, &c_prev->shape, "lstm cell backward dc_prev");
}
