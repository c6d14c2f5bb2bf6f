/* Optimizers over a graph's trainable parameters, on the graph's device. */
#ifndef PIPEDREAM_OPTIM_H
#define PIPEDREAM_OPTIM_H

#include <pipedream/graph.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pd_optimizer pd_optimizer;

/* SGD with momentum and weight decay (torch.optim.SGD semantics); the
 * momentum buffers are allocated here. `desc->first_step` is managed. */
pd_status pd_optimizer_create_sgd(pd_graph *g, const pd_sgd_desc *desc, pd_optimizer **out);

/* Adam / AdamW (torch.optim semantics); the step count is managed. */
pd_status pd_optimizer_create_adam(pd_graph *g, const pd_adam_desc *desc, pd_optimizer **out);

/* Applies one update to every trainable parameter from its gradient. */
pd_status pd_optimizer_step(pd_optimizer *opt);

/* Changes the learning rate (schedules). */
void pd_optimizer_set_lr(pd_optimizer *opt, float lr);

/* Frees the optimizer state. NULL is ignored. */
void pd_optimizer_destroy(pd_optimizer *opt);

#ifdef __cplusplus
}
#endif
#endif
