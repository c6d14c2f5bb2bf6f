/* How many forwards each stage of 1F1B runs before its first backward.
 *
 * A stage holds a minibatch from the start of its forward to the end of
 * its backward. In a steady state of period T per minibatch, minibatch m
 * starts its forward at stage s at m T + a_s and its backward at
 * m T + a_s + D_s. A replica of stage s (r_s of them, each taking every
 * r_s-th minibatch) with w_s warm-up forwards runs forward m + w_s r_s
 * between backwards m and m + r_s, which it can only do when
 *
 *   (w_s - 1) r_s T + f_s  <=  D_s  <=  w_s r_s T - g_s
 *
 * (f_s, g_s: its forward and backward), while the stages after it need
 * D_s >= L_s = f_s + x_s + D_{s+1} + g_{s+1} + x_s (the activation out,
 * the next stage's hold, the gradient back; x_s the transfer across the
 * cut). Taking each D_s as small as allowed gives the fewest warm-up
 * forwards that never hold the pipeline back: w_s = ceil((L_s + g_s) /
 * (r_s T)).
 *
 * Without costs, f_s + g_s <= r_s T and free transfers bound it by
 * w_s = 1 + ceil(w_{s+1} r_{s+1} / r_s): what the replica counts alone
 * guarantee. */
#include "config.h"

#include <math.h>

#include "sched/sched_int.h"

/* The longest transfer of `bytes` between a replica of `stage` and one of
 * the next stage that exchange minibatches (mb goes from replica mb mod r
 * to replica mb mod r'), in ms. */
static double cut_transfer_ms(const pd_sched_builder *b, int stage, int64_t bytes)
{
    const pd_sched *s = b->s;
    int r0 = s->stage_replicas[stage], r1 = s->stage_replicas[stage + 1];
    double worst = 0;

    for (int m = 0; m < r0 * r1; m++) {
        double bandwidth, latency;
        pd_sched_link(b->cluster, s->stage_ranks[stage][m % r0], s->stage_ranks[stage + 1][m % r1], &bandwidth,
                      &latency);
        double ms = 1000.0 * ((double)bytes / bandwidth + latency);
        worst = ms > worst ? ms : worst;
    }
    return worst;
}

/* The fastest the pipeline can go: its slowest stage's share. */
static double pipeline_period(const pd_sched *s, const pd_sched_stage_cost *c)
{
    double period = c[0].load_ms / s->stage_replicas[0];

    for (int i = 0; i < s->n_stages; i++)
        period = fmax(period, (c[i].fwd_ms + c[i].bwd_ms) / s->stage_replicas[i]);
    return period;
}

/* Both bounds, from the last stage up. Returns the most forwards a stage
 * runs beyond the replicas' bound (pd_plan_1f1b_in_flight). */
int pd_sched_1f1b_in_flight_from_costs(const pd_sched_builder *b, int *in_flight)
{
    const pd_sched *s = b->s;
    const int n_stages = s->n_stages, *replicas = s->stage_replicas;
    const pd_sched_stage_cost *c = b->costs->stages;
    double period = pipeline_period(s, c);
    double hold = 0;    /* D of the next stage */
    int downstream = 0; /* minibatches in flight at the next stage, all its replicas */
    int extra = 0;

    pd_plan_1f1b_in_flight(n_stages, replicas, in_flight);
    for (int i = n_stages - 1; i >= 0; i--) {
        int plain = in_flight[i];
        in_flight[i] = 1 + (downstream + replicas[i] - 1) / replicas[i];
        double slot = replicas[i] * period, need = c[i].fwd_ms; /* L_s; at the last stage its forward */
        if (i + 1 < n_stages)
            need += 2 * cut_transfer_ms(b, i, c[i].send_bytes) + hold + c[i + 1].bwd_ms;
        if (slot > 0) {
            double w = ceil((need + c[i].bwd_ms) / slot - 1e-9);
            if (w > in_flight[i])
                in_flight[i] = w < s->minibatches ? (int)w : s->minibatches;
            hold = fmax(need, (in_flight[i] - 1) * slot + c[i].fwd_ms);
        } else
            hold = need;
        downstream = in_flight[i] * replicas[i];
        extra = in_flight[i] - plain > extra ? in_flight[i] - plain : extra;
    }
    return extra;
}

void pd_sched_1f1b_warmup(pd_sched_builder *b, bool warmup_from_costs)
{
    pd_sched *s = b->s;

    /* The extra forwards are minibatches on their way between stages:
     * the channels hold them (docs/simulator.md). */
    if (warmup_from_costs && b->costs)
        s->depth += pd_sched_1f1b_in_flight_from_costs(b, s->in_flight);
    else
        pd_plan_1f1b_in_flight(s->n_stages, s->stage_replicas, s->in_flight);
}
