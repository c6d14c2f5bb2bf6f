/* Element-wise CUDA kernels: fill, axpby, add, dtype conversion, sum, ReLU
 * and dropout. Grid-stride loops with float4 accesses when every pointer is
 * 16-byte aligned; arithmetic rounded step by step (__fmul_rn and friends
 * never fuse into an FMA) so results match the CPU kernels bit for bit. */
#include "config.h"

#include <stdint.h>

#include "core/pd_rng.h"
#include "kernels/cuda/pd_cuda.h"

namespace {

/* Maps y[i] = op(i, a[i], b[i]) over n elements; `inputs` (0, 1 or 2) says
 * which of a, b are read. With `vec`, the first n/4*4 elements go as float4
 * and the rest one by one; without, all one by one. */
template <int inputs, class Op>
__global__ void __launch_bounds__(PD_CUDA_BLOCK)
    map_kernel(Op op, const float *a, const float *b, float *y, int64_t n, bool vec)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t n4 = vec ? n / 4 : 0;

    for (int64_t v = tid; v < n4; v += stride) {
        float4 av = make_float4(0.0f, 0.0f, 0.0f, 0.0f), bv = av, r;
        const int64_t i = 4 * v;
        if constexpr (inputs >= 1)
            av = reinterpret_cast<const float4 *>(a)[v];
        if constexpr (inputs >= 2)
            bv = reinterpret_cast<const float4 *>(b)[v];
        r.x = op(i, av.x, bv.x);
        r.y = op(i + 1, av.y, bv.y);
        r.z = op(i + 2, av.z, bv.z);
        r.w = op(i + 3, av.w, bv.w);
        reinterpret_cast<float4 *>(y)[v] = r;
    }
    for (int64_t i = 4 * n4 + tid; i < n; i += stride) {
        float av = 0.0f, bv = 0.0f;
        if constexpr (inputs >= 1)
            av = a[i];
        if constexpr (inputs >= 2)
            bv = b[i];
        y[i] = op(i, av, bv);
    }
}

template <int inputs, class Op>
pd_status launch_map(const pd_cuda_launch *launch, const char *what, Op op, const float *a, const float *b, float *y,
                     int64_t n)
{
    if (n <= 0)
        return PD_OK;
    const bool vec = pd_cuda_aligned16(a) && pd_cuda_aligned16(b) && pd_cuda_aligned16(y);
    const unsigned blocks = pd_cuda_grid(launch, vec ? (n + 3) / 4 : n);
    map_kernel<inputs><<<blocks, PD_CUDA_BLOCK, 0, launch->stream>>>(op, a, b, y, n, vec);
    PD_CUDA_CHECK_LAUNCH(what);
    return PD_OK;
}

struct fill_op {
    float value;
    __device__ float operator()(int64_t, float, float) const { return value; }
};

struct scale_op { /* axpby with beta == 0 */
    float alpha;
    __device__ float operator()(int64_t, float x, float) const { return __fmul_rn(alpha, x); }
};

struct axpby_op {
    float alpha, beta;
    __device__ float operator()(int64_t, float x, float y) const
    {
        return __fadd_rn(__fmul_rn(alpha, x), __fmul_rn(beta, y));
    }
};

struct add_op {
    __device__ float operator()(int64_t, float a, float b) const { return __fadd_rn(a, b); }
};

struct relu_op {
    __device__ float operator()(int64_t, float x, float) const { return x > 0.0f ? x : 0.0f; }
};

struct relu_backward_op {
    __device__ float operator()(int64_t, float y, float dy) const { return y > 0.0f ? dy : 0.0f; }
};

struct dropout_op {
    float p, scale;
    uint64_t seed;
    __device__ float operator()(int64_t i, float x, float) const
    {
        return pd_rng_uniform(seed, (uint64_t)i) >= p ? __fmul_rn(x, scale) : 0.0f;
    }
};

/* dtype conversion, bit for bit the host's pd_dtype_convert (src/core/dtype.c). */

