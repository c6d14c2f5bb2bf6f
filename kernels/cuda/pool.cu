/* Pooling kernels: max and average pooling with the CPU's exact semantics
 * (kernels/cpu/pool2d.c), which cuDNN's pooling does not give: cuDNN has no
 * ceil_mode, its padded average divides by the whole window where PyTorch's
 * stops the window at input + padding, and its max ignores or propagates
 * NaN as a whole where the CPU takes the first NaN as the maximum.
 *
 * Forward: one thread per output; max takes the first maximum of the window
 * in row-major order (a NaN counts as the maximum); the average sums in
 * double and divides once. Backward: one thread per input element gathers
 * the gradients of the windows that hold it, in the CPU's (p, q) order, so
 * there are no atomics and the result is the CPU's bit for bit: max pooling
 * gives an element dy of every window whose first maximum it is, average
 * pooling dy / divisor. The window's maximum is recomputed from x (as the
 * CPU does); for windows larger than POOL_TABLE_MIN_WINDOW (global pooling)
 * a first pass records each window's maximum in a table instead, so that
 * the gather does not rescan a large window for each of its elements. */
#include "config.h"

#include <math.h>

#include "kernels/cuda/pd_cuda_nn.h"

/* Max-pooling windows of more elements than this use the argmax table. */
#define POOL_TABLE_MIN_WINDOW 64

namespace {

/* A window clipped to the input, and its average-pooling divisor. */
struct window {
    int h0, h1, w0, w1;
    int divisor;
};

/* Output (p, q)'s window, as the CPU's window_at: PyTorch's padded window
 * stops at input + padding. */
__device__ window window_at(const pd_cuda_pool_geom &g, int p, int q)
{
    const int h0 = p * g.d.stride_h - g.d.pad_h, w0 = q * g.d.stride_w - g.d.pad_w;
    const int h1 = min(h0 + g.d.kernel_h, g.h + g.d.pad_h), w1 = min(w0 + g.d.kernel_w, g.w + g.d.pad_w);
    window win;

    win.h0 = max(h0, 0);
    win.w0 = max(w0, 0);
    win.h1 = min(h1, g.h);
    win.w1 = min(w1, g.w);
    win.divisor = g.d.count_include_pad ? (h1 - h0) * (w1 - w0) : (win.h1 - win.h0) * (win.w1 - win.w0);
    return win;
}

/* Whether v replaces `best` as the maximum so far: larger, or the window's
 * first NaN. */
__device__ bool max_takes(float v, float best) { return v > best || (v != v && best == best); }

/* Index in the plane of the window's first maximum, -1 for an empty window. */
__device__ int window_argmax(const pd_cuda_pool_geom &g, const float *plane, const window &win)
{
    int best = -1;
    float best_value = -INFINITY;

    for (int ih = win.h0; ih < win.h1; ih++)
        for (int iw = win.w0; iw < win.w1; iw++) {
            const float v = plane[ih * g.w + iw];
            if (best < 0 || max_takes(v, best_value)) {
                best = ih * g.w + iw;
                best_value = v;
            }
        }
    return best;
}

/* Output i's input plane (in x) and window. */
__device__ const float *output_window(const pd_cuda_pool_geom &g, const float *x, int64_t i, window *win)
{
    *win = window_at(g, (int)(i / g.q % g.p), (int)(i % g.q));
    return x + i / ((int64_t)g.p * g.q) * ((int64_t)g.h * g.w);
}

__global__ void __launch_bounds__(PD_CUDA_BLOCK)
    pool_forward_kernel(pd_cuda_pool_geom g, const float *x, float *y, int64_t outputs)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;

    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < outputs; i += stride) {
        window win;
        const float *plane = output_window(g, x, i, &win);
        float value;

        if (g.d.mode == PD_POOL_MAX) {
            const int at = window_argmax(g, plane, win);
            value = at < 0 ? -INFINITY : plane[at];
        } else {
            double total = 0.0;
            for (int ih = win.h0; ih < win.h1; ih++)
                for (int iw = win.w0; iw < win.w1; iw++)
                    total = __dadd_rn(total, (double)plane[ih * g.w + iw]);
            value = win.divisor > 0 ? (float)__ddiv_rn(total, (double)win.divisor) : 0.0f;
        }
        y[i] = value;
    }
}

/* argmax[i] = the first maximum of output i's window (its plane index). */
__global__ void __launch_bounds__(PD_CUDA_BLOCK)
    pool_argmax_kernel(pd_cuda_pool_geom g, const float *x, int *argmax, int64_t outputs)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;

    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < outputs; i += stride) {
        window win;
        const float *plane = output_window(g, x, i, &win);
        argmax[i] = window_argmax(g, plane, win);
    }
}

