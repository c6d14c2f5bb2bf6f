/* PipeDream-2BW (Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN
 * Training", ICML 2021): 1F1B with double-buffered weights. The
 * minibatches come in batches of m; batch k runs, at every stage, on the
 * version after k - 1 updates (the first two batches on the first
 * weights), and each replica takes one step per batch, after its last
 * backward of the batch and the replicas' all-reduce, on the gradients of
 * the batch summed. The step is taken as late as the next backward (whose
 * gradients go into the buffer being reduced) or the first forward that
 * needs its version, whichever comes first, so the all-reduce overlaps the
 * forward between. With m at least every replica's warm-up span
 * (pd_sched_2bw_accumulate) a version is published before any forward
 * needs it, and the one before it is no longer used by then: two versions
 * are alive at most. */
#include "config.h"

#include <stdlib.h>

#include "sched/sched_int.h"

/* Checks (or, requested 0, chooses) m for stages with these replicas and
 * warm-up forwards. */
static pd_status accumulate_for(int n_stages, const int *replicas, const int *in_flight, int requested, int *out)
{
    int unit = 1, need = n_stages, bound_stage = -1;

    for (int i = 0; i < n_stages; i++) {
        int a = unit, b = replicas[i];
        while (b) {
            int t = a % b;
            a = b;
            b = t;
        }
        unit = unit / a * replicas[i];
        /* A replica's forward of batch k + 1 follows its backward of the
         * minibatch in_flight - 1 local minibatches before it, which must
         * be of batch k or later: batch k - 1's step is then taken. */
        if (replicas[i] * (in_flight[i] - 1) > need) {
            need = replicas[i] * (in_flight[i] - 1);
            bound_stage = i;
        }
    }
    if (requested == 0) {
        *out = (need + unit - 1) / unit * unit;
        return PD_OK;
    }
    if (requested < 0 || requested % unit)
        return PD_ERROR(PD_EINVAL, "schedule 1f1b-2bw: %d minibatches per weight version: need a multiple of %d, "
                                   "every stage's replicas", requested, unit);
    if (requested < need && bound_stage < 0)
        return PD_ERROR(PD_EINVAL, "schedule 1f1b-2bw: %d minibatches per weight version: need at least the "
                                   "pipeline's depth, %d stages", requested, n_stages);
    if (requested < need)
        return PD_ERROR(PD_EINVAL, "schedule 1f1b-2bw: %d minibatches per weight version: need at least %d, stage "
                                   "%d's %d replicas x its %d warm-up forwards after the first",
                        requested, need, bound_stage, replicas[bound_stage], in_flight[bound_stage] - 1);
    *out = requested;
    return PD_OK;
}

pd_status pd_sched_2bw_accumulate(const pd_plan *plan, int requested, int *out)
{
    int *replicas, *in_flight;
    pd_status s;

    if (!plan || plan->n_stages < 1 || !plan->stages || !out)
        return PD_ERROR(PD_EINVAL, "schedule 1f1b-2bw: no plan");
    replicas = malloc(sizeof(int) * (size_t)plan->n_stages);
    in_flight = malloc(sizeof(int) * (size_t)plan->n_stages);
    if (!replicas || !in_flight) {
        s = PD_ERROR(PD_ENOMEM, "schedule: out of host memory");
        goto free_arrays;
    }
    for (int i = 0; i < plan->n_stages; i++) {
        replicas[i] = plan->stages[i].replicas;
        if (replicas[i] < 1) {
            s = PD_ERROR(PD_EINVAL, "schedule 1f1b-2bw: stage %d has %d replicas", i, replicas[i]);
            goto free_arrays;
        }
    }
    pd_plan_1f1b_in_flight(plan->n_stages, replicas, in_flight);
    s = accumulate_for(plan->n_stages, replicas, in_flight, requested, out);
free_arrays:
    free(in_flight);
    free(replicas);
    return s;
}

/* A rank's state while its list is built. */
typedef struct rank_2bw {
    int rank, m;
    bool pending;    /* a step is due (after its all-reduce) */
    int pending_end; /* the minibatches it applies: the end of its batch */
} rank_2bw;

static pd_status take_step(pd_sched_builder *b, rank_2bw *r)
{
    r->pending = false;
    return pd_sched_emit_step_to(b, r->rank, r->pending_end);
}

/* A forward of `mb` on its batch's version, after the step publishing it. */
static pd_status forward(pd_sched_builder *b, rank_2bw *r, int mb)
{
    int k = mb / r->m, version = k > 0 ? (k - 1) * r->m : 0;

    if (version > b->version[r->rank] && r->pending)
        PD_CHECK(take_step(b, r));
    if (version > b->version[r->rank])
        return PD_ERROR(PD_ESTATE, "schedule 1f1b-2bw: rank %d: minibatch %d needs weight version %d before it is "
                                   "published (%d minibatches per version are too few)", r->rank, mb, version, r->m);
    return pd_sched_emit_forward(b, r->rank, mb, version, false);
}

static pd_status rank_list(pd_sched_builder *b, int rank, int m, int *mbs)
{
    const pd_sched *s = b->s;
    int stage = s->rank_stage[rank];
    int n = pd_sched_local_minibatches(s, stage, s->rank_replica[rank], 0, s->minibatches, mbs);
    int warm = s->in_flight[stage] < n ? s->in_flight[stage] : n;
    rank_2bw r = {.rank = rank, .m = m};

    for (int k = 0; k < warm; k++)
        PD_CHECK(forward(b, &r, mbs[k]));
    for (int i = 0; i < n; i++) {
        if (r.pending)
            PD_CHECK(take_step(b, &r));
        PD_CHECK(pd_sched_emit_backward(b, rank, mbs[i]));
        if (i + 1 == n || mbs[i + 1] / m != mbs[i] / m) {
            int end = (mbs[i] / m + 1) * m;
            PD_CHECK(pd_sched_emit_allreduce(b, rank));
            r.pending = true;
            r.pending_end = end < s->minibatches ? end : s->minibatches;
            /* Without replicas there is nothing to overlap. */
            if (s->stage_replicas[stage] == 1)
                PD_CHECK(take_step(b, &r));
        }
        if (warm + i < n)
            PD_CHECK(forward(b, &r, mbs[warm + i]));
    }
    if (r.pending)
        PD_CHECK(take_step(b, &r));
    return pd_sched_emit_eval(b, rank);
}

pd_status pd_sched_gen_2bw(pd_sched_builder *b, int microbatches, bool warmup_from_costs)
{
    pd_sched *s = b->s;
    int *mbs, m;
    pd_status status = PD_OK;

    pd_sched_1f1b_warmup(b, warmup_from_costs);
    PD_CHECK(accumulate_for(s->n_stages, s->stage_replicas, s->in_flight, microbatches, &m));
    s->microbatches = m;
    if (!(mbs = malloc(sizeof(int) * (s->minibatches > 0 ? s->minibatches : 1))))
        return PD_ERROR(PD_ENOMEM, "schedule: out of host memory");
    for (int i = 0; i < s->n_stages && status == PD_OK; i++)
        for (int j = 0; j < s->stage_replicas[i] && status == PD_OK; j++)
            status = rank_list(b, s->stage_ranks[i][j], m, mbs);
    free(mbs);
    return status;
}
