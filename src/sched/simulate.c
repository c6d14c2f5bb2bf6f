/* The discrete-event simulator: every action's start and end from its
 * rank's previous action and what it waits for (a message's arrival, a
 * free channel slot, an all-reduce round), transfers serialised per link.
 * The times form a dataflow over the lists, so actions are timed in any
 * order their dependencies allow. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sched/sched_int.h"

/* One ordered pair of ranks: message k's arrival and the end of its
 * receive (which frees its slot). */
typedef struct sim_channel {
    int sent, received, capacity;
    double *arrival, *freed;
    double link_free; /* when the link finishes its last transfer */
    int64_t bytes;
    double busy_ms;
} sim_channel;

/* One all-reduce round of a stage. */
typedef struct sim_round {
    int posted;
    double start, end;
    int64_t bytes;
} sim_round;

/* Minibatches a stage-0 rank's data loader prepares ahead (the loader's
 * default ring, pd_loader_options.prefetch). */
#define SIM_PREFETCH 3

typedef struct sim {
    const pd_sched *s;
    const pd_sched_costs *costs;
    const pd_plan_cluster *cluster;
    pd_sched_result *r;
    int *pc;
    double *clock;        /* per rank: when its last action ended */
    sim_channel *channels; /* [src][dst] */
    sim_round **rounds;   /* per stage, per round */
    int n_rounds;
    double *completion;   /* per training minibatch: end of the step applying it on stage 0 */
    /* Stage 0, per rank: its training minibatches in backward order, how
     * many of them a step has applied, and per round how many had been
     * backwarded when the rank posted it (a deferred step applies an
     * earlier round than the last backward's). */
    int *backwarded;
    int *n_backwarded, *n_applied;
    int *sealed;
    /* Per rank: its loader's minibatches taken so far, when the last one
     * was ready, and when each of the last SIM_PREFETCH was taken (its
     * buffer then takes the next one). */
    int *loads;
    double *load_ready;
    double *load_taken;
} sim;

static double compute_ms(const sim *m, const pd_sched_action *a)
{
    const pd_sched_stage_cost *c;

    if (!m->costs || a->stage < 0 || a->stage >= m->costs->n_stages)
        return 0;
    c = &m->costs->stages[a->stage];
    switch (a->op) {
    case PD_SCHED_FORWARD:
    case PD_SCHED_EVAL: return c->fwd_ms;
    case PD_SCHED_BACKWARD: return c->bwd_ms;
    default: return 0;
    }
}

static double load_ms(const sim *m, const pd_sched_action *a)
{
    return m->costs && a->stage >= 0 && a->stage < m->costs->n_stages ? m->costs->stages[a->stage].load_ms : 0;
}

static pd_status channel_grow(sim_channel *ch)
{
    if (ch->sent < ch->capacity)
        return PD_OK;
    int cap = ch->capacity ? 2 * ch->capacity : 16;
    double *arrival = realloc(ch->arrival, sizeof(double) * cap);
    if (!arrival)
        return PD_ERROR(PD_ENOMEM, "simulate: out of host memory");
    ch->arrival = arrival;
    double *freed = realloc(ch->freed, sizeof(double) * cap);
    if (!freed)
        return PD_ERROR(PD_ENOMEM, "simulate: out of host memory");
    ch->freed = freed;
    ch->capacity = cap;
    return PD_OK;
}

/* The slowest link among the stage's replicas. */
static void group_link(const sim *m, int stage, double *bandwidth, double *latency)
{
    const pd_sched *s = m->s;

    *bandwidth = INFINITY;
    *latency = 0;
    for (int i = 0; i < s->stage_replicas[stage]; i++)
        for (int j = i + 1; j < s->stage_replicas[stage]; j++) {
            double bw, lat;
            pd_sched_link(m->cluster, s->stage_ranks[stage][i], s->stage_ranks[stage][j], &bw, &lat);
            if (bw < *bandwidth)
                *bandwidth = bw;
            if (lat > *latency)
                *latency = lat;
        }
}