__device__ uint16_t f32_to_bf16(float f)
{
    uint32_t u = __float_as_uint(f);

    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* keep it a quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__device__ float bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ uint16_t f32_to_f16(float f)
{
    const uint32_t u = __float_as_uint(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const int32_t exponent = (int32_t)((u >> 23) & 0xffu) - 127 + 15;
    uint32_t mantissa = u & 0x7fffffu;

    if (((u >> 23) & 0xffu) == 0xffu) /* inf or NaN */
        return (uint16_t)(sign | 0x7c00u | (mantissa ? 0x200u : 0u));
    if (exponent >= 31) /* overflow rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (exponent <= 0) { /* subnormal or zero */
        if (exponent < -10)
            return (uint16_t)sign;
        mantissa |= 0x800000u;
        const uint32_t shift = (uint32_t)(14 - exponent);
        uint32_t half = mantissa >> shift;
        const uint32_t rest = mantissa & ((1u << shift) - 1u);
        const uint32_t halfway = 1u << (shift - 1u);
        if (rest > halfway || (rest == halfway && (half & 1u)))
            half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exponent << 10) | (mantissa >> 13);
    const uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
        half++; /* may carry into the exponent, which is right */
    return (uint16_t)half;
}

__device__ float f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu;
    const uint32_t mantissa = h & 0x3ffu;

    if (exponent == 0x1fu)
        return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) {
        if (mantissa == 0)
            return __uint_as_float(sign);
        const float value = __fmul_rn((float)mantissa, 0x1p-24f); /* exact, as ldexpf */
        return sign ? -value : value;
    }
    return __uint_as_float(sign | ((exponent - 15u + 127u) << 23) | (mantissa << 13));
}

template <pd_dtype dtype>
__device__ float load_as_f32(const void *src, int64_t i)
{
    if constexpr (dtype == PD_F32)
        return static_cast<const float *>(src)[i];
    else if constexpr (dtype == PD_BF16)
        return bf16_to_f32(static_cast<const uint16_t *>(src)[i]);
    else if constexpr (dtype == PD_F16)
        return f16_to_f32(static_cast<const uint16_t *>(src)[i]);
    else if constexpr (dtype == PD_I32)
        return (float)static_cast<const int32_t *>(src)[i];
    else
        return (float)static_cast<const uint8_t *>(src)[i];
}

/* Integers round to nearest even to 64 bits (__float2ll_rn, the host's
 * lrintf), then narrow as the host does; NaN, inf and values beyond 64 bits
 * convert as the hardware does, which C leaves unspecified anyway. */
template <pd_dtype dtype>
__device__ void store_from_f32(void *dst, int64_t i, float value)
{
    if constexpr (dtype == PD_F32)
        static_cast<float *>(dst)[i] = value;
    else if constexpr (dtype == PD_BF16)
        static_cast<uint16_t *>(dst)[i] = f32_to_bf16(value);
    else if constexpr (dtype == PD_F16)
        static_cast<uint16_t *>(dst)[i] = f32_to_f16(value);
    else if constexpr (dtype == PD_I32)
        static_cast<int32_t *>(dst)[i] = (int32_t)__float2ll_rn(value);
    else
        static_cast<uint8_t *>(dst)[i] = (uint8_t)fminf(fmaxf((float)__float2ll_rn(value), 0.0f), 255.0f);
}

template <pd_dtype from, pd_dtype to>
__global__ void __launch_bounds__(PD_CUDA_BLOCK) convert_kernel(const void *x, void *y, int64_t n)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;

    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        store_from_f32<to>(y, i, load_as_f32<from>(x, i));
}

