/* CPU kernels: 2-D convolution (NCHW, stride, padding, dilation, groups) as
 * im2col/col2im plus one sgemm per image and group. The column matrix of one
 * image holds all groups: rows (c, r, s), columns (p, q), so group g's
 * operand is the contiguous row block [g*Cg*R*S, (g+1)*Cg*R*S). It lives in
 * the device scratch buffer; a 1x1, stride-1, unpadded convolution uses the
 * image itself as its column matrix. */
#include "config.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "kernels/cpu/pd_cpu.h"

/* Below this many column elements a single thread is faster. */
#define CONV_PARALLEL_MIN 32768

typedef struct conv_geom {
    int64_t n, c, h, w;   /* input */
    int64_t k, p, q;      /* output channels and spatial size */
    int64_t cg, kg;       /* input and output channels per group */
    int64_t crs;          /* rows of one group's column block: Cg*R*S */
    int64_t rows;         /* rows of one image's column matrix: C*R*S */
    int64_t pq;           /* columns of the column matrix */
    bool direct;          /* the image is its own column matrix */
    const pd_conv2d_desc *d;
} conv_geom;

/* Checks the descriptor, the input-side tensor x (dx in backward_data) and
 * the filter w (dw in backward_filter), and derives the geometry. */
static pd_status conv_geometry(const char *op, const pd_conv2d_desc *d, const pd_tensor *x, const char *x_name,
                               const pd_tensor *w, const char *w_name, conv_geom *g)
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
    g->n = x->shape.dim[0];
    g->c = x->shape.dim[1];
    g->h = x->shape.dim[2];
    g->w = x->shape.dim[3];
    g->k = w->shape.dim[0];
    if (g->c % d->groups != 0 || g->k % d->groups != 0)
        return PD_ERROR(PD_ESHAPE, "%s: groups %d must divide input channels %lld and output channels %lld", op,
                        d->groups, (long long)g->c, (long long)g->k);
    g->cg = g->c / d->groups;
    g->kg = g->k / d->groups;
    pd_shape want_w = pd_shape_make(4, g->k, g->cg, (int64_t)d->kernel_h, (int64_t)d->kernel_w);
    PD_CHECK(pd_kernel_expect_f32(w, &want_w, w_name));
    g->p = pd_window_output_size(g->h, d->kernel_h, d->stride_h, d->pad_h, d->dilation_h, false);
    g->q = pd_window_output_size(g->w, d->kernel_w, d->stride_w, d->pad_w, d->dilation_w, false);
    if (g->p <= 0 || g->q <= 0)
        return PD_ERROR(PD_ESHAPE, "%s: dilated kernel %dx%d (dilation %dx%d) exceeds padded input %lldx%lld", op,
                        d->kernel_h, d->kernel_w, d->dilation_h, d->dilation_w, (long long)(g->h + 2 * d->pad_h),
                        (long long)(g->w + 2 * d->pad_w));
    g->crs = g->cg * d->kernel_h * d->kernel_w;
    g->rows = g->c * d->kernel_h * d->kernel_w;
    g->pq = g->p * g->q;
    g->direct = d->kernel_h == 1 && d->kernel_w == 1 && d->stride_h == 1 && d->stride_w == 1 && d->pad_h == 0 &&
                d->pad_w == 0;
    g->d = d;
    return PD_OK;
}

/* Output columns q whose input column q*stride + iw0 lies in [0, width):
 * the half-open range [*lo, *hi) within [0, q_count). */
static void valid_columns(int64_t iw0, int stride, int64_t width, int64_t q_count, int64_t *lo, int64_t *hi)
{
    int64_t first = iw0 >= 0 ? 0 : (-iw0 + stride - 1) / stride;
    int64_t end = width - 1 - iw0 < 0 ? 0 : (width - 1 - iw0) / stride + 1;

    *hi = end < q_count ? end : q_count;
    *lo = first < *hi ? first : *hi;
}

/* col [C*R*S, P*Q] from one image x [C,H,W]. */
static void im2col(const conv_geom *g, const float *x, float *col)
{
    const pd_conv2d_desc *d = g->d;
    int64_t rs = (int64_t)d->kernel_h * d->kernel_w;

#pragma omp parallel for schedule(static) if (g->rows * g->pq > CONV_PARALLEL_MIN)
    for (int64_t row = 0; row < g->rows; row++) {
        int64_t c = row / rs, r = (row / d->kernel_w) % d->kernel_h, s = row % d->kernel_w;
        const float *plane = x + c * g->h * g->w;
        float *dst = col + row * g->pq;
        int64_t iw0 = s * d->dilation_w - d->pad_w, lo, hi;

        valid_columns(iw0, d->stride_w, g->w, g->q, &lo, &hi);
        for (int64_t p = 0; p < g->p; p++, dst += g->q) {
            int64_t ih = p * d->stride_h - d->pad_h + r * d->dilation_h;
            if (ih < 0 || ih >= g->h) {
                memset(dst, 0, (size_t)g->q * sizeof(float));
                continue;
            }
            const float *src = plane + ih * g->w;
            memset(dst, 0, (size_t)lo * sizeof(float));
            if (d->stride_w == 1)
                memcpy(dst + lo, src + lo + iw0, (size_t)(hi - lo) * sizeof(float));
            else
                for (int64_t q = lo; q < hi; q++)
                    dst[q] = src[q * d->stride_w + iw0];
            memset(dst + hi, 0, (size_t)(g->q - hi) * sizeof(float));
        }
    }
}

