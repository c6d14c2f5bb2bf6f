/* The default cost model's dynamic program: the plan that minimises the
 * slowest stage's time per minibatch under default_cost.c's formulas, over
 * the machine hierarchy as PipeDream does, and why it won.
 *
 * States are indexed here from 1 (index k + 1 is state k); index 0 is the
 * empty prefix, so that a stage is (x, z] = prefix(z) \ prefix(x) for any
 * x that precedes z, x = 0 included.
 *
 * Shape of a plan (PipeDream's): the top level splits the layers into
 * top-level stages, each on c whole groups of the level below; the
 * pipeline of its layers inside one group is copied into each of the c
 * groups. A stage of r workers per copy thus has r x c replicas (times the
 * copies of the levels above): r consecutive workers in each of c
 * consecutive groups. Pipelines may leave units idle when
 * allow_fewer_workers, the idle ones last; a stage never holds only layers
 * without compute.
 *
 * With one or two levels (here) the top level's cuts are part of the
 * state, and one pass over the states solves suffixes exactly: the workers
 * after a stage are known (its NOAM in flight), and each cut's transfer
 * 2X / (B min(R_a, R_b)) + 2 latency is charged with the replicas of both
 * sides known. With NOAM's counts one approximation remains: the groups of
 * later top-level stages count as fully used, so when they leave workers
 * idle (allow_fewer_workers) the in-flight counts of the earlier stages are
 * overestimated (the exact pass below has no such approximation). Three
 * levels or more go level by level
 * (default_levels.c). The chosen plan is then evaluated exactly
 * (pd_plan_default_fill).
 *
 * Memory depends on the minibatches a stage holds in flight: in a plan,
 * the runtime's 1F1B warm-up (pd_plan_1f1b_in_flight), which depends on
 * every later stage's replicas. Under a memory limit with one or two levels
 * the one pass runs with those counts in its state (default_exact.c).
 * Otherwise stages are priced with PipeDream's NOAM, which the state knows
 * (the workers after a stage) and which is never higher: when the plan
 * found fits with the schedule's counts, no faster plan fits; when it does
 * not, the program runs again with the counts raised by a margin, up to a
 * bound no schedule exceeds, and the plan found says that it may not be the
 * fastest that fits (refit). */
#include "config.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/default_dp.h"

/* ---- set-up ---- */

static size_t pass_cell(const pd_plan_dp_pass *f, int x, int M, int c, int m, int r)
{
    return (size_t)x * f->per_x + (((size_t)M * f->F1 + c) * f->F0 + m) * f->F0 + r;
}

static void pass_free(pd_plan_dp_pass *f)
{
    free(f->a);
    free(f->inner);
    free(f->top);
    free(f->a_z);
    free(f->inner_r);
    free(f->top_pick);
    free(f->price);
}

static pd_status pass_alloc(const pd_plan_dp *d, pd_plan_dp_pass *f)
{
    memset(f, 0, sizeof(*f));
    f->f0 = d->cluster->levels[0].fanout;
    f->f1 = d->levels == 2 ? d->cluster->levels[1].fanout : 1;
    f->F0 = f->f0 + 1;
    f->F1 = f->f1 + 1;
    f->outer = d->levels - 1;
    f->per_x = (size_t)f->F1 * f->F1 * f->F0 * f->F0;
    if ((double)f->per_x * d->n > 1e8)
        return PD_ERROR(PD_EINVAL,
                        "plan: %d states on %d x %d workers are too many for the default model's "
                        "dynamic program; collapse branches or give fewer workers",
                        d->n - 1, f->f0, f->f1);
    f->a = malloc(sizeof(double) * f->per_x * (size_t)d->n);
    f->inner = malloc(sizeof(double) * f->per_x * (size_t)d->n);
    f->a_z = malloc(sizeof(int) * f->per_x * (size_t)d->n);
    f->inner_r = malloc(sizeof(int) * f->per_x * (size_t)d->n);
    f->top = malloc(sizeof(double) * (size_t)f->F1 * (size_t)d->n);
    f->top_pick = malloc(sizeof(int) * (size_t)f->F1 * (size_t)d->n);
    f->price = malloc(sizeof(double) * (size_t)f->F1 * f->F0);
    if (!f->a || !f->inner || !f->a_z || !f->inner_r || !f->top || !f->top_pick || !f->price) {
        pass_free(f);
        return PD_ERROR(PD_ENOMEM, "plan: out of host memory for the default model's dynamic program");
    }
    return PD_OK;
}

