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

/* Checks that the parts fit `whole` along `axis`; `what` names the kernel
 * and `part` the parts ("x", "dx"). */
static pd_status check_parts(const char *what, const char *part, int axis, int n, const pd_tensor *const *parts,
                             const pd_tensor *whole)
{
    char want[96], got[96];
    int64_t total = 0;

    if (!whole)
        return PD_ERROR(PD_EINVAL, "%s: missing concatenated tensor", what);
    pd_shape_format(&whole->shape, want, sizeof(want));
    if (n < 1 || !parts)
        return PD_ERROR(PD_EINVAL, "%s: needs at least one %s, got %d", what, part, parts ? n : 0);
    if (axis < 0 || axis >= whole->shape.ndim)
        return PD_ERROR(PD_EINVAL, "%s: axis %d outside [0, %d) of %s", what, axis, whole->shape.ndim, want);
    if (!pd_tensor_is_contiguous(whole))
        return PD_ERROR(PD_ESHAPE, "%s: the concatenated tensor %s is not contiguous", what, want);
    for (int i = 0; i < n; i++) {
        const pd_tensor *p = parts[i];
        if (!p)
            return PD_ERROR(PD_EINVAL, "%s: %s[%d] is missing", what, part, i);
        pd_shape_format(&p->shape, got, sizeof(got));
        if (p->dtype != whole->dtype)
            return PD_ERROR(PD_ESHAPE, "%s: %s[%d] is %s, the concatenated tensor %s", what, part, i,
                            pd_dtype_name(p->dtype), pd_dtype_name(whole->dtype));
        if (p->shape.ndim != whole->shape.ndim)
            return PD_ERROR(PD_ESHAPE, "%s: %s[%d] %s has rank %d, the concatenated tensor %s rank %d", what, part,
                            i, got, p->shape.ndim, want, whole->shape.ndim);
        for (int d = 0; d < whole->shape.ndim; d++)
            if (d != axis && p->shape.dim[d] != whole->shape.dim[d])
                return PD_ERROR(PD_ESHAPE, "%s: %s[%d] %s differs from the concatenated %s in dimension %d "
                                "(concatenating along axis %d)", what, part, i, got, want, d, axis);
        if (!pd_tensor_is_contiguous(p))
            return PD_ERROR(PD_ESHAPE, "%s: %s[%d] %s is not contiguous", what, part, i, got);
        total += p->shape.dim[axis];
    }
    if (total != whole->shape.dim[axis])
        return PD_ERROR(PD_ESHAPE, "%s: the %s parts span %lld along axis %d, the concatenated tensor %s has %lld",
                        what, part, (long long)total, axis, want, (long long)whole->shape.dim[axis]);
    return PD_OK;
}

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
    PD_CHECK(check_parts("concat", "x", axis, n, xs, y));
    for (int i = 0; i < n; i++)
        if (!xs[i]->data && pd_tensor_numel(xs[i]) > 0)
            return PD_ERROR(PD_EINVAL, "concat: x[%d] has no data", i);
    blocked_copy(axis, n, xs, y, true);
    return PD_OK;
}

pd_status pd_cpu_concat_backward(pd_device *dev, int axis, int n, const pd_tensor *dy, pd_tensor *const *dxs)
{
    const pd_tensor *const *parts = (const pd_tensor *const *)dxs;
    PD_CHECK(check_parts("concat backward", "dx", axis, n, parts, dy));
    blocked_copy(axis, n, parts, dy, false);
    return PD_OK;
}