/* The outputs [*lo, *hi] along one axis whose windows start at or before
 * input index i and end after it: o * stride - pad <= i < o * stride - pad
 * + kernel, within [0, count). */
__device__ void windows_over(int i, int kernel, int stride, int pad, int count, int *lo, int *hi)
{
    const int last_start = i + pad, first_end = i + pad - kernel; /* o*stride in (first_end, last_start] */

    *lo = first_end < 0 ? 0 : first_end / stride + 1;
    *hi = min(last_start / stride, count - 1);
}

/* dx[i] = the sum of the gradients output windows route to input element i,
 * in the CPU's order (p, then q). `table`: the windows' first maxima come
 * from argmax (max pooling with large windows). */
template <bool table>
__global__ void __launch_bounds__(PD_CUDA_BLOCK)
    pool_backward_kernel(pd_cuda_pool_geom g, const float *x, const float *dy, const int *argmax, float *dx,
                         int64_t inputs)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t plane_out = (int64_t)g.p * g.q, plane_in = (int64_t)g.h * g.w;
    const bool max_mode = g.d.mode == PD_POOL_MAX;

    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < inputs; i += stride) {
        const int64_t plane = i / plane_in;
        const int own = (int)(i % plane_in), ih = own / g.w, iw = own % g.w;
        const float *grad = dy + plane * plane_out;
        int p_lo, p_hi, q_lo, q_hi;
        float acc = 0.0f;

        windows_over(ih, g.d.kernel_h, g.d.stride_h, g.d.pad_h, g.p, &p_lo, &p_hi);
        windows_over(iw, g.d.kernel_w, g.d.stride_w, g.d.pad_w, g.q, &q_lo, &q_hi);
        for (int p = p_lo; p <= p_hi; p++)
            for (int q = q_lo; q <= q_hi; q++) {
                const window win = window_at(g, p, q);
                if (ih < win.h0 || ih >= win.h1 || iw < win.w0 || iw >= win.w1)
                    continue;
                const float gpq = grad[p * g.q + q];
                if (max_mode) {
                    const int at = table ? argmax[plane * plane_out + p * g.q + q]
                                         : window_argmax(g, x + plane * plane_in, win);
                    if (at == own)
                        acc = __fadd_rn(acc, gpq);
                } else if (win.divisor > 0) {
                    acc = __fadd_rn(acc, __fdiv_rn(gpq, (float)win.divisor));
                }
            }
        dx[i] = acc;
    }
}

} // namespace

int64_t pd_cuda_pool2d_argmax_ints(const pd_cuda_pool_geom *g)
{
    const bool large = (int64_t)g->d.kernel_h * g->d.kernel_w > POOL_TABLE_MIN_WINDOW;

    return g->d.mode == PD_POOL_MAX && large ? g->planes * g->p * g->q : 0;
}

pd_status pd_cuda_launch_pool2d_forward(const pd_cuda_launch *launch, const pd_cuda_pool_geom *g, const float *x,
                                        float *y)
{
    const int64_t outputs = g->planes * g->p * g->q;

    if (outputs <= 0)
        return PD_OK;
    pool_forward_kernel<<<pd_cuda_grid(launch, outputs), PD_CUDA_BLOCK, 0, launch->stream>>>(*g, x, y, outputs);
    PD_CUDA_CHECK_LAUNCH("pool2d forward kernel");
    return PD_OK;
}

pd_status pd_cuda_launch_pool2d_backward(const pd_cuda_launch *launch, const pd_cuda_pool_geom *g, const float *x,
                                         const float *dy, int *argmax, float *dx)
{
    const int64_t outputs = g->planes * g->p * g->q, inputs = g->planes * g->h * g->w;

    if (inputs <= 0)
        return PD_OK;
    if (argmax) {
        pool_argmax_kernel<<<pd_cuda_grid(launch, outputs), PD_CUDA_BLOCK, 0, launch->stream>>>(*g, x, argmax,
                                                                                               outputs);
        PD_CUDA_CHECK_LAUNCH("pool2d argmax kernel");
        pool_backward_kernel<true>
            <<<pd_cuda_grid(launch, inputs), PD_CUDA_BLOCK, 0, launch->stream>>>(*g, x, dy, argmax, dx, inputs);
    } else {
        pool_backward_kernel<false>
            <<<pd_cuda_grid(launch, inputs), PD_CUDA_BLOCK, 0, launch->stream>>>(*g, x, dy, NULL, dx, inputs);
    }
    PD_CUDA_CHECK_LAUNCH("pool2d backward kernel");
    return PD_OK;
}
