/* The default device table: every entry reports PD_ENOTSUP, naming itself
 * and the device, and pd_device_ops_overlay() lays a backend over it. */
#include "config.h"

#include "kernels/pd_kernels_int.h"

#define UNSUPPORTED(entry) return PD_ERROR(PD_ENOTSUP, "%s is unsupported on device %s", #entry, dev->name)

static pd_status gemm(pd_device *dev, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    UNSUPPORTED(gemm);
}
static pd_status fill(pd_device *dev, pd_tensor *y, float value) { UNSUPPORTED(fill); }
static pd_status axpby(pd_device *dev, float alpha, const pd_tensor *x, float beta, pd_tensor *y)
{
    UNSUPPORTED(axpby);
}
static pd_status add(pd_device *dev, const pd_tensor *a, const pd_tensor *b, pd_tensor *y) { UNSUPPORTED(add); }
static pd_status convert(pd_device *dev, const pd_tensor *x, pd_tensor *y) { UNSUPPORTED(convert); }
static pd_status sum(pd_device *dev, const pd_tensor *x, pd_tensor *out) { UNSUPPORTED(sum); }
static pd_status relu_forward(pd_device *dev, const pd_tensor *x, pd_tensor *y) { UNSUPPORTED(relu_forward); }
static pd_status relu_backward(pd_device *dev, const pd_tensor *y, const pd_tensor *dy, pd_tensor *dx)
{
    UNSUPPORTED(relu_backward);
}
static pd_status conv2d_forward(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *x, const pd_tensor *w,
                                const pd_tensor *bias, pd_tensor *y)
{
    UNSUPPORTED(conv2d_forward);
}
static pd_status conv2d_backward_data(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *dy,
                                      const pd_tensor *w, pd_tensor *dx)
{
    UNSUPPORTED(conv2d_backward_data);
}
static pd_status conv2d_backward_filter(pd_device *dev, const pd_conv2d_desc *desc, const pd_tensor *x,
                                        const pd_tensor *dy, pd_tensor *dw, pd_tensor *dbias)
{
    UNSUPPORTED(conv2d_backward_filter);
}
static pd_status linear_forward(pd_device *dev, const pd_tensor *x, const pd_tensor *w, const pd_tensor *bias,
                                pd_tensor *y)
{
    UNSUPPORTED(linear_forward);
}
static pd_status linear_backward(pd_device *dev, const pd_tensor *x, const pd_tensor *w, const pd_tensor *dy,
                                 pd_tensor *dx, pd_tensor *dw, pd_tensor *dbias)
{
    UNSUPPORTED(linear_backward);
}
static pd_status pool2d_forward(pd_device *dev, const pd_pool2d_desc *desc, const pd_tensor *x, pd_tensor *y)
{
    UNSUPPORTED(pool2d_forward);
}
static pd_status pool2d_backward(pd_device *dev, const pd_pool2d_desc *desc, const pd_tensor *x, const pd_tensor *y,
                                 const pd_tensor *dy, pd_tensor *dx)
{
    UNSUPPORTED(pool2d_backward);
}
static pd_status lrn_forward(pd_device *dev, const pd_lrn_desc *desc, const pd_tensor *x, pd_tensor *y)
{
    UNSUPPORTED(lrn_forward);
}
static pd_status lrn_backward(pd_device *dev, const pd_lrn_desc *desc, const pd_tensor *x, const pd_tensor *y,
                              const pd_tensor *dy, pd_tensor *dx)
{
    UNSUPPORTED(lrn_backward);
}
static pd_status batchnorm_forward_train(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                         const pd_tensor *gamma, const pd_tensor *beta, pd_tensor *running_mean,
                                         pd_tensor *running_var, pd_tensor *y, pd_tensor *save_mean,
                                         pd_tensor *save_invstd)
{
    UNSUPPORTED(batchnorm_forward_train);
}
static pd_status batchnorm_forward_eval(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                        const pd_tensor *gamma, const pd_tensor *beta,
                                        const pd_tensor *running_mean, const pd_tensor *running_var, pd_tensor *y)
{
    UNSUPPORTED(batchnorm_forward_eval);
}
static pd_status batchnorm_backward(pd_device *dev, const pd_batchnorm_desc *desc, const pd_tensor *x,
                                    const pd_tensor *dy, const pd_tensor *gamma, const pd_tensor *save_mean,
                                    const pd_tensor *save_invstd, pd_tensor *dx, pd_tensor *dgamma, pd_tensor *dbeta)
{
    UNSUPPORTED(batchnorm_backward);
}
static pd_status dropout_forward(pd_device *dev, float p, uint64_t seed, const pd_tensor *x, pd_tensor *y)
{
    UNSUPPORTED(dropout_forward);
}
static pd_status dropout_backward(pd_device *dev, float p, uint64_t seed, const pd_tensor *dy, pd_tensor *dx)
{
    UNSUPPORTED(dropout_backward);
}
static pd_status softmax_cross_entropy_forward(pd_device *dev, const pd_tensor *logits, const pd_tensor *labels,
                                               pd_tensor *probs, pd_tensor *loss)
{
    UNSUPPORTED(softmax_cross_entropy_forward);
}
static pd_status softmax_cross_entropy_backward(pd_device *dev, const pd_tensor *probs, const pd_tensor *labels,
                                                float dloss, pd_tensor *dlogits)
{
    UNSUPPORTED(softmax_cross_entropy_backward);
}
static pd_status concat_forward(pd_device *dev, int axis, int n, const pd_tensor *const *xs, pd_tensor *y)
{
    UNSUPPORTED(concat_forward);
}
static pd_status concat_backward(pd_device *dev, int axis, int n, const pd_tensor *dy, pd_tensor *const *dxs)
{
    UNSUPPORTED(concat_backward);
}
static pd_status embedding_forward(pd_device *dev, const pd_tensor *ids, const pd_tensor *table, pd_tensor *y)
{
    UNSUPPORTED(embedding_forward);
}
static pd_status embedding_backward(pd_device *dev, const pd_tensor *ids, const pd_tensor *dy, pd_tensor *dtable)
{
    UNSUPPORTED(embedding_backward);
}
static pd_status lstm_cell_forward(pd_device *dev, const pd_tensor *gates, const pd_tensor *c_prev, pd_tensor *act,
                                   pd_tensor *c, pd_tensor *h)
{
    UNSUPPORTED(lstm_cell_forward);
}
static pd_status lstm_cell_backward(pd_device *dev, const pd_tensor *act, const pd_tensor *c_prev, const pd_tensor *c,
                                    const pd_tensor *dh, const pd_tensor *dc, pd_tensor *dgates, pd_tensor *dc_prev)
{
    UNSUPPORTED(lstm_cell_backward);
}
static pd_status sgd_update(pd_device *dev, const pd_sgd_desc *desc, pd_tensor *w, const pd_tensor *g,
                            pd_tensor *momentum_buf)
{
    UNSUPPORTED(sgd_update);
}
static pd_status adam_update(pd_device *dev, const pd_adam_desc *desc, pd_tensor *w, const pd_tensor *g, pd_tensor *m,
                             pd_tensor *v)
{
    UNSUPPORTED(adam_update);
}
static pd_status memory_stats(pd_device *dev, pd_device_memory_stats *out) { UNSUPPORTED(memory_stats); }
static pd_status host_alloc(pd_device *dev, size_t bytes, void **out) { UNSUPPORTED(host_alloc); }
static void host_free(pd_device *dev, void *ptr) {} /* host_alloc handed nothing out */
static pd_status event_create(pd_device *dev, pd_device_event **out) { UNSUPPORTED(event_create); }
static pd_status event_record(pd_device *dev, pd_device_event *event) { UNSUPPORTED(event_record); }
static pd_status event_elapsed_ms(pd_device *dev, pd_device_event *start, pd_device_event *stop, double *ms)
{
    UNSUPPORTED(event_elapsed_ms);
}
static void event_destroy(pd_device *dev, pd_device_event *event) {} /* event_create made none */
static pd_status set_precision(pd_device *dev, pd_precision precision) { UNSUPPORTED(set_precision); }