static void dp_free(pd_plan_dp *d)
{
    pass_free(&d->fl);
    pd_plan_exact_free(d);
    pd_plan_levels_free(d);
    free(d->comp);
    free(d->par);
    free(d->act);
    free(d->cut);
    free(d->nz);
    free(d->succ_off);
    free(d->succ);
    free(d->pred_off);
    free(d->pred_x);
    free(d->pred_pair);
}

/* Sums over each state's prefix that the states do not carry: stashed
 * activations (all merged members') and nodes that compute. */
static void dp_prefix_sums(pd_plan_dp *d)
{
    const pd_plan_graph *g = d->g;
    for (int x = 1; x < d->n; x++) {
        d->comp[x] = d->s->compute_ms[x - 1];
        d->par[x] = d->s->par_bytes[x - 1];
        d->cut[x] = d->s->cut_bytes[x - 1];
        for (int v = 0; v < g->n; v++)
            if (dp_in_prefix(d->s, x - 1, v)) {
                d->act[x] += pd_plan_default_node_activation(d->profile, g, v);
                d->nz[x] += g->fwd_ms[v] + g->bwd_ms[v] > 0;
            }
    }
    d->input_bytes = pd_plan_default_input_bytes(d->profile, g);
}

/* The pairs (x, z) with x preceding z, listed by x and by z. */
static pd_status dp_pairs(pd_plan_dp *d)
{
    int n = d->n, *fill = calloc((size_t)n, sizeof(int));
    long long pairs = 0;

    d->succ_off = calloc((size_t)n + 1, sizeof(int));
    d->pred_off = calloc((size_t)n + 1, sizeof(int));
    if (!fill || !d->succ_off || !d->pred_off)
        goto fail;
    for (int z = 1; z < n; z++) {
        int np = d->s->n_preds[z - 1];
        d->succ_off[1]++;
        for (int k = 0; k < np; k++)
            d->succ_off[d->s->preds[z - 1][k] + 2]++;
        pairs += np + 1;
        d->pred_off[z + 1] = (int)pairs;
    }
    if (pairs > INT_MAX / 2) {
        free(fill);
        return PD_ERROR(PD_EINVAL,
                        "plan: %lld stage candidates are too many for the default model; collapse "
                        "branches first",
                        pairs);
    }
    for (int x = 1; x <= n; x++)
        d->succ_off[x] += d->succ_off[x - 1];
    d->succ = malloc(sizeof(int) * (size_t)(pairs + 1));
    d->pred_x = malloc(sizeof(int) * (size_t)(pairs + 1));
    d->pred_pair = malloc(sizeof(int) * (size_t)(pairs + 1));
    if (!d->succ || !d->pred_x || !d->pred_pair)
        goto fail;
    for (int z = 1; z < n; z++) {
        int at = d->pred_off[z];
        for (int k = -1; k < d->s->n_preds[z - 1]; k++) {
            int x = k < 0 ? 0 : d->s->preds[z - 1][k] + 1, id = d->succ_off[x] + fill[x]++;
            d->succ[id] = z;
            d->pred_x[at] = x;
            d->pred_pair[at++] = id;
        }
    }
    free(fill);
    return PD_OK;
fail:
    free(fill);
    return PD_ERROR(PD_ENOMEM, "plan: out of host memory for the default model's dynamic program");
}

/* Sets up the dynamic program `method` names (PD_PLAN_DP_SOLVER: the
 * exact pass where it applies). */
static pd_status dp_init(pd_plan_dp *d, const pd_profile *profile, const pd_plan_graph *g, const pd_plan_states *s,
                         const pd_plan_cluster *cluster, const pd_plan_options *opts, pd_plan_dp_method method)
{
    long long workers = 1;

    memset(d, 0, sizeof(*d));
    d->profile = profile;
    d->g = g;
    d->s = s;
    d->opts = opts;
    d->cluster = cluster;
    d->levels = cluster->n_levels;
    d->fewer = opts->allow_fewer_workers;
    d->limit = opts->memory_bytes > 0;
    for (int l = 0; l < d->levels; l++)
        d->group[l] = workers *= cluster->levels[l].fanout;
    d->n = s->n + 1;
    d->comp = calloc((size_t)d->n, sizeof(double));
    d->par = calloc((size_t)d->n, sizeof(double));
    d->act = calloc((size_t)d->n, sizeof(double));
    d->cut = calloc((size_t)d->n, sizeof(double));
    d->nz = calloc((size_t)d->n, sizeof(int));
    if (!d->comp || !d->par || !d->act || !d->cut || !d->nz)
        return PD_ERROR(PD_ENOMEM, "plan: out of host memory for the default model's dynamic program");
    dp_prefix_sums(d);
    PD_CHECK(dp_pairs(d));
    d->one_pass = d->levels <= 2 && method != PD_PLAN_DP_NOAM_BY_LEVEL;
    if (!d->one_pass)
        return pd_plan_levels_init(d);
    PD_CHECK(pass_alloc(d, &d->fl));
    return d->limit && method == PD_PLAN_DP_SOLVER ? pd_plan_exact_init(d) : PD_OK;
}

