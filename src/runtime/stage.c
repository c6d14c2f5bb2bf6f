/* A pipeline stage on the model's graph: which nodes it runs, the tensors
 * crossing its cuts (every output of an earlier stage that a later stage
 * reads, so labels and skip connections travel stage by stage), the part of
 * the graph its rank allocates (those nodes and tensors only), the seeds of
 * its backward pass, its trainable parameters, and the stash of the forward
 * state of minibatches in flight. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream/graph.h>
#include <pipedream/plan.h>
#include <pipedream/profile.h>

#include "runtime/pd_runtime_int.h"

static bool is_input(const pd_graph *g, int k) { return strcmp(pd_graph_node_type(g, k), PD_PROFILE_INPUT_TYPE) == 0; }

/* owner[k]: the stage of graph node k (inputs no stage names: stage 0). */
static pd_status node_owners(const pd_graph *g, const pd_plan *plan, const pd_profile *profile, int *owner)
{
    int n = pd_graph_size(g);

    for (int k = 0; k < n; k++)
        owner[k] = -1;
    for (int s = 0; s < plan->n_stages; s++) {
        for (int i = 0; i < plan->stages[s].n_layers; i++) {
            int idx = plan->stages[s].layers[i];
            if (idx < 0 || idx >= pd_profile_size(profile))
                return PD_ERROR(PD_EINVAL, "pipeline: stage %d: layer %d is not a node of the profile", s, idx);
            const char *name = pd_profile_node_at(profile, idx)->name;
            int k = pd_graph_find(g, name);
            if (k < 0)
                return PD_ERROR(PD_EINVAL, "pipeline: stage %d: layer '%s' of the profile is not a node of the model "
                                           "(a profile of another model?)", s, name);
            owner[k] = s;
        }
    }
    for (int k = 0; k < n; k++) {
        if (owner[k] >= 0)
            continue;
        if (!is_input(g, k))
            return PD_ERROR(PD_EINVAL, "pipeline: model node '%s' is in no stage of the plan (a profile of another "
                                       "model or size?)", pd_graph_node_name(g, k));
        owner[k] = 0;
    }
    return PD_OK;
}

/* The tensors crossing the cut after stage `c`, into *out (n entries). */
static pd_status cut_nodes(const pd_graph *g, const int *owner, int c, int **out, int *count)
{
    int n = pd_graph_size(g), used = 0;
    bool *crosses = calloc((size_t)n, sizeof(*crosses));

    if (!crosses)
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    for (int j = 0; j < n; j++) {
        const int *in;
        int n_in = pd_graph_node_inputs(g, j, &in);
        for (int i = 0; i < n_in; i++)
            if (owner[j] > c && owner[in[i]] <= c)
                crosses[in[i]] = true;
    }
    for (int k = 0; k < n; k++)
        used += crosses[k];
    *out = malloc(sizeof(**out) * (size_t)(used ? used : 1));
    if (!*out) {
        free(crosses);
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    }
    *count = 0;
    for (int k = 0; k < n; k++)
        if (crosses[k])
            (*out)[(*count)++] = k;
    free(crosses);
    return PD_OK;
}

pd_status pd_stage_select(const pd_graph *g, const pd_plan *plan, const pd_profile *profile, int index, bool *run,
                          bool *hold)
{
    const int n = pd_graph_size(g);
    int *owner = malloc(sizeof(int) * (size_t)(n > 0 ? n : 1)), *cut = NULL, n_cut = 0;
    pd_status s;

    if (!owner)
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    PD_CHECK_GOTO(node_owners(g, plan, profile, owner), s, done);
    for (int k = 0; k < n; k++) {
        run[k] = owner[k] == index && !is_input(g, k);
        hold[k] = index == 0 && is_input(g, k); /* where stage 0 loads the data */
    }
    /* The cut before the stage (what it receives) and after it (what it
     * sends: its outputs, and what it forwards from earlier stages). */
    for (int c = index - 1; c <= index; c++) {
        if (c < 0 || c + 1 >= plan->n_stages)
            continue;
        PD_CHECK_GOTO(cut_nodes(g, owner, c, &cut, &n_cut), s, done);
        for (int i = 0; i < n_cut; i++)
            hold[cut[i]] = true;
        free(cut);
        cut = NULL;
    }
    s = PD_OK;
done:
    free(owner);
    return s;
}