template <pd_dtype from>
pd_status launch_convert_from(const pd_cuda_launch *launch, const void *x, pd_dtype y_dtype, void *y, int64_t n)
{
    const unsigned blocks = pd_cuda_grid(launch, n);

    switch (y_dtype) {
    case PD_F32: convert_kernel<from, PD_F32><<<blocks, PD_CUDA_BLOCK, 0, launch->stream>>>(x, y, n); break;
    case PD_BF16: convert_kernel<from, PD_BF16><<<blocks, PD_CUDA_BLOCK, 0, launch->stream>>>(x, y, n); break;
    case PD_F16: convert_kernel<from, PD_F16><<<blocks, PD_CUDA_BLOCK, 0, launch->stream>>>(x, y, n); break;
    case PD_I32: convert_kernel<from, PD_I32><<<blocks, PD_CUDA_BLOCK, 0, launch->stream>>>(x, y, n); break;
    case PD_U8: convert_kernel<from, PD_U8><<<blocks, PD_CUDA_BLOCK, 0, launch->stream>>>(x, y, n); break;
    default: return PD_ERROR(PD_EINVAL, "convert: invalid target dtype %d", (int)y_dtype);
    }
    PD_CUDA_CHECK_LAUNCH("convert kernel launch");
    return PD_OK;
}

/* Sum of v over the block (PD_CUDA_BLOCK threads), in thread 0: a fixed tree
 * of warp shuffles, so the order of additions never varies. */
__device__ double block_sum(double v)
{
    __shared__ double warp_sums[PD_CUDA_BLOCK / 32];
    const unsigned lane = threadIdx.x % 32u, warp = threadIdx.x / 32u;

    for (int offset = 16; offset > 0; offset /= 2)
        v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0)
        warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < PD_CUDA_BLOCK / 32 ? warp_sums[lane] : 0.0;
        for (int offset = 16; offset > 0; offset /= 2)
            v += __shfl_down_sync(0xffffffffu, v, offset);
    }
    return v;
}

/* First level: each block adds its grid-stride share into partials[block]. */
__global__ void __launch_bounds__(PD_CUDA_BLOCK)
    sum_partials_kernel(const float *x, int64_t n, bool vec, double *partials)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t n4 = vec ? n / 4 : 0;
    double acc = 0.0;

    for (int64_t v = tid; v < n4; v += stride) {
        const float4 xv = reinterpret_cast<const float4 *>(x)[v];
        acc += (double)xv.x;
        acc += (double)xv.y;
        acc += (double)xv.z;
        acc += (double)xv.w;
    }
    for (int64_t i = 4 * n4 + tid; i < n; i += stride)
        acc += (double)x[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0)
        partials[blockIdx.x] = acc;
}

/* Second level: one block adds the partials and rounds once to float. */
__global__ void __launch_bounds__(PD_CUDA_BLOCK) sum_final_kernel(const double *partials, int count, float *out)
{
    double acc = 0.0;

    for (int i = (int)threadIdx.x; i < count; i += PD_CUDA_BLOCK)
        acc += partials[i];
    acc = block_sum(acc);
    if (threadIdx.x == 0)
        *out = (float)acc;
}

/* C[i, j] *= beta over a rows x cols matrix with row stride ld; beta == 0
 * writes zeros without reading (C may hold NaN garbage). */
__global__ void __launch_bounds__(PD_CUDA_BLOCK)
    scale_matrix_kernel(float *c, int64_t rows, int64_t cols, int64_t ld, float beta)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;

    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < rows * cols; e += stride) {
        float *p = c + (e / cols) * ld + e % cols;
        *p = beta == 0.0f ? 0.0f : __fmul_rn(*p, beta);
    }
}

} // namespace

extern "C" pd_status pd_cuda_launch_fill(const pd_cuda_launch *launch, float *y, int64_t n, float value)
{
    return launch_map<0>(launch, "fill kernel launch", fill_op{value}, nullptr, nullptr, y, n);
}

extern "C" pd_status pd_cuda_launch_axpby(const pd_cuda_launch *launch, float alpha, const float *x, float beta,
                                          float *y, int64_t n)
{
    if (beta == 0.0f)
        return launch_map<1>(launch, "axpby kernel launch", scale_op{alpha}, x, nullptr, y, n);
    return launch_map<2>(launch, "axpby kernel launch", axpby_op{alpha, beta}, x, y, y, n);
}

extern "C" pd_status pd_cuda_launch_add(const pd_cuda_launch *launch, const float *a, const float *b, float *y,
                                        int64_t n)
{
    return launch_map<2>(launch, "add kernel launch", add_op{}, a, b, y, n);
}

