/* Cross-channel local response normalisation kernels, the CPU's function
 * (kernels/cpu/lrn.c, torch.nn.LocalResponseNorm): the window of channel c
 * is [c - size/2, c + (size-1)/2] clipped to the channels, scale_c = k +
 * alpha/size * sum x^2 and y_c = x_c * scale_c^-beta. cuDNN's LRN is not
 * used: it takes only windows of 1 to 16 channels, k >= 1e-5 and beta >=
 * 0.01, and it is deprecated in cuDNN 9. Every operation is rounded as the
 * CPU code writes it (no fused multiply-add; beta 0.75 and 0.5 through
 * square roots as there), so results match the CPU's bit for bit except
 * for other betas, where CUDA's powf may differ from the C library's in the
 * last bits. One thread per element, no atomics: deterministic. The
 * backward pass recomputes the neighbouring channels' scales instead of
 * storing them (size^2 multiply-adds per element, no scratch memory). */
#include "config.h"

#include "kernels/cuda/pd_cuda_nn.h"

namespace {

/* The LRN of one call as the kernels need it. */
struct lrn_args {
    int64_t c, spatial, elements;
    int size;
    float k, beta;
    float alpha_over_size; /* alpha / size, as the CPU rounds it */
    float coef;            /* 2 alpha beta / size, as the CPU rounds it */
};

/* scale of channel c at spatial position s; x_n is image n's [C, spatial]. */
__device__ float lrn_scale(const lrn_args &a, const float *x_n, int64_t c, int64_t s)
{
    const int64_t lo = c - a.size / 2 < 0 ? 0 : c - a.size / 2;
    const int64_t hi = c + (a.size - 1) / 2 >= a.c ? a.c - 1 : c + (a.size - 1) / 2;
    float sum = 0.0f;

    for (int64_t j = lo; j <= hi; j++) {
        const float v = x_n[j * a.spatial + s];
        sum = __fadd_rn(sum, __fmul_rn(v, v));
    }
    return __fadd_rn(a.k, __fmul_rn(a.alpha_over_size, sum));
}

/* scale^-beta as the CPU's lrn_pow_neg. */
__device__ float lrn_pow_neg(float scale, float beta)
{
    if (beta == 0.75f) {
        const float r = __fsqrt_rn(scale);
        return __fdiv_rn(1.0f, __fmul_rn(r, __fsqrt_rn(r)));
    }
    if (beta == 0.5f)
        return __fdiv_rn(1.0f, __fsqrt_rn(scale));
    return powf(scale, -beta);
}

__global__ void __launch_bounds__(PD_CUDA_BLOCK) lrn_forward_kernel(lrn_args a, const float *x, float *y)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, image = a.c * a.spatial;

    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.elements; i += stride) {
        const int64_t s = i % a.spatial, c = i / a.spatial % a.c;
        const float scale = lrn_scale(a, x + i / image * image, c, s);
        y[i] = __fmul_rn(x[i], lrn_pow_neg(scale, a.beta));
    }
}

/* dx_j = dy_j scale_j^-beta - coef x_j sum_{c: j in window(c)} dy_c y_c / scale_c,
 * where j is in window(c) iff c runs from j - (size-1)/2 to j + size/2; the
 * terms subtracted one by one in increasing c, as the CPU does. */
__global__ void __launch_bounds__(PD_CUDA_BLOCK)
    lrn_backward_kernel(lrn_args a, const float *x, const float *y, const float *dy, float *dx)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, image = a.c * a.spatial;
    const int before = (a.size - 1) / 2, after = a.size / 2;

    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.elements; i += stride) {
        const int64_t s = i % a.spatial, j = i / a.spatial % a.c, base = i / image * image;
        const float *x_n = x + base;
        const int64_t lo = j - before < 0 ? 0 : j - before, hi = j + after >= a.c ? a.c - 1 : j + after;
        const float xj_coef = __fmul_rn(a.coef, x[i]);
        float grad = __fmul_rn(dy[i], lrn_pow_neg(lrn_scale(a, x_n, j, s), a.beta));

        for (int64_t c = lo; c <= hi; c++) {
            const int64_t at = base + c * a.spatial + s;
            const float ratio = __fdiv_rn(__fmul_rn(dy[at], y[at]), lrn_scale(a, x_n, c, s));
            grad = __fsub_rn(grad, __fmul_rn(xj_coef, ratio));
        }
        dx[i] = grad;
    }
}

lrn_args make_args(const pd_lrn_desc *desc, int64_t n, int64_t c, int64_t spatial)
{
    lrn_args a;

    a.c = c;
    a.spatial = spatial;
    a.elements = n * c * spatial;
    a.size = desc->size;
    a.k = desc->k;
    a.beta = desc->beta;
    /* Host arithmetic, rounded like the CPU's expressions. */
    a.alpha_over_size = desc->alpha / (float)desc->size;
    a.coef = 2.0f * desc->alpha * desc->beta / (float)desc->size;
    return a;
}

} // namespace

pd_status pd_cuda_launch_lrn_forward(const pd_cuda_launch *launch, const pd_lrn_desc *desc, int64_t n, int64_t c,
                                     int64_t spatial, const float *x, float *y)
{
    const lrn_args a = make_args(desc, n, c, spatial);

    if (a.elements <= 0)
        return PD_OK;
    lrn_forward_kernel<<<pd_cuda_grid(launch, a.elements), PD_CUDA_BLOCK, 0, launch->stream>>>(a, x, y);
    PD_CUDA_CHECK_LAUNCH("lrn forward kernel");
    return PD_OK;
}

pd_status pd_cuda_launch_lrn_backward(const pd_cuda_launch *launch, const pd_lrn_desc *desc, int64_t n, int64_t c,
                                      int64_t spatial, const float *x, const float *y, const float *dy, float *dx)
{
    const lrn_args a = make_args(desc, n, c, spatial);

    if (a.elements <= 0)
        return PD_OK;
    lrn_backward_kernel<<<pd_cuda_grid(launch, a.elements), PD_CUDA_BLOCK, 0, launch->stream>>>(a, x, y, dy, dx);
    PD_CUDA_CHECK_LAUNCH("lrn backward kernel");
    return PD_OK;
}
