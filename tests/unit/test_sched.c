/* Schedules: every generator's lists pass the checker on many random plans
 * (up to 16 ranks, replicated stages, evaluation passes, channel depth 1);
 * deliberately broken lists (swapped send order, a missing or extra
 * receive, an extra send, a receive moved after the send it waits for, a
 * minibatch dropped) are caught with rank, action and minibatch named; the
 * simulator reproduces hand-computed timelines (2 and 4 stages, unequal
 * stage times, replicated stages, transfers, all-reduce, GPipe, straight)
 * and a steady-state throughput of 1 / (slowest stage time / replicas)
 * where nothing else limits it; PipeDream-2BW's lists (batch versions, one
 * step per batch) keep two weight versions, 2 x the weights in memory. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pipedream.h>
#include <pipedream/sched.h>

#include "test_plans.h"

/* ---- plans and costs by hand ---- */

/* A plan of n stages with the given replicas, ranks assigned in order,
 * on one level of `workers` ranks (bandwidth 1 GB/s, no latency). */
static pd_plan *make_plan(int n_stages, const int *replicas)
{
    pd_plan *p = test_plan_by_replicas(n_stages, replicas);

    p->cluster.n_levels = 1;
    p->cluster.levels[0] = (pd_plan_level){.name = "gpu", .fanout = p->workers, .bandwidth_bytes_per_s = 1e9};
    return p;
}

/* Costs: forward, backward per stage; no bytes. */
static pd_sched_costs make_costs(int n_stages, const double *fwd, const double *bwd)
{
    pd_sched_costs c = {.n_stages = n_stages, .stages = calloc(n_stages, sizeof(pd_sched_stage_cost))};

    assert_non_null(c.stages);
    for (int i = 0; i < n_stages; i++) {
        c.stages[i].fwd_ms = fwd[i];
        c.stages[i].bwd_ms = bwd[i];
    }
    return c;
}

static pd_sched *generate(const pd_plan *p, const pd_sched_costs *c, pd_sched_type type, int minibatches, int m)
{
    pd_sched_options o = {.type = type, .minibatches = minibatches, .microbatches = m, .depth = 2};
    pd_sched *s = NULL;

    if (pd_sched_generate(p, c, &o, &s) != PD_OK)
        fail_msg("generate %s: %s", pd_sched_type_name(type), pd_last_error());
    return s;
}

/* The index of the first action of `rank` with `op` on `mb`; fails if none. */
static int find(const pd_sched *s, int rank, pd_sched_op op, int mb)
{
    for (int i = 0; i < s->n_actions[rank]; i++)
        if (s->actions[rank][i].op == op && s->actions[rank][i].minibatch == mb)
            return i;
    fail_msg("rank %d has no %s of mb %d", rank, pd_sched_op_name(op), mb);
    return -1;
}

/* Moves action `from` of `rank` to position `to` (shifting the rest). */
static void move_action(pd_sched *s, int rank, int from, int to)
{
    pd_sched_action a = s->actions[rank][from], *l = s->actions[rank];

    if (from < to)
        memmove(&l[from], &l[from + 1], sizeof(*l) * (to - from));
    else
        memmove(&l[to + 1], &l[to], sizeof(*l) * (from - to));
    l[to] = a;
}

static void remove_action(pd_sched *s, int rank, int at)
{
    pd_sched_action *l = s->actions[rank];
    memmove(&l[at], &l[at + 1], sizeof(*l) * (s->n_actions[rank] - at - 1));
    s->n_actions[rank]--;
}

static void append_action(pd_sched *s, int rank, pd_sched_action a)
{
    pd_sched_action *grown = realloc(s->actions[rank], sizeof(*grown) * (s->n_actions[rank] + 1));
    assert_non_null(grown);
    s->actions[rank] = grown;
    grown[s->n_actions[rank]++] = a;
}

static void assert_check_fails(const pd_sched *s, const char *const *needles)
{
    pd_error_clear();
    assert_int_equal(pd_sched_check(s), PD_ESTATE);
    for (int i = 0; needles[i]; i++)
        if (!strstr(pd_last_error(), needles[i]))
            fail_msg("'%s' not in '%s'", needles[i], pd_last_error());
}

/* ---- generation and the checker ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static int rnd(int n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((rng_state >> 33) % (uint64_t)n);
}

static int lcm(int a, int b)
{
    int x = a, y = b;
    while (y) {
        int t = x % y;
        x = y;
        y = t;
    }
    return a / x * b;
}

/* 200 random plans, every schedule, depth 1..3, with evaluation passes,
 * steps deferred or not: every list passes the checker, every minibatch is
 * forwarded and backwarded by the replica mb mod r. */
