/* CPU kernels: embedding lookup (a row gather from the table) and its
 * gradient (a row scatter-add). The backward pass is deterministic: threads
 * own disjoint column blocks of the table and each adds the rows of dy in
 * position order, exactly as one thread would. */
#include "config.h"

#include <string.h>

#include "kernels/cpu/pd_cpu.h"

/* Work below this many elements is not worth waking threads for. */
#define EMBEDDING_PARALLEL_ELEMS 65536
/* Columns per thread block of the scatter-add: a cache line of floats and more. */
#define EMBEDDING_COLUMN_BLOCK 64

/* The ids' range, on the host: PD_EINVAL naming the first one outside [0, vocab). */
static pd_status check_ids(const char *what, const pd_tensor *ids, int64_t vocab)
{
    int64_t n = pd_tensor_numel(ids), p = pd_kernel_first_outside(ids->data, n, vocab);

    if (p < n)
        return pd_kernel_id_outside(what, ids, p, ((const int32_t *)ids->data)[p], vocab);
    return PD_OK;
}

pd_status pd_cpu_embedding_forward(pd_device *dev, const pd_tensor *ids, const pd_tensor *table, pd_tensor *y)
{
    pd_embedding_dims d;

    PD_CHECK(pd_kernel_check_embedding("embedding", ids, table, y, "embedding y", &d));
    PD_CHECK(check_ids("embedding", ids, d.vocab));

    const int32_t *id = ids->data;
    const float *rows = table->data;
    float *out = y->data;
    const int64_t n = d.ids, dim = d.dim;
    size_t row_bytes = (size_t)dim * sizeof(float);

#pragma omp parallel for schedule(static) if (n * dim > EMBEDDING_PARALLEL_ELEMS)
    for (int64_t p = 0; p < n; p++)
        memcpy(out + p * dim, rows + (int64_t)id[p] * dim, row_bytes);
    return PD_OK;
}

pd_status pd_cpu_embedding_backward(pd_device *dev, const pd_tensor *ids, const pd_tensor *dy, pd_tensor *dtable)
{
    pd_embedding_dims d;

    PD_CHECK(pd_kernel_check_embedding("embedding backward", ids, dtable, dy, "embedding backward dy", &d));
    PD_CHECK(check_ids("embedding backward", ids, d.vocab));

    const int32_t *id = ids->data;
    const float *grad_out = dy->data;
    float *grad_table = dtable->data;
    const int64_t n = d.ids, vocab = d.vocab, dim = d.dim;
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
