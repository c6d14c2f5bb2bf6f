/* Fused CUDA optimizer updates: one pass over w, g and the optimizer state
 * per step, element for element the arithmetic of kernels/cpu/optimizer.c
 * (torch.optim.SGD, torch.optim.Adam / AdamW), each operation rounded on its
 * own (__fmul_rn and friends never fuse into an FMA) so that both backends
 * produce the same bits. */
#include "config.h"

#include <math.h>
#include <stdint.h>

#include "kernels/cuda/pd_cuda.h"

namespace {

/* w, g and up to two state arrays s0, s1 (`states` says how many are used),
 * updated by step(w, g, s0, s1) element by element; with `vec` as float4.
 * The state is not read when !read_state (its first step may see garbage). */
template <int states, class Step>
__global__ void __launch_bounds__(PD_CUDA_BLOCK)
    update_kernel(Step step, float *w, const float *g, float *s0, float *s1, int64_t n, bool vec, bool read_state)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t n4 = vec ? n / 4 : 0;

    for (int64_t v = tid; v < n4; v += stride) {
        float4 wv = reinterpret_cast<const float4 *>(w)[v];
        const float4 gv = reinterpret_cast<const float4 *>(g)[v];
        float4 s0v = make_float4(0.0f, 0.0f, 0.0f, 0.0f), s1v = s0v;
        if (states >= 1 && read_state)
            s0v = reinterpret_cast<const float4 *>(s0)[v];
        if (states >= 2 && read_state)
            s1v = reinterpret_cast<const float4 *>(s1)[v];
        step(wv.x, gv.x, s0v.x, s1v.x);
        step(wv.y, gv.y, s0v.y, s1v.y);
        step(wv.z, gv.z, s0v.z, s1v.z);
        step(wv.w, gv.w, s0v.w, s1v.w);
        reinterpret_cast<float4 *>(w)[v] = wv;
        if constexpr (states >= 1)
            reinterpret_cast<float4 *>(s0)[v] = s0v;
        if constexpr (states >= 2)
            reinterpret_cast<float4 *>(s1)[v] = s1v;
    }
    for (int64_t i = 4 * n4 + tid; i < n; i += stride) {
        float wi = w[i], s0i = 0.0f, s1i = 0.0f;
        if (states >= 1 && read_state)
            s0i = s0[i];
        if (states >= 2 && read_state)
            s1i = s1[i];
        step(wi, g[i], s0i, s1i);
        w[i] = wi;
        if constexpr (states >= 1)
            s0[i] = s0i;
        if constexpr (states >= 2)
            s1[i] = s1i;
    }
}

template <int states, class Step>
pd_status launch_update(const pd_cuda_launch *launch, const char *what, Step step, float *w, const float *g,
                        float *s0, float *s1, int64_t n, bool read_state)
{
    if (n <= 0)
        return PD_OK;
    const bool vec = pd_cuda_aligned16(w) && pd_cuda_aligned16(g) && pd_cuda_aligned16(s0) && pd_cuda_aligned16(s1);
    const unsigned blocks = pd_cuda_grid(launch, vec ? (n + 3) / 4 : n);
    update_kernel<states><<<blocks, PD_CUDA_BLOCK, 0, launch->stream>>>(step, w, g, s0, s1, n, vec, read_state);
    PD_CUDA_CHECK_LAUNCH(what);
    return PD_OK;
}

/* SGD without momentum: w -= lr * (g + wd * w). */
struct sgd_plain_step {
    float lr, weight_decay;
    __device__ void operator()(float &w, float g, float &, float &) const
    {
        w = __fsub_rn(w, __fmul_rn(lr, __fadd_rn(g, __fmul_rn(weight_decay, w))));
    }
};

/* SGD with momentum: d = g + wd * w; buf = first ? d : keep * buf + take * d;
 * w -= lr * (nesterov ? d + momentum * buf : buf). */
struct sgd_momentum_step {
    float lr, weight_decay, momentum, keep, take;
    bool nesterov, first_step;
    __device__ void operator()(float &w, float g, float &buf, float &) const
    {
        const float d = __fadd_rn(g, __fmul_rn(weight_decay, w));
        const float b = first_step ? d : __fadd_rn(__fmul_rn(keep, buf), __fmul_rn(take, d));
        buf = b;
        w = __fsub_rn(w, __fmul_rn(lr, nesterov ? __fadd_rn(d, __fmul_rn(momentum, b)) : b));
    }
};

/* Adam: grad = g + l2 * w; w *= shrink; m += (1-beta1) (grad - m);
 * v = beta2 v + (1-beta2) grad grad; w -= step_size m / (sqrt(v)/bc2_sqrt + eps). */
struct adam_step {
    float l2, shrink, one_minus_beta1, beta2, one_minus_beta2, step_size, bc2_sqrt, eps;
    __device__ void operator()(float &w, float g, float &m, float &v) const
    {
        const float grad = __fadd_rn(g, __fmul_rn(l2, w));
        const float wi = __fmul_rn(w, shrink);
        const float mi = __fadd_rn(m, __fmul_rn(one_minus_beta1, __fsub_rn(grad, m)));
        const float vi = __fadd_rn(__fmul_rn(v, beta2), __fmul_rn(__fmul_rn(one_minus_beta2, grad), grad));
        const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
        m = mi;
        v = vi;
        w = __fsub_rn(wi, __fdiv_rn(__fmul_rn(step_size, mi), denom));
    }
};

} // namespace

extern "C" pd_status pd_cuda_launch_sgd(const pd_cuda_launch *launch, const pd_sgd_desc *desc, float *w,
                                        const float *g, float *momentum_buf, int64_t n)
{
    if (desc->momentum == 0.0f)
        return launch_update<0>(launch, "sgd kernel launch", sgd_plain_step{desc->lr, desc->weight_decay}, w, g,
                                nullptr, nullptr, n, false);
    const sgd_momentum_step step = {
        desc->lr,
        desc->weight_decay,
        desc->momentum,
        desc->first_step ? 0.0f : desc->momentum,
        desc->first_step ? 1.0f : 1.0f - desc->dampening,
        desc->nesterov,
        desc->first_step,
    };
    return launch_update<1>(launch, "sgd kernel launch", step, w, g, momentum_buf, nullptr, n, !desc->first_step);
}

extern "C" pd_status pd_cuda_launch_adam(const pd_cuda_launch *launch, const pd_adam_desc *desc, float *w,
                                         const float *g, float *m, float *v, int64_t n)
{
    /* The scalars exactly as the CPU derives them: bias corrections in double. */
    const double bc1 = 1.0 - pow((double)desc->beta1, (double)desc->step);
    const double bc2 = 1.0 - pow((double)desc->beta2, (double)desc->step);
    const adam_step step = {
        desc->decoupled ? 0.0f : desc->weight_decay,
        desc->decoupled ? 1.0f - desc->lr * desc->weight_decay : 1.0f,
        1.0f - desc->beta1,
        desc->beta2,
        1.0f - desc->beta2,
        (float)((double)desc->lr / bc1),
        (float)sqrt(bc2),
        desc->eps,
    };
    return launch_update<2>(launch, "adam kernel launch", step, w, g, m, v, n, true);
}