static void test_random_plans_check(void **state)
{
    (void)state;
    for (int trial = 0; trial < 200; trial++) {
        int n_stages = 1 + rnd(6), replicas[16], workers = 0, period = 1;
        for (int i = 0; i < n_stages; i++) {
            replicas[i] = workers + n_stages - i > 16 ? 1 : 1 + rnd(i == 0 ? 4 : 3);
            if (workers + replicas[i] + (n_stages - i - 1) > 16)
                replicas[i] = 1;
            workers += replicas[i];
            period = lcm(period, replicas[i]);
        }
        pd_plan *p = make_plan(n_stages, replicas);
        int ones[16];
        for (int i = 0; i < 16; i++)
            ones[i] = 1;
        pd_plan *straight = make_plan(n_stages, ones);
        int all[1] = {workers};
        pd_plan *dp = make_plan(1, all);
        for (int t = 0; t < PD_SCHED_TYPE_COUNT; t++) {
            const pd_plan *plan = t == PD_SCHED_DP ? dp : t == PD_SCHED_STRAIGHT ? straight : p;
            int per = t == PD_SCHED_DP ? workers : t == PD_SCHED_STRAIGHT ? 1 : period;
            int m = period * (1 + rnd(3));
            if (t == PD_SCHED_1F1B_2BW) { /* the default, or more */
                assert_int_equal(pd_sched_2bw_accumulate(plan, 0, &m), PD_OK);
                m = rnd(2) ? 0 : m + period * rnd(3);
            }
            pd_sched_options o = {.type = t, .minibatches = (t == PD_SCHED_GPIPE ? m : per) * (1 + rnd(5)),
                                  .microbatches = m, .eval_minibatches = rnd(4), .depth = 1 + rnd(3),
                                  .defer_step = rnd(2)};
            pd_sched *s = NULL;
            if (pd_sched_generate(plan, NULL, &o, &s) != PD_OK)
                fail_msg("trial %d %s: %s", trial, pd_sched_type_name(t), pd_last_error());
            if (pd_sched_check(s) != PD_OK)
                fail_msg("trial %d %s (%d stages, depth %d): %s", trial, pd_sched_type_name(t), n_stages, o.depth,
                         pd_last_error());
            pd_sched_destroy(s);
        }
        pd_plan_destroy(p);
        pd_plan_destroy(straight);
        pd_plan_destroy(dp);
    }
}

/* 1F1B's shape: NOAM warm-up at stage 0, fewer downstream, alternation
 * after; routing mb mod r; weight stashing; vertical sync's versions. */
static void test_1f1b_shape(void **state)
{
    int replicas[3] = {2, 1, 1};
    pd_plan *p = make_plan(3, replicas);
    pd_sched *s = generate(p, NULL, PD_SCHED_1F1B, 8, 0);

    (void)state;
    /* 4 workers / 2 replicas at stage 0 = 2; stage 1: 2 workers / 1; last: 1. */
    assert_int_equal(s->in_flight[0], 2);
    assert_int_equal(s->in_flight[1], 2);
    assert_int_equal(s->in_flight[2], 1);
    /* Rank 1 (stage 0, replica 1) runs mb 1, 3, 5, 7: load 1, forward 1,
     * send to rank 2, load 3, ..., then the backward of 1. */
    const pd_sched_action *a = s->actions[1];
    assert_int_equal(a[0].op, PD_SCHED_LOAD);
    assert_int_equal(a[0].minibatch, 1);
    assert_int_equal(a[1].op, PD_SCHED_FORWARD);
    assert_int_equal(a[2].op, PD_SCHED_SEND_ACT);
    assert_int_equal(a[2].peer, 2);
    assert_int_equal(a[3].minibatch, 3);
    assert_int_equal(a[6].op, PD_SCHED_RECV_GRAD);
    assert_int_equal(a[6].minibatch, 1);
    assert_int_equal(a[7].op, PD_SCHED_BACKWARD);
    assert_int_equal(a[7].weight_version, 0);
    assert_int_equal(a[8].op, PD_SCHED_ALLREDUCE);
    assert_int_equal(a[8].round, 0);
    /* The next forward (mb 5) overlaps the reduction, then the step
     * publishes version 2 (two replicas' minibatches applied). */
    assert_int_equal(a[9].op, PD_SCHED_LOAD);
    assert_int_equal(a[9].minibatch, 5);
    assert_int_equal(a[10].weight_version, 0);
    assert_int_equal(a[12].op, PD_SCHED_STEP);
    assert_int_equal(a[12].weight_version, 2);
    /* Rank 3 (last stage): forward then backward at once. */
    assert_int_equal(s->actions[3][0].op, PD_SCHED_RECV_ACT);
    assert_int_equal(s->actions[3][0].peer, 2);
    assert_int_equal(s->actions[3][1].op, PD_SCHED_FORWARD);
    assert_int_equal(s->actions[3][2].op, PD_SCHED_BACKWARD);
    assert_int_equal(s->actions[3][3].op, PD_SCHED_SEND_GRAD);
    assert_int_equal(s->actions[3][3].peer, 2);
    /* Stashing: the backward of every minibatch uses its forward's version. */
    for (int r = 0; r < s->n_ranks; r++)
        for (int i = 0; i < s->n_actions[r]; i++)
            if (s->actions[r][i].op == PD_SCHED_BACKWARD) {
                int f = find(s, r, PD_SCHED_FORWARD, s->actions[r][i].minibatch);
                assert_int_equal(s->actions[r][i].weight_version, s->actions[r][f].weight_version);
            }
    assert_int_equal(pd_sched_check(s), PD_OK);
    pd_sched_destroy(s);

    /* Vertical sync on unreplicated stages: every stage runs a minibatch
     * on stage 0's version of it; without, later stages run newer ones. */
    int ones[4] = {1, 1, 1, 1};
    pd_plan *q = make_plan(4, ones);
    pd_sched *v = generate(q, NULL, PD_SCHED_1F1B_VSYNC, 12, 0), *plain = generate(q, NULL, PD_SCHED_1F1B, 12, 0);
    int newer = 0;
    for (int mb = 0; mb < 12; mb++) {
        int v0 = v->actions[0][find(v, 0, PD_SCHED_FORWARD, mb)].weight_version;
        for (int r = 1; r < 4; r++) {
            assert_int_equal(v->actions[r][find(v, r, PD_SCHED_FORWARD, mb)].weight_version, v0);
            newer += plain->actions[r][find(plain, r, PD_SCHED_FORWARD, mb)].weight_version > v0;
        }
    }
    assert_true(newer > 0);
    assert_int_equal(pd_sched_check(v), PD_OK);
    pd_sched_destroy(v);
    pd_sched_destroy(plain);
    pd_plan_destroy(q);
    pd_plan_destroy(p);
}

