/* CPU kernels: embedding lookup (a row gather from the table) and its
 * gradient (a row scatter-add). The backward pass is deterministic: threads
 * own disjoint column blocks of the table and each adds the rows of dy in
 * position order, exactly as one thread would. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "kernels/cpu/pd_cpu.h"

/* Work below this many elements is not worth waking threads for. */
#define EMBEDDING_PARALLEL_ELEMS 65536
/* Columns per thread block of the scatter-add: a cache line of floats and more. */
#define EMBEDDING_COLUMN_BLOCK 64

/* Checks ids (contiguous i32) and that `rows` is ids.shape + [dim] (f32). */
static pd_status check_rows(const char *what, const pd_tensor *ids, const pd_tensor *rows, const char *rows_name,
                            int64_t dim)
{
    pd_shape want;
    char got[96];

    if (!ids)
        return PD_ERROR(PD_EINVAL, "%s: missing ids", what);
    if (ids->dtype != PD_I32 || !pd_tensor_is_contiguous(ids))
        return PD_ERROR(PD_ESHAPE, "%s: ids must be a contiguous i32 tensor, got %s %s", what,
                        pd_dtype_name(ids->dtype), pd_shape_format(&ids->shape, got, sizeof(got)));
    if (ids->shape.ndim >= PD_MAX_DIMS)
        return PD_ERROR(PD_ESHAPE, "%s: ids of rank %d leave no room for the embedding dimension (rank <= %d)",
                        what, ids->shape.ndim, PD_MAX_DIMS);
    want = ids->shape;
    want.dim[want.ndim++] = dim;
    return pd_kernel_expect_f32(rows, &want, rows_name);
}

/* PD_EINVAL naming the first id outside [0, vocab), with its coordinates. */
static pd_status check_ids(const char *what, const pd_tensor *ids, int64_t vocab)
{
    const int32_t *id = ids->data;
    int64_t n = pd_tensor_numel(ids);

    for (int64_t p = 0; p < n; p++) {
        if (id[p] >= 0 && id[p] < vocab)
            continue;
        int64_t coord[PD_MAX_DIMS], rest = p;
        char where[160] = "";
        size_t len = 0;
        for (int d = ids->shape.ndim - 1; d >= 0; d--) { /* a non-empty tensor has no zero dims */
            coord[d] = rest % ids->shape.dim[d];
            rest /= ids->shape.dim[d];
        }
        for (int d = 0; d < ids->shape.ndim && len < sizeof(where); d++)
            len += (size_t)snprintf(where + len, sizeof(where) - len, "%s%lld", d ? "," : "", (long long)coord[d]);
        return PD_ERROR(PD_EINVAL, "%s: ids[%s] = %d lies outside the vocabulary [0, %lld)", what, where, id[p],
                        (long long)vocab);
    }
    return PD_OK;
}

/* The table must be a contiguous f32 [V,D]. */
static pd_status check_table(const char *what, const pd_tensor *table)
{
    char got[96];

    if (!table)
        return PD_ERROR(PD_EINVAL, "%s: missing table", what);
    if (table->dtype != PD_F32 || table->shape.ndim != 2 || !pd_tensor_is_contiguous(table))
        return PD_ERROR(PD_ESHAPE, "%s: the table must be a contiguous f32 [V,D], got %s %s", what,
                        pd_dtype_name(table->dtype), pd_shape_format(&table->shape, got, sizeof(got)));
    return PD_OK;
}

pd_status pd_cpu_embedding_forward(pd_device *dev, const pd_tensor *ids, const pd_tensor *table, pd_tensor *y)
{
    PD_CHECK(check_table("embedding", table));
    int64_t vocab = table->shape.dim[0], dim = table->shape.dim[1];
    PD_CHECK(check_rows("embedding", ids, y, "embedding y", dim));
    PD_CHECK(check_ids("embedding", ids, vocab));

    const int32_t *id = ids->data;
    const float *rows = table->data;
    float *out = y->data;
    int64_t n = pd_tensor_numel(ids);
    size_t row_bytes = (size_t)dim * sizeof(float);

#pragma omp parallel for schedule(static) if (n * dim > EMBEDDING_PARALLEL_ELEMS)
    for (int64_t p = 0; p < n; p++)
        memcpy(out + p * dim, rows + (int64_t)id[p] * dim, row_bytes);
    return PD_OK;
}

pd_status pd_cpu_embedding_backward(pd_device *dev, const pd_tensor *ids, const pd_tensor *dy, pd_tensor *dtable)
{
    PD_CHECK(check_table("embedding backward", dtable));
    int64_t vocab = dtable->shape.dim[0], dim = dtable->shape.dim[1];
    PD_CHECK(check_rows("embedding backward", ids, dy, "embedding backward dy", dim));
    PD_CHECK(check_ids("embedding backward", ids, vocab));

    const int32_t *id = ids->data;
    const float *grad_out = dy->data;
    float *grad_table = dtable->data;
    int64_t n = pd_tensor_numel(ids);
    int64_t blocks = (dim + EMBEDDING_COLUMN_BLOCK - 1) / EMBEDDING_COLUMN_BLOCK;

    memset(grad_table, 0, (size_t)(vocab * dim) * sizeof(float));
#pragma omp parallel for schedule(static) if (blocks > 1 && n * dim > EMBEDDING_PARALLEL_ELEMS)
    for (int64_t b = 0; b < blocks; b++) {
        int64_t lo = b * EMBEDDING_COLUMN_BLOCK;
        int64_t hi = lo + EMBEDDING_COLUMN_BLOCK < dim ? lo + EMBEDDING_COLUMN_BLOCK : dim;
        for (int64_t p = 0; p < n; p++) {
            float *dst = grad_table + (int64_t)id[p] * dim;
            const float *src = grad_out + p * dim;
            for (int64_t j = lo; j < hi; j++)
                dst[j] += src[j];
        }
    }
    return PD_OK;
}
