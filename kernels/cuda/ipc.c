/* The CUDA device's IPC entries: a handle for a block of device memory
 * (cudaIpcGetMemHandle), and mapping and unmapping a handle exported by
 * another process of the node (cudaIpcOpenMemHandle,
 * cudaIpcCloseMemHandle). The shm transport writes a receiver's device
 * slots through them (transport/shm.c, docs/transport.md). Blocks of the
 * device's caching allocator are whole cudaMalloc allocations, so the
 * pointer given is the allocation's base, as cudaIpcGetMemHandle wants. */
#include "config.h"

#include <string.h>

#include <pipedream/log.h>

#include "kernels/cuda/pd_cuda.h"

_Static_assert(sizeof(cudaIpcMemHandle_t) == PD_DEVICE_IPC_HANDLE_BYTES, "a CUDA IPC handle is 64 bytes");

/* "<dev>: <call> failed: <CUDA's message> (<name>)": PD_ENOTSUP where the
 * device or platform has no CUDA IPC, else PD_EDEVICE; the runtime's last
 * error is cleared. */
static pd_status ipc_failure(const pd_device *dev, const char *call, cudaError_t err)
{
    (void)cudaGetLastError();
    return PD_ERROR(err == cudaErrorNotSupported ? PD_ENOTSUP : PD_EDEVICE, "%s: %s failed: %s (%s)", dev->name, call,
                    cudaGetErrorString(err), cudaGetErrorName(err));
}

pd_status pd_cuda_ipc_export(pd_device *dev, void *ptr, uint8_t handle[PD_DEVICE_IPC_HANDLE_BYTES])
{
    cudaIpcMemHandle_t h;
    pd_cuda_state *st;
    cudaError_t err;

    if (!ptr)
        return PD_ERROR(PD_EINVAL, "%s: ipc_export of a NULL block", dev->name);
    PD_CHECK(pd_cuda_enter(dev, &st));
    err = cudaIpcGetMemHandle(&h, ptr);
    if (err != cudaSuccess)
        return ipc_failure(dev, "cudaIpcGetMemHandle", err);
    memcpy(handle, &h, sizeof(h));
    return PD_OK;
}

pd_status pd_cuda_ipc_open(pd_device *dev, const uint8_t handle[PD_DEVICE_IPC_HANDLE_BYTES], void **ptr)
{
    cudaIpcMemHandle_t h;
    pd_cuda_state *st;
    void *p = NULL;
    cudaError_t err;

    memcpy(&h, handle, sizeof(h));
    PD_CHECK(pd_cuda_enter(dev, &st));
    /* The only flag the runtime accepts: peer access between two GPUs is
     * enabled as the mapping needs it (slots on another GPU of the node). */
    err = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess)
        return ipc_failure(dev, "cudaIpcOpenMemHandle", err);
    *ptr = p;
    return PD_OK;
}

void pd_cuda_ipc_close(pd_device *dev, void *ptr)
{
    pd_cuda_state *st;
    cudaError_t err;

    if (!ptr)
        return;
    if (pd_cuda_enter(dev, &st) != PD_OK)
        PD_LOG_WARNF("%s", pd_last_error());
    err = cudaIpcCloseMemHandle(ptr);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        PD_LOG_WARNF("%s: cudaIpcCloseMemHandle failed: %s", dev->name, cudaGetErrorString(err));
    }
}