/* Times rank's next action if what it waits for is known; *moved says so. */
static pd_status advance(sim *m, int rank, bool *moved)
{
    const pd_sched *s = m->s;
    int i = m->pc[rank];
    const pd_sched_action *a = &s->actions[rank][i];
    double start = m->clock[rank], end;

    *moved = false;
    switch (a->op) {
    case PD_SCHED_SEND_ACT:
    case PD_SCHED_SEND_GRAD: {
        sim_channel *ch = &m->channels[rank * s->n_ranks + a->peer];
        double bw, lat, t;
        int k = ch->sent;
        if (k >= s->depth && ch->received <= k - s->depth)
            return PD_OK; /* the slot is not free yet */
        if (k >= s->depth && ch->freed[k - s->depth] > start)
            start = ch->freed[k - s->depth];
        PD_CHECK(channel_grow(ch));
        pd_sched_link(m->cluster, rank, a->peer, &bw, &lat);
        t = 1000.0 * ((double)a->bytes / bw + lat);
        double begin = start > ch->link_free ? start : ch->link_free;
        ch->arrival[k] = begin + t;
        ch->link_free = begin + t;
        ch->bytes += a->bytes;
        ch->busy_ms += t;
        ch->sent++;
        m->r->ranks[rank].bytes_sent += a->bytes;
        m->r->bytes_total += a->bytes;
        /* The event shows the transfer; the rank goes on at `start`. */
        m->clock[rank] = start;
        end = begin + t;
        start = begin;
        break;
    }
    case PD_SCHED_RECV_ACT:
    case PD_SCHED_RECV_GRAD: {
        sim_channel *ch = &m->channels[a->peer * s->n_ranks + rank];
        int k = ch->received;
        if (k >= ch->sent)
            return PD_OK; /* not sent yet */
        end = ch->arrival[k] > start ? ch->arrival[k] : start;
        ch->freed[k] = end;
        ch->received++;
        m->clock[rank] = end;
        break;
    }
    case PD_SCHED_ALLREDUCE: {
        int replicas = s->stage_replicas[a->stage];
        sim_round *rd = &m->rounds[a->stage][a->round];
        if (rd->posted == 0 || start > rd->start)
            rd->start = start;
        rd->bytes = a->bytes;
        if (a->stage == 0)
            m->sealed[(size_t)rank * m->n_rounds + a->round] = m->n_backwarded[rank];
        if (++rd->posted == replicas) {
            double bw, lat;
            group_link(m, a->stage, &bw, &lat);
            rd->end = rd->start + pd_sched_allreduce_ms(replicas, a->bytes, bw, lat);
        }
        /* Each replica sends (and receives) 2(r-1)/r of the gradient. */
        int64_t share = (int64_t)(2.0 * (replicas - 1) / replicas * (double)a->bytes);
        m->r->ranks[rank].bytes_sent += share;
        m->r->bytes_total += share;
        end = start; /* posted; its span is set when the step runs */
        break;
    }
    case PD_SCHED_LOAD: {
        /* The loader works beside the rank, one minibatch at a time, into
         * SIM_PREFETCH buffers: minibatch k starts once k - 1 is ready and
         * the rank has taken k - SIM_PREFETCH. */
        int k = m->loads[rank]++;
        double *taken = &m->load_taken[(size_t)rank * SIM_PREFETCH];
        double begin = m->load_ready[rank];
        if (k >= SIM_PREFETCH && taken[k % SIM_PREFETCH] > begin)
            begin = taken[k % SIM_PREFETCH];
        m->load_ready[rank] = begin + load_ms(m, a);
        end = m->load_ready[rank] > start ? m->load_ready[rank] : start;
        taken[k % SIM_PREFETCH] = end;
        m->clock[rank] = end;
        break;
    }
    case PD_SCHED_STEP: {
        sim_round *rd = s->stage_replicas[a->stage] > 1 ? &m->rounds[a->stage][a->round] : NULL;
        if (rd && rd->posted < s->stage_replicas[a->stage])
            return PD_OK; /* the round has not started */
        end = rd && rd->end > start ? rd->end : start;
        m->clock[rank] = end;
        if (a->stage == 0) {
            int upto = rd ? m->sealed[(size_t)rank * m->n_rounds + a->round] : m->n_backwarded[rank];
            for (int k = m->n_applied[rank]; k < upto; k++)
                m->completion[m->backwarded[(size_t)rank * s->minibatches + k]] = end;
            m->n_applied[rank] = upto;
        }
        break;
    }
    default: {
        double t = compute_ms(m, a);
        end = start + t;
        m->clock[rank] = end;
        m->r->ranks[rank].busy_ms += t;
        if (a->op == PD_SCHED_BACKWARD && a->stage == 0)
            m->backwarded[(size_t)rank * s->minibatches + m->n_backwarded[rank]++] = a->minibatch;
        break;
    }
    }
    m->r->events[m->r->n_events++] = (pd_sched_event){.rank = rank, .action = i, .start_ms = start, .end_ms = end};
    m->pc[rank]++;
    *moved = true;
    return PD_OK;
}

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Steady state: the completions in the middle half of the run, whole
 * periods (a flush, a round of replicas) at both ends. */