static void test_generate_rejects(void **state)
{
    int replicas[2] = {2, 1};
    pd_plan *p = make_plan(2, replicas);
    pd_sched *s = NULL;
    pd_sched_options o = {.type = PD_SCHED_1F1B, .minibatches = 3, .depth = 1};

    (void)state;
    assert_int_equal(pd_sched_generate(p, NULL, &o, &s), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "not a multiple of stage 0's 2 replicas"));
    o.type = PD_SCHED_DP;
    o.minibatches = 4;
    assert_int_equal(pd_sched_generate(p, NULL, &o, &s), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "dp needs a one-stage plan"));
    o.type = PD_SCHED_STRAIGHT;
    assert_int_equal(pd_sched_generate(p, NULL, &o, &s), PD_EINVAL);
    o.type = PD_SCHED_GPIPE;
    o.microbatches = 3;
    assert_int_equal(pd_sched_generate(p, NULL, &o, &s), PD_EINVAL);
    o.type = PD_SCHED_1F1B;
    o.depth = 0;
    assert_int_equal(pd_sched_generate(p, NULL, &o, &s), PD_EINVAL);
    assert_null(s);
    pd_sched_type t;
    assert_int_equal(pd_sched_type_parse("gpipe", &t), PD_OK);
    assert_int_equal(t, PD_SCHED_GPIPE);
    assert_int_equal(pd_sched_type_parse("pipedream", &t), PD_EINVAL);
    pd_plan_destroy(p);
}

/* Rank 0 sends mb 1's activation before mb 0's: rank 1 finds mb 1 where it
 * waits for mb 0. */
static void test_check_swapped_sends(void **state)
{
    int replicas[2] = {1, 1};
    pd_plan *p = make_plan(2, replicas);
    pd_sched *s = generate(p, NULL, PD_SCHED_1F1B, 4, 0);

    (void)state;
    assert_int_equal(pd_sched_check(s), PD_OK);
    move_action(s, 0, find(s, 0, PD_SCHED_SEND_ACT, 0), find(s, 0, PD_SCHED_SEND_ACT, 1));
    assert_true(find(s, 0, PD_SCHED_SEND_ACT, 1) < find(s, 0, PD_SCHED_SEND_ACT, 0));
    const char *needles[] = {"rank 1 action 0 (recv-act mb 0 from rank 0", "send-act mb 1", "out of order", NULL};
    assert_check_fails(s, needles);
    pd_sched_destroy(s);
    pd_plan_destroy(p);
}

/* A receive removed, with what depends on it: the message stays unreceived. */
static void test_check_missing_receive(void **state)
{
    int replicas[2] = {1, 1};
    pd_plan *p = make_plan(2, replicas);
    pd_sched *s = generate(p, NULL, PD_SCHED_1F1B, 4, 0);

    (void)state;
    /* Just the receive: rank 1's forward of mb 2 lacks its input. */
    remove_action(s, 1, find(s, 1, PD_SCHED_RECV_ACT, 2));
    const char *no_input[] = {"rank 1 action", "(forward mb 2", "neither loaded nor received", NULL};
    assert_check_fails(s, no_input);
    pd_sched_destroy(s);

    /* The last minibatch dropped on rank 1 (receive, forward, backward,
     * gradient send): rank 0's activation is never received... */
    s = generate(p, NULL, PD_SCHED_1F1B, 4, 0);
    pd_sched_op ops[] = {PD_SCHED_RECV_ACT, PD_SCHED_FORWARD, PD_SCHED_BACKWARD, PD_SCHED_SEND_GRAD};
    for (int k = 0; k < 4; k++)
        remove_action(s, 1, find(s, 1, ops[k], 3));
    /* ... and rank 0 waits forever for its gradient. */
    const char *unmatched[] = {"rank 0 action", "recv-grad mb 3 from rank 1", "unmatched receive", NULL};
    assert_check_fails(s, unmatched);
    pd_sched_destroy(s);

    /* An extra send nobody receives. */
    s = generate(p, NULL, PD_SCHED_1F1B, 4, 0);
    pd_sched_action extra = s->actions[0][find(s, 0, PD_SCHED_SEND_ACT, 3)];
    append_action(s, 0, extra);
    char expect[64];
    snprintf(expect, sizeof(expect), "rank 0 action %d (send-act mb 3 to rank 1", s->n_actions[0] - 1);
    const char *unreceived[] = {expect, "unmatched send", NULL};
    assert_check_fails(s, unreceived);
    pd_sched_destroy(s);
    pd_plan_destroy(p);
}

