/* The default model's dynamic program by level, for three levels or more
 * (default_dp.c solves one or two levels in one pass; tests hold the two
 * to each other there). Level by level as PipeDream does: a table per
 * level and key holds the best pipeline of every range (x, z] inside one
 * group of that level, copied into `copies` groups and followed by `down`
 * workers; the level above prices a stage of c groups over a range by the
 * table of the level below. Each pass fixes the end y of the ranges and
 * solves suffixes (x, y], so that a stage knows how many workers follow it
 * (its minibatches in flight, hence its memory).
 *
 * A transfer across a cut is max(2X / (B R_a), 2X / (B R_b)) + 2 latency,
 * so the two sides of a cut between ranges each carry their half, over
 * the level the level above knows ("lev_in", "lev_out"); cuts inside a
 * level-0 pipeline are charged whole, the replicas of both sides known.
 *
 * Approximations (the plan chosen is evaluated exactly afterwards):
 * - "down" counts whole groups: idle workers in later groups
 *   (allow_fewer_workers) make earlier stages' in-flight counts and memory
 *   overestimated (a plan that fits may be refused, never the reverse);
 * - the cut between two stages of a copied level >= 1 pipeline is taken
 *   over that level, and between copied level-0 stages of different widths
 *   over the outermost level the copies span, while round-robin routing
 *   may send some minibatches over another level. */
#include "config.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "plan/default_dp.h"

static pd_status level_alloc(pd_plan_dp_level *lv, int n, int fan, bool level0)
{
    size_t F = (size_t)fan + 1, cells = (size_t)n * F * (level0 ? F : 1);

    lv->fan = fan;
    lv->slot = malloc(sizeof(int) * (size_t)n);
    lv->best = malloc(sizeof(double) * cells);
    lv->best_z = malloc(sizeof(int) * cells);
    lv->best_c = malloc(sizeof(int) * cells);
    lv->start = malloc(sizeof(double) * cells);
    lv->start_z = malloc(sizeof(int) * cells);
    lv->start_c = malloc(sizeof(int) * cells);
    lv->via = level0 ? malloc(sizeof(double) * cells) : NULL;
    lv->via_r = level0 ? malloc(sizeof(int) * cells) : NULL;
    lv->tout = malloc(sizeof(double) * (size_t)n);
    lv->tm = malloc(sizeof(int) * (size_t)n);
    lv->tr = malloc(sizeof(int) * (size_t)n);
    lv->send_ms = malloc(sizeof(double) * F);
    lv->in_flight = malloc(sizeof(int) * F * F);
    if (!lv->send_ms || !lv->in_flight || !lv->slot || !lv->best || !lv->best_z || !lv->best_c || !lv->start ||
        !lv->start_z || !lv->start_c || (level0 && (!lv->via || !lv->via_r)) || !lv->tout || !lv->tm || !lv->tr)
        return PD_ERROR(PD_ENOMEM, "plan: out of host memory for the default model's dynamic program");
    return PD_OK;
}

/* ---- level 0: stages of workers ---- */

/* The time of every stage (x, z] on r workers per copy under key k,
 * without the send at a range's end, which only a pass for that end knows
 * (PD_PLAN_DP_NONE for a stage without compute), and the most minibatches it may
 * have in flight within the memory limit. */
static void level0_prices(pd_plan_dp *d, const pd_plan_dp_key *k)
{
    int f = d->lv[0].fan;
    bool limit = d->limit;

    for (int x = 0; x < d->n - 1; x++)
        for (int e = d->succ_off[x]; e < d->succ_off[x + 1]; e++) {
            int z = d->succ[e];
            pd_plan_default_load load = dp_load(d, x, z);
            /* Memory per replica does not depend on the replicas. */
            d->cap[e] = limit ? pd_plan_default_max_in_flight(&load, d->opts) : INT_MAX;
            for (int r = 1; r <= f; r++) {
                int sync_level = r > 1 && k->span < 0 ? 0 : k->span;
                double t = dp_price(d, &load, k->copies * r, sync_level);
                d->own[(size_t)e * f + r - 1] = d->nz[z] > d->nz[x] ? t : PD_PLAN_DP_NONE;
            }
        }
}

/* The ranges (x, y] for every start x of end y under key k (level 0):
 * lv->tout[slot of x], with the choices to rebuild them. The first stage
 * may not end at exclude_z when it starts at 0. With time as the
 * objective, level0_prices(k) must have run. */