/* dst += src over n elements; restrict lets the compiler vectorise. */
static void add_row(float *restrict dst, const float *restrict src, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] += src[i];
}

/* dx [C,H,W] = the sum of col's entries over the positions they came from.
 * Threads own whole channels, so no two write the same element. */
static void col2im(const conv_geom *g, const float *col, float *dx)
{
    const pd_conv2d_desc *d = g->d;

#pragma omp parallel for schedule(static) if (g->rows * g->pq > CONV_PARALLEL_MIN)
    for (int64_t c = 0; c < g->c; c++) {
        float *plane = dx + c * g->h * g->w;

        memset(plane, 0, (size_t)(g->h * g->w) * sizeof(float));
        for (int64_t r = 0; r < d->kernel_h; r++) {
            for (int64_t s = 0; s < d->kernel_w; s++) {
                const float *src = col + ((c * d->kernel_h + r) * d->kernel_w + s) * g->pq;
                int64_t iw0 = s * d->dilation_w - d->pad_w, lo, hi;

                valid_columns(iw0, d->stride_w, g->w, g->q, &lo, &hi);
                for (int64_t p = 0; p < g->p; p++, src += g->q) {
                    int64_t ih = p * d->stride_h - d->pad_h + r * d->dilation_h;
                    if (ih < 0 || ih >= g->h)
                        continue;
                    float *dst = plane + ih * g->w;
                    if (d->stride_w == 1)
                        add_row(dst + lo + iw0, src + lo, hi - lo);
                    else
                        for (int64_t q = lo; q < hi; q++)
                            dst[q * d->stride_w + iw0] += src[q];
                }
            }
        }
    }
}

static pd_status column_buffer(pd_device *dev, const conv_geom *g, float **col)
{
    *col = NULL;
    if (g->direct)
        return PD_OK;
    return pd_cpu_scratch(dev, (size_t)(g->rows * g->pq) * sizeof(float), col);
}

/* One product per group, operand g at a + g*a_step etc. With at least as
 * many groups as threads (depthwise) the groups run in parallel, one
 * sequential sgemm each; otherwise each product is split across threads. */
static pd_status grouped_gemm(pd_device *dev, int groups, bool trans_a, bool trans_b, int64_t m, int64_t n,
                              int64_t k, const float *a, int64_t lda, int64_t a_step, const float *b, int64_t ldb,
                              int64_t b_step, float beta, float *c, int64_t ldc, int64_t c_step)
{
    bool parallel_groups = false;
    int failed = -1;

#ifdef _OPENMP
    parallel_groups = groups > 1 && groups >= omp_get_max_threads() && !omp_in_parallel();
#endif
    if (!parallel_groups) { /* no enclosing region: a nested one inside it would start a new team per call */
        for (int grp = 0; grp < groups; grp++)
            PD_CHECK(pd_cpu_gemm(dev, trans_a, trans_b, m, n, k, 1.0f, a + grp * a_step, lda, b + grp * b_step, ldb,
                                 beta, c + grp * c_step, ldc));
        return PD_OK;
    }
#pragma omp parallel for schedule(static)
    for (int grp = 0; grp < groups; grp++)
        if (pd_cpu_gemm(dev, trans_a, trans_b, m, n, k, 1.0f, a + grp * a_step, lda, b + grp * b_step, ldb, beta,
                        c + grp * c_step, ldc) != PD_OK) {
#pragma omp atomic write
            failed = grp;
        }
    if (failed >= 0) /* again on this thread, which keeps the error message */
        return pd_cpu_gemm(dev, trans_a, trans_b, m, n, k, 1.0f, a + failed * a_step, lda, b + failed * b_step, ldb,
                           beta, c + failed * c_step, ldc);
    return PD_OK;
}