/* Rank 0 waits for a gradient before sending the activation it comes
 * from: both ranks block. */
static void test_check_deadlock(void **state)
{
    int replicas[2] = {1, 1};
    pd_plan *p = make_plan(2, replicas);
    pd_sched *s = generate(p, NULL, PD_SCHED_1F1B, 1, 0);

    (void)state;
    move_action(s, 0, find(s, 0, PD_SCHED_SEND_ACT, 0), find(s, 0, PD_SCHED_RECV_GRAD, 0));
    const char *needles[] = {"deadlock", "rank 0 action 2 (recv-grad mb 0 from rank 1",
                             "rank 1 action 0 (recv-act mb 0 from rank 0", NULL};
    assert_check_fails(s, needles);
    pd_sched_destroy(s);

    /* Depth matters: stage 0 of a 2-minibatch GPipe flush sends both
     * activations before any receive of a gradient; moving rank 1's first
     * receive after its gradient send cannot work at any depth, but
     * sending two activations in a row is fine with one slot because rank 1
     * drains it. */
    s = generate(p, NULL, PD_SCHED_GPIPE, 2, 2);
    s->depth = 1;
    assert_int_equal(pd_sched_check(s), PD_OK);
    pd_sched_destroy(s);
    pd_plan_destroy(p);
}

/* A minibatch no rank runs: the completion check names it. */
static void test_check_incomplete_minibatch(void **state)
{
    int one[1] = {2};
    pd_plan *p = make_plan(1, one);
    pd_sched *s = generate(p, NULL, PD_SCHED_DP, 4, 0);

    (void)state;
    /* Rank 1 skips mb 3 (load, forward, backward), still all-reducing. */
    for (pd_sched_op op = PD_SCHED_LOAD; op <= PD_SCHED_BACKWARD; op++)
        remove_action(s, 1, find(s, 1, op, 3));
    const char *needles[] = {"minibatch 3 is never completed", "no forward at stage 0 (rank 1)", NULL};
    assert_check_fails(s, needles);
    pd_sched_destroy(s);

    /* An all-reduce round one replica never posts: its step waits forever. */
    s = generate(p, NULL, PD_SCHED_DP, 4, 0);
    for (int i = s->n_actions[1] - 1; i >= 0; i--)
        if (s->actions[1][i].op == PD_SCHED_ALLREDUCE) {
            remove_action(s, 1, i);
            break;
        }
    const char *step[] = {"rank 1 action", "(step round 1", "not posted by this rank", NULL};
    assert_check_fails(s, step);
    pd_sched_destroy(s);
    pd_plan_destroy(p);
}

/* ---- the simulator ---- */

static pd_sched_result *simulate(const pd_sched *s, const pd_sched_costs *c, const pd_plan *p)
{
    pd_sched_result *r = NULL;
    if (pd_sched_simulate(s, c, &p->cluster, 0, &r) != PD_OK)
        fail_msg("simulate: %s", pd_last_error());
    return r;
}

static const pd_sched_event *event(const pd_sched_result *r, const pd_sched *s, int rank, pd_sched_op op, int mb)
{
    int i = find(s, rank, op, mb);
    for (int e = 0; e < r->n_events; e++)
        if (r->events[e].rank == rank && r->events[e].action == i)
            return &r->events[e];
    fail_msg("no event for rank %d action %d", rank, i);
    return NULL;
}

static void assert_span(const pd_sched_event *e, double start, double end)
{
    if (fabs(e->start_ms - start) > 1e-9 || fabs(e->end_ms - end) > 1e-9)
        fail_msg("event [%g, %g], expected [%g, %g]", e->start_ms, e->end_ms, start, end);
}

/* Two stages (forward 1, backward 2 ms each), no transfer time, 4
 * minibatches, 1F1B: worked out by hand in the comments. */
