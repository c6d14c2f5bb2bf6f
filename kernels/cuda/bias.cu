/* Bias kernels of the fully connected layer (linear.c): the bias added to
 * the product, and the bias gradient, a column sum of dy. The column sum is
 * deterministic without atomics: blocks of 32 columns x 8 row lanes add a
 * fixed chunk of rows each in double (a lane strides the chunk, the 8 lane
 * sums are added in lane order), and when there is more than one chunk a
 * second pass adds the chunk sums of each column in chunk order. The chunks
 * depend on the number of rows only, not on the GPU. */
#include "config.h"

#include <stdint.h>

#include "kernels/cuda/pd_cuda.h"

/* Columns per block of the column sum: one warp reads 32 neighbouring
 * floats of a row, a 128-byte transaction. */
#define COLSUM_COLS 32
/* Row lanes per block. */
#define COLSUM_LANES (PD_CUDA_BLOCK / COLSUM_COLS)
/* Rows per chunk at least, and the most chunks (bounds the scratch to
 * COLSUM_MAX_CHUNKS doubles per column). */
#define COLSUM_MIN_CHUNK_ROWS 512
#define COLSUM_MAX_CHUNKS 64

namespace {

__global__ void __launch_bounds__(PD_CUDA_BLOCK)
    bias_add_kernel(float *y, const float *bias, int64_t rows, int64_t cols, bool vec)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;

    if (vec) { /* cols % 4 == 0: a float4 never straddles two rows */
        const int64_t n4 = rows * cols / 4, cols4 = cols / 4;
        float4 *y4 = reinterpret_cast<float4 *>(y);
        const float4 *b4 = reinterpret_cast<const float4 *>(bias);
        for (int64_t v = tid; v < n4; v += stride) {
            float4 yv = y4[v];
            const float4 bv = b4[v % cols4];
            yv.x = __fadd_rn(yv.x, bv.x);
            yv.y = __fadd_rn(yv.y, bv.y);
            yv.z = __fadd_rn(yv.z, bv.z);
            yv.w = __fadd_rn(yv.w, bv.w);
            y4[v] = yv;
        }
        return;
    }
    for (int64_t e = tid; e < rows * cols; e += stride)
        y[e] = __fadd_rn(y[e], bias[e % cols]);
}

/* Block (column tile blockIdx.x, chunk blockIdx.y): the chunk's sum of
 * each of its columns, into out (one chunk) or partials[chunk, column]. */
__global__ void __launch_bounds__(PD_CUDA_BLOCK) column_sum_chunk_kernel(const float *x, int64_t rows, int64_t cols,
                                                                         int64_t chunk_rows, double *partials,
                                                                         float *out)
{
    __shared__ double lane_sums[COLSUM_LANES][COLSUM_COLS];
    const int col = (int)(threadIdx.x % COLSUM_COLS), lane = (int)(threadIdx.x / COLSUM_COLS);
    const int64_t j = (int64_t)blockIdx.x * COLSUM_COLS + col;
    const int64_t lo = (int64_t)blockIdx.y * chunk_rows;
    const int64_t hi = lo + chunk_rows < rows ? lo + chunk_rows : rows;
    double acc = 0.0;

    if (j < cols)
        for (int64_t i = lo + lane; i < hi; i += COLSUM_LANES)
            acc += (double)x[i * cols + j];
    lane_sums[lane][col] = acc;
    __syncthreads();
    if (lane != 0 || j >= cols)
        return;
    for (int l = 1; l < COLSUM_LANES; l++)
        acc += lane_sums[l][col];
    if (out)
        out[j] = (float)acc;
    else
        partials[(int64_t)blockIdx.y * cols + j] = acc;
}

/* out[j] = the chunk sums of column j added in chunk order. */
__global__ void __launch_bounds__(PD_CUDA_BLOCK)
    column_sum_final_kernel(const double *partials, int64_t chunks, int64_t cols, float *out)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;

    for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += stride) {
        double acc = partials[j];
        for (int64_t c = 1; c < chunks; c++)
            acc += partials[c * cols + j];
        out[j] = (float)acc;
    }
}

int64_t chunk_rows_of(int64_t rows)
{
    const int64_t even = (rows + COLSUM_MAX_CHUNKS - 1) / COLSUM_MAX_CHUNKS;

    return even > COLSUM_MIN_CHUNK_ROWS ? even : COLSUM_MIN_CHUNK_ROWS;
}

int64_t chunks_of(int64_t rows)
{
    const int64_t per = chunk_rows_of(rows);

    return rows > per ? (rows + per - 1) / per : 1;
}

} // namespace

extern "C" pd_status pd_cuda_launch_bias_add(const pd_cuda_launch *launch, float *y, const float *bias, int64_t rows,
                                             int64_t cols)
{
    if (rows <= 0 || cols <= 0)
        return PD_OK;
    const bool vec = cols % 4 == 0 && pd_cuda_aligned16(y) && pd_cuda_aligned16(bias);
    const unsigned blocks = pd_cuda_grid(launch, vec ? rows * cols / 4 : rows * cols);
    bias_add_kernel<<<blocks, PD_CUDA_BLOCK, 0, launch->stream>>>(y, bias, rows, cols, vec);
    PD_CUDA_CHECK_LAUNCH("bias add kernel launch");
    return PD_OK;
}

extern "C" size_t pd_cuda_column_sum_scratch(int64_t rows, int64_t cols)
{
    const int64_t chunks = chunks_of(rows);

    return chunks > 1 && cols > 0 ? (size_t)(chunks * cols) * sizeof(double) : 0;
}

extern "C" pd_status pd_cuda_launch_column_sum(const pd_cuda_launch *launch, const float *x, int64_t rows,
                                               int64_t cols, double *partials, float *out)
{
    if (cols <= 0)
        return PD_OK;
    const int64_t chunks = chunks_of(rows), tiles = (cols + COLSUM_COLS - 1) / COLSUM_COLS;
    const dim3 grid((unsigned)tiles, (unsigned)chunks);

    if (tiles > INT32_MAX)
        return PD_ERROR(PD_EINVAL, "column sum: %lld columns are more than one grid holds", (long long)cols);
    column_sum_chunk_kernel<<<grid, PD_CUDA_BLOCK, 0, launch->stream>>>(x, rows > 0 ? rows : 0, cols,
                                                                       chunk_rows_of(rows), partials,
                                                                       chunks > 1 ? nullptr : out);
    PD_CUDA_CHECK_LAUNCH("column sum kernel launch (first pass)");
    if (chunks == 1)
        return PD_OK;
    column_sum_final_kernel<<<pd_cuda_grid(launch, cols), PD_CUDA_BLOCK, 0, launch->stream>>>(partials, chunks, cols,
                                                                                             out);
    PD_CUDA_CHECK_LAUNCH("column sum kernel launch (second pass)");
    return PD_OK;
}