void pd_plan_span_list_free(pd_plan_span_list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->spans[i].ranks);
    free(l->spans);
    memset(l, 0, sizeof(*l));
}

pd_status pd_plan_span_list_add(pd_plan_span_list *l, int x, int z, const long long *bases, int n_bases, int offset,
                                int r)
{
    int *ranks = malloc(sizeof(int) * (size_t)n_bases * (size_t)r);
    if (!ranks)
        return PD_ERROR(PD_ENOMEM, "plan: out of host memory");
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        pd_plan_span *s = realloc(l->spans, sizeof(*s) * (size_t)cap);
        if (!s) {
            free(ranks);
            return PD_ERROR(PD_ENOMEM, "plan: out of host memory");
        }
        l->spans = s;
        l->cap = cap;
    }
    for (int b = 0; b < n_bases; b++)
        for (int q = 0; q < r; q++)
            ranks[b * r + q] = (int)(bases[b] + offset + q);
    l->spans[l->n++] = (pd_plan_span){.from_state = x - 1, .to_state = z - 1, .n_ranks = n_bases * r, .ranks = ranks};
    return PD_OK;
}

pd_status pd_plan_span_list_add_groups(pd_plan_span_list *l, int x, int z, int group, int c, int f0, int offset,
                                       int r)
{
    long long *bases = malloc(sizeof(long long) * (size_t)c);
    pd_status s;

    if (!bases)
        return PD_ERROR(PD_ENOMEM, "plan: out of host memory");
    for (int g = 0; g < c; g++)
        bases[g] = (long long)(group + g) * f0;
    s = pd_plan_span_list_add(l, x, z, bases, c, offset, r);
    free(bases);
    return s;
}

/* ---- one or two levels: the whole pipeline in one pass ---- */

/* What a stage puts against the bottleneck when it holds in_flight
 * minibatches: its memory per replica in the memory pass, else its time
 * (`time_ms`), or PD_PLAN_DP_NONE when it may not hold that many (more
 * than `cap`). */
static inline double stage_value(const pd_plan_default_load *load, const pd_plan_options *opts, bool memory,
                                 int in_flight, int cap, double time_ms)
{
    if (memory)
        return pd_plan_default_memory_bytes(load, in_flight, opts);
    return in_flight > cap ? PD_PLAN_DP_NONE : time_ms;
}

/* Keeps the smaller of a[q] and v, with what chose it. */
static inline void keep_min(double *a, int *a_z, size_t q, double v, int choice)
{
    if (v < a[q]) {
        a[q] = v;
        a_z[q] = choice;
    }
}