static void test_sim_two_stages(void **state)
{
    int replicas[2] = {1, 1};
    double fwd[2] = {1, 1}, bwd[2] = {2, 2};
    pd_plan *p = make_plan(2, replicas);
    pd_sched_costs c = make_costs(2, fwd, bwd);
    pd_sched *s = generate(p, &c, PD_SCHED_1F1B, 4, 0);
    pd_sched_result *r = simulate(s, &c, p);

    (void)state;
    /* rank 0: F0 [0,1] F1 [1,2]; rank 1: F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7] */
    assert_span(event(r, s, 0, PD_SCHED_FORWARD, 1), 1, 2);
    assert_span(event(r, s, 1, PD_SCHED_FORWARD, 0), 1, 2);
    assert_span(event(r, s, 1, PD_SCHED_BACKWARD, 0), 2, 4);
    assert_span(event(r, s, 1, PD_SCHED_FORWARD, 1), 4, 5);
    /* rank 0: B0 [4,6] F2 [6,7] B1 [7,9] F3 [9,10] B2 [10,12] B3 [13,15] */
    assert_span(event(r, s, 0, PD_SCHED_BACKWARD, 0), 4, 6);
    assert_span(event(r, s, 0, PD_SCHED_FORWARD, 2), 6, 7);
    assert_span(event(r, s, 0, PD_SCHED_BACKWARD, 1), 7, 9);
    assert_span(event(r, s, 0, PD_SCHED_BACKWARD, 2), 10, 12);
    assert_span(event(r, s, 0, PD_SCHED_BACKWARD, 3), 13, 15);
    /* rank 1: F2 [7,8] (its input sent at 7), B3 [11,13] */
    assert_span(event(r, s, 1, PD_SCHED_FORWARD, 2), 7, 8);
    assert_span(event(r, s, 1, PD_SCHED_BACKWARD, 3), 11, 13);
    assert_true(fabs(r->makespan_ms - 15) < 1e-9);
    assert_true(fabs(r->ranks[0].busy_ms - 12) < 1e-9);
    assert_true(fabs(r->ranks[0].idle_ms - 3) < 1e-9);
    assert_true(fabs(r->ranks[1].utilisation - 12.0 / 15) < 1e-9);
    /* Rank 0 stashes 2 minibatches on 2 versions at most (mb 1 on v0 while
     * v1 is published); rank 1 one. */
    assert_int_equal(r->ranks[0].max_in_flight, 2);
    assert_int_equal(r->ranks[0].weight_versions, 2);
    assert_int_equal(r->ranks[1].max_in_flight, 1);
    assert_int_equal(r->ranks[1].weight_versions, 1);
    pd_sched_result_destroy(r);
    pd_sched_destroy(s);
    pd_sched_costs_destroy(&c);
    pd_plan_destroy(p);
}

/* The same two stages with 500-byte messages on a 1 MB/s link (0.5 ms
 * each), 2 minibatches: the second activation waits for the link. */
static void test_sim_transfers(void **state)
{
    int replicas[2] = {1, 1};
    double fwd[2] = {1, 1}, bwd[2] = {2, 2};
    pd_plan *p = make_plan(2, replicas);
    pd_sched_costs c = make_costs(2, fwd, bwd);

    (void)state;
    p->cluster.levels[0].bandwidth_bytes_per_s = 1e6;
    c.stages[0].send_bytes = 500;
    pd_sched *s = generate(p, &c, PD_SCHED_1F1B, 2, 0);
    pd_sched_result *r = simulate(s, &c, p);
    /* rank 0: F0 [0,1], sent [1,1.5]; F1 [1,2], sent [2,2.5] */
    assert_span(event(r, s, 0, PD_SCHED_SEND_ACT, 0), 1, 1.5);
    assert_span(event(r, s, 0, PD_SCHED_SEND_ACT, 1), 2, 2.5);
    /* rank 1: F0 [1.5,2.5] B0 [2.5,4.5] gradient [4.5,5]; F1 [4.5,5.5] B1 [5.5,7.5] gradient [7.5,8] */
    assert_span(event(r, s, 1, PD_SCHED_FORWARD, 0), 1.5, 2.5);
    assert_span(event(r, s, 1, PD_SCHED_SEND_GRAD, 0), 4.5, 5);
    assert_span(event(r, s, 1, PD_SCHED_BACKWARD, 1), 5.5, 7.5);
    /* rank 0: waits from 2 to 5 for the gradient, B0 [5,7], B1 [8,10] */
    assert_span(event(r, s, 0, PD_SCHED_RECV_GRAD, 0), 2, 5);
    assert_span(event(r, s, 0, PD_SCHED_BACKWARD, 0), 5, 7);
    assert_span(event(r, s, 0, PD_SCHED_BACKWARD, 1), 8, 10);
    assert_true(fabs(r->makespan_ms - 10) < 1e-9);
    /* 500 B each way per minibatch */
    assert_int_equal(r->bytes_total, 2000);
    assert_true(fabs(r->bytes_per_minibatch - 1000) < 1e-9);
    assert_int_equal(r->n_links, 2);
    assert_int_equal(r->links[0].bytes, 1000);
    assert_true(fabs(r->links[0].busy_ms - 1.0) < 1e-9);
    pd_sched_result_destroy(r);
    pd_sched_destroy(s);
    pd_sched_costs_destroy(&c);
    pd_plan_destroy(p);
}

static double steady(pd_plan *p, pd_sched_costs *c, pd_sched_type type, int minibatches, int m)
{
    pd_sched *s = generate(p, c, type, minibatches, m);
    pd_sched_result *r = simulate(s, c, p);
    double ms = r->ms_per_minibatch;

    pd_sched_result_destroy(r);
    pd_sched_destroy(s);
    return ms;
}

