/* Range check of i32 indices in device memory (class labels, embedding
 * ids): the entries' contracts refuse an index outside [0, limit) with
 * PD_EINVAL before anything is computed, as the CPU does on the host. One
 * grid-stride pass keeps the smallest offending position (atomicMin: the
 * minimum does not depend on the order of the updates), then an 8-byte read
 * back waits for the stream. That wait is the price of a synchronous error
 * instead of a kernel reading out of bounds. */
#include "config.h"

#include <stdint.h>

#include "kernels/cuda/pd_cuda.h"

namespace {

__global__ void __launch_bounds__(PD_CUDA_BLOCK)
    first_outside_kernel(const int32_t *ids, int64_t n, int64_t limit, unsigned long long *first)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;

    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int32_t id = ids[i];
        if (id < 0 || id >= limit) {
            atomicMin(first, (unsigned long long)i);
            return; /* later positions of this thread are larger */
        }
    }
}

} // namespace

extern "C" pd_status pd_cuda_first_outside(pd_device *dev, const int32_t *ids, int64_t n, int64_t limit,
                                           size_t extra, void **scratch, int64_t *first, int32_t *value)
{
    unsigned long long found = ~0ull, *position;
    pd_cuda_state *st;

    PD_CHECK(pd_cuda_scratch(dev, PD_CUDA_INDEX_SCRATCH + extra, scratch));
    PD_CHECK(pd_cuda_enter(dev, &st));
    *first = n;
    if (n <= 0)
        return PD_OK;
    const pd_cuda_launch *launch = &st->launch;
    position = static_cast<unsigned long long *>(*scratch);
    /* All bits set: no position yet. */
    PD_CUDA_CHECK(cudaMemsetAsync(position, 0xff, sizeof(*position), launch->stream));
    first_outside_kernel<<<pd_cuda_grid(launch, n), PD_CUDA_BLOCK, 0, launch->stream>>>(ids, n, limit, position);
    PD_CUDA_CHECK_LAUNCH("index range check kernel launch");
    PD_CUDA_CHECK(cudaMemcpyAsync(&found, position, sizeof(found), cudaMemcpyDeviceToHost, launch->stream));
    PD_CUDA_CHECK(cudaStreamSynchronize(launch->stream));
    if (found >= (unsigned long long)n)
        return PD_OK;
    *first = (int64_t)found;
    PD_CUDA_CHECK(cudaMemcpyAsync(value, ids + found, sizeof(*value), cudaMemcpyDeviceToHost, launch->stream));
    PD_CUDA_CHECK(cudaStreamSynchronize(launch->stream));
    return PD_OK;
}