static void steady_state(sim *m)
{
    const pd_sched *s = m->s;
    pd_sched_result *r = m->r;
    int n = s->minibatches, period = 1;

    if (s->type == PD_SCHED_GPIPE || s->type == PD_SCHED_STRAIGHT)
        period = s->microbatches > 0 ? s->microbatches : 1;
    else
        for (int i = 0; i < s->n_stages; i++)
            period = period / gcd(period, s->stage_replicas[i]) * s->stage_replicas[i];
    qsort(m->completion, n, sizeof(double), cmp_double);
    int periods = period > 0 && period <= n ? n / period : 0;
    if (periods >= 4) {
        int q0 = periods / 4, q1 = periods - periods / 4;
        double span = m->completion[q1 * period - 1] - m->completion[q0 * period - 1];
        r->ms_per_minibatch = span / ((q1 - q0) * period);
    } else
        r->ms_per_minibatch = r->makespan_ms / n;
}

static pd_status finish(sim *m)
{
    const pd_sched *s = m->s;
    pd_sched_result *r = m->r;
    int n_links = 0;

    for (int rank = 0; rank < s->n_ranks; rank++)
        if (m->clock[rank] > r->makespan_ms)
            r->makespan_ms = m->clock[rank];
    for (int e = 0; e < r->n_events; e++) /* transfers may end after their sender's last action */
        if (r->events[e].end_ms > r->makespan_ms)
            r->makespan_ms = r->events[e].end_ms;
    steady_state(m);
    r->minibatches_per_s = r->ms_per_minibatch > 0 ? 1000.0 / r->ms_per_minibatch : INFINITY;
    r->samples_per_s = r->batch > 0 ? r->minibatches_per_s * r->batch : 0;
    r->bytes_per_minibatch = (double)r->bytes_total / s->minibatches;
    r->bytes_per_sample = r->batch > 0 ? r->bytes_per_minibatch / r->batch : 0;
    for (int rank = 0; rank < s->n_ranks; rank++) {
        pd_sched_rank_stats *st = &r->ranks[rank];
        int stage = s->rank_stage[rank];
        st->idle_ms = r->makespan_ms - st->busy_ms;
        st->utilisation = r->makespan_ms > 0 ? st->busy_ms / r->makespan_ms : 0;
        PD_CHECK(pd_sched_rank_memory(s, rank, &st->max_in_flight, &st->weight_versions));
        if (stage >= 0 && m->costs) {
            const pd_sched_stage_cost *c = &m->costs->stages[stage];
            st->memory_bytes = (double)c->weight_bytes * st->weight_versions +
                               (double)c->stash_bytes * st->max_in_flight +
                               (double)c->weight_bytes * m->costs->optimizer_state_factor;
        }
    }
    for (int p = 0; p < s->n_ranks * s->n_ranks; p++)
        n_links += m->channels[p].sent > 0;
    r->links = calloc(n_links ? n_links : 1, sizeof(*r->links));
    if (!r->links)
        return PD_ERROR(PD_ENOMEM, "simulate: out of host memory");
    for (int p = 0; p < s->n_ranks * s->n_ranks; p++)
        if (m->channels[p].sent > 0)
            r->links[r->n_links++] = (pd_sched_link_stats){.src = p / s->n_ranks, .dst = p % s->n_ranks,
                                                            .bytes = m->channels[p].bytes,
                                                            .busy_ms = m->channels[p].busy_ms};
    return PD_OK;
}

void pd_sched_result_destroy(pd_sched_result *r)
{
    if (!r)
        return;
    free(r->ranks);
    free(r->links);
    free(r->events);
    free(r);
}

static void sim_release(sim *m)
{
    for (int p = 0; m->channels && p < m->s->n_ranks * m->s->n_ranks; p++) {
        free(m->channels[p].arrival);
        free(m->channels[p].freed);
    }
    for (int i = 0; m->rounds && i < m->s->n_stages; i++)
        free(m->rounds[i]);
    free(m->rounds);
    free(m->channels);
    free(m->clock);
    free(m->pc);
    free(m->completion);
    free(m->backwarded);
    free(m->n_backwarded);
    free(m->n_applied);
    free(m->sealed);
    free(m->loads);
    free(m->load_ready);
    free(m->load_taken);
}