/* The suffixes starting at x, all stages (x, z] priced. */
static void pass_state(pd_plan_dp *d, pd_plan_dp_pass *f, int x, bool memory, int exclude_z)
{
    const pd_plan_options *opts = d->opts;
    int f0 = f->f0, f1 = f->f1, F0 = f->F0, last = d->n - 1;
    double *a = f->a + (size_t)x * f->per_x;
    int *a_z = f->a_z + (size_t)x * f->per_x;
    double *price = f->price;

    for (size_t q = 0; q < f->per_x; q++)
        a[q] = PD_PLAN_DP_NONE;
    for (int e = d->succ_off[x]; e < d->succ_off[x + 1]; e++) {
        int z = d->succ[e];
        if (d->nz[z] == d->nz[x] || (x == 0 && z == exclude_z))
            continue;
        pd_plan_default_load load = dp_load(d, x, z);
        /* Memory per replica does not depend on the replicas: the most
         * minibatches the stage may hold is the pair's. */
        int cap = d->limit && !memory ? pd_plan_default_max_in_flight(&load, opts) : INT_MAX;
        /* The stage's time on c copies of r workers; when it ends its
         * top-level stage before the end, its half of the transfer over
         * the top level is added below. */
        if (!memory)
            dp_prices(d, &load, f0, f1, f->outer, price);
        for (int M = 0; M < f1; M++)
            for (int c = 1; c + M <= f1; c++) {
                /* The stage ends its top-level stage: what follows starts
                 * a new one on M groups (or nothing, at the end). */
                double next = z == last ? (M == 0 ? 0 : PD_PLAN_DP_NONE) : f->top[(size_t)z * f->F1 + M];
                if (next != PD_PLAN_DP_NONE)
                    for (int r = 1; r <= f0; r++) {
                        int in_flight = dp_in_flight(d, c * r + f0 * M, c * r);
                        double v = stage_value(&load, opts, memory, in_flight, cap, price[c * F0 + r]);
                        if (v == PD_PLAN_DP_NONE)
                            continue;
                        if (!memory && z != last) {
                            double t = dp_transfer(d, d->cut[z], c * r, f->outer);
                            v = t > v ? t : v;
                        }
                        keep_min(a, a_z, (((size_t)M * f->F1 + c) * F0 + r) * F0 + r, next > v ? next : v, -(z + 1));
                    }
                if (z == last)
                    continue;
                /* The top-level stage goes on after z with m - r workers. */
                const double *inner = f->inner + pass_cell(f, z, M, c, 0, 0);
                for (int m = 2; m <= f0; m++)
                    for (int r = 1; r < m; r++) {
                        double h = inner[(m - r) * F0 + r], v;
                        if (h == PD_PLAN_DP_NONE)
                            continue;
                        v = stage_value(&load, opts, memory, dp_in_flight(d, c * m + f0 * M, c * r), cap,
                                        price[c * F0 + r]);
                        if (v == PD_PLAN_DP_NONE)
                            continue;
                        keep_min(a, a_z, (((size_t)M * f->F1 + c) * F0 + m) * F0 + r, h > v ? h : v, z);
                    }
            }
    }
}

/* top[x] and inner[x] from a[x], for the stages that end at x. */
static void pass_boundaries(pd_plan_dp *d, pd_plan_dp_pass *f, int x, bool memory)
{
    int f0 = f->f0, f1 = f->f1, F0 = f->F0;
    const double *a = f->a + (size_t)x * f->per_x;
    double *inner = f->inner + (size_t)x * f->per_x, *top = f->top + (size_t)x * f->F1;
    int *inner_r = f->inner_r + (size_t)x * f->per_x, *top_pick = f->top_pick + (size_t)x * f->F1;

    for (int total = 0; total <= f1; total++) {
        top[total] = PD_PLAN_DP_NONE;
        top_pick[total] = 0;
        for (int c = total; c >= 1; c--)
            for (int m = f0; m >= (d->fewer ? 1 : f0); m--)
                for (int r = 1; r <= m; r++) {
                    double v = a[(((size_t)(total - c) * f->F1 + c) * F0 + m) * F0 + r];
                    if (v == PD_PLAN_DP_NONE)
                        continue;
                    if (!memory) {
                        double t = dp_transfer(d, d->cut[x], c * r, f->outer);
                        v = t > v ? t : v;
                    }
                    if (dp_better(v, top[total])) {
                        top[total] = v;
                        top_pick[total] = (c * F0 + m) * F0 + r;
                    }
                }
    }
    for (int M = 0; M < f1; M++)
        for (int c = 1; c + M <= f1; c++) {
            size_t row = ((size_t)M * f->F1 + c) * F0 * F0;
            for (int m = 0; m < F0; m++)
                for (int rp = 0; rp < F0; rp++)
                    inner[row + m * F0 + rp] = PD_PLAN_DP_NONE;
            for (int m = 1; m < f0; m++)
                for (int rp = 1; rp + m <= f0; rp++) {
                    double b = PD_PLAN_DP_NONE;
                    int br = 0;
                    for (int r = 1; r <= m; r++) {
                        double v = a[row + m * F0 + r];
                        if (v == PD_PLAN_DP_NONE)
                            continue;
                        if (!memory) {
                            int level = c > 1 && r != rp ? f->outer : 0;
                            double t = dp_transfer(d, d->cut[x], c * (r < rp ? r : rp), level);
                            v = t > v ? t : v;
                        }
                        if (v < b) {
                            b = v;
                            br = r;
                        }
                    }
                    inner[row + m * F0 + rp] = b;
                    inner_r[row + m * F0 + rp] = br;
                }
        }
}

