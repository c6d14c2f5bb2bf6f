/* CPU kernels: 2-D max and average pooling (NCHW) with PyTorch's semantics:
 * max pooling pads with -inf and routes the gradient to the first maximum of
 * each window (recomputed from x in the backward pass exactly as the forward
 * pass chose it); average pooling clips windows at input + padding (which
 * matters with ceil_mode) and divides by the padded window
 * (count_include_pad) or by the input elements it covers. One thread owns a
 * whole (n, c) plane, so the backward scatter has no races. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "kernels/cpu/pd_cpu.h"

#define POOL_PARALLEL_MIN 32768

typedef struct pool_geom {
    int64_t planes, h, w; /* planes = N*C */
    int64_t p, q;
    const pd_pool2d_desc *d;
} pool_geom;

/* One output position's window, clipped to the input, and its average
 * pooling divisor. */
typedef struct pool_window {
    int64_t h0, h1, w0, w1;
    int64_t divisor;
} pool_window;

static pd_status pool_geometry(const char *op, const pd_pool2d_desc *d, const pd_tensor *x, const char *x_name,
                               pool_geom *g)
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
    PD_CHECK(pd_kernel_expect_f32(x, &x->shape, x_name));
    if (x->shape.ndim != 4 || x->shape.dim[1] <= 0 || x->shape.dim[2] <= 0 || x->shape.dim[3] <= 0)
        return PD_ERROR(PD_ESHAPE, "%s: %s must be [N,C,H,W] with C, H, W > 0, got %s", op, x_name,
                        pd_shape_format(&x->shape, buf, sizeof(buf)));
    g->planes = x->shape.dim[0] * x->shape.dim[1];
    g->h = x->shape.dim[2];
    g->w = x->shape.dim[3];
    g->p = pd_window_output_size(g->h, d->kernel_h, d->stride_h, d->pad_h, 1, d->ceil_mode);
    g->q = pd_window_output_size(g->w, d->kernel_w, d->stride_w, d->pad_w, 1, d->ceil_mode);
    if (g->p <= 0 || g->q <= 0)
        return PD_ERROR(PD_ESHAPE, "%s: kernel %dx%d exceeds padded input %lldx%lld", op, d->kernel_h, d->kernel_w,
                        (long long)(g->h + 2 * d->pad_h), (long long)(g->w + 2 * d->pad_w));
    g->d = d;
    return PD_OK;
}

static pool_window window_at(const pool_geom *g, int64_t p, int64_t q)
{
    const pd_pool2d_desc *d = g->d;
    pool_window win;
    int64_t h0 = p * d->stride_h - d->pad_h, w0 = q * d->stride_w - d->pad_w;
    int64_t h1 = h0 + d->kernel_h, w1 = w0 + d->kernel_w;

    /* PyTorch's AvgPool2d: the padded window stops at input + padding. */
    if (h1 > g->h + d->pad_h)
        h1 = g->h + d->pad_h;
    if (w1 > g->w + d->pad_w)
        w1 = g->w + d->pad_w;
    int64_t padded = (h1 - h0) * (w1 - w0);

    win.h0 = h0 > 0 ? h0 : 0;
    win.w0 = w0 > 0 ? w0 : 0;
    win.h1 = h1 < g->h ? h1 : g->h;
    win.w1 = w1 < g->w ? w1 : g->w;
    win.divisor = d->count_include_pad ? padded : (win.h1 - win.h0) * (win.w1 - win.w0);
    return win;
}

/* Index in the plane of the window's first maximum (a NaN counts as the
 * maximum), or -1 for a window that covers no input. */
static int64_t window_argmax(const pool_geom *g, const float *plane, const pool_window *win)
{
    int64_t best = -1;
    float best_value = -INFINITY;

    for (int64_t ih = win->h0; ih < win->h1; ih++)
        for (int64_t iw = win->w0; iw < win->w1; iw++) {
            float v = plane[ih * g->w + iw];
            if (best < 0 || v > best_value || (isnan(v) && !isnan(best_value))) {
                best = ih * g->w + iw;
                best_value = v;
            }
        }
    return best;
}