static size_t cut_bytes(const pd_graph *g, const int *nodes, int n, bool grads)
{
    size_t bytes = 0;

    for (int i = 0; i < n; i++)
        if (!grads || pd_graph_node_needs_grad(g, nodes[i]))
            bytes += pd_graph_node_activation_bytes(g, nodes[i]);
    return bytes;
}

/* The parameters of the stage's nodes ("<node>.<suffix>"): all of them
 * (buffers too) for checkpoints, the trainable ones for training. */
static pd_status stage_params(pd_stage *st, const int *owner)
{
    pd_param **all;
    int n_all = pd_graph_params(st->g, &all);

    st->params = calloc((size_t)(n_all ? n_all : 1), sizeof(*st->params));
    st->saved = calloc((size_t)(n_all ? n_all : 1), sizeof(*st->saved));
    if (!st->params || !st->saved)
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    for (int i = 0; i < n_all; i++) {
        char node[sizeof(all[i]->name)];
        snprintf(node, sizeof(node), "%s", all[i]->name);
        char *dot = strrchr(node, '.');
        if (dot)
            *dot = '\0';
        int k = pd_graph_find(st->g, node);
        if (k < 0 || owner[k] != st->index)
            continue;
        st->saved[st->n_saved++] = all[i];
        if (!all[i]->trainable)
            continue;
        if (all[i]->value.dtype != PD_F32)
            return PD_ERROR(PD_ENOTSUP, "pipeline: parameter %s is not f32", all[i]->name);
        st->params[st->n_params++] = all[i];
        st->n_weights += (size_t)pd_tensor_numel(&all[i]->value);
    }
    return PD_OK;
}

static pd_status stage_seeds(pd_stage *st)
{
    pd_graph *g = st->g;
    int last = pd_graph_size(g) - 1;

    st->seed_nodes = malloc(sizeof(int) * (size_t)(st->n_cut_out + 1));
    st->seeds = calloc((size_t)(st->n_cut_out + 1), sizeof(*st->seeds));
    if (!st->seed_nodes || !st->seeds)
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    if (st->index == st->n_stages - 1) {
        st->seed_nodes[st->n_seeds++] = last; /* the loss, seeded with 1 */
        return PD_OK;
    }
    for (int i = 0; i < st->n_cut_out; i++) {
        int k = st->cut_out[i];
        if (!pd_graph_node_needs_grad(g, k))
            continue;
        /* In the dtype the graph stores the tensor in (bf16 under
         * --precision bf16), as its gradient travels. */
        const pd_tensor *out = pd_graph_output(g, k);
        PD_CHECK(pd_tensor_create(out->device, out->dtype, pd_graph_node_shape(g, k), &st->seeds[st->n_seeds]));
        st->seed_nodes[st->n_seeds++] = k;
    }
    return PD_OK;
}

