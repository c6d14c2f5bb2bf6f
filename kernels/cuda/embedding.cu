/* Embedding lookup on the GPU (a row gather) and its gradient (a row
 * scatter-add), the functions of kernels/cpu/embedding.c.
 *
 * The scatter-add is deterministic and sort-based, without atomics: the
 * positions 0..n-1 are sorted by id with CUB's radix sort, which is stable,
 * so each id's positions come out in increasing order; one warp per run of
 * equal ids then adds the run's dy rows column by column in that order, in
 * float, starting from zero, and stores the row of dtable (rows no id names
 * were zeroed first). That is the CPU's order and rounding: the gradient
 * matches it bit for bit, however often an id repeats. The ids are range-
 * checked first (one read-back, see index_check.cu). */
#include "config.h"

#include <limits.h>
#include <stdint.h>

#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/pd_cuda.h"
extern "C" {
#include "kernels/pd_kernels_int.h"
}

/* Scratch pieces start on this boundary. */
#define EMBEDDING_ALIGN 256
#define EMBEDDING_WARPS (PD_CUDA_BLOCK / 32)

namespace {

/* y[p, :] = table[ids[p], :], as float4 when dim % 4 == 0 and aligned. */
__global__ void __launch_bounds__(PD_CUDA_BLOCK)
    gather_kernel(const int32_t *ids, const float *table, float *y, int64_t n, int64_t dim, bool vec)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;

    if (vec) {
        const int64_t dim4 = dim / 4;
        const float4 *t4 = reinterpret_cast<const float4 *>(table);
        float4 *y4 = reinterpret_cast<float4 *>(y);
        for (int64_t v = tid; v < n * dim4; v += stride) {
            const int64_t p = v / dim4;
            y4[v] = t4[(int64_t)ids[p] * dim4 + (v - p * dim4)];
        }
        return;
    }
    for (int64_t e = tid; e < n * dim; e += stride) {
        const int64_t p = e / dim;
        y[e] = table[(int64_t)ids[p] * dim + (e - p * dim)];
    }
}

__global__ void __launch_bounds__(PD_CUDA_BLOCK) iota_kernel(int32_t *v, int64_t n)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;

    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        v[i] = (int32_t)i;
}

/* keys: the ids sorted; pos: their positions, increasing within equal ids.
 * The warp of sorted index s starts a run when keys[s-1] differs, and
 * writes dtable[keys[s], :] = the run's dy rows added in order. */
__global__ void __launch_bounds__(PD_CUDA_BLOCK) run_sum_kernel(const uint32_t *keys, const int32_t *pos,
                                                                const float *dy, float *dtable, int64_t n,
                                                                int64_t dim)
{
    const unsigned lane = threadIdx.x % 32u;
    const int64_t warps = (int64_t)gridDim.x * EMBEDDING_WARPS;

    for (int64_t s = (int64_t)blockIdx.x * EMBEDDING_WARPS + threadIdx.x / 32u; s < n; s += warps) {
        const uint32_t key = keys[s];
        if (s > 0 && keys[s - 1] == key)
            continue;
        for (int64_t j = lane; j < dim; j += 32) {
            float acc = 0.0f;
            for (int64_t t = s; t < n && keys[t] == key; t++)
                acc = __fadd_rn(acc, dy[(int64_t)pos[t] * dim + j]);
            dtable[(int64_t)key * dim + j] = acc;
        }
    }
}

size_t align_up(size_t bytes) { return (bytes + EMBEDDING_ALIGN - 1) / EMBEDDING_ALIGN * EMBEDDING_ALIGN; }

/* Bits that hold every id in [0, vocab): the radix sort's end bit. */
int id_bits(int64_t vocab)
{
    int bits = 1;

    while (bits < 31 && ((int64_t)1 << bits) < vocab)
        bits++;
    return bits;
}

/* The device checks and the ids' range (synchronous); *extra_scratch gets
 * `extra` bytes of the device's scratch. */
pd_status check_ids(pd_device *dev, const char *entry, const pd_embedding_dims *d, const pd_tensor *ids,
                    const pd_tensor *table, const pd_tensor *rows, const char *const *names, size_t extra,
                    void **extra_scratch)
{
    const pd_tensor *tensors[] = {ids, table, rows};
    void *scratch;
    int64_t bad;
    int32_t id = 0;

    PD_CHECK(pd_cuda_expect_on_gpu(entry, 3, tensors, names));
    PD_CHECK(pd_cuda_first_outside(dev, (const int32_t *)ids->data, d->ids, d->vocab, extra, &scratch, &bad, &id));
    if (bad < d->ids)
        return pd_kernel_id_outside(entry, ids, bad, id, d->vocab);
    *extra_scratch = (char *)scratch + PD_CUDA_INDEX_SCRATCH;
    return PD_OK;
}

} // namespace

