/* One LSTM time step on the GPU, the functions of kernels/cpu/lstm_cell.c:
 * gates in PyTorch's order (i, f, g, o), each pass one fused element-wise
 * kernel (forward: the four nonlinearities, the cell update and h; backward:
 * the gradient reaching c, the four gate gradients and dc_prev), one thread
 * per (row, hidden unit) reading its four gates at stride H. Arithmetic is
 * rounded step by step in the CPU's order (no fused multiply-add); expf and
 * tanhf are CUDA's (within 2 ulp), so results agree with the CPU's to a few
 * ulp. Every output element depends only on inputs of the same (row, unit),
 * so outputs may alias inputs of the same shape. */
#include "config.h"

#include <math.h>
#include <stdint.h>

#include "kernels/cuda/pd_cuda.h"
extern "C" {
#include "kernels/pd_kernels_int.h"
}

namespace {

__device__ float sigmoid(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }

__global__ void __launch_bounds__(PD_CUDA_BLOCK)
    lstm_forward_kernel(const float *gates, const float *c_prev, float *act, float *c, float *h, int64_t n,
                        int64_t hid)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;

    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n * hid; e += stride) {
        const int64_t r = e / hid, j = e - r * hid;
        const float *g = gates + r * 4 * hid;
        float *a = act + r * 4 * hid;
        const float ig = sigmoid(g[j]);
        const float fg = sigmoid(g[hid + j]);
        const float gg = tanhf(g[2 * hid + j]);
        const float og = sigmoid(g[3 * hid + j]);
        const float cn = __fadd_rn(__fmul_rn(fg, c_prev[e]), __fmul_rn(ig, gg));
        a[j] = ig;
        a[hid + j] = fg;
        a[2 * hid + j] = gg;
        a[3 * hid + j] = og;
        c[e] = cn;
        h[e] = __fmul_rn(og, tanhf(cn));
    }
}

/* dc may be NULL (no gradient from step t+1). */
__global__ void __launch_bounds__(PD_CUDA_BLOCK)
    lstm_backward_kernel(const float *act, const float *c_prev, const float *c, const float *dh, const float *dc,
                         float *dgates, float *dc_prev, int64_t n, int64_t hid)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;

    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n * hid; e += stride) {
        const int64_t r = e / hid, j = e - r * hid;
        const float *a = act + r * 4 * hid;
        float *d = dgates + r * 4 * hid;
        const float ig = a[j], fg = a[hid + j], gg = a[2 * hid + j], og = a[3 * hid + j];
        const float gh = dh[e], cp = c_prev[e], tc = tanhf(c[e]);
        /* Gradient reaching c at this step: through h = o tanh(c) and from step t+1. */
        const float dct = __fadd_rn(__fmul_rn(__fmul_rn(gh, og), __fsub_rn(1.0f, __fmul_rn(tc, tc))),
                                    dc ? dc[e] : 0.0f);
        d[j] = __fmul_rn(__fmul_rn(__fmul_rn(dct, gg), ig), __fsub_rn(1.0f, ig));
        d[hid + j] = __fmul_rn(__fmul_rn(__fmul_rn(dct, cp), fg), __fsub_rn(1.0f, fg));
        d[2 * hid + j] = __fmul_rn(__fmul_rn(dct, ig), __fsub_rn(1.0f, __fmul_rn(gg, gg)));
        d[3 * hid + j] = __fmul_rn(__fmul_rn(__fmul_rn(gh, tc), og), __fsub_rn(1.0f, og));
        dc_prev[e] = __fmul_rn(dct, fg);
    }
}

} // namespace

extern "C" pd_status pd_cuda_lstm_cell_forward(pd_device *dev, const pd_tensor *gates, const pd_tensor *c_prev,
                                               pd_tensor *act, pd_tensor *c, pd_tensor *h)
{
    const pd_tensor *tensors[] = {gates, c_prev, act, c, h};
    static const char *const names[] = {"gates", "c_prev", "act", "c", "h"};
    pd_lstm_cell_dims d;
    pd_cuda_state *st;

    PD_CHECK(pd_kernel_check_lstm_cell_forward(gates, c_prev, act, c, h, &d));
    PD_CHECK(pd_cuda_expect_on_gpu("lstm cell", 5, tensors, names));
    if (d.n * d.hidden == 0)
        return PD_OK;
    PD_CHECK(pd_cuda_enter(dev, &st));
    lstm_forward_kernel<<<pd_cuda_grid(&st->launch, d.n * d.hidden), PD_CUDA_BLOCK, 0, st->launch.stream>>>(
        (const float *)gates->data, (const float *)c_prev->data, (float *)act->data, (float *)c->data,
        (float *)h->data, d.n, d.hidden);
    PD_CUDA_CHECK_LAUNCH("lstm cell forward kernel launch");
    return PD_OK;
}

extern "C" pd_status pd_cuda_lstm_cell_backward(pd_device *dev, const pd_tensor *act, const pd_tensor *c_prev,
                                                const pd_tensor *c, const pd_tensor *dh, const pd_tensor *dc,
                                                pd_tensor *dgates, pd_tensor *dc_prev)
{
    const pd_tensor *tensors[] = {act, c_prev, c, dh, dc, dgates, dc_prev};
    static const char *const names[] = {"act", "c_prev", "c", "dh", "dc", "dgates", "dc_prev"};
    pd_lstm_cell_dims d;
    pd_cuda_state *st;

    PD_CHECK(pd_kernel_check_lstm_cell_backward(act, c_prev, c, dh, dc, dgates, dc_prev, &d));
    PD_CHECK(pd_cuda_expect_on_gpu("lstm cell backward", 7, tensors, names));
    if (d.n * d.hidden == 0)
        return PD_OK;
    PD_CHECK(pd_cuda_enter(dev, &st));
    lstm_backward_kernel<<<pd_cuda_grid(&st->launch, d.n * d.hidden), PD_CUDA_BLOCK, 0, st->launch.stream>>>(
        (const float *)act->data, (const float *)c_prev->data, (const float *)c->data, (const float *)dh->data,
        dc ? (const float *)dc->data : nullptr, (float *)dgates->data, (float *)dc_prev->data, d.n, d.hidden);
    PD_CUDA_CHECK_LAUNCH("lstm cell backward kernel launch");
    return PD_OK;
}