/* The best plan's value: all groups and workers, or fewer when strictly
 * better. */
static pd_status pass_solve(pd_plan_dp *d, pd_plan_dp_pass *f, bool memory, int exclude_z, double *value)
{
    int f0 = f->f0, f1 = f->f1, F0 = f->F0;
    const double *a = f->a;

    for (int x = d->n - 2; x >= 0; x--) {
        pass_state(d, f, x, memory, exclude_z);
        if (x > 0)
            pass_boundaries(d, f, x, memory);
    }
    *value = PD_PLAN_DP_NONE;
    f->start_pick = -1;
    for (int total = f1; total >= (d->fewer ? 1 : f1); total--)
        for (int c = total; c >= 1; c--)
            for (int m = f0; m >= (d->fewer ? 1 : f0); m--)
                for (int r = 1; r <= m; r++) {
                    int pick = (((total - c) * f->F1 + c) * F0 + m) * F0 + r;
                    if (dp_better(a[pick], *value)) {
                        *value = a[pick];
                        f->start_pick = pick;
                    }
                }
    return PD_OK;
}

/* The stages of the plan pass_solve found. */
static pd_status pass_rebuild(const pd_plan_dp *d, const pd_plan_dp_pass *f, pd_plan_span_list *out)
{
    int F0 = f->F0, pick = f->start_pick;
    int r = pick % F0, m = pick / F0 % F0, c = pick / F0 / F0 % f->F1, M = pick / F0 / F0 / f->F1;
    int x = 0, group = 0, offset = 0;

    for (;;) {
        int code = f->a_z[pass_cell(f, x, M, c, m, r)], z = code < 0 ? -code - 1 : code;
        PD_CHECK(pd_plan_span_list_add_groups(out, x, z, group, c, f->f0, offset, r));
        if (z == d->n - 1)
            return PD_OK;
        if (code < 0) {
            int next = f->top_pick[(size_t)z * f->F1 + M];
            group += c;
            offset = 0;
            r = next % F0;
            m = next / F0 % F0;
            c = next / F0 / F0;
            M -= c;
        } else {
            int next_r = f->inner_r[pass_cell(f, z, M, c, m - r, r)];
            offset += r;
            m -= r;
            r = next_r;
        }
        x = z;
    }
}

/* The best value of the whole model (PD_PLAN_DP_NONE: no plan), its
 * first stage not ending at exclude_z (-1: any; with three levels or
 * more, the first stage of the top level). */
static pd_status solve_top(pd_plan_dp *d, bool memory, int exclude_z, double *value)
{
    if (d->exact && !memory)
        return pd_plan_exact_solve(d, exclude_z, value);
    if (d->one_pass)
        return pass_solve(d, &d->fl, memory, exclude_z, value);
    return pd_plan_levels_solve(d, memory, exclude_z, value);
}

/* Builds `plan`'s stages from the best plan found by the last solve_top
 * with the same arguments, and evaluates it. */
static pd_status make_plan(pd_plan_dp *d, bool memory, int exclude_z, pd_plan *plan)
{
    pd_plan_span_list spans = {0};
    int *node_stage = malloc(sizeof(int) * (size_t)d->g->n);
    pd_status s;

    if (!node_stage)
        return PD_ERROR(PD_ENOMEM, "plan: out of host memory");
    if (d->exact && !memory)
        PD_CHECK_GOTO(pd_plan_exact_rebuild(d, &spans), s, out_free);
    else if (d->one_pass)
        PD_CHECK_GOTO(pass_rebuild(d, &d->fl, &spans), s, out_free);
    else
        PD_CHECK_GOTO(pd_plan_levels_rebuild(d, memory, exclude_z, &spans), s, out_free);
    PD_CHECK_GOTO(pd_plan_set_stages(plan, d->g, d->s, spans.n, spans.spans), s, out_free);
    for (int v = 0; v < d->g->n; v++)
        for (int t = 0; t < spans.n; t++)
            if (dp_in_prefix(d->s, spans.spans[t].to_state, v) && !dp_in_prefix(d->s, spans.spans[t].from_state, v)) {
                node_stage[v] = t;
                break;
            }
    s = pd_plan_default_fill(d->profile, d->g, node_stage, d->opts, plan);
out_free:
    pd_plan_span_list_free(&spans);
    free(node_stage);
    return s;
}