pd_status pd_stage_init(pd_stage *st, pd_graph *g, const pd_plan *plan, const pd_profile *profile, int index,
                        int in_flight)
{
    int n = pd_graph_size(g);
    int *owner = malloc(sizeof(int) * (size_t)n);
    pd_status s;

    *st = (pd_stage){.g = g, .index = index, .n_stages = plan->n_stages};
    if (!owner)
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    PD_CHECK_GOTO(node_owners(g, plan, profile, owner), s, fail);
    if (owner[n - 1] != plan->n_stages - 1) {
        s = PD_ERROR(PD_EINVAL, "pipeline: the loss '%s' is not in the last stage", pd_graph_node_name(g, n - 1));
        goto fail;
    }
    if (!(st->nodes = malloc(sizeof(int) * (size_t)n))) {
        s = PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
        goto fail;
    }
    for (int k = 0; k < n; k++)
        if (owner[k] == index && !is_input(g, k))
            st->nodes[st->n_nodes++] = k;
    if (index > 0)
        PD_CHECK_GOTO(cut_nodes(g, owner, index - 1, &st->cut_in, &st->n_cut_in), s, fail);
    if (index + 1 < plan->n_stages)
        PD_CHECK_GOTO(cut_nodes(g, owner, index, &st->cut_out, &st->n_cut_out), s, fail);
    st->act_in_bytes = cut_bytes(g, st->cut_in, st->n_cut_in, false);
    st->grad_out_bytes = cut_bytes(g, st->cut_in, st->n_cut_in, true);
    st->act_out_bytes = cut_bytes(g, st->cut_out, st->n_cut_out, false);
    st->grad_in_bytes = cut_bytes(g, st->cut_out, st->n_cut_out, true);
    PD_CHECK_GOTO(stage_seeds(st), s, fail);
    PD_CHECK_GOTO(stage_params(st, owner), s, fail);
    PD_CHECK_GOTO(pd_graph_stash_bytes(g, st->nodes, st->n_nodes, &st->stash_bytes), s, fail);
    st->stash_slots = in_flight > 0 ? in_flight : 1;
    st->stash = malloc(st->stash_bytes * (size_t)st->stash_slots + 1);
    st->stash_mb = malloc(sizeof(*st->stash_mb) * (size_t)st->stash_slots);
    if (!st->stash || !st->stash_mb) {
        s = PD_ERROR(PD_ENOMEM, "pipeline: out of host memory for %d stashed minibatches of %zu bytes",
                     st->stash_slots, st->stash_bytes);
        goto fail;
    }
    for (int i = 0; i < st->stash_slots; i++)
        st->stash_mb[i] = -1;
    free(owner);
    return PD_OK;
fail:
    free(owner);
    pd_stage_destroy(st);
    return s;
}

void pd_stage_destroy(pd_stage *st)
{
    if (st->seeds)
        for (int i = 0; i < st->n_seeds; i++)
            pd_tensor_destroy(st->seeds[i]);
    free(st->seeds);
    free(st->seed_nodes);
    free(st->params);
    free(st->saved);
    free(st->nodes);
    free(st->cut_in);
    free(st->cut_out);
    free(st->stash);
    free(st->stash_mb);
    *st = (pd_stage){0};
}

/* Copies `bytes` from `src` to `dst` on the device of tensor t: one of
 * them is t's data, the other a message buffer in host memory (buf_dev
 * NULL, `kind` says which way) or in memory of buf_dev (device to
 * device). */
static pd_status copy_message(const pd_tensor *t, void *dst, const void *src, size_t bytes, pd_copy_kind kind,
                              pd_device *buf_dev)
{
    if (buf_dev && buf_dev != t->device)
        return PD_ERROR(PD_EINVAL, "pipeline: a message buffer of %s for a tensor of %s", buf_dev->name,
                        t->device->name);
    if (!bytes)
        return PD_OK;
    return t->device->mem->copy(t->device, dst, src, bytes, buf_dev ? PD_COPY_DEVICE_TO_DEVICE : kind);
}

/* After copies into or out of a device buffer: they are queued on the
 * device (device-to-device copies return at once), so wait for them
 * before the buffer is sent or the slot released. */
static pd_status message_done(pd_device *buf_dev)
{
    return buf_dev && buf_dev->mem->synchronize ? buf_dev->mem->synchronize(buf_dev) : PD_OK;
}

pd_status pd_stage_pack(pd_stage *st, const int *nodes, int n, bool grads, void *buf, pd_device *buf_dev)
{
    size_t offset = 0;

    for (int i = 0; i < n; i++) {
        if (grads && !pd_graph_node_needs_grad(st->g, nodes[i]))
            continue;
        const pd_tensor *t = grads ? pd_graph_grad(st->g, nodes[i]) : pd_graph_output(st->g, nodes[i]);
        if (!t || !t->data)
            return PD_ERROR(PD_ESTATE, "pipeline: no %s for '%s' to send", grads ? "gradient" : "output",
                            pd_graph_node_name(st->g, nodes[i]));
        PD_CHECK(copy_message(t, (char *)buf + offset, t->data, pd_tensor_nbytes(t), PD_COPY_DEVICE_TO_HOST, buf_dev));
        offset += pd_tensor_nbytes(t);
    }
    return message_done(buf_dev);
}