/* Four unequal stages (3, 6, 2, 4 ms): 1F1B settles at the slowest, 6 ms
 * per minibatch; replicating the slow stage twice makes it 3 ms and the
 * last stage (4 ms) the bottleneck; GPipe and straight as worked out. */
static void test_sim_steady_state(void **state)
{
    int ones[4] = {1, 1, 1, 1}, rep[4] = {1, 2, 1, 1};
    double fwd[4] = {1, 2, 1, 1}, bwd[4] = {2, 4, 1, 3};
    pd_sched_costs c = make_costs(4, fwd, bwd);
    pd_plan *p = make_plan(4, ones), *q = make_plan(4, rep);

    (void)state;
    assert_true(fabs(steady(p, &c, PD_SCHED_1F1B, 64, 0) - 6) < 1e-9);
    assert_true(fabs(steady(p, &c, PD_SCHED_1F1B_VSYNC, 64, 0) - 6) < 1e-9);
    assert_true(fabs(steady(q, &c, PD_SCHED_1F1B, 64, 0) - 4) < 1e-9);
    /* Straight: one minibatch through all stages and back, 15 ms. */
    assert_true(fabs(steady(p, &c, PD_SCHED_STRAIGHT, 16, 0) - 15) < 1e-9);
    pd_plan_destroy(p);
    pd_plan_destroy(q);
    pd_sched_costs_destroy(&c);

    /* GPipe, two stages of (1, 2) ms, flushes of 4: rank 1 runs B0..B3 in
     * [5,13], rank 0 in [7,15]; a flush every 15 ms, 3.75 ms a minibatch. */
    int two[2] = {1, 1};
    double f2[2] = {1, 1}, b2[2] = {2, 2};
    pd_sched_costs c2 = make_costs(2, f2, b2);
    pd_plan *g = make_plan(2, two);
    pd_sched *s = generate(g, &c2, PD_SCHED_GPIPE, 16, 4);
    pd_sched_result *r = simulate(s, &c2, g);
    assert_span(event(r, s, 1, PD_SCHED_BACKWARD, 0), 5, 7);
    assert_span(event(r, s, 0, PD_SCHED_BACKWARD, 3), 13, 15);
    assert_span(event(r, s, 0, PD_SCHED_FORWARD, 4), 15, 16);
    assert_true(fabs(r->ms_per_minibatch - 3.75) < 1e-9);
    assert_int_equal(r->ranks[0].max_in_flight, 4);
    assert_int_equal(r->ranks[0].weight_versions, 1);
    pd_sched_result_destroy(r);
    pd_sched_destroy(s);
    pd_plan_destroy(g);
    pd_sched_costs_destroy(&c2);
}

/* Data parallelism on two ranks: 3 ms of compute, then a ring all-reduce of
 * 1 MB at 1 GB/s (2 (n-1)/n x 1e6 / 1e9 s = 1 ms): 4 ms per step of two
 * minibatches. */
static void test_sim_allreduce(void **state)
{
    int two[1] = {2};
    double fwd[1] = {1}, bwd[1] = {2};
    pd_plan *p = make_plan(1, two);
    pd_sched_costs c = make_costs(1, fwd, bwd);

    (void)state;
    c.stages[0].weight_bytes = 1000000;
    pd_sched *s = generate(p, &c, PD_SCHED_DP, 8, 0);
    pd_sched_result *r = simulate(s, &c, p);
    assert_true(fabs(pd_sched_allreduce_ms(2, 1000000, 1e9, 0) - 1) < 1e-12);
    assert_true(fabs(r->makespan_ms - 16) < 1e-9);
    assert_true(fabs(r->ms_per_minibatch - 2) < 1e-9);
    assert_span(event(r, s, 1, PD_SCHED_BACKWARD, 3), 5, 7);
    /* Each rank sends 1 MB per round, 4 rounds each. */
    assert_int_equal(r->ranks[0].bytes_sent, 4000000);
    assert_int_equal(r->bytes_total, 8000000);
    pd_sched_result_destroy(r);
    pd_sched_destroy(s);
    pd_sched_costs_destroy(&c);
    pd_plan_destroy(p);
}

/* PipeDream-2BW on 4 stages: batch k of m = 4 minibatches runs on the
 * version after k - 1 updates at every stage, one step per batch; two
 * versions alive where stashing keeps one per minibatch in flight, so the
 * simulator's weight memory is 2 x the stage's weights; the checker
 * refuses a list that keeps three; m is checked against the plan. */
