/* The CUDA device's flush_rdma_writes entry: GPUDirect RDMA writes that an
 * adapter completed into GPU memory are visible to the GPU's later work
 * only once flushed, unless the device orders them itself
 * (cudaDevAttrGPUDirectRDMAWritesOrdering at least Owner). The attribute is
 * read once when the device opens; the flush is the runtime's
 * cudaDeviceFlushGPUDirectRDMAWrites (the counterpart of the driver's
 * cuFlushGPUDirectRDMAWrites: no libcuda link), to the owner of the
 * current device's context. */
#include "config.h"

#include "kernels/cuda/pd_cuda.h"

void pd_cuda_rdma_flush_probe(pd_cuda_state *st)
{
    int ordering = cudaGPUDirectRDMAWritesOrderingNone, options = 0;

    /* A driver that cannot say orders nothing and flushes nothing. */
    if (cudaDeviceGetAttribute(&ordering, cudaDevAttrGPUDirectRDMAWritesOrdering, st->ordinal) != cudaSuccess)
        ordering = cudaGPUDirectRDMAWritesOrderingNone;
    if (cudaDeviceGetAttribute(&options, cudaDevAttrGPUDirectRDMAFlushWritesOptions, st->ordinal) != cudaSuccess)
        options = 0;
    (void)cudaGetLastError();
    st->rdma_ordering = ordering;
    if (ordering >= cudaGPUDirectRDMAWritesOrderingOwner)
        st->rdma_flush = PD_CUDA_RDMA_ORDERED;
    else if (options & cudaFlushGPUDirectRDMAWritesOptionHost)
        st->rdma_flush = PD_CUDA_RDMA_FLUSH;
    else
        st->rdma_flush = PD_CUDA_RDMA_UNORDERED;
}

pd_status pd_cuda_flush_rdma_writes(pd_device *dev)
{
    pd_cuda_state *st = dev->backend;

    if (st->rdma_flush == PD_CUDA_RDMA_ORDERED)
        return PD_OK;
    if (st->rdma_flush == PD_CUDA_RDMA_UNORDERED)
        return PD_ERROR(PD_ENOTSUP,
                        "%s: GPUDirect RDMA writes are not ordered (ordering %d) and the device cannot flush them",
                        dev->name, st->rdma_ordering);
    PD_CHECK(pd_cuda_enter(dev, &st));
    PD_CUDA_CHECK(cudaDeviceFlushGPUDirectRDMAWrites(cudaFlushGPUDirectRDMAWritesTargetCurrentDevice,
                                                     cudaFlushGPUDirectRDMAWritesToOwner));
    return PD_OK;
}