extern "C" pd_status pd_cuda_launch_convert(const pd_cuda_launch *launch, pd_dtype x_dtype, const void *x,
                                            pd_dtype y_dtype, void *y, int64_t n)
{
    if (n <= 0)
        return PD_OK;
    if (x_dtype == y_dtype) {
        PD_CUDA_CHECK(cudaMemcpyAsync(y, x, (size_t)n * pd_dtype_size(x_dtype), cudaMemcpyDeviceToDevice,
                                      launch->stream));
        return PD_OK;
    }
    switch (x_dtype) {
    case PD_F32: return launch_convert_from<PD_F32>(launch, x, y_dtype, y, n);
    case PD_BF16: return launch_convert_from<PD_BF16>(launch, x, y_dtype, y, n);
    case PD_F16: return launch_convert_from<PD_F16>(launch, x, y_dtype, y, n);
    case PD_I32: return launch_convert_from<PD_I32>(launch, x, y_dtype, y, n);
    case PD_U8: return launch_convert_from<PD_U8>(launch, x, y_dtype, y, n);
    }
    return PD_ERROR(PD_EINVAL, "convert: invalid source dtype %d", (int)x_dtype);
}

extern "C" pd_status pd_cuda_launch_sum(const pd_cuda_launch *launch, const float *x, int64_t n, double *partials,
                                        float *out)
{
    const bool vec = pd_cuda_aligned16(x);
    const int64_t items = vec ? (n + 3) / 4 : n;
    int64_t blocks = (items + PD_CUDA_BLOCK - 1) / PD_CUDA_BLOCK;

    /* Not capped by the device: the same n adds in the same order anywhere. */
    if (blocks > PD_CUDA_SUM_BLOCKS)
        blocks = PD_CUDA_SUM_BLOCKS;
    if (blocks < 1)
        blocks = 1; /* n == 0 still writes a zero partial, hence *out = 0 */
    sum_partials_kernel<<<(unsigned)blocks, PD_CUDA_BLOCK, 0, launch->stream>>>(x, n > 0 ? n : 0, vec, partials);
    PD_CUDA_CHECK_LAUNCH("sum kernel launch (first pass)");
    sum_final_kernel<<<1, PD_CUDA_BLOCK, 0, launch->stream>>>(partials, (int)blocks, out);
    PD_CUDA_CHECK_LAUNCH("sum kernel launch (second pass)");
    return PD_OK;
}

extern "C" pd_status pd_cuda_launch_scale_matrix(const pd_cuda_launch *launch, float *c, int64_t rows, int64_t cols,
                                                 int64_t ld, float beta)
{
    if (rows <= 0 || cols <= 0 || beta == 1.0f)
        return PD_OK;
    scale_matrix_kernel<<<pd_cuda_grid(launch, rows * cols), PD_CUDA_BLOCK, 0, launch->stream>>>(c, rows, cols, ld,
                                                                                                 beta);
    PD_CUDA_CHECK_LAUNCH("scale_matrix kernel launch");
    return PD_OK;
}

extern "C" pd_status pd_cuda_launch_relu_forward(const pd_cuda_launch *launch, const float *x, float *y, int64_t n)
{
    return launch_map<1>(launch, "relu_forward kernel launch", relu_op{}, x, nullptr, y, n);
}

extern "C" pd_status pd_cuda_launch_relu_backward(const pd_cuda_launch *launch, const float *y, const float *dy,
                                                  float *dx, int64_t n)
{
    return launch_map<2>(launch, "relu_backward kernel launch", relu_backward_op{}, y, dy, dx, n);
}

extern "C" pd_status pd_cuda_launch_dropout(const pd_cuda_launch *launch, float p, uint64_t seed, const float *x,
                                            float *y, int64_t n)
{
    /* The scale as the CPU computes it, in float. */
    return launch_map<1>(launch, "dropout kernel launch", dropout_op{p, 1.0f / (1.0f - p), seed}, x, nullptr, y, n);
}
