/* The default cost model's dynamic program, private to its two files:
 * default_dp.c (set-up, one or two levels in one pass, the plan, its
 * explanation) and default_levels.c (tables by level, for three levels or
 * more). See default_dp.c for the shape of the plans and the method. */
#ifndef PD_PLAN_DEFAULT_DP_H
#define PD_PLAN_DEFAULT_DP_H

#include <math.h>
#include <stdbool.h>

#include "plan/plan_int.h"

/* No plan (of a range, a suffix, the model). */
#define PD_PLAN_DP_NONE HUGE_VAL

/* ---- tables by level (default_levels.c) ---- */

/* What a table of range values is solved for. */
typedef struct pd_plan_dp_key {
    int level;
    int copies;          /* identical copies of the range's pipeline, one per level-`level` group */
    int span;            /* the outermost level the copies span; -1: one copy */
    int down;            /* workers in the stages after the range */
    int lev_in, lev_out; /* levels of the cuts at the range's ends (-1: none) */
    bool memory;         /* minimise memory per worker instead of time */
} pd_plan_dp_key;

/* Values of every range (x, z] for one key, by pair id. */
typedef struct pd_plan_dp_table {
    pd_plan_dp_key key;
    double *value;
} pd_plan_dp_table;

/* One level's scratch for the ranges ending at one state: per slot (a
 * start x, the end last) and units m (and replicas r of the first stage at
 * level 0). */
typedef struct pd_plan_dp_level {
    int fan;
    int *slot;            /* slot of each state for the current end */
    double *best;         /* level 0: [slot][m][r]; above: [slot][m] */
    int *best_z, *best_c; /* the first stage's end (and units above) */
    double *start;        /* above: like best, as the range's first stage */
    int *start_z, *start_c;
    double *via; /* level 0: [slot][m][r'] best continuation after a stage of r' ending at slot */
    int *via_r;
    double *tout;    /* [slot]: the range's value */
    int *tm, *tr;    /* units (and first replicas at level 0) it uses */
    double *send_ms; /* level 0: [r] the send at the range's end */
    int *in_flight;  /* level 0: [m][r] minibatches in flight */
} pd_plan_dp_level;

/* ---- one pass (default_dp.c) ---- */

/* With at most two levels the top level's cuts become part of the state,
 * so that no range needs a pass of its own: a suffix from state x whose
 * first stage has r workers per copy, in a top-level stage of c copies
 * (groups) whose stages from x on use m workers per copy, followed by
 * top-level stages on M groups. One level is the case of one group.
 *   a[x][M][c][m][r]  best such suffix, without the first stage's recv;
 *   top[x][M']        best suffix that starts a top-level stage at x on
 *                     M' groups in all, its recv (the top level's link)
 *                     included;
 *   inner[x][M][c][m][r'] best suffix continuing a top-level stage at x
 *                     after a stage of r' workers per copy, the transfer
 *                     across x (level 0, or level 1 between copies when
 *                     r' differs from the next stage's r) included. */
typedef struct pd_plan_dp_pass {
    int f0, f1, F0, F1, outer; /* fanouts, +1, and the level of top-level cuts */
    size_t per_x;              /* cells of a[x] and inner[x] */
    double *a, *inner, *top;
    int *a_z;                /* end of the first stage; -(end + 1) when it ends the top-level stage */
    int *inner_r, *top_pick; /* next stage's r; (c, m, r) packed */
    int start_pick;          /* (M, c, m, r) of the best plan from state 0 */
    double *price;           /* [c][r]: scratch of pass_state */
} pd_plan_dp_pass;

/* ---- one or two levels with the schedule's in-flight counts
 * (default_exact.c) ---- */

/* The one pass again, each suffix also indexed by the minibatches w its
 * first stage holds in flight (the 1F1B warm-up, which depends on every
 * later stage's replicas), so that memory is checked exactly. With
 * "at most" semantics: a[x][cell][w] is the best suffix whose first stage
 * holds at most w. Cells as pd_plan_dp_pass's (M, c, m, r), each with its
 * own run of w values (up to pd_plan_default_in_flight_bound). */