static void level0_end(pd_plan_dp *d, const pd_plan_dp_key *k, int y, int exclude_z)
{
    pd_plan_dp_level *lv = &d->lv[0];
    const pd_plan_options *opts = d->opts;
    const int *xs = d->pred_x + d->pred_off[y];
    int f = lv->fan, F = f + 1, FF = F * F, nx = d->pred_off[y + 1] - d->pred_off[y];
    bool send = !k->memory && y != d->n - 1 && k->lev_out >= 0;
    double *end_via = lv->via + (size_t)nx * FF, *send_ms = lv->send_ms;
    int *in_flight = lv->in_flight;

    for (int i = 0; i < nx; i++)
        lv->slot[xs[i]] = i;
    lv->slot[y] = nx;
    for (int q = 0; q < FF; q++)
        end_via[q] = q < F ? 0 : PD_PLAN_DP_NONE; /* m = 0 units left: done */
    for (int r = 1; r <= f; r++) {
        send_ms[r] = send ? dp_transfer(d, d->cut[y], k->copies * r, k->lev_out) : 0;
        for (int m = r; m <= f; m++)
            in_flight[m * F + r] = dp_in_flight(d, k->copies * m + k->down, k->copies * r);
    }
    for (int i = nx - 1; i >= 0; i--) {
        int x = xs[i];
        double *best = lv->best + (size_t)i * FF;
        int *best_z = lv->best_z + (size_t)i * FF;
        for (int q = 0; q < FF; q++)
            best[q] = PD_PLAN_DP_NONE;
        for (int e = d->succ_off[x]; e < d->succ_off[x + 1]; e++) {
            int z = d->succ[e];
            if (z > y)
                break;
            if ((z != y && !dp_precedes(d, z, y)) || d->nz[z] == d->nz[x] || (i == 0 && z == exclude_z))
                continue;
            const double *via = lv->via + (size_t)lv->slot[z] * FF;
            const double *own = d->own + (size_t)e * f - 1;
            int cap = d->cap[e];
            pd_plan_default_load load = dp_load(d, x, z);
            for (int r = 1; r <= f; r++) {
                double price = 0;
                if (!k->memory) {
                    price = z == y && send_ms[r] > own[r] ? send_ms[r] : own[r];
                }
                for (int m = r; m <= f; m++) {
                    double h = via[(m - r) * F + r], v = price;
                    if (h == PD_PLAN_DP_NONE)
                        continue;
                    if (k->memory)
                        v = pd_plan_default_memory_bytes(&load, in_flight[m * F + r], opts);
                    else if (in_flight[m * F + r] > cap)
                        continue;
                    v = h > v ? h : v;
                    if (v < best[m * F + r]) {
                        best[m * F + r] = v;
                        best_z[m * F + r] = z;
                    }
                }
            }
        }
        if (i > 0) {
            /* x as a cut inside the range, after a stage of rp replicas per
             * copy: the transfer to the next stage (r per copy) crosses
             * the copies when the widths differ (round-robin pairs replica
             * b mod R_a with b mod R_b). */
            double *via = lv->via + (size_t)i * FF;
            int *via_r = lv->via_r + (size_t)i * FF;
            for (int rp = 0; rp <= f; rp++)
                via[rp] = PD_PLAN_DP_NONE;
            for (int m = 1; m <= f; m++)
                for (int rp = 1; rp <= f; rp++) {
                    double b = PD_PLAN_DP_NONE;
                    int br = 0;
                    for (int r = 1; r <= m; r++) {
                        double v = best[m * F + r];
                        if (v == PD_PLAN_DP_NONE)
                            continue;
                        if (!k->memory) {
                            int level = k->copies > 1 && r != rp ? k->span : 0;
                            double t = dp_transfer(d, d->cut[x], k->copies * (r < rp ? r : rp), level);
                            v = t > v ? t : v;
                        }
                        if (v < b) {
                            b = v;
                            br = r;
                        }
                    }
                    via[m * F + rp] = b;
                    via_r[m * F + rp] = br;
                }
        }
        /* x as the range's start: all units, or fewer when that is faster. */
        lv->tout[i] = PD_PLAN_DP_NONE;
        lv->tm[i] = lv->tr[i] = 0;
        for (int m = f; m >= (d->fewer ? 1 : f); m--)
            for (int r = 1; r <= m; r++) {
                double v = best[m * F + r];
                if (v == PD_PLAN_DP_NONE)
                    continue;
                if (!k->memory && x != 0 && k->lev_in >= 0) {
                    double t = dp_transfer(d, d->cut[x], k->copies * r, k->lev_in);
                    v = t > v ? t : v;
                }
                if (dp_better(v, lv->tout[i])) {
                    lv->tout[i] = v;
                    lv->tm[i] = m;
                    lv->tr[i] = r;
                }
            }
    }
}