static void test_2bw(void **state)
{
    int ones[4] = {1, 1, 1, 1}, two_by_two[2] = {2, 2}, m = 0;
    double fwd[4] = {1, 1, 1, 1}, bwd[4] = {2, 2, 2, 2};
    pd_plan *p = make_plan(4, ones), *q = make_plan(2, two_by_two);
    pd_sched_costs c = make_costs(4, fwd, bwd);
    pd_sched *s, *stash, *bad = NULL;
    pd_sched_result *r, *rs;

    (void)state;
    assert_int_equal(pd_sched_2bw_accumulate(p, 0, &m), PD_OK);
    assert_int_equal(m, 4);
    for (int i = 0; i < 4; i++) {
        c.stages[i].weight_bytes = 1000 * (i + 1);
        c.stages[i].stash_bytes = 10;
    }
    s = generate(p, &c, PD_SCHED_1F1B_2BW, 16, 0);
    assert_int_equal(s->microbatches, 4);
    for (int rank = 0; rank < 4; rank++) {
        int steps = 0;
        for (int i = 0; i < s->n_actions[rank]; i++) {
            const pd_sched_action *a = &s->actions[rank][i];
            if (a->op == PD_SCHED_FORWARD || a->op == PD_SCHED_BACKWARD)
                assert_int_equal(a->weight_version, a->minibatch < 8 ? 0 : (a->minibatch / 4 - 1) * 4);
            if (a->op == PD_SCHED_STEP)
                assert_int_equal(a->weight_version, 4 * ++steps);
        }
        assert_int_equal(steps, 4);
    }
    /* Stage 0: F0..F3 on v0, B0 F4 B1 F5 B2 F6 B3, the step to v4, F7 on v0. */
    int step = find(s, 0, PD_SCHED_BACKWARD, 3) + 1;
    assert_int_equal(s->actions[0][step].op, PD_SCHED_STEP);
    assert_true(step < find(s, 0, PD_SCHED_FORWARD, 7));
    stash = generate(p, &c, PD_SCHED_1F1B, 16, 0);
    r = simulate(s, &c, p);
    rs = simulate(stash, &c, p);
    for (int rank = 0; rank < 4; rank++) {
        double weights = 1000.0 * (rank + 1), opt = weights * c.optimizer_state_factor;
        /* The last stage too: batch 1 runs on v0 while v4 is published. */
        assert_int_equal(r->ranks[rank].weight_versions, 2);
        assert_int_equal(rs->ranks[rank].weight_versions, 4 - rank);
        assert_int_equal(r->ranks[rank].max_in_flight, 4 - rank);
        assert_true(fabs(r->ranks[rank].memory_bytes - (r->ranks[rank].weight_versions * weights +
                                                        10.0 * (4 - rank) + opt)) < 1e-9);
    }
    assert_true(fabs(r->ranks[0].memory_bytes - (2 * 1000.0 + 40 + 0)) < 1e-9);
    assert_true(fabs(rs->ranks[0].memory_bytes - (4 * 1000.0 + 40 + 0)) < 1e-9);
    pd_sched_result_destroy(r);
    pd_sched_result_destroy(rs);
    pd_sched_destroy(stash);

    /* Stage 0's first step taken after F7 and F8: F8 needs v4 first. */
    move_action(s, 0, step, find(s, 0, PD_SCHED_FORWARD, 8) + 1);
    const char *early[] = {"rank 0 action", "(forward mb 8 (weights v4)", "not published yet", NULL};
    assert_check_fails(s, early);
    /* F8 and F9 on v0 then: mb 9 keeps v0 alive past the step to v8, three
     * versions. */
    s->actions[0][find(s, 0, PD_SCHED_FORWARD, 8)].weight_version = 0;
    s->actions[0][find(s, 0, PD_SCHED_BACKWARD, 8)].weight_version = 0;
    s->actions[0][find(s, 0, PD_SCHED_FORWARD, 9)].weight_version = 0;
    s->actions[0][find(s, 0, PD_SCHED_BACKWARD, 9)].weight_version = 0;
    const char *three[] = {"rank 0 keeps 3 weight versions", NULL};
    assert_check_fails(s, three);
    pd_sched_destroy(s);

    /* 2 stages x 2 replicas: m = 2 suffices (stage 0: 2 x (2 - 1)). */
    assert_int_equal(pd_sched_2bw_accumulate(q, 0, &m), PD_OK);
    assert_int_equal(m, 2);
    s = generate(q, NULL, PD_SCHED_1F1B_2BW, 12, 0);
    assert_int_equal(pd_sched_check(s), PD_OK);
    pd_sched_destroy(s);
    /* Bad m: below the depth, not a multiple of the replicas. */
    pd_sched_options o = {.type = PD_SCHED_1F1B_2BW, .minibatches = 12, .microbatches = 3, .depth = 2};
    assert_int_equal(pd_sched_generate(p, NULL, &o, &bad), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "need at least the pipeline's depth, 4 stages"));
    o.microbatches = 3;
    assert_int_equal(pd_sched_generate(q, NULL, &o, &bad), PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "need a multiple of 2"));
    assert_int_equal(pd_sched_2bw_accumulate(q, 3, &m), PD_EINVAL);
    assert_null(bad);
    pd_sched_costs_destroy(&c);
    pd_plan_destroy(p);
    pd_plan_destroy(q);
}