/* A plan of nothing but the cluster, to build alternatives in. */
static pd_plan *scratch_plan(const pd_plan_dp *d)
{
    pd_plan *p = calloc(1, sizeof(*p));
    if (p)
        p->cluster = *d->cluster;
    return p;
}

/* ---- explanations ---- */

/* "stage 2 (4 replicas) 'conv4_1'..'fc8'" into buf. */
static void describe_stage(const pd_plan_dp *d, const pd_plan *p, int k, char *buf, size_t size)
{
    const pd_plan_stage *st = &p->stages[k];
    snprintf(buf, size, "stage %d ('%s'..'%s', %d replica%s)", k, pd_profile_node_at(d->profile, st->layers[0])->name,
             pd_profile_node_at(d->profile, st->layers[st->n_layers - 1])->name, st->replicas,
             st->replicas == 1 ? "" : "s");
}

/* Appends printf output to a malloc'd string. */
static void append(char **text, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void append(char **text, const char *fmt, ...)
{
    va_list ap;
    size_t used = *text ? strlen(*text) : 0;
    int n;
    char *t;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !(t = realloc(*text, used + (size_t)n + 1)))
        return;
    va_start(ap, fmt);
    vsnprintf(t + used, (size_t)n + 1, fmt, ap);
    va_end(ap);
    *text = t;
}

/* One line on a plan: its time and what bounds it. */
static void append_plan(const pd_plan_dp *d, char **text, const pd_plan *p)
{
    char stage[512];
    const pd_plan_stage *st = &p->stages[p->bottleneck_stage];
    describe_stage(d, p, p->bottleneck_stage, stage, sizeof(stage));
    append(text, "%d stage%s on %d of %d workers, %.6g ms per minibatch, bound by the %s of %s (%.6g ms)", p->n_stages,
           p->n_stages == 1 ? "" : "s", p->workers_used, p->workers, p->time_ms, pd_plan_term_name(st->bottleneck),
           stage, st->time_ms);
}

/* The end of the first stage (top-level stage, with three levels or
 * more) of the plan the last solve_top chose. */
static int top_first_cut(const pd_plan_dp *d)
{
    if (d->exact)
        return pd_plan_exact_first_cut(d);
    if (d->one_pass) {
        int code = d->fl.a_z[d->fl.start_pick];
        return code < 0 ? -code - 1 : code;
    }
    return pd_plan_levels_first_cut(d);
}

static pd_status explain(pd_plan_dp *d, pd_plan *plan, int first_z)
{
    char *text = NULL;
    double alt;
    pd_plan *p = NULL;
    pd_status s = PD_OK;
    const char *what = d->one_pass ? "first stage" : "first top-level stage";

    append(&text, "chosen: ");
    append_plan(d, &text, plan);
    append(&text, "\n");
    PD_CHECK_GOTO(solve_top(d, false, first_z, &alt), s, out_free);
    if (alt == PD_PLAN_DP_NONE) {
        append(&text, "no plan with another end of the %s %s\n", what, d->limit ? "fits in memory" : "exists");
    } else {
        if (!(p = scratch_plan(d))) {
            s = PD_ERROR(PD_ENOMEM, "plan: out of host memory");
            goto out_free;
        }
        PD_CHECK_GOTO(make_plan(d, false, first_z, p), s, out_free);
        append(&text, "next best, with another end of the %s: ", what);
        append_plan(d, &text, p);
        if (p->time_ms <= plan->time_ms * (1 + 1e-9))
            append(&text, " (as fast)\n");
        else
            append(&text, " (%.3g%% slower)\n", 100.0 * (p->time_ms / plan->time_ms - 1));
        pd_plan_destroy(p);
        p = NULL;
    }
    if (plan->n_stages > 1 || plan->workers_used < plan->workers) {
        /* Data parallelism: one stage of every layer on all workers. */
        int W = plan->workers;
        long long base = 0;
        pd_plan_span_list one = {0};
        int *node_stage = calloc((size_t)d->g->n, sizeof(int));
        if (!(p = scratch_plan(d)) || !node_stage) {
            free(node_stage);
            s = PD_ERROR(PD_ENOMEM, "plan: out of host memory");
            goto out_free;
        }
        s = pd_plan_span_list_add(&one, 0, d->n - 1, &base, 1, 0, W);
        if (s == PD_OK)
            s = pd_plan_set_stages(p, d->g, d->s, 1, one.spans);
        if (s == PD_OK)
            s = pd_plan_default_fill(d->profile, d->g, node_stage, d->opts, p);
        pd_plan_span_list_free(&one);
        free(node_stage);
        if (s != PD_OK)
            goto out_free;
        append(&text, "data parallelism: ");
        append_plan(d, &text, p);
        if (d->limit && p->stages[0].memory_bytes > d->opts->memory_bytes)
            append(&text, "; does not fit: needs %.3g GB per worker of %.3g", p->stages[0].memory_bytes / 1e9,
                   d->opts->memory_bytes / 1e9);
        append(&text, "\n");
    }
    if (text && text[0])
        text[strlen(text) - 1] = '\0';
    free(plan->explanation);
    plan->explanation = text;
    text = NULL;
out_free:
    pd_plan_destroy(p);
    free(text);
    return s;
}

