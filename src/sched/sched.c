/* The schedule object: names, the builder the generators share, routing of
 * minibatches over replicas, printing. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "sched/sched_int.h"

static const char *const type_names[PD_SCHED_TYPE_COUNT] = {"1f1b", "1f1b-vsync", "gpipe", "dp", "straight",
                                                             "1f1b-2bw"};

static const char *const op_names[PD_SCHED_OP_COUNT] = {
    "load", "forward", "backward", "send-act", "recv-act", "send-grad", "recv-grad", "allreduce", "step", "eval",
};

const char *pd_sched_type_name(pd_sched_type type)
{
    return (unsigned)type < PD_SCHED_TYPE_COUNT ? type_names[type] : NULL;
}

pd_status pd_sched_type_parse(const char *name, pd_sched_type *out)
{
    for (int i = 0; i < PD_SCHED_TYPE_COUNT; i++)
        if (name && strcmp(name, type_names[i]) == 0) {
            *out = (pd_sched_type)i;
            return PD_OK;
        }
    return PD_ERROR(PD_EINVAL, "schedule: unknown schedule '%s' (known: 1f1b, 1f1b-vsync, gpipe, dp, straight, 1f1b-2bw)",
                    name ? name : "(null)");
}

const char *pd_sched_op_name(pd_sched_op op) { return (unsigned)op < PD_SCHED_OP_COUNT ? op_names[op] : NULL; }

void pd_sched_destroy(pd_sched *s)
{
    if (!s)
        return;
    for (int r = 0; s->actions && r < s->n_ranks; r++)
        free(s->actions[r]);
    for (int i = 0; s->stage_ranks && i < s->n_stages; i++)
        free(s->stage_ranks[i]);
    free(s->actions);
    free(s->n_actions);
    free(s->stage_ranks);
    free(s->stage_replicas);
    free(s->in_flight);
    free(s->rank_stage);
    free(s->rank_replica);
    free(s);
}

static void builder_release(pd_sched_builder *b)
{
    for (int i = 0; b->fwd_version && b->s && i < b->s->n_stages; i++)
        free(b->fwd_version[i]);
    free(b->fwd_version);
    free(b->capacity);
    free(b->version);
    free(b->steps);
    free(b->posted);
    b->fwd_version = NULL;
    b->capacity = b->version = b->steps = b->posted = NULL;
}

pd_status pd_sched_builder_init(pd_sched_builder *b, const pd_plan *plan, const pd_sched_costs *costs,
                                const pd_sched_options *opts)
{
    pd_sched *s;
    int n_total = opts->minibatches + opts->eval_minibatches;

    *b = (pd_sched_builder){.costs = costs, .cluster = &plan->cluster};
    s = calloc(1, sizeof(*s));
    if (!s)
        return PD_ERROR(PD_ENOMEM, "schedule: out of host memory");
    b->s = s;
    s->type = opts->type;
    s->n_ranks = plan->workers;
    s->n_stages = plan->n_stages;
    s->minibatches = opts->minibatches;
    s->eval_minibatches = opts->eval_minibatches;
    s->microbatches = opts->microbatches;
    s->depth = opts->depth;
    s->rank_stage = malloc(sizeof(int) * s->n_ranks);
    s->rank_replica = malloc(sizeof(int) * s->n_ranks);
    s->n_actions = calloc(s->n_ranks, sizeof(int));
    s->actions = calloc(s->n_ranks, sizeof(*s->actions));
    s->stage_replicas = calloc(s->n_stages, sizeof(int));
    s->stage_ranks = calloc(s->n_stages, sizeof(*s->stage_ranks));
    s->in_flight = calloc(s->n_stages, sizeof(int));
    b->capacity = calloc(s->n_ranks, sizeof(int));
    b->version = calloc(s->n_ranks, sizeof(int));
    b->steps = calloc(s->n_ranks, sizeof(int));
    b->posted = calloc(s->n_ranks, sizeof(int));
    b->fwd_version = calloc(s->n_stages, sizeof(*b->fwd_version));
    if (!s->rank_stage || !s->rank_replica || !s->n_actions || !s->actions || !s->stage_replicas || !s->stage_ranks ||
        !s->in_flight || !b->capacity || !b->version || !b->steps || !b->posted ||
        !b->fwd_version)
        return pd_sched_builder_finish(b, PD_ERROR(PD_ENOMEM, "schedule: out of host memory"), NULL);
    for (int r = 0; r < s->n_ranks; r++)
        s->rank_stage[r] = s->rank_replica[r] = -1;
    for (int i = 0; i < s->n_stages; i++) {
        const pd_plan_stage *st = &plan->stages[i];

        s->stage_replicas[i] = st->replicas;
        s->stage_ranks[i] = malloc(sizeof(int) * st->replicas);
        b->fwd_version[i] = malloc(sizeof(int) * (n_total > 0 ? n_total : 1));
        if (!s->stage_ranks[i] || !b->fwd_version[i])
            return pd_sched_builder_finish(b, PD_ERROR(PD_ENOMEM, "schedule: out of host memory"), NULL);
        for (int j = 0; j < st->replicas; j++) {
            int r = st->ranks[j];
            if (r < 0 || r >= s->n_ranks)
                return pd_sched_builder_finish(
                    b, PD_ERROR(PD_EINVAL, "schedule: stage %d: rank %d is not a worker (0..%d)", i, r, s->n_ranks - 1),
                    NULL);
            if (s->rank_stage[r] >= 0)
                return pd_sched_builder_finish(
                    b, PD_ERROR(PD_EINVAL, "schedule: rank %d is in stages %d and %d", r, s->rank_stage[r], i), NULL);
            s->rank_stage[r] = i;
            s->rank_replica[r] = j;
            s->stage_ranks[i][j] = r;
        }
    }
    return PD_OK;
}

pd_status pd_sched_builder_finish(pd_sched_builder *b, pd_status status, pd_sched **out)
{
    builder_release(b);
    if (status == PD_OK && out)
        *out = b->s;
    else
        pd_sched_destroy(b->s);
    b->s = NULL;
    return status;
}

int pd_sched_route(const pd_sched *s, int stage, int mb)
{
    return s->stage_ranks[stage][mb % s->stage_replicas[stage]];
}

int pd_sched_local_minibatches(const pd_sched *s, int stage, int replica, int first, int last, int *mbs)
{
    int n = 0;

    for (int mb = first; mb < last; mb++)
        if (mb % s->stage_replicas[stage] == replica)
            mbs[n++] = mb;
    return n;
}

void pd_sched_action_format(const pd_sched_action *a, char *buf, size_t size)
{
    const char *name = pd_sched_op_name(a->op);

    switch (a->op) {
    case PD_SCHED_SEND_ACT:
    case PD_SCHED_SEND_GRAD:
        snprintf(buf, size, "%s mb %d to rank %d (%lld B)", name, a->minibatch, a->peer, (long long)a->bytes);
        break;
    case PD_SCHED_RECV_ACT:
    case PD_SCHED_RECV_GRAD:
        snprintf(buf, size, "%s mb %d from rank %d (%lld B)", name, a->minibatch, a->peer, (long long)a->bytes);
        break;
    case PD_SCHED_FORWARD:
    case PD_SCHED_BACKWARD:
    case PD_SCHED_EVAL:
        snprintf(buf, size, "%s mb %d (weights v%d)", name, a->minibatch, a->weight_version);
        break;
    case PD_SCHED_ALLREDUCE:
        snprintf(buf, size, "%s round %d mb %d (%lld B)", name, a->round, a->minibatch, (long long)a->bytes);
        break;
    case PD_SCHED_STEP:
        snprintf(buf, size, "%s round %d (publishes v%d)", name, a->round, a->weight_version);
        break;
    default:
        snprintf(buf, size, "%s mb %d", name ? name : "?", a->minibatch);
        break;
    }
}

void pd_sched_print(const pd_sched *s, FILE *out)
{
    char line[128];

    fprintf(out, "schedule %s: %d ranks, %d stages, %d minibatches", pd_sched_type_name(s->type), s->n_ranks,
            s->n_stages, s->minibatches);
    if (s->eval_minibatches)
        fprintf(out, " + %d evaluation", s->eval_minibatches);
    fprintf(out, "\n");
    for (int r = 0; r < s->n_ranks; r++) {
        if (s->rank_stage[r] < 0) {
            fprintf(out, "rank %d: unused\n", r);
            continue;
        }
        fprintf(out, "rank %d: stage %d replica %d, %d actions\n", r, s->rank_stage[r], s->rank_replica[r],
                s->n_actions[r]);
        for (int i = 0; i < s->n_actions[r]; i++) {
            pd_sched_action_format(&s->actions[r][i], line, sizeof(line));
            fprintf(out, "  %4d %s\n", i, line);
        }
    }
}
