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

/* The same over the trainable ones among `n` of g's parameters only (a
 * pipeline stage's): state is allocated, and updates applied, for them
 * alone. */
pd_status pd_optimizer_create_sgd_for(pd_graph *g, pd_param *const *params, int n, const pd_sgd_desc *desc,
                                      pd_optimizer **out);
pd_status pd_optimizer_create_adam_for(pd_graph *g, pd_param *const *params, int n, const pd_adam_desc *desc,
                                       pd_optimizer **out);

/* Applies one update to every trainable parameter from its gradient. */
pd_status pd_optimizer_step(pd_optimizer *opt);

/* Changes the learning rate (schedules). */
void pd_optimizer_set_lr(pd_optimizer *opt, float lr);

/* What a checkpoint needs to save and restore an optimizer exactly. */

typedef enum pd_optimizer_kind {
    PD_OPTIMIZER_SGD = 0,
    PD_OPTIMIZER_ADAM = 1,
} pd_optimizer_kind;

/* "sgd" or "adam". */
const char *pd_optimizer_kind_name(pd_optimizer_kind kind);

/* The optimizer's kind. */
pd_optimizer_kind pd_optimizer_get_kind(const pd_optimizer *opt);

/* Its hyper-parameters as in effect now (the lr as last set). The
 * descriptor of the other kind is zero. */
void pd_optimizer_get_sgd(const pd_optimizer *opt, pd_sgd_desc *out);
void pd_optimizer_get_adam(const pd_optimizer *opt, pd_adam_desc *out);

/* Updates applied so far (pd_optimizer_step calls since creation or the
 * last pd_optimizer_set_steps). */
int64_t pd_optimizer_steps(const pd_optimizer *opt);

/* Sets the number of updates already applied, as when state tensors are
 * restored from a checkpoint: SGD then treats its momentum buffers as
 * initialised (steps > 0) and Adam corrects its bias for step steps + 1
 * next. PD_EINVAL for a negative count. */
pd_status pd_optimizer_set_steps(pd_optimizer *opt, int64_t steps);

/* Number of state tensors: one per trainable parameter for SGD with
 * momentum ("momentum"), none for plain SGD, two for Adam ("adam_m",
 * "adam_v"). */
int pd_optimizer_state_count(const pd_optimizer *opt);

/* The state tensor at `index` (0 .. count-1, parameter-major): its kind
 * ("momentum", "adam_m", "adam_v"), the parameter it belongs to and the
 * tensor itself (on the graph's device, shaped like the parameter, owned by
 * the optimizer; callers may overwrite its contents). PD_EINVAL if out of
 * range. */
pd_status pd_optimizer_state(pd_optimizer *opt, int index, const char **kind, const pd_param **param,
                             pd_tensor **state);

/* Frees the optimizer state. NULL is ignored. */
void pd_optimizer_destroy(pd_optimizer *opt);

#ifdef __cplusplus
}
#endif
#endif