static void pool_plane_forward(const pool_geom *g, const float *plane, float *out)
{
    for (int64_t p = 0; p < g->p; p++)
        for (int64_t q = 0; q < g->q; q++) {
            pool_window win = window_at(g, p, q);
            float value;

            if (g->d->mode == PD_POOL_MAX) {
                int64_t at = window_argmax(g, plane, &win);
                value = at < 0 ? -INFINITY : plane[at];
            } else {
                double total = 0.0;
                for (int64_t ih = win.h0; ih < win.h1; ih++)
                    for (int64_t iw = win.w0; iw < win.w1; iw++)
                        total += plane[ih * g->w + iw];
                value = win.divisor > 0 ? (float)(total / (double)win.divisor) : 0.0f;
            }
            out[p * g->q + q] = value;
        }
}

static void pool_plane_backward(const pool_geom *g, const float *plane, const float *grad_out, float *grad_in)
{
    memset(grad_in, 0, (size_t)(g->h * g->w) * sizeof(float));
    for (int64_t p = 0; p < g->p; p++)
        for (int64_t q = 0; q < g->q; q++) {
            pool_window win = window_at(g, p, q);
            float grad = grad_out[p * g->q + q];

            if (g->d->mode == PD_POOL_MAX) {
                int64_t at = window_argmax(g, plane, &win);
                if (at >= 0)
                    grad_in[at] += grad;
            } else if (win.divisor > 0) {
                float share = grad / (float)win.divisor;
                for (int64_t ih = win.h0; ih < win.h1; ih++)
                    for (int64_t iw = win.w0; iw < win.w1; iw++)
                        grad_in[ih * g->w + iw] += share;
            }
        }
}

pd_status pd_cpu_pool2d_forward(pd_device *dev, const pd_pool2d_desc *desc, const pd_tensor *x, pd_tensor *y)
{
    pool_geom g;

    PD_CHECK(pool_geometry("pool2d forward", desc, x, "pool2d x", &g));
    pd_shape want_y = pd_shape_make(4, x->shape.dim[0], x->shape.dim[1], g.p, g.q);
    PD_CHECK(pd_kernel_expect_f32(y, &want_y, "pool2d forward y"));

    const float *in = x->data;
    float *out = y->data;
#pragma omp parallel for schedule(static) if (g.planes * g.h * g.w > POOL_PARALLEL_MIN)
    for (int64_t i = 0; i < g.planes; i++)
        pool_plane_forward(&g, in + i * g.h * g.w, out + i * g.p * g.q);
    return PD_OK;
}

pd_status pd_cpu_pool2d_backward(pd_device *dev, const pd_pool2d_desc *desc, const pd_tensor *x, const pd_tensor *y,
                                 const pd_tensor *dy, pd_tensor *dx)
{
    pool_geom g;

    PD_CHECK(pool_geometry("pool2d backward", desc, x, "pool2d x", &g));
    pd_shape want_y = pd_shape_make(4, x->shape.dim[0], x->shape.dim[1], g.p, g.q);
    PD_CHECK(pd_kernel_expect_f32(y, &want_y, "pool2d backward y"));
    PD_CHECK(pd_kernel_expect_f32(dy, &want_y, "pool2d backward dy"));
    PD_CHECK(pd_kernel_expect_f32(dx, &x->shape, "pool2d backward dx"));

    const float *in = x->data, *grad_out = dy->data;
    float *grad_in = dx->data;
#pragma omp parallel for schedule(static) if (g.planes * g.h * g.w > POOL_PARALLEL_MIN)
    for (int64_t i = 0; i < g.planes; i++)
        pool_plane_backward(&g, in + i * g.h * g.w, grad_out + i * g.p * g.q, grad_in + i * g.h * g.w);
    return PD_OK;
}
