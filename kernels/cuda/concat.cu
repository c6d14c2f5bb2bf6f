/* Concatenation along one axis on the GPU and its inverse, the split of the
 * gradient: the blocked copy of kernels/cpu/concat.c. In row-major layout
 * each of the `outer` index tuples before the axis holds one contiguous run
 * of every part, so a part is a strided 2-D copy; one launch moves up to
 * CONCAT_PARTS parts (blockIdx.y picks the part), in the widest unit (16,
 * 8, 4, 2 or 1 bytes) that divides every address, run and offset. Any
 * dtype; parts without data are skipped (their runs still place the
 * others). Pure copies: bit for bit the CPU's result. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>

#include "kernels/cuda/pd_cuda.h"
extern "C" {
#include "kernels/pd_kernels_int.h"
}

/* Parts per launch: a layer has at most 8 inputs (PD_LAYER_MAX_INPUTS). */
#define CONCAT_PARTS 8

namespace {

/* A part in units: its data, its run per outer index, the run's offset in
 * the concatenated tensor's row. */
struct concat_part {
    void *data;
    int64_t run, offset;
};

struct concat_batch {
    concat_part part[CONCAT_PARTS];
};

template <class Unit>
__global__ void __launch_bounds__(PD_CUDA_BLOCK)
    concat_kernel(concat_batch batch, Unit *whole, int64_t whole_run, int64_t outer, bool to_whole)
{
    const concat_part pt = batch.part[blockIdx.y];
    Unit *part = static_cast<Unit *>(pt.data);
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;

    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < outer * pt.run; e += stride) {
        const int64_t o = e / pt.run;
        Unit *w = whole + o * whole_run + pt.offset + (e - o * pt.run);
        if (to_whole)
            *w = part[e];
        else
            part[e] = *w;
    }
}

/* Launches the parts of `batch` (count of them, longest run max_run). */
template <class Unit>
pd_status launch_batch(const pd_cuda_launch *launch, const concat_batch &batch, int count, int64_t max_run,
                       void *whole, int64_t whole_run, int64_t outer, bool to_whole)
{
    unsigned blocks = pd_cuda_grid(launch, outer * max_run);
    const unsigned cap = launch->max_blocks / count > 0 ? (unsigned)(launch->max_blocks / count) : 1u;

    if (blocks > cap)
        blocks = cap;
    concat_kernel<Unit><<<dim3(blocks, (unsigned)count), PD_CUDA_BLOCK, 0, launch->stream>>>(
        batch, static_cast<Unit *>(whole), whole_run, outer, to_whole);
    PD_CUDA_CHECK_LAUNCH(to_whole ? "concat kernel launch" : "concat backward kernel launch");
    return PD_OK;
}

/* launch_batch in units of `unit` bytes; whole_row in bytes. */
pd_status launch_units(const pd_cuda_launch *launch, int64_t unit, const concat_batch &batch, int count,
                       int64_t max_run, void *whole, int64_t whole_row, int64_t outer, bool to_whole)
{
    const int64_t run = whole_row / unit;

    switch (unit) {
    case 16: return launch_batch<uint4>(launch, batch, count, max_run, whole, run, outer, to_whole);
    case 8: return launch_batch<uint2>(launch, batch, count, max_run, whole, run, outer, to_whole);
    case 4: return launch_batch<uint32_t>(launch, batch, count, max_run, whole, run, outer, to_whole);
    case 2: return launch_batch<uint16_t>(launch, batch, count, max_run, whole, run, outer, to_whole);
    default: return launch_batch<uint8_t>(launch, batch, count, max_run, whole, run, outer, to_whole);
    }
}

/* Gathers the parts into whole (to_whole) or scatters whole into them. */
pd_status blocked_copy(pd_device *dev, int axis, int n, const pd_tensor *const *parts, const pd_tensor *whole,
                       bool to_whole)
{
    const int64_t es = (int64_t)pd_dtype_size(whole->dtype);
    int64_t outer = 1, inner = 1;
    pd_cuda_state *st;

    for (int d = 0; d < axis; d++)
        outer *= whole->shape.dim[d];
    for (int d = axis + 1; d < whole->shape.ndim; d++)
        inner *= whole->shape.dim[d];
    const int64_t whole_row = whole->shape.dim[axis] * inner * es; /* bytes per outer index */
    if (outer == 0 || whole_row == 0)
        return PD_OK;

    /* The widest unit dividing every address, run and offset in bytes. */
    uint64_t bits = (uint64_t)(uintptr_t)whole->data | (uint64_t)whole_row;
    int64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const int64_t run = parts[i]->shape.dim[axis] * inner * es;
        if (parts[i]->data && run > 0)
            bits |= (uint64_t)(uintptr_t)parts[i]->data | (uint64_t)run | (uint64_t)offset;
        offset += run;
    }
    int64_t unit = 16;
    while (bits % (uint64_t)unit != 0)
        unit /= 2;

    PD_CHECK(pd_cuda_enter(dev, &st));
    concat_batch batch = {};
    int count = 0;
    int64_t max_run = 0;
    offset = 0;
    for (int i = 0; i < n; i++) {
        const int64_t run = parts[i]->shape.dim[axis] * inner * es;
        if (parts[i]->data && run > 0) {
            batch.part[count] = {parts[i]->data, run / unit, offset / unit};
            max_run = run / unit > max_run ? run / unit : max_run;
            count++;
        }
        offset += run;
        if (count == 0 || (count < CONCAT_PARTS && i + 1 < n))
            continue;
        PD_CHECK(launch_units(&st->launch, unit, batch, count, max_run, whole->data, whole_row, outer, to_whole));
        count = 0;
        max_run = 0;
    }
    return PD_OK;
}

/* Every part ("<part>[i]") and the concatenated tensor in device memory. */
pd_status check_on_gpu(const char *entry, const char *part, int n, const pd_tensor *const *parts,
                       const pd_tensor *whole, const char *whole_name)
{
    char name[32];
    const char *names[1] = {name};

    PD_CHECK(pd_cuda_expect_on_gpu(entry, 1, &whole, &whole_name));
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof(name), "%s[%d]", part, i);
        PD_CHECK(pd_cuda_expect_on_gpu(entry, 1, &parts[i], names));
    }
    return PD_OK;
}

} // namespace

extern "C" pd_status pd_cuda_concat_forward(pd_device *dev, int axis, int n, const pd_tensor *const *xs, pd_tensor *y)
{
    PD_CHECK(pd_kernel_check_concat_forward(axis, n, xs, y));
    PD_CHECK(check_on_gpu("concat", "x", n, xs, y, "y"));
    return blocked_copy(dev, axis, n, xs, y, true);
}

extern "C" pd_status pd_cuda_concat_backward(pd_device *dev, int axis, int n, const pd_tensor *dy,
                                             pd_tensor *const *dxs)
{
    const pd_tensor *const *parts = (const pd_tensor *const *)dxs;

    PD_CHECK(pd_kernel_check_concat_backward(axis, n, dy, dxs));
    PD_CHECK(check_on_gpu("concat backward", "dx", n, parts, dy, "dy"));
    return blocked_copy(dev, axis, n, parts, dy, false);
}