/* ---- levels above: stages of whole groups ---- */

static pd_status get_table(pd_plan_dp *d, const pd_plan_dp_key *k, double **out);

/* The key of the level below for a stage of c units out of the m units
 * left per copy at key k's level; `at_end`: the stage ends the range;
 * `at_start`: it starts it. */
static pd_plan_dp_key child_key(const pd_plan_dp *d, const pd_plan_dp_key *k, int c, int m, bool at_start, bool at_end)
{
    int l = k->level;
    pd_plan_dp_key ck = {
        .level = l - 1,
        .copies = k->copies * c,
        .span = c > 1 && k->span < l ? l : k->span,
        .down = k->down + (int)((m - c) * k->copies * d->group[l - 1]),
        .lev_in = at_start ? k->lev_in : l,
        .lev_out = at_end && k->lev_out >= 0 ? k->lev_out : l,
        .memory = k->memory,
    };
    if (ck.memory)
        ck.span = ck.lev_in = ck.lev_out = -1;
    else if (!d->limit)
        ck.down = 0; /* memory is not checked: what follows does not matter */
    return ck;
}

/* Whether the range's first stage needs its own tables: its recv crosses
 * the level above's cut, not this level's. */
static bool needs_start(const pd_plan_dp_key *k) { return !k->memory && k->lev_in >= 0 && k->lev_in != k->level; }

/* The tables of the level below for key k: tab[((c * F) + m) * 2 + at_end]
 * (and start likewise, when needs_start). */
static pd_status child_tables(pd_plan_dp *d, const pd_plan_dp_key *k, double **tab, double **start)
{
    int f = d->lv[k->level].fan, F = f + 1;
    for (int c = 1; c <= f; c++)
        for (int m = c; m <= f; m++)
            for (int e = 0; e < 2; e++) {
                pd_plan_dp_key ck = child_key(d, k, c, m, false, e);
                PD_CHECK(get_table(d, &ck, &tab[(c * F + m) * 2 + e]));
                if (needs_start(k)) {
                    ck = child_key(d, k, c, m, true, e);
                    PD_CHECK(get_table(d, &ck, &start[(c * F + m) * 2 + e]));
                }
            }
    return PD_OK;
}

/* Like level0_end for a level above 0, its stages priced by the tables of
 * the level below. */
static void upper_end(pd_plan_dp *d, const pd_plan_dp_key *k, int y, int exclude_z, double *const *tab,
                      double *const *tab_start)
{
    pd_plan_dp_level *lv = &d->lv[k->level];
    const int *xs = d->pred_x + d->pred_off[y];
    int f = lv->fan, F = f + 1, nx = d->pred_off[y + 1] - d->pred_off[y];
    bool two = needs_start(k);

    for (int i = 0; i < nx; i++)
        lv->slot[xs[i]] = i;
    lv->slot[y] = nx;
    for (int m = 0; m <= f; m++)
        lv->best[(size_t)nx * F + m] = m == 0 ? 0 : PD_PLAN_DP_NONE;
    for (int i = nx - 1; i >= 0; i--) {
        int x = xs[i];
        double *best = lv->best + (size_t)i * F, *start = lv->start + (size_t)i * F;
        int *best_z = lv->best_z + (size_t)i * F, *best_c = lv->best_c + (size_t)i * F;
        int *start_z = lv->start_z + (size_t)i * F, *start_c = lv->start_c + (size_t)i * F;
        for (int m = 0; m <= f; m++)
            best[m] = start[m] = PD_PLAN_DP_NONE;
        for (int e = d->succ_off[x]; e < d->succ_off[x + 1]; e++) {
            int z = d->succ[e], end;
            if (z > y)
                break;
            if ((z != y && !dp_precedes(d, z, y)) || (i == 0 && z == exclude_z))
                continue;
            const double *after = lv->best + (size_t)lv->slot[z] * F;
            end = z == y;
            for (int c = 1; c <= f; c++)
                for (int m = c; m <= f; m++) {
                    double h = after[m - c], v, t;
                    if (h == PD_PLAN_DP_NONE)
                        continue;
                    t = tab[(c * F + m) * 2 + end][e];
                    v = h > t ? h : t;
                    if (v < best[m]) {
                        best[m] = v;
                        best_z[m] = z;
                        best_c[m] = c;
                    }
                    if (two) {
                        t = tab_start[(c * F + m) * 2 + end][e];
                        v = h > t ? h : t;
                        if (v < start[m]) {
                            start[m] = v;
                            start_z[m] = z;
                            start_c[m] = c;
                        }
                    }
                }
        }
        lv->tout[i] = PD_PLAN_DP_NONE;
        lv->tm[i] = 0;
        for (int m = f; m >= (d->fewer ? 1 : f); m--) {
            double v = two && x != 0 ? start[m] : best[m];
            if (dp_better(v, lv->tout[i])) {
                lv->tout[i] = v;
                lv->tm[i] = m;
            }
        }
    }
}

