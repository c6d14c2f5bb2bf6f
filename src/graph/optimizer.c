/* Optimizers over a graph's trainable parameters: the per-parameter state
 * (SGD momentum buffers; Adam's first and second moments) lives on the
 * graph's device, zeroed at creation, and every step calls the device's
 * update entry once per parameter. */
#include "config.h"

#include <stdlib.h>

#include <pipedream/optim.h>

#include "graph/pd_graph_int.h"

#define OPT_MAX_STATE 2 /* Adam: m and v */

typedef enum { OPT_SGD, OPT_ADAM } opt_kind;

struct pd_optimizer {
    opt_kind kind;
    pd_device *dev;
    pd_sgd_desc sgd;
    pd_adam_desc adam;
    int n_params;
    pd_param **params;                 /* the trainable ones, borrowed from the graph */
    pd_tensor *(*state)[OPT_MAX_STATE]; /* [n_params]; NULL where the kind needs none */
    int n_state;                       /* state tensors per parameter */
    int64_t steps;                     /* updates applied */
};

void pd_optimizer_destroy(pd_optimizer *opt)
{
    if (!opt)
        return;
    if (opt->state)
        for (int i = 0; i < opt->n_params; i++)
            for (int k = 0; k < opt->n_state; k++)
                pd_tensor_destroy(opt->state[i][k]);
    free(opt->state);
    free(opt->params);
    free(opt);
}

/* Collects g's trainable parameters (those of `only` when it is not NULL)
 * and allocates n_state zeroed tensors shaped like each of them on g's
 * device. */
static pd_status optimizer_create(pd_graph *g, pd_param *const *only, int n_only, opt_kind kind, int n_state,
                                  pd_optimizer **out)
{
    pd_param **all;
    int n_all = pd_graph_params(g, &all);
    pd_optimizer *opt = calloc(1, sizeof(*opt));
    pd_status s = PD_OK;

    if (!opt)
        return PD_ERROR(PD_ENOMEM, "optimizer: out of host memory");
    opt->kind = kind;
    opt->dev = pd_graph_device(g);
    opt->n_state = n_state;
    opt->params = calloc((size_t)(n_all ? n_all : 1), sizeof(*opt->params));
    opt->state = calloc((size_t)(n_all ? n_all : 1), sizeof(*opt->state));
    if (!opt->params || !opt->state) {
        s = PD_ERROR(PD_ENOMEM, "optimizer: out of host memory for %d parameters", n_all);
        goto destroy;
    }
    for (int i = 0; i < n_all; i++) {
        pd_param *p = all[i];
        bool chosen = !only;
        for (int k = 0; k < n_only && !chosen; k++)
            chosen = only[k] == p;
        if (!p->trainable || !chosen)
            continue;
        if (!p->value.data || !p->grad.data) {
            s = PD_ERROR(PD_ESTATE, "optimizer: parameter %s has no memory; create the optimizer after "
                                    "pd_graph_allocate", p->name);
            goto destroy;
        }
        /* Counted before the allocations so that destroy frees what was made. */
        int slot = opt->n_params++;
        opt->params[slot] = p;
        for (int k = 0; k < n_state; k++)
            PD_CHECK_GOTO(pd_tensor_create_zero(opt->dev, PD_F32, &p->value.shape, &opt->state[slot][k]), s,
                          destroy);
    }
    *out = opt;
    return PD_OK;
destroy:
    pd_optimizer_destroy(opt);
    return s;
}

pd_status pd_optimizer_create_sgd(pd_graph *g, const pd_sgd_desc *desc, pd_optimizer **out)
{
    return pd_optimizer_create_sgd_for(g, NULL, 0, desc, out);
}

pd_status pd_optimizer_create_sgd_for(pd_graph *g, pd_param *const *params, int n, const pd_sgd_desc *desc,
                                      pd_optimizer **out)
{
    pd_optimizer *opt;

    if (!g || !desc || !out)
        return PD_ERROR(PD_EINVAL, "optimizer: sgd needs a graph, a descriptor and an output");
    if (!(desc->lr >= 0.0f) || !(desc->momentum >= 0.0f) || !(desc->weight_decay >= 0.0f))
        return PD_ERROR(PD_EINVAL, "optimizer: sgd lr, momentum and weight_decay must be >= 0, got %g, %g, %g",
                        (double)desc->lr, (double)desc->momentum, (double)desc->weight_decay);
    if (desc->nesterov && (desc->momentum <= 0.0f || desc->dampening != 0.0f))
        return PD_ERROR(PD_EINVAL, "optimizer: sgd nesterov needs momentum > 0 and dampening 0, got %g and %g",
                        (double)desc->momentum, (double)desc->dampening);
    /* Plain SGD keeps no state. */
    PD_CHECK(optimizer_create(g, params, n, OPT_SGD, desc->momentum != 0.0f ? 1 : 0, &opt));
    opt->sgd = *desc;
    opt->sgd.first_step = true;
    *out = opt;
    return PD_OK;
}