typedef struct pd_plan_dp_exact {
    int f0, f1, F0, F1, outer;
    int wcap;          /* more than any w: picks pack (cell, w) as cell * wcap + w */
    int dn;            /* top's entries per group count: D in 0..dn-1 */
    size_t cells;      /* (M, c, m, r) cells, F1 * F1 * F0 * F0 */
    size_t *woff;      /* [cell]: its run in a[x] */
    int *wmax;         /* [cell]: its most w (0: no such cell) */
    size_t *uoff;      /* [cell (M, c, m, rp)]: its run in inner[x] */
    int *umax;         /* [cell]: its most per-copy D (-1: none) */
    double *price;     /* [c][r]: scratch of one stage's times */
    size_t per_x, inner_per_x, top_per_x;
    double *a, *inner, *top;
    /* a_z: end of the first stage, -(end + 1) when it ends the top-level
     * stage; inner_pick: (r, w) of the next stage, r * wcap + w; top_pick:
     * (cell, w) of the next top-level stage's first stage. */
    int *a_z, *inner_pick, *top_pick;
    int start_cell, start_w;
} pd_plan_dp_exact;

/* ---- both ---- */

/* The inputs, sums over the states' prefixes, the pairs of states that
 * make stages, and the scratch of one method or the other. */
typedef struct pd_plan_dp {
    const pd_profile *profile;
    const pd_plan_graph *g;
    const pd_plan_states *s;
    const pd_plan_options *opts;
    const pd_plan_cluster *cluster;
    int levels;
    long long group[PD_PLAN_MAX_LEVELS]; /* workers in one group of each level */
    bool fewer, limit;
    /* In-flight minibatches the stages are priced with: NOAM (0), or NOAM
     * plus this margin, at most pd_plan_default_in_flight_bound (when
     * NOAM's plan does not fit with the schedule's counts). */
    int margin;
    int n; /* states + 1 */
    double *comp, *par, *act, *cut, input_bytes;
    int *nz;     /* nodes with nonzero compute in the prefix */
    double *own; /* tables by level: stage times by pair and replicas (level0_prices) */
    int *cap;    /* and minibatches in flight that fit, by pair */
    int *succ_off, *succ;               /* pairs (x, z), by x: pair id = position */
    int *pred_off, *pred_x, *pred_pair; /* by end z: the starts x and pair ids */
    bool one_pass;                      /* one or two levels: one pass (fl); else tables by level (lv) */
    pd_plan_dp_pass fl;
    /* Under a memory limit with one or two levels, when its tables fit in
     * memory: times are solved with the schedule's in-flight counts (ex);
     * the memory pass (the least memory, when nothing fits) uses fl. */
    bool exact;
    pd_plan_dp_exact ex;
    pd_plan_dp_table *tables;
    int n_tables, cap_tables;
    pd_plan_dp_level lv[PD_PLAN_MAX_LEVELS];
} pd_plan_dp;

/* The stages of a plan being rebuilt, with their ranks. */
typedef struct pd_plan_span_list {
    pd_plan_span *spans;
    int n, cap;
} pd_plan_span_list;

/* Whether state x comes before state z (0, the empty prefix, before
 * every other). */
static inline bool dp_precedes(const pd_plan_dp *d, int x, int z)
{
    return x == 0 || (d->s->is_pred[z - 1][(x - 1) / 64] >> ((x - 1) % 64) & 1);
}

/* Whether graph node v is in prefix(state) (state -1: the empty one). */
static inline bool dp_in_prefix(const pd_plan_states *s, int state, int v)
{
    return state >= 0 && (s->prefix[state][v / 64] >> (v % 64) & 1);
}

/* A cut's transfer over the links of `level`. */
static inline double dp_transfer(const pd_plan_dp *d, double bytes, int replicas, int level)
{
    const pd_plan_level *l = &d->cluster->levels[level];
    return pd_plan_default_transfer_ms(bytes, replicas, l->bandwidth_bytes_per_s, l->latency_s);
}

/* The load of stage (x, z]; replicas and the all-reduce's level are set
 * by dp_price. */
static inline pd_plan_default_load dp_load(const pd_plan_dp *d, int x, int z)
{
    return (pd_plan_default_load){
        .compute_ms = d->comp[z] - d->comp[x],
        .weight_bytes = d->par[z] - d->par[x],
        .activation_bytes = d->act[z] - d->act[x] + (x == 0 ? d->input_bytes : d->cut[x]),
        .data_ms = x == 0 ? d->g->data_loading_ms : 0,
    };
}

/* The time per minibatch of a stage of `load` on `replicas` replicas whose
 * all-reduce crosses `level` (-1: none). */