/* Links: the level of the lowest common group. */
static void test_links(void **state)
{
    pd_plan_cluster c = {.n_levels = 2};
    double bw, lat;

    (void)state;
    c.levels[0] = (pd_plan_level){.name = "gpu", .fanout = 4, .bandwidth_bytes_per_s = 10, .latency_s = 1e-6};
    c.levels[1] = (pd_plan_level){.name = "node", .fanout = 4, .bandwidth_bytes_per_s = 1, .latency_s = 1e-5};
    pd_sched_link(&c, 0, 3, &bw, &lat);
    assert_true(bw == 10 && lat == 1e-6);
    pd_sched_link(&c, 3, 4, &bw, &lat);
    assert_true(bw == 1 && lat == 1e-5);
    pd_sched_link(&c, 5, 5, &bw, &lat);
    assert_true(isinf(bw) && lat == 0);
}

/* A profile: an input and a chain of layers with the given forward and
 * backward times and no bytes (no transfers, no synchronisation: the
 * partitioner's default model is then exact). */
static pd_profile *chain_profile(int n, const double *fwd, const double *bwd)
{
    pd_profile_info info = {.model = "chain", .batch = 32, .dtype = PD_F32, .device = "test", .source = "test"};
    pd_profile *p = NULL;
    char name[16];

    assert_int_equal(pd_profile_create(&info, &p), PD_OK);
    pd_profile_node in = {.name = "x", .type = PD_PROFILE_INPUT_TYPE, .description = "input", .flops = -1};
    assert_int_equal(pd_profile_add_node(p, &in, NULL), PD_OK);
    for (int i = 0; i < n; i++) {
        int prev = i;
        snprintf(name, sizeof(name), "l%d", i);
        pd_profile_node node = {.name = name, .type = "linear", .description = "layer", .fwd_ms = fwd[i],
                                .bwd_ms = bwd[i], .flops = -1, .n_inputs = 1, .inputs = &prev};
        assert_int_equal(pd_profile_add_node(p, &node, NULL), PD_OK);
    }
    return p;
}

/* The partitioner's predicted time per minibatch (its default model, where
 * nothing but compute counts) equals the simulator's steady state for
 * unequal stages, unreplicated and replicated (1-2-1, 2-3-1-2). */
static void test_sim_matches_partitioner(void **state)
{
    double fwd[6] = {1, 2, 1.5, 3, 0.5, 1}, bwd[6] = {2, 3, 3, 5, 1, 2};
    pd_profile *prof = chain_profile(6, fwd, bwd);
    pd_plan_options opts = {0};
    int shapes[3][4] = {{1, 1, 1, 0}, {1, 2, 1, 0}, {2, 3, 1, 2}};
    int cuts[3][4] = {{2, 4, 6, 0}, {2, 4, 6, 0}, {2, 3, 4, 6}};
    int n_stages[3] = {3, 3, 4};

    (void)state;
    for (int k = 0; k < 3; k++) {
        pd_plan *p = make_plan(n_stages[k], shapes[k]);
        for (int i = 0, first = 1; i < n_stages[k]; i++) {
            p->stages[i].n_layers = cuts[k][i] + 1 - first;
            p->stages[i].layers = malloc(sizeof(int) * p->stages[i].n_layers);
            assert_non_null(p->stages[i].layers);
            for (int j = 0; j < p->stages[i].n_layers; j++)
                p->stages[i].layers[j] = first + j;
            first = cuts[k][i] + 1;
        }
        p->batch = 32;
        assert_int_equal(pd_plan_evaluate(prof, &opts, p), PD_OK);
        pd_sched_costs c = {0};
        assert_int_equal(pd_sched_costs_from_profile(p, prof, 0, &c), PD_OK);
        double ms = steady(p, &c, PD_SCHED_1F1B, 24 * 6, 0);
        /* Plan 1 (1-2-1, the unreplicated first stage the bottleneck)
         * needs 5 warm-up forwards at stage 0 where PipeDream's NOAM gives
         * 4 (10.25 ms per minibatch then; docs/simulator.md). */
        if (k == 1) {
            pd_sched *s = generate(p, &c, PD_SCHED_1F1B, 24, 0);
            assert_int_equal(s->in_flight[0], 5);
            pd_sched_destroy(s);
        }
        if (fabs(ms - p->time_ms) > 1e-9)
            fail_msg("plan %d: simulated %.6f ms per minibatch, predicted %.6f", k, ms, p->time_ms);
        pd_sched_costs_destroy(&c);
        pd_plan_destroy(p);
    }
    pd_profile_destroy(prof);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_plans_check),
        cmocka_unit_test(test_1f1b_shape),
        cmocka_unit_test(test_generate_rejects),
        cmocka_unit_test(test_2bw),
        cmocka_unit_test(test_check_swapped_sends),
        cmocka_unit_test(test_check_missing_receive),
        cmocka_unit_test(test_check_deadlock),
        cmocka_unit_test(test_check_incomplete_minibatch),
        cmocka_unit_test(test_sim_two_stages),
        cmocka_unit_test(test_sim_transfers),
        cmocka_unit_test(test_sim_steady_state),
        cmocka_unit_test(test_sim_allreduce),
        cmocka_unit_test(test_links),
        cmocka_unit_test(test_sim_matches_partitioner),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