extern "C" pd_status pd_cuda_embedding_forward(pd_device *dev, const pd_tensor *ids, const pd_tensor *table,
                                               pd_tensor *y)
{
    static const char *const names[] = {"ids", "table", "y"};
    pd_embedding_dims d;
    pd_cuda_state *st;
    void *scratch;

    PD_CHECK(pd_kernel_check_embedding("embedding", ids, table, y, "embedding y", &d));
    PD_CHECK(check_ids(dev, "embedding", &d, ids, table, y, names, 0, &scratch));
    if (d.ids == 0 || d.dim == 0)
        return PD_OK;
    PD_CHECK(pd_cuda_enter(dev, &st));
    const bool vec = d.dim % 4 == 0 && pd_cuda_aligned16(table->data) && pd_cuda_aligned16(y->data);
    const int64_t items = vec ? d.ids * (d.dim / 4) : d.ids * d.dim;
    gather_kernel<<<pd_cuda_grid(&st->launch, items), PD_CUDA_BLOCK, 0, st->launch.stream>>>(
        (const int32_t *)ids->data, (const float *)table->data, (float *)y->data, d.ids, d.dim, vec);
    PD_CUDA_CHECK_LAUNCH("embedding gather kernel launch");
    return PD_OK;
}

extern "C" pd_status pd_cuda_embedding_backward(pd_device *dev, const pd_tensor *ids, const pd_tensor *dy,
                                                pd_tensor *dtable)
{
    static const char *const names[] = {"ids", "dtable", "dy"};
    pd_embedding_dims d;
    pd_cuda_state *st;
    size_t sort_bytes = 0;
    void *scratch;

    PD_CHECK(pd_kernel_check_embedding("embedding backward", ids, dtable, dy, "embedding backward dy", &d));
    if (d.ids > INT32_MAX)
        return PD_ERROR(PD_ENOTSUP, "embedding backward: %lld ids are more than the sort's int positions hold",
                        (long long)d.ids);
    const int bits = id_bits(d.vocab);
    const uint32_t *ids_in = (const uint32_t *)ids->data; /* non-negative once checked */
    if (d.ids > 0)
        PD_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, ids_in, (uint32_t *)nullptr,
                                                      (const int32_t *)nullptr, (int32_t *)nullptr, d.ids, 0, bits));
    /* Scratch: sorted ids, positions, sorted positions, CUB's temporary storage. */
    const size_t ints = align_up((size_t)d.ids * sizeof(int32_t));
    PD_CHECK(check_ids(dev, "embedding backward", &d, ids, dtable, dy, names, 3 * ints + sort_bytes, &scratch));
    PD_CHECK(pd_cuda_enter(dev, &st));
    const pd_cuda_launch *launch = &st->launch;
    if (d.vocab * d.dim > 0)
        PD_CUDA_CHECK(cudaMemsetAsync(dtable->data, 0, (size_t)(d.vocab * d.dim) * sizeof(float), launch->stream));
    if (d.ids == 0 || d.dim == 0)
        return PD_OK;

    char *base = (char *)scratch;
    uint32_t *keys = (uint32_t *)base;
    int32_t *pos_in = (int32_t *)(base + ints), *pos = (int32_t *)(base + 2 * ints);
    void *sort_temp = base + 3 * ints;
    iota_kernel<<<pd_cuda_grid(launch, d.ids), PD_CUDA_BLOCK, 0, launch->stream>>>(pos_in, d.ids);
    PD_CUDA_CHECK_LAUNCH("embedding backward position kernel launch");
    PD_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, ids_in, keys, (const int32_t *)pos_in, pos,
                                                  d.ids, 0, bits, launch->stream));
    run_sum_kernel<<<pd_cuda_grid(launch, d.ids * 32), PD_CUDA_BLOCK, 0, launch->stream>>>(
        keys, pos, (const float *)dy->data, (float *)dtable->data, d.ids, d.dim);
    PD_CUDA_CHECK_LAUNCH("embedding backward run-sum kernel launch");
    return PD_OK;
}