static inline double dp_price(const pd_plan_dp *d, pd_plan_default_load *load, int replicas, int level)
{
    pd_plan_stage st;
    load->replicas = replicas;
    if (level >= 0) {
        load->sync_bandwidth = d->cluster->levels[level].bandwidth_bytes_per_s;
        load->sync_latency_s = d->cluster->levels[level].latency_s;
    }
    pd_plan_default_stage_cost(load, 1, d->opts, &st);
    return st.time_ms;
}

/* price[c * (f0 + 1) + r]: the time of a stage of `load` on c copies of r
 * workers (c <= f1, r <= f0), the copies' all-reduce over `outer`. */
static inline void dp_prices(const pd_plan_dp *d, pd_plan_default_load *load, int f0, int f1, int outer,
                             double *price)
{
    for (int c = 1; c <= f1; c++)
        for (int r = 1; r <= f0; r++)
            price[c * (f0 + 1) + r] = dp_price(d, load, c * r, c > 1 ? outer : r > 1 ? 0 : -1);
}

/* Minibatches in flight at a stage of `replicas` replicas followed by
 * workers_from - replicas workers, as the program prices it (margin). */
static inline int dp_in_flight(const pd_plan_dp *d, int workers_from, int replicas)
{
    int noam = pd_plan_default_in_flight(workers_from, replicas), bound;
    if (d->margin == 0)
        return noam;
    bound = pd_plan_default_in_flight_bound(workers_from, replicas);
    return noam + d->margin < bound ? noam + d->margin : bound;
}

/* Chooses `v` over the best so far `b`: strictly smaller, by more than
 * rounding, so that ties keep the earlier candidate (more units first). */
static inline bool dp_better(double v, double b) { return v < b && (b == PD_PLAN_DP_NONE || b - v > 1e-12 * b); }

/* Appends stage (x, z] with r consecutive workers from `offset` in each
 * level-0 group starting at bases[0..n_bases). */
pd_status pd_plan_span_list_add(pd_plan_span_list *l, int x, int z, const long long *bases, int n_bases, int offset,
                                int r);
void pd_plan_span_list_free(pd_plan_span_list *l);

/* The same for the c consecutive level-0 groups (f0 workers each) from
 * group `group` on: the one pass's stages. */
pd_status pd_plan_span_list_add_groups(pd_plan_span_list *l, int x, int z, int group, int c, int f0, int offset,
                                       int r);

/* ---- the exact pass's entry points (default_exact.c) ---- */

/* Allocates d->ex for d (d->n, the pairs and d->fl's fanouts set) and sets
 * d->exact, unless its tables would take more than PD_PLAN_EXACT_BYTES. */
#define PD_PLAN_EXACT_BYTES (384.0 * 1024 * 1024)
pd_status pd_plan_exact_init(pd_plan_dp *d);
void pd_plan_exact_free(pd_plan_dp *d);

/* The best plan's time with the schedule's in-flight counts
 * (PD_PLAN_DP_NONE: none fits), its first stage not ending at exclude_z
 * (-1: any), and its stages. */
pd_status pd_plan_exact_solve(pd_plan_dp *d, int exclude_z, double *value);
pd_status pd_plan_exact_rebuild(const pd_plan_dp *d, pd_plan_span_list *out);

/* The end of the first stage of the plan the last solve found. */
int pd_plan_exact_first_cut(const pd_plan_dp *d);

/* ---- the tables' entry points (default_levels.c) ---- */

/* Allocates the levels' scratch for d (d->levels, d->n and the pairs
 * set); pd_plan_levels_free frees it and the tables. */
pd_status pd_plan_levels_init(pd_plan_dp *d);
void pd_plan_levels_free(pd_plan_dp *d);

/* Drops the tables solved so far (after d->margin changed). */
void pd_plan_levels_forget(pd_plan_dp *d);

/* The best value of the whole model (PD_PLAN_DP_NONE: no plan), the top
 * level's first stage not ending at exclude_z (-1: any). */
pd_status pd_plan_levels_solve(pd_plan_dp *d, bool memory, int exclude_z, double *value);

/* The stages of the plan the last pd_plan_levels_solve with the same
 * arguments found. */
pd_status pd_plan_levels_rebuild(pd_plan_dp *d, bool memory, int exclude_z, pd_plan_span_list *out);

/* The end of the top level's first stage in that plan. */
int pd_plan_levels_first_cut(const pd_plan_dp *d);

#endif