/* No plan fits as far as the dynamic program can tell: PD_ENOTFOUND
 * naming what the plan of least memory per worker needs. That plan is
 * evaluated exactly; when it does fit after all (the dynamic program
 * overestimates in-flight counts when later groups leave workers idle),
 * it becomes the plan. */
static pd_status no_fit(pd_plan_dp *d, pd_plan *plan)
{
    double least;
    pd_plan *p = NULL;
    pd_status s;
    int worst = 0;
    char stage[512];

    PD_CHECK(solve_top(d, true, -1, &least));
    if (least == PD_PLAN_DP_NONE)
        return PD_ERROR(PD_ENOTFOUND, "no plan of '%s' exists on %d workers", plan->model ? plan->model : "the model",
                        pd_plan_cluster_workers(d->cluster));
    if (!(p = scratch_plan(d)))
        return PD_ERROR(PD_ENOMEM, "plan: out of host memory");
    PD_CHECK_GOTO(make_plan(d, true, -1, p), s, out_free);
    for (int k = 1; k < p->n_stages; k++)
        if (p->stages[k].memory_bytes > p->stages[worst].memory_bytes)
            worst = k;
    const pd_plan_stage *st = &p->stages[worst];
    if (st->memory_bytes <= d->opts->memory_bytes) {
        s = make_plan(d, true, -1, plan);
        goto out_free;
    }
    describe_stage(d, p, worst, stage, sizeof(stage));
    s = PD_ERROR(PD_ENOTFOUND,
                 "no plan fits in %.3g GB of device memory per worker: the smallest needs %.3g GB (%s of %d: "
                 "weights %.3g GB in %d versions, activations %.3g GB for %d in flight, optimizer %.3g GB)",
                 d->opts->memory_bytes / 1e9, st->memory_bytes / 1e9, stage, p->n_stages, st->weight_bytes / 1e9,
                 st->weight_versions, st->activation_bytes / 1e9, st->in_flight, st->optimizer_bytes / 1e9);
out_free:
    pd_plan_destroy(p);
    return s;
}

/* The first stage of p over the memory limit, or -1. */
static int over_memory(const pd_plan_dp *d, const pd_plan *p)
{
    for (int k = 0; d->limit && k < p->n_stages; k++)
        if (p->stages[k].memory_bytes > d->opts->memory_bytes)
            return k;
    return -1;
}

/* The plan chosen with NOAM's in-flight counts does not fit with the
 * schedule's (stage `worst`): solve again with the counts raised by a
 * margin (1, 2, 4, ..., up to pd_plan_default_in_flight_bound, which no
 * schedule exceeds) until the plan fits, and say in *note that it may not
 * be the fastest that does. PD_ENOTFOUND when none fits even then. */
static pd_status refit(pd_plan_dp *d, pd_plan *plan, int worst, char **note)
{
    const pd_plan_stage *st = &plan->stages[worst];
    int workers = pd_plan_cluster_workers(d->cluster);
    double noam_ms = plan->time_ms, best;
    char stage[512], first[1024];

    describe_stage(d, plan, worst, stage, sizeof(stage));
    snprintf(first, sizeof(first),
             "the fastest plan with NOAM's in-flight counts (%.6g ms per minibatch) does not fit once the 1F1B "
             "schedule's are used: %s holds %d minibatches in flight and needs %.3g GB of %.3g",
             noam_ms, stage, st->in_flight, st->memory_bytes / 1e9, d->opts->memory_bytes / 1e9);
    for (int margin = 1;; margin = margin >= workers ? 2 * workers : 2 * margin) {
        d->margin = margin;
        if (!d->one_pass)
            pd_plan_levels_forget(d);
        PD_CHECK(solve_top(d, false, -1, &best));
        if (best == PD_PLAN_DP_NONE)
            break;
        PD_CHECK(make_plan(d, false, -1, plan));
        if (over_memory(d, plan) < 0) {
            append(note, "note: %s; this plan, chosen with up to %d more in flight per stage, fits but may not be "
                   "the fastest that does", first, margin);
            return PD_OK;
        }
        if (margin >= 2 * workers)
            break;
    }
    return PD_ERROR(PD_ENOTFOUND, "no plan fits in %.3g GB of device memory per worker: %s, and no plan priced with "
                    "more in flight fits", d->opts->memory_bytes / 1e9, first);
}

