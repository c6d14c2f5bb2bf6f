/* Softmax cross-entropy on the GPU, the function of
 * kernels/cpu/softmax_cross_entropy.c: probs = softmax(logits) row by row
 * with the row maximum subtracted, loss = mean over the rows of
 * log(sum) - (logit[label] - max), the sums in double.
 *
 * The forward pass is one fused kernel per row group (maximum, exponentials
 * and their sum, scaling, the row's loss: logits read twice, probs written
 * and rescaled while still in cache), then one block adds the row losses in
 * a fixed order and divides by N. A row is one warp's when it has at most
 * SCE_WARP_CLASSES classes, one block's otherwise; either way its sums run
 * through a fixed butterfly, so every thread of the group holds the same
 * bits and the results do not depend on the grid. The exponentials are
 * CUDA's expf (within 2 ulp, glibc's within 1), so probs agree with the
 * CPU's to a few ulp, not bit for bit. The backward pass is element-wise,
 * rounded exactly as the CPU's. Labels are range-checked first (one
 * read-back, see index_check.cu). */
#include "config.h"

#include <math.h>
#include <stdint.h>

#include "kernels/cuda/pd_cuda.h"
extern "C" {
#include "kernels/pd_kernels_int.h"
}

/* Rows of at most this many classes take one warp, wider rows one block. */
#define SCE_WARP_CLASSES 256
#define SCE_WARPS (PD_CUDA_BLOCK / 32)

namespace {

constexpr unsigned FULL_MASK = 0xffffffffu;

struct max_op {
    /* fmaxf ignores NaN, which the exponentials then propagate as the CPU does. */
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

struct sum_op {
    __device__ double operator()(double a, double b) const { return a + b; }
};

/* Over the threads of one row group (a warp, or the whole block when
 * width == PD_CUDA_BLOCK): a butterfly within each warp (every step
 * combines the same two operands in every lane, and op commutes, so all
 * lanes end with the same bits), then the warps' results in warp order. */
template <int width, class T, class Op>
__device__ T group_reduce(T v, Op op)
{
    for (int offset = 16; offset > 0; offset /= 2)
        v = op(v, __shfl_xor_sync(FULL_MASK, v, offset));
    if constexpr (width == PD_CUDA_BLOCK) {
        __shared__ T warp_values[SCE_WARPS];
        if (threadIdx.x % 32u == 0)
            warp_values[threadIdx.x / 32u] = v;
        __syncthreads();
        v = warp_values[0];
        for (int w = 1; w < SCE_WARPS; w++)
            v = op(v, warp_values[w]);
        __syncthreads(); /* before the next call reuses warp_values */
    }
    return v;
}

/* Rows of `width` threads each (32 or PD_CUDA_BLOCK); row r's loss
 * log(sum) - (x[label] - max) into row_loss[r]. A group's loop bounds are
 * the same for all its threads, as the block-wide sums need. */
template <int width>
__global__ void __launch_bounds__(PD_CUDA_BLOCK) sce_forward_kernel(const float *x, const int32_t *labels, float *p,
                                                                    double *row_loss, int64_t n, int64_t c)
{
    constexpr int rows_per_block = PD_CUDA_BLOCK / width;
    const int t = (int)(threadIdx.x % width);
    const int64_t step = (int64_t)gridDim.x * rows_per_block;

    for (int64_t row = (int64_t)blockIdx.x * rows_per_block + threadIdx.x / width; row < n; row += step) {
        const float *xr = x + row * c;
        float *pr = p + row * c;
        float max = -INFINITY;
        for (int64_t j = t; j < c; j += width)
            max = fmaxf(max, xr[j]);
        max = group_reduce<width>(max, max_op{});
        double sum = 0.0;
        for (int64_t j = t; j < c; j += width) {
            const float e = expf(__fsub_rn(xr[j], max));
            pr[j] = e;
            sum += (double)e;
        }
        sum = group_reduce<width>(sum, sum_op{});
        const float inv = (float)(1.0 / sum);
        for (int64_t j = t; j < c; j += width) /* the thread's own writes above */
            pr[j] = __fmul_rn(pr[j], inv);
        /* -log softmax = log(sum) - (x_label - max), without log(tiny prob). */
        if (t == 0)
            row_loss[row] = log(sum) - ((double)xr[labels[row]] - (double)max);
    }
}

/* One block: *loss = (sum of the n row losses, in a fixed order) / n. */
__global__ void __launch_bounds__(PD_CUDA_BLOCK) sce_mean_kernel(const double *row_loss, int64_t n, float *loss)
{
    double acc = 0.0;

    for (int64_t i = threadIdx.x; i < n; i += PD_CUDA_BLOCK)
        acc += row_loss[i];
    acc = group_reduce<PD_CUDA_BLOCK>(acc, sum_op{});
    if (threadIdx.x == 0)
        *loss = n > 0 ? (float)(acc / (double)n) : 0.0f;
}

/* g = k * p, and k * (p - 1) at the label (k = dloss / N); g may be p. */
__global__ void __launch_bounds__(PD_CUDA_BLOCK)
    sce_backward_kernel(const float *p, const int32_t *labels, float k, float *g, int64_t n, int64_t c)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;

    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n * c; e += stride) {
        const int64_t row = e / c;
        const float pe = p[e];
        g[e] = e - row * c == labels[row] ? __fmul_rn(k, __fsub_rn(pe, 1.0f)) : __fmul_rn(k, pe);
    }
}