pd_status pd_cpu_conv2d_forward(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *x, const pd_tensor *w,
                                const pd_tensor *bias, pd_tensor *y)
{
    conv_geom g;
    float *col;

    PD_CHECK(conv_geometry("conv2d forward", desc, x, "conv2d x", w, "conv2d w", &g));
    pd_shape want_y = pd_shape_make(4, g.n, g.k, g.p, g.q), want_bias = pd_shape_make(1, g.k);
    PD_CHECK(pd_kernel_expect_f32(y, &want_y, "conv2d forward y"));
    if (bias)
        PD_CHECK(pd_kernel_expect_f32(bias, &want_bias, "conv2d forward bias"));
    PD_CHECK(column_buffer(dev, &g, &col));

    const float *weights = w->data, *b = bias ? bias->data : NULL;
    for (int64_t n = 0; n < g.n; n++) {
        const float *image = (const float *)x->data + n * g.c * g.h * g.w;
        float *out = (float *)y->data + n * g.k * g.pq;

        if (!g.direct) {
            im2col(&g, image, col);
            image = col;
        }
        if (b) {
#pragma omp parallel for schedule(static) if (g.k * g.pq > CONV_PARALLEL_MIN)
            for (int64_t k = 0; k < g.k; k++)
                for (int64_t i = 0; i < g.pq; i++)
                    out[k * g.pq + i] = b[k];
        }
        /* y_g [Kg,PQ] = w_g [Kg,CgRS] col_g [CgRS,PQ] (+ the bias already there) */
        PD_CHECK(grouped_gemm(dev, desc->groups, false, false, g.kg, g.pq, g.crs, weights, g.crs, g.kg * g.crs, image,
                              g.pq, g.crs * g.pq, b ? 1.0f : 0.0f, out, g.pq, g.kg * g.pq));
    }
    return PD_OK;
}

pd_status pd_cpu_conv2d_backward_data(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *dy,
                                      const pd_tensor *w, pd_tensor *dx)
{
    conv_geom g;
    float *col;

    PD_CHECK(conv_geometry("conv2d backward data", desc, dx, "conv2d dx", w, "conv2d w", &g));
    pd_shape want_dy = pd_shape_make(4, g.n, g.k, g.p, g.q);
    PD_CHECK(pd_kernel_expect_f32(dy, &want_dy, "conv2d backward data dy"));
    PD_CHECK(column_buffer(dev, &g, &col));

    const float *weights = w->data;
    for (int64_t n = 0; n < g.n; n++) {
        const float *grad_out = (const float *)dy->data + n * g.k * g.pq;
        float *grad_in = (float *)dx->data + n * g.c * g.h * g.w;
        float *target = g.direct ? grad_in : col;

        /* col_g [CgRS,PQ] = w_g^T dy_g [Kg,PQ] */
        PD_CHECK(grouped_gemm(dev, desc->groups, true, false, g.crs, g.pq, g.kg, weights, g.crs, g.kg * g.crs,
                              grad_out, g.pq, g.kg * g.pq, 0.0f, target, g.pq, g.crs * g.pq));
        if (!g.direct)
            col2im(&g, col, grad_in);
    }
    return PD_OK;
}

pd_status pd_cpu_conv2d_backward_filter(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *x,
                                        const pd_tensor *dy, pd_tensor *dw, pd_tensor *dbias)
{
    conv_geom g;
    float *col;

    PD_CHECK(conv_geometry("conv2d backward filter", desc, x, "conv2d x", dw, "conv2d dw", &g));
    pd_shape want_dy = pd_shape_make(4, g.n, g.k, g.p, g.q), want_bias = pd_shape_make(1, g.k);
    PD_CHECK(pd_kernel_expect_f32(dy, &want_dy, "conv2d backward filter dy"));
    if (dbias)
        PD_CHECK(pd_kernel_expect_f32(dbias, &want_bias, "conv2d backward filter dbias"));
    PD_CHECK(column_buffer(dev, &g, &col));

    float *grad_w = dw->data;
    if (g.n == 0)
        memset(grad_w, 0, pd_tensor_nbytes(dw));
    for (int64_t n = 0; n < g.n; n++) {
        const float *image = (const float *)x->data + n * g.c * g.h * g.w;
        const float *grad_out = (const float *)dy->data + n * g.k * g.pq;

        if (!g.direct) {
            im2col(&g, image, col);
            image = col;
        }
        /* dw_g [Kg,CgRS] (+)= dy_g [Kg,PQ] col_g^T, summed over the images */
        PD_CHECK(grouped_gemm(dev, desc->groups, false, true, g.kg, g.crs, g.pq, grad_out, g.pq, g.kg * g.pq, image,
                              g.pq, g.crs * g.pq, n == 0 ? 0.0f : 1.0f, grad_w, g.crs, g.kg * g.crs));
    }
    if (dbias) {
        const float *grad_out = dy->data;
        float *grad_b = dbias->data;

#pragma omp parallel for schedule(static) if (g.n * g.k * g.pq > CONV_PARALLEL_MIN)
        for (int64_t k = 0; k < g.k; k++) {
            double total = 0.0;
            for (int64_t n = 0; n < g.n; n++) {
                const float *plane = grad_out + (n * g.k + k) * g.pq;
                for (int64_t i = 0; i < g.pq; i++)
                    total += plane[i];
            }
            grad_b[k] = (float)total;
        }
    }
    return PD_OK;
}
