/* CPU kernels: concatenation along one axis and its inverse, the split of the
 * gradient. Row-major layout makes both a blocked copy: for each of the
 * `outer` index tuples before the axis, every part contributes one contiguous
 * run of dim[axis] * (product of the dims after it) elements. Any dtype; all
 * tensors must share it. In the split, parts without data are skipped; their
 * shapes still place the others. */
#include "config.h"

#include <string.h>

#include "kernels/cpu/pd_cpu.h"

/* Copies below this many bytes in all are not worth waking threads for. */
#define CONCAT_PARALLEL_BYTES (1 << 20)

/* Gathers the parts into whole (to_whole) or scatters whole into the parts,
 * skipping parts without data. */
static void blocked_copy(int axis, int n, const pd_tensor *const *parts, const pd_tensor *whole, bool to_whole)
{
    size_t es = pd_dtype_size(whole->dtype);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++)
        outer *= whole->shape.dim[d];
    for (int d = axis + 1; d < whole->shape.ndim; d++)
        inner *= whole->shape.dim[d];
    size_t whole_row = (size_t)(whole->shape.dim[axis] * inner) * es; /* bytes per outer index */
    size_t offset = 0;
    char *wbase = whole->data;

    for (int i = 0; i < n; i++) {
        const pd_tensor *p = parts[i];
        size_t part_row = (size_t)(p->shape.dim[axis] * inner) * es;
        char *pbase = p->data;
        bool parallel = outer > 1 && (size_t)outer * part_row >= CONCAT_PARALLEL_BYTES;
        (void)parallel; /* unused without OpenMP */
        if (pbase) {
#pragma omp parallel for schedule(static) if (parallel)
            for (int64_t o = 0; o < outer; o++) {
                char *w = wbase + (size_t)o * whole_row + offset;
                char *x = pbase + (size_t)o * part_row;
                if (to_whole)
                    memcpy(w, x, part_row);
                else
                    memcpy(x, w, part_row);
            }
        }
        offset += part_row;
    }
}

pd_status pd_cpu_concat_forward(pd_device *dev, int axis, int n, const pd_tensor *const *xs, pd_tensor *y)
{
    PD_CHECK(pd_kernel_check_concat_forward(axis, n, xs, y));
    blocked_copy(axis, n, xs, y, true);
    return PD_OK;
}

pd_status pd_cpu_concat_backward(pd_device *dev, int axis, int n, const pd_tensor *dy, pd_tensor *const *dxs)
{
    PD_CHECK(pd_kernel_check_concat_backward(axis, n, dy, dxs));
    blocked_copy(axis, n, (const pd_tensor *const *)dxs, dy, false);
    return PD_OK;
}