/* PD_EINVAL naming the first label outside [0, classes) (synchronous);
 * *extra_scratch gets `extra` bytes of the device's scratch. */
pd_status check_labels(pd_device *dev, const pd_sce_dims *d, const pd_tensor *labels, const char *what_labels,
                       size_t extra, void **extra_scratch)
{
    void *scratch;
    int64_t bad;
    int32_t label = 0;

    PD_CHECK(pd_cuda_first_outside(dev, (const int32_t *)labels->data, d->n, d->classes, extra, &scratch, &bad,
                                   &label));
    if (bad < d->n)
        return pd_kernel_label_outside(what_labels, bad, label, d->classes);
    *extra_scratch = (char *)scratch + PD_CUDA_INDEX_SCRATCH;
    return PD_OK;
}

} // namespace

extern "C" pd_status pd_cuda_softmax_cross_entropy_forward(pd_device *dev, const pd_tensor *logits,
                                                           const pd_tensor *labels, pd_tensor *probs,
                                                           pd_tensor *loss)
{
    const pd_tensor *tensors[] = {logits, labels, probs, loss};
    static const char *const names[] = {"logits", "labels", "probs", "loss"};
    pd_sce_dims d;
    pd_cuda_state *st;
    void *scratch;

    PD_CHECK(pd_kernel_check_sce_forward(logits, labels, probs, loss, &d));
    PD_CHECK(pd_cuda_expect_on_gpu("softmax_cross_entropy forward", 4, tensors, names));
    PD_CHECK(check_labels(dev, &d, labels, PD_SCE_FORWARD_LABELS, (size_t)d.n * sizeof(double), &scratch));
    PD_CHECK(pd_cuda_enter(dev, &st));
    const pd_cuda_launch *launch = &st->launch;
    double *row_loss = (double *)scratch;
    const float *x = (const float *)logits->data;
    const int32_t *lab = (const int32_t *)labels->data;
    float *p = (float *)probs->data;
    if (d.n > 0) {
        if (d.classes <= SCE_WARP_CLASSES)
            sce_forward_kernel<32><<<pd_cuda_grid(launch, d.n * 32), PD_CUDA_BLOCK, 0, launch->stream>>>(
                x, lab, p, row_loss, d.n, d.classes);
        else
            sce_forward_kernel<PD_CUDA_BLOCK><<<pd_cuda_grid(launch, d.n * PD_CUDA_BLOCK), PD_CUDA_BLOCK, 0,
                                                launch->stream>>>(x, lab, p, row_loss, d.n, d.classes);
        PD_CUDA_CHECK_LAUNCH("softmax_cross_entropy forward kernel launch");
    }
    sce_mean_kernel<<<1, PD_CUDA_BLOCK, 0, launch->stream>>>(row_loss, d.n, (float *)loss->data);
    PD_CUDA_CHECK_LAUNCH("softmax_cross_entropy mean kernel launch");
    return PD_OK;
}

extern "C" pd_status pd_cuda_softmax_cross_entropy_backward(pd_device *dev, const pd_tensor *probs,
                                                            const pd_tensor *labels, float dloss, pd_tensor *dlogits)
{
    const pd_tensor *tensors[] = {probs, labels, dlogits};
    static const char *const names[] = {"probs", "labels", "dlogits"};
    pd_sce_dims d;
    pd_cuda_state *st;
    void *scratch;

    PD_CHECK(pd_kernel_check_sce_backward(probs, labels, dlogits, &d));
    PD_CHECK(pd_cuda_expect_on_gpu("softmax_cross_entropy backward", 3, tensors, names));
    PD_CHECK(check_labels(dev, &d, labels, PD_SCE_BACKWARD_LABELS, 0, &scratch));
    if (d.n == 0 || d.classes == 0)
        return PD_OK;
    PD_CHECK(pd_cuda_enter(dev, &st));
    /* The factor as the CPU computes it, in float. */
    const float k = dloss / (float)d.n;
    sce_backward_kernel<<<pd_cuda_grid(&st->launch, d.n * d.classes), PD_CUDA_BLOCK, 0, st->launch.stream>>>(
        (const float *)probs->data, (const int32_t *)labels->data, k, (float *)dlogits->data, d.n, d.classes);
    PD_CUDA_CHECK_LAUNCH("softmax_cross_entropy backward kernel launch");
    return PD_OK;
}