/* The cluster the program solves on: under a memory limit, `cluster`
 * without its levels of fanout 1 (they join no two ranks, so ranks, links
 * and times stay the same), so that three levels of which one is 1-wide
 * get the exact pass of two; otherwise `cluster` itself. */
static const pd_plan_cluster *solver_cluster(const pd_plan_cluster *cluster, const pd_plan_options *opts,
                                             pd_plan_cluster *squeezed)
{
    if (!(opts->memory_bytes > 0) || cluster->n_levels <= 2)
        return cluster;
    *squeezed = (pd_plan_cluster){0};
    for (int l = 0; l < cluster->n_levels; l++)
        if (cluster->levels[l].fanout > 1)
            squeezed->levels[squeezed->n_levels++] = cluster->levels[l];
    if (squeezed->n_levels == 0)
        squeezed->levels[squeezed->n_levels++] = cluster->levels[0];
    return squeezed;
}

pd_status pd_plan_solve_default(const pd_profile *profile, const pd_plan_graph *g, const pd_plan_states *s,
                                const pd_plan_cluster *cluster, const pd_plan_options *opts, pd_plan *plan)
{
    pd_plan_cluster squeezed;
    pd_plan_dp d;
    double best;
    char *note = NULL;
    int worst;
    pd_status st;

    PD_CHECK_GOTO(dp_init(&d, profile, g, s, solver_cluster(cluster, opts, &squeezed), opts, PD_PLAN_DP_SOLVER), st,
                  out_free);
    if (d.nz[d.n - 1] == 0) {
        st = PD_ERROR(PD_EINVAL, "profile '%s' has no layer with compute time to plan",
                      pd_profile_get_info(profile)->model);
        goto out_free;
    }
    if (cluster != &plan->cluster)
        plan->cluster = *cluster;
    plan->cost_model = PD_PLAN_COST_DEFAULT;
    PD_CHECK_GOTO(solve_top(&d, false, -1, &best), st, out_free);
    if (best == PD_PLAN_DP_NONE) {
        st = no_fit(&d, plan);
        goto out_free;
    }
    PD_CHECK_GOTO(make_plan(&d, false, -1, plan), st, out_free);
    /* The exact pass checked memory with the plan's own counts; NOAM's
     * never exceed them, so a plan found with NOAM's that fits with the
     * schedule's is the fastest that does. */
    if ((worst = over_memory(&d, plan)) >= 0) {
        if (d.exact) {
            st = PD_ERROR(PD_ESTATE, "internal error: the default model's plan needs %.6g bytes at stage %d, over "
                          "the %.6g it was solved for", plan->stages[worst].memory_bytes, worst,
                          opts->memory_bytes);
            goto out_free;
        }
        PD_CHECK_GOTO(refit(&d, plan, worst, &note), st, out_free);
    }
    if (opts->explain)
        PD_CHECK_GOTO(explain(&d, plan, top_first_cut(&d)), st, out_free);
    if (note) {
        if (plan->explanation)
            append(&plan->explanation, "\n");
        append(&plan->explanation, "%s", note);
    }
out_free:
    free(note);
    dp_free(&d);
    return st;
}

pd_status pd_plan_default_dp_ms(const pd_profile *profile, const pd_plan_graph *g, const pd_plan_states *s,
                                const pd_plan_cluster *cluster, const pd_plan_options *opts,
                                pd_plan_dp_method method, double *ms)
{
    pd_plan_dp d;
    pd_plan_cluster squeezed;
    pd_status st;

    if (method == PD_PLAN_DP_SOLVER)
        cluster = solver_cluster(cluster, opts, &squeezed);
    PD_CHECK_GOTO(dp_init(&d, profile, g, s, cluster, opts, method), st, out_free);
    st = solve_top(&d, false, -1, ms);
out_free:
    dp_free(&d);
    return st;
}