pd_status pd_stage_unpack_act(pd_stage *st, const void *buf, size_t bytes, pd_device *buf_dev)
{
    size_t offset = 0;

    if (bytes != st->act_in_bytes)
        return PD_ERROR(PD_ECOMM, "pipeline: stage %d: activation message of %zu bytes, expected %zu", st->index,
                        bytes, st->act_in_bytes);
    for (int i = 0; i < st->n_cut_in; i++) {
        pd_tensor *t = pd_graph_output(st->g, st->cut_in[i]);
        PD_CHECK(copy_message(t, t->data, (const char *)buf + offset, pd_tensor_nbytes(t), PD_COPY_HOST_TO_DEVICE,
                              buf_dev));
        offset += pd_tensor_nbytes(t);
    }
    return message_done(buf_dev);
}

pd_status pd_stage_unpack_grad(pd_stage *st, const void *buf, size_t bytes, pd_device *buf_dev)
{
    size_t offset = 0;

    if (bytes != st->grad_in_bytes)
        return PD_ERROR(PD_ECOMM, "pipeline: stage %d: gradient message of %zu bytes, expected %zu", st->index, bytes,
                        st->grad_in_bytes);
    for (int i = 0; i < st->n_seeds; i++) {
        pd_tensor *t = st->seeds[i];
        PD_CHECK(copy_message(t, t->data, (const char *)buf + offset, pd_tensor_nbytes(t), PD_COPY_HOST_TO_DEVICE,
                              buf_dev));
        offset += pd_tensor_nbytes(t);
    }
    return message_done(buf_dev);
}

pd_status pd_stage_stash_save(pd_stage *st, int64_t mb)
{
    for (int i = 0; i < st->stash_slots; i++) {
        if (st->stash_mb[i] >= 0)
            continue;
        st->stash_mb[i] = mb;
        return pd_graph_stash_save(st->g, st->nodes, st->n_nodes, st->stash + (size_t)i * st->stash_bytes);
    }
    return PD_ERROR(PD_ESTATE, "pipeline: stage %d: all %d activation stashes in use at minibatch %lld", st->index,
                    st->stash_slots, (long long)mb);
}

pd_status pd_stage_stash_restore(pd_stage *st, int64_t mb)
{
    for (int i = 0; i < st->stash_slots; i++) {
        if (st->stash_mb[i] != mb)
            continue;
        st->stash_mb[i] = -1;
        return pd_graph_stash_restore(st->g, st->nodes, st->n_nodes, mb, st->stash + (size_t)i * st->stash_bytes);
    }
    return PD_ERROR(PD_ESTATE, "pipeline: stage %d: no stashed forward state of minibatch %lld", st->index,
                    (long long)mb);
}

pd_status pd_stage_params_get(pd_stage *st, bool grads, float *buf)
{
    for (int i = 0; i < st->n_params; i++) {
        const pd_tensor *t = grads ? &st->params[i]->grad : &st->params[i]->value;
        PD_CHECK(pd_tensor_copy_to_host(t, buf, pd_tensor_nbytes(t)));
        buf += pd_tensor_numel(t);
    }
    return PD_OK;
}

pd_status pd_stage_params_set(pd_stage *st, bool grads, const float *buf)
{
    for (int i = 0; i < st->n_params; i++) {
        pd_tensor *t = grads ? &st->params[i]->grad : &st->params[i]->value;
        PD_CHECK(pd_tensor_copy_from_host(t, buf, pd_tensor_nbytes(t)));
        buf += pd_tensor_numel(t);
    }
    return PD_OK;
}
