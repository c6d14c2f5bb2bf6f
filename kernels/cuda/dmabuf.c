/* The CUDA device's export_dmabuf entry: a dma_buf file descriptor for a
 * range of device memory (GPUDirect RDMA through ibv_reg_dmabuf_mr). The
 * driver functions it needs are taken at run time through the runtime's
 * cudaGetDriverEntryPointByVersion, so the library never links libcuda
 * (the toolkit's stub is for linking only; the driver lives elsewhere, and
 * machines without a GPU have none). cuda.h is included for its types
 * only. */
#include "config.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <unistd.h>

#include "kernels/cuda/pd_cuda.h"

/* The driver's function `symbol` as of CUDA version `version` (the one
 * its PFN_..._v<version> typedef names), or PD_ENOTSUP naming it. */
static pd_status driver_fn(const pd_device *dev, const char *symbol, unsigned version, void **fn)
{
    enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, fn, version, cudaEnableDefault, &found);

    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return PD_ERROR(PD_ENOTSUP, "%s: the driver does not give %s (v%u): %s", dev->name, symbol, version,
                        cudaGetErrorString(err));
    }
    if (found != cudaDriverEntryPointSuccess || !*fn)
        return PD_ERROR(PD_ENOTSUP, "%s: the driver has no %s (v%u)%s", dev->name, symbol, version,
                        found == cudaDriverEntryPointVersionNotSufficent ? ": driver too old" : "");
    return PD_OK;
}

/* "<call> failed: CUDA_ERROR_..." for a driver result (the name through
 * the driver too, when it gives it). */
static pd_status driver_error(const pd_device *dev, const char *call, CUresult r)
{
    PFN_cuGetErrorName_v6000 get_name = NULL;
    const char *name = NULL;

    if (driver_fn(dev, "cuGetErrorName", 6000, (void **)&get_name) != PD_OK ||
        get_name(r, &name) != CUDA_SUCCESS || !name)
        name = "?";
    return PD_ERROR(r == CUDA_ERROR_NOT_SUPPORTED ? PD_ENOTSUP : PD_EDEVICE, "%s: %s failed: %s (%d)", dev->name,
                    call, name, (int)r);
}

pd_status pd_cuda_export_dmabuf(pd_device *dev, const void *ptr, size_t bytes, int *fd, uint64_t *offset)
{
    PFN_cuDeviceGet_v2000 device_get = NULL;
    PFN_cuDeviceGetAttribute_v2000 get_attribute = NULL;
    PFN_cuMemGetHandleForAddressRange_v11070 get_handle = NULL;
    pd_cuda_state *st;
    CUdevice cu_dev;
    CUresult r;
    int supported = 0, handle = -1;
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start, end;

    *fd = -1;
    *offset = 0;
    if (!ptr || bytes == 0 || page <= 0)
        return PD_ERROR(PD_EINVAL, "%s: export_dmabuf of an empty range", dev->name);
    PD_CHECK(pd_cuda_enter(dev, &st));
    PD_CHECK(driver_fn(dev, "cuDeviceGet", 2000, (void **)&device_get));
    PD_CHECK(driver_fn(dev, "cuDeviceGetAttribute", 2000, (void **)&get_attribute));
    PD_CHECK(driver_fn(dev, "cuMemGetHandleForAddressRange", 11070, (void **)&get_handle));
    r = device_get(&cu_dev, st->ordinal);
    if (r != CUDA_SUCCESS)
        return driver_error(dev, "cuDeviceGet", r);
    r = get_attribute(&supported, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, cu_dev);
    if (r != CUDA_SUCCESS)
        return driver_error(dev, "cuDeviceGetAttribute(DMA_BUF_SUPPORTED)", r);
    if (!supported)
        return PD_ERROR(PD_ENOTSUP, "%s: the device or its driver does not export dma_buf", dev->name);
    /* The driver wants the range on host-page boundaries. */
    start = (uintptr_t)ptr & ~(uintptr_t)(page - 1);
    end = ((uintptr_t)ptr + bytes + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    r = get_handle(&handle, (CUdeviceptr)start, end - start, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (r != CUDA_SUCCESS)
        return driver_error(dev, "cuMemGetHandleForAddressRange(DMA_BUF_FD)", r);
    if (handle < 0)
        return PD_ERROR(PD_EDEVICE, "%s: cuMemGetHandleForAddressRange gave no descriptor", dev->name);
    *fd = handle;
    *offset = (uint64_t)((uintptr_t)ptr - start);
    return PD_OK;
}