/* Runs the pass of key k's level for end y (tables of the level below
 * fetched first). */
static pd_status run_end(pd_plan_dp *d, const pd_plan_dp_key *k, int y, int exclude_z)
{
    int F = d->lv[k->level].fan + 1;
    double **tab, **start;

    if (k->level == 0) {
        if (!k->memory)
            level0_prices(d, k);
        level0_end(d, k, y, exclude_z);
        return PD_OK;
    }
    tab = calloc((size_t)F * F * 2, sizeof(*tab));
    start = calloc((size_t)F * F * 2, sizeof(*start));
    if (!tab || !start) {
        free(tab);
        free(start);
        return PD_ERROR(PD_ENOMEM, "plan: out of host memory for the default model's dynamic program");
    }
    pd_status s = child_tables(d, k, tab, start);
    if (s == PD_OK)
        upper_end(d, k, y, exclude_z, tab, start);
    free(tab);
    free(start);
    return s;
}

static bool same_key(const pd_plan_dp_key *a, const pd_plan_dp_key *b)
{
    return a->level == b->level && a->copies == b->copies && a->span == b->span && a->down == b->down &&
           a->lev_in == b->lev_in && a->lev_out == b->lev_out && a->memory == b->memory;
}

/* The values of every range under key k, solved once and kept. */
static pd_status get_table(pd_plan_dp *d, const pd_plan_dp_key *k, double **out)
{
    int pairs = d->pred_off[d->n], F = d->lv[k->level].fan + 1;
    double *value, **tab = NULL, **start = NULL;
    pd_status s = PD_OK;

    for (int t = 0; t < d->n_tables; t++)
        if (same_key(&d->tables[t].key, k)) {
            *out = d->tables[t].value;
            return PD_OK;
        }
    value = malloc(sizeof(double) * (size_t)(pairs + 1));
    if (k->level > 0) {
        tab = calloc((size_t)F * F * 2, sizeof(*tab));
        start = calloc((size_t)F * F * 2, sizeof(*start));
    }
    if (!value || (k->level > 0 && (!tab || !start))) {
        s = PD_ERROR(PD_ENOMEM, "plan: out of host memory for the default model's dynamic program");
        goto fail;
    }
    if (k->level > 0)
        PD_CHECK_GOTO(child_tables(d, k, tab, start), s, fail);
    else if (!k->memory)
        level0_prices(d, k);
    for (int y = 1; y < d->n; y++) {
        pd_plan_dp_level *lv = &d->lv[k->level];
        if (k->level == 0)
            level0_end(d, k, y, -1);
        else
            upper_end(d, k, y, -1, tab, start);
        for (int i = 0; i < d->pred_off[y + 1] - d->pred_off[y]; i++)
            value[d->pred_pair[d->pred_off[y] + i]] = lv->tout[i];
    }
    /* Solving this table added those it needed: make room only now. */
    if (d->n_tables == d->cap_tables) {
        int cap = d->cap_tables ? 2 * d->cap_tables : 16;
        pd_plan_dp_table *t = realloc(d->tables, sizeof(*t) * (size_t)cap);
        if (!t) {
            s = PD_ERROR(PD_ENOMEM, "plan: out of host memory for the default model's dynamic program");
            goto fail;
        }
        d->tables = t;
        d->cap_tables = cap;
    }
    d->tables[d->n_tables++] = (pd_plan_dp_table){.key = *k, .value = value};
    *out = value;
    free(tab);
    free(start);
    return PD_OK;
fail:
    free(value);
    free(tab);
    free(start);
    return s;
}

/* ---- the whole model ---- */

static pd_plan_dp_key top_key(const pd_plan_dp *d, bool memory)
{
    return (pd_plan_dp_key){
        .level = d->levels - 1, .copies = 1, .span = -1, .lev_in = -1, .lev_out = -1, .memory = memory};
}

/* Rebuilds the stages of range (x0, y] under key k, its copies in the
 * level-k.level groups starting at bases[]. */