#define OVERLAY(entry) table->entry = backend->entry ? backend->entry : entry

void pd_device_ops_overlay(pd_device_ops *table, const pd_device_ops *backend)
{
    OVERLAY(gemm);
    OVERLAY(fill);
    OVERLAY(axpby);
    OVERLAY(add);
    OVERLAY(convert);
    OVERLAY(sum);
    OVERLAY(relu_forward);
    OVERLAY(relu_backward);
    OVERLAY(conv2d_forward);
    OVERLAY(conv2d_backward_data);
    OVERLAY(conv2d_backward_filter);
    OVERLAY(linear_forward);
    OVERLAY(linear_backward);
    OVERLAY(pool2d_forward);
    OVERLAY(pool2d_backward);
    OVERLAY(lrn_forward);
    OVERLAY(lrn_backward);
    OVERLAY(batchnorm_forward_train);
    OVERLAY(batchnorm_forward_eval);
    OVERLAY(batchnorm_backward);
    OVERLAY(dropout_forward);
    OVERLAY(dropout_backward);
    OVERLAY(softmax_cross_entropy_forward);
    OVERLAY(softmax_cross_entropy_backward);
    OVERLAY(concat_forward);
    OVERLAY(concat_backward);
    OVERLAY(embedding_forward);
    OVERLAY(embedding_backward);
    OVERLAY(lstm_cell_forward);
    OVERLAY(lstm_cell_backward);
    OVERLAY(sgd_update);
    OVERLAY(adam_update);
    OVERLAY(memory_stats);
    OVERLAY(host_alloc);
    OVERLAY(host_free);
    OVERLAY(event_create);
    OVERLAY(event_record);
    OVERLAY(event_elapsed_ms);
    OVERLAY(event_destroy);
    OVERLAY(set_precision);
    /* Optional entries stay NULL where the backend has none: their
     * absence is what callers test (a device without dma_buf export, CUDA
     * IPC or an RDMA write flush). */
    table->export_dmabuf = backend->export_dmabuf;
    table->ipc_export = backend->ipc_export;
    table->ipc_open = backend->ipc_open;
    table->ipc_close = backend->ipc_close;
    table->flush_rdma_writes = backend->flush_rdma_writes;
}