pd_status pd_sched_simulate(const pd_sched *s, const pd_sched_costs *costs, const pd_plan_cluster *cluster, int batch,
                            pd_sched_result **out)
{
    sim m = {.s = s, .costs = costs, .cluster = cluster};
    size_t total = 0, pairs;
    pd_status status;
    bool progress = true, done = false;

    PD_CHECK(pd_sched_check(s));
    if (costs && costs->n_stages != s->n_stages)
        return PD_ERROR(PD_EINVAL, "simulate: costs for %d stages, the schedule has %d", costs->n_stages,
                        s->n_stages);
    pairs = (size_t)s->n_ranks * s->n_ranks;
    for (int r = 0; r < s->n_ranks; r++)
        total += s->n_actions[r];
    m.n_rounds = s->minibatches + 1;
    m.r = calloc(1, sizeof(*m.r));
    m.pc = calloc(s->n_ranks, sizeof(int));
    m.clock = calloc(s->n_ranks, sizeof(double));
    m.channels = calloc(pairs, sizeof(sim_channel));
    m.rounds = calloc(s->n_stages, sizeof(*m.rounds));
    m.completion = calloc(s->minibatches, sizeof(double));
    m.backwarded = calloc((size_t)s->n_ranks * s->minibatches, sizeof(int));
    m.n_backwarded = calloc(s->n_ranks, sizeof(int));
    m.n_applied = calloc(s->n_ranks, sizeof(int));
    m.sealed = calloc((size_t)s->n_ranks * m.n_rounds, sizeof(int));
    m.loads = calloc(s->n_ranks, sizeof(int));
    m.load_ready = calloc(s->n_ranks, sizeof(double));
    m.load_taken = calloc((size_t)s->n_ranks * SIM_PREFETCH, sizeof(double));
    if (!m.r || !m.pc || !m.clock || !m.channels || !m.rounds || !m.completion || !m.backwarded ||
        !m.n_backwarded || !m.n_applied || !m.sealed || !m.loads || !m.load_ready || !m.load_taken) {
        status = PD_ERROR(PD_ENOMEM, "simulate: out of host memory");
        goto fail;
    }
    for (int i = 0; i < s->n_stages; i++)
        if (!(m.rounds[i] = calloc(m.n_rounds, sizeof(sim_round)))) {
            status = PD_ERROR(PD_ENOMEM, "simulate: out of host memory");
            goto fail;
        }
    m.r->batch = batch;
    m.r->n_ranks = s->n_ranks;
    m.r->ranks = calloc(s->n_ranks, sizeof(*m.r->ranks));
    m.r->events = calloc(total ? total : 1, sizeof(*m.r->events));
    if (!m.r->ranks || !m.r->events) {
        status = PD_ERROR(PD_ENOMEM, "simulate: out of host memory");
        goto fail;
    }
    while (progress && !done) {
        progress = false;
        done = true;
        for (int r = 0; r < s->n_ranks; r++) {
            bool moved = true;
            while (moved && m.pc[r] < s->n_actions[r]) {
                PD_CHECK_GOTO(advance(&m, r, &moved), status, fail);
                progress |= moved;
            }
            done &= m.pc[r] == s->n_actions[r];
        }
    }
    if (!done) { /* the checker passed, so this is a bug here */
        status = PD_ERROR(PD_ESTATE, "simulate: the run stopped before its end although the checker passed");
        goto fail;
    }
    /* An all-reduce's span: from the round's start to its end. */
    for (int e = 0; e < m.r->n_events; e++) {
        pd_sched_event *ev = &m.r->events[e];
        const pd_sched_action *a = &s->actions[ev->rank][ev->action];
        if (a->op == PD_SCHED_ALLREDUCE) {
            ev->start_ms = m.rounds[a->stage][a->round].start;
            ev->end_ms = m.rounds[a->stage][a->round].end;
        }
    }
    PD_CHECK_GOTO(finish(&m), status, fail);
    *out = m.r;
    m.r = NULL;
    sim_release(&m);
    return PD_OK;
fail:
    pd_sched_result_destroy(m.r);
    sim_release(&m);
    return status;
}