pd_status pd_optimizer_create_adam(pd_graph *g, const pd_adam_desc *desc, pd_optimizer **out)
{
    return pd_optimizer_create_adam_for(g, NULL, 0, desc, out);
}

pd_status pd_optimizer_create_adam_for(pd_graph *g, pd_param *const *params, int n, const pd_adam_desc *desc,
                                       pd_optimizer **out)
{
    pd_optimizer *opt;

    if (!g || !desc || !out)
        return PD_ERROR(PD_EINVAL, "optimizer: adam needs a graph, a descriptor and an output");
    if (!(desc->lr >= 0.0f) || !(desc->eps >= 0.0f) || !(desc->weight_decay >= 0.0f))
        return PD_ERROR(PD_EINVAL, "optimizer: adam lr, eps and weight_decay must be >= 0, got %g, %g, %g",
                        (double)desc->lr, (double)desc->eps, (double)desc->weight_decay);
    if (!(desc->beta1 >= 0.0f && desc->beta1 < 1.0f) || !(desc->beta2 >= 0.0f && desc->beta2 < 1.0f))
        return PD_ERROR(PD_EINVAL, "optimizer: adam betas must be in [0,1), got %g and %g", (double)desc->beta1,
                        (double)desc->beta2);
    PD_CHECK(optimizer_create(g, params, n, OPT_ADAM, 2, &opt));
    opt->adam = *desc;
    opt->adam.step = 0; /* the first pd_optimizer_step is step 1 */
    *out = opt;
    return PD_OK;
}

pd_status pd_optimizer_step(pd_optimizer *opt)
{
    pd_device *dev = opt->dev;

    if (opt->kind == OPT_SGD) {
        for (int i = 0; i < opt->n_params; i++)
            PD_CHECK(dev->ops->sgd_update(dev, &opt->sgd, &opt->params[i]->value, &opt->params[i]->grad,
                                          opt->state[i][0]));
        opt->sgd.first_step = false;
        opt->steps++;
        return PD_OK;
    }
    opt->adam.step++;
    for (int i = 0; i < opt->n_params; i++)
        PD_CHECK(dev->ops->adam_update(dev, &opt->adam, &opt->params[i]->value, &opt->params[i]->grad,
                                       opt->state[i][0], opt->state[i][1]));
    opt->steps++;
    return PD_OK;
}

void pd_optimizer_set_lr(pd_optimizer *opt, float lr)
{
    opt->sgd.lr = lr;
    opt->adam.lr = lr;
}

const char *pd_optimizer_kind_name(pd_optimizer_kind kind)
{
    return kind == PD_OPTIMIZER_ADAM ? "adam" : "sgd";
}

pd_optimizer_kind pd_optimizer_get_kind(const pd_optimizer *opt)
{
    return opt->kind == OPT_ADAM ? PD_OPTIMIZER_ADAM : PD_OPTIMIZER_SGD;
}

void pd_optimizer_get_sgd(const pd_optimizer *opt, pd_sgd_desc *out)
{
    *out = opt->kind == OPT_SGD ? opt->sgd : (pd_sgd_desc){0};
}

void pd_optimizer_get_adam(const pd_optimizer *opt, pd_adam_desc *out)
{
    *out = opt->kind == OPT_ADAM ? opt->adam : (pd_adam_desc){0};
}

int64_t pd_optimizer_steps(const pd_optimizer *opt) { return opt->steps; }

pd_status pd_optimizer_set_steps(pd_optimizer *opt, int64_t steps)
{
    if (!opt || steps < 0)
        return PD_ERROR(PD_EINVAL, "optimizer: step count %lld must be >= 0", (long long)steps);
    opt->steps = steps;
    /* The update kernels read these two: SGD initialises its momentum buffer
     * from the gradient on its first step, Adam corrects bias by step. */
    opt->sgd.first_step = steps == 0;
    opt->adam.step = steps;
    return PD_OK;
}

int pd_optimizer_state_count(const pd_optimizer *opt) { return opt->n_params * opt->n_state; }

pd_status pd_optimizer_state(pd_optimizer *opt, int index, const char **kind, const pd_param **param,
                             pd_tensor **state)
{
    static const char *const names[2][OPT_MAX_STATE] = {{"momentum", NULL}, {"adam_m", "adam_v"}};

    if (!opt || index < 0 || index >= pd_optimizer_state_count(opt))
        return PD_ERROR(PD_EINVAL, "optimizer: state index %d out of range [0, %d)", index,
                        opt ? pd_optimizer_state_count(opt) : 0);
    int i = index / opt->n_state, k = index % opt->n_state;
    *kind = names[opt->kind == OPT_ADAM][k];
    *param = opt->params[i];
    *state = opt->state[i][k];
    return PD_OK;
}