static pd_status rebuild(pd_plan_dp *d, const pd_plan_dp_key *k, int x0, int y, const long long *bases, int n_bases,
                         int exclude_z, pd_plan_span_list *out)
{
    pd_plan_dp_level *lv = &d->lv[k->level];
    int F = lv->fan + 1, i, m, x = x0, offset = 0;
    bool first = true;

    PD_CHECK(run_end(d, k, y, exclude_z));
    i = lv->slot[x0];
    m = lv->tm[i];
    if (k->level == 0) {
        int r = lv->tr[i];
        for (;;) {
            int z = lv->best_z[(size_t)i * F * F + m * F + r];
            PD_CHECK(pd_plan_span_list_add(out, x, z, bases, n_bases, offset, r));
            if (z == y)
                return PD_OK;
            offset += r;
            m -= r;
            i = lv->slot[z];
            r = lv->via_r[(size_t)i * F * F + m * F + r];
            x = z;
        }
    }
    for (;;) {
        bool use_start = first && x != 0 && needs_start(k);
        int z = (use_start ? lv->start_z : lv->best_z)[(size_t)i * F + m];
        int c = (use_start ? lv->start_c : lv->best_c)[(size_t)i * F + m];
        pd_plan_dp_key ck = child_key(d, k, c, m, first, z == y);
        long long *inner = malloc(sizeof(long long) * (size_t)n_bases * (size_t)c);
        pd_status s;
        if (!inner)
            return PD_ERROR(PD_ENOMEM, "plan: out of host memory");
        for (int b = 0; b < n_bases; b++)
            for (int q = 0; q < c; q++)
                inner[b * c + q] = bases[b] + (offset + q) * d->group[k->level - 1];
        s = rebuild(d, &ck, x, z, inner, n_bases * c, -1, out);
        free(inner);
        PD_CHECK(s);
        if (z == y)
            return PD_OK;
        /* The level below reused its own scratch only; this level's
         * choices for end y are intact. */
        offset += c;
        m -= c;
        i = lv->slot[z];
        x = z;
        first = false;
    }
}

pd_status pd_plan_levels_solve(pd_plan_dp *d, bool memory, int exclude_z, double *value)
{
    pd_plan_dp_key k = top_key(d, memory);
    PD_CHECK(run_end(d, &k, d->n - 1, exclude_z));
    *value = d->lv[k.level].tout[0];
    return PD_OK;
}

pd_status pd_plan_levels_rebuild(pd_plan_dp *d, bool memory, int exclude_z, pd_plan_span_list *out)
{
    pd_plan_dp_key k = top_key(d, memory);
    long long base = 0;
    return rebuild(d, &k, 0, d->n - 1, &base, 1, exclude_z, out);
}

int pd_plan_levels_first_cut(const pd_plan_dp *d)
{
    const pd_plan_dp_level *lv = &d->lv[d->levels - 1];
    int F = lv->fan + 1, m = lv->tm[0];
    return d->levels == 1 ? lv->best_z[m * F + lv->tr[0]] : lv->best_z[m];
}

pd_status pd_plan_levels_init(pd_plan_dp *d)
{
    size_t cells = (size_t)d->pred_off[d->n] * (size_t)d->cluster->levels[0].fanout;

    d->own = malloc(sizeof(double) * cells);
    d->cap = malloc(sizeof(int) * (size_t)d->pred_off[d->n]);
    if (!d->own || !d->cap)
        return PD_ERROR(PD_ENOMEM, "plan: out of host memory for the default model's dynamic program");
    for (int l = 0; l < d->levels; l++)
        PD_CHECK(level_alloc(&d->lv[l], d->n, d->cluster->levels[l].fanout, l == 0));
    return PD_OK;
}

void pd_plan_levels_forget(pd_plan_dp *d)
{
    for (int t = 0; t < d->n_tables; t++)
        free(d->tables[t].value);
    d->n_tables = 0;
}

void pd_plan_levels_free(pd_plan_dp *d)
{
    for (int l = 0; l < PD_PLAN_MAX_LEVELS; l++) {
        pd_plan_dp_level *lv = &d->lv[l];
        free(lv->slot);
        free(lv->best);
        free(lv->best_z);
        free(lv->best_c);
        free(lv->start);
        free(lv->start_z);
        free(lv->start_c);
        free(lv->via);
        free(lv->via_r);
        free(lv->tout);
        free(lv->tm);
        free(lv->tr);
        free(lv->send_ms);
        free(lv->in_flight);
    }
    pd_plan_levels_forget(d);
    free(d->tables);
    free(d->own);
    free(d->cap);
}
