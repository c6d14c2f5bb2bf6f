/* The default model's one-pass dynamic program (default_dp.c) with the 1F1B
 * schedule's in-flight counts instead of NOAM, for a memory limit.
 *
 * A stage of R replicas holds w = 1 + ceil(D' / R) minibatches in flight,
 * D' being the minibatches in flight at the next stage over all its
 * replicas (pd_plan_1f1b_in_flight); D' depends on every later stage, so
 * the suffixes of the one pass are also indexed by the w of their first
 * stage. Since a smaller D' never hurts a stage before it, a suffix's
 * value at w is the best with at most w ("at most" tables), and the
 * continuation a stage may take is the best one with D' <= (w - 1) R:
 *
 *   a[x][M][c][m][r][w]  as the one pass's a, its first stage (c copies of
 *                        r workers) holding at most w in flight;
 *   top[x][M'][D]        the best suffix starting a top-level stage at x on
 *                        M' groups whose first stage holds at most D over
 *                        all its replicas (recv included);
 *   inner[x][M][c][m][rp][u] the best suffix continuing a top-level stage
 *                        at x after a stage of rp workers per copy whose
 *                        first stage holds at most u per copy (r * w; the
 *                        copies cancel out within a top-level stage), the
 *                        transfer across x included.
 *
 * The counts come from the stages' replicas alone, so idle workers
 * (allow_fewer_workers) cost nothing here: the plan found is the fastest
 * whose every stage fits with the counts the runtime will use. */
#include "config.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "plan/default_dp.h"

static size_t ex_cell(const pd_plan_dp_exact *e, int M, int c, int m, int r)
{
    return (((size_t)M * e->F1 + c) * e->F0 + m) * e->F0 + r;
}

void pd_plan_exact_free(pd_plan_dp *d)
{
    pd_plan_dp_exact *e = &d->ex;
    free(e->woff);
    free(e->wmax);
    free(e->uoff);
    free(e->umax);
    free(e->price);
    free(e->a);
    free(e->inner);
    free(e->top);
    free(e->a_z);
    free(e->inner_pick);
    free(e->top_pick);
    memset(e, 0, sizeof(*e));
    d->exact = false;
}

/* The runs of every cell of a[x] and inner[x], and the sizes that follow. */
static void ex_layout(pd_plan_dp_exact *e)
{
    int f0 = e->f0, f1 = e->f1, most = 1, dmax = 1;

    e->per_x = e->inner_per_x = 0;
    for (size_t q = 0; q < e->cells; q++) {
        e->wmax[q] = 0;
        e->umax[q] = -1;
    }
    for (int M = 0; M < f1; M++)
        for (int c = 1; c + M <= f1; c++)
            for (int m = 1; m <= f0; m++)
                for (int r = 1; r <= m; r++) {
                    size_t q = ex_cell(e, M, c, m, r);
                    e->wmax[q] = pd_plan_default_in_flight_bound(c * m + f0 * M, c * r);
                    e->woff[q] = e->per_x;
                    e->per_x += (size_t)e->wmax[q];
                    most = e->wmax[q] > most ? e->wmax[q] : most;
                    dmax = c * r * e->wmax[q] > dmax ? c * r * e->wmax[q] : dmax;
                }
    for (int M = 0; M < f1; M++)
        for (int c = 1; c + M <= f1; c++)
            for (int m = 1; m < f0; m++) {
                int u = 0;
                for (int r = 1; r <= m; r++)
                    u = r * e->wmax[ex_cell(e, M, c, m, r)] > u ? r * e->wmax[ex_cell(e, M, c, m, r)] : u;
                for (int rp = 1; rp + m <= f0; rp++) {
                    size_t q = ex_cell(e, M, c, m, rp);
                    e->umax[q] = u;
                    e->uoff[q] = e->inner_per_x;
                    e->inner_per_x += (size_t)u + 1;
                }
            }
    e->wcap = most + 1;
    e->dn = dmax + 1;
    e->top_per_x = (size_t)e->F1 * (size_t)e->dn;
}

pd_status pd_plan_exact_init(pd_plan_dp *d)
{
    pd_plan_dp_exact *e = &d->ex;
    double bytes;

    memset(e, 0, sizeof(*e));
    d->exact = false;
    e->f0 = d->cluster->levels[0].fanout;
    e->f1 = d->levels == 2 ? d->cluster->levels[1].fanout : 1;
    e->F0 = e->f0 + 1;
    e->F1 = e->f1 + 1;
    e->outer = d->levels - 1;
    e->cells = (size_t)e->F1 * e->F1 * e->F0 * e->F0;
    e->woff = calloc(e->cells, sizeof(size_t));
    e->wmax = calloc(e->cells, sizeof(int));
    e->uoff = calloc(e->cells, sizeof(size_t));
    e->umax = calloc(e->cells, sizeof(int));
    e->price = calloc((size_t)e->F1 * e->F0, sizeof(double));
    if (!e->woff || !e->wmax || !e->uoff || !e->umax || !e->price) {
        pd_plan_exact_free(d);
        return PD_ERROR(PD_ENOMEM, "plan: out of host memory for the default model's dynamic program");
    }
    ex_layout(e);
    bytes = (double)d->n * (double)(e->per_x + e->inner_per_x + e->top_per_x) * (sizeof(double) + sizeof(int));
    if (bytes > PD_PLAN_EXACT_BYTES || (double)e->cells * e->wcap > INT_MAX) {
        pd_plan_exact_free(d); /* the caller falls back to NOAM's counts */
        return PD_OK;
    }
    e->a = malloc(sizeof(double) * e->per_x * (size_t)d->n);
    e->a_z = malloc(sizeof(int) * e->per_x * (size_t)d->n);
    e->inner = malloc(sizeof(double) * (e->inner_per_x + 1) * (size_t)d->n);
    e->inner_pick = malloc(sizeof(int) * (e->inner_per_x + 1) * (size_t)d->n);
    e->top = malloc(sizeof(double) * e->top_per_x * (size_t)d->n);
    e->top_pick = malloc(sizeof(int) * e->top_per_x * (size_t)d->n);
    if (!e->a || !e->a_z || !e->inner || !e->inner_pick || !e->top || !e->top_pick) {
        pd_plan_exact_free(d);
        return PD_ERROR(PD_ENOMEM, "plan: out of host memory for the default model's dynamic program");
    }
    d->exact = true;
    return PD_OK;
}

/* v into entry q of a run, with what chose it, when smaller. */
static inline void keep(double *value, int *pick, size_t q, double v, int choice)
{
    if (v < value[q]) {
        value[q] = v;
        pick[q] = choice;
    }
}

/* The suffixes starting at x (see the file comment). */
static void ex_state(pd_plan_dp *d, pd_plan_dp_exact *e, int x, int exclude_z)
{
    int f0 = e->f0, f1 = e->f1, F0 = e->F0, last = d->n - 1;
    double *a = e->a + (size_t)x * e->per_x, *price = e->price;
    int *a_z = e->a_z + (size_t)x * e->per_x;

    for (size_t q = 0; q < e->per_x; q++)
        a[q] = PD_PLAN_DP_NONE;
    for (int k = d->succ_off[x]; k < d->succ_off[x + 1]; k++) {
        int z = d->succ[k];
        if (d->nz[z] == d->nz[x] || (x == 0 && z == exclude_z))
            continue;
        pd_plan_default_load load = dp_load(d, x, z);
        int cap = pd_plan_default_max_in_flight(&load, d->opts);
        dp_prices(d, &load, f0, f1, e->outer, price);
        for (int M = 0; M < f1; M++)
            for (int c = 1; c + M <= f1; c++) {
                /* The stage ends its top-level stage: the next one, on M
                 * groups, may hold at most (w - 1) c r in its first stage. */
                const double *top = z == last ? NULL : e->top + (size_t)z * e->top_per_x + (size_t)M * e->dn;
                for (int r = 1; r <= f0 && (z != last || M == 0); r++) {
                    size_t q = ex_cell(e, M, c, r, r);
                    int most = e->wmax[q] < cap ? e->wmax[q] : cap;
                    double v = price[c * F0 + r];
                    if (z != last) {
                        double t = dp_transfer(d, d->cut[z], c * r, e->outer);
                        v = t > v ? t : v;
                    }
                    for (int w = 1; w <= most; w++) {
                        long long allowed = (long long)(w - 1) * c * r;
                        double next = z == last ? 0 : top[allowed < e->dn ? allowed : e->dn - 1];
                        if (next != PD_PLAN_DP_NONE)
                            keep(a, a_z, e->woff[q] + (size_t)w - 1, next > v ? next : v, -(z + 1));
                    }
                }
                if (z == last)
                    continue;
                /* It goes on after z with m - r workers per copy, whose
                 * first stage may hold at most (w - 1) r per copy. */
                for (int m = 2; m <= f0; m++)
                    for (int r = 1; r < m; r++) {
                        size_t q = ex_cell(e, M, c, m, r), iq = ex_cell(e, M, c, m - r, r);
                        const double *inner = e->inner + (size_t)z * (e->inner_per_x + 1) + e->uoff[iq];
                        int most = e->wmax[q] < cap ? e->wmax[q] : cap;
                        double v = price[c * F0 + r];
                        for (int w = 1; w <= most; w++) {
                            int allowed = (w - 1) * r;
                            double h = inner[allowed < e->umax[iq] ? allowed : e->umax[iq]];
                            if (h != PD_PLAN_DP_NONE)
                                keep(a, a_z, e->woff[q] + (size_t)w - 1, h > v ? h : v, z);
                        }
                    }
            }
    }
}

/* Makes run[0..n) hold the least of run[0..i] at i, with its pick. */
static void prefix_min(double *run, int *pick, int n)
{
    for (int i = 1; i < n; i++)
        if (run[i - 1] <= run[i]) {
            run[i] = run[i - 1];
            pick[i] = pick[i - 1];
        }
}

/* top[x] and inner[x] from a[x], for the stages that end at x. */
static void ex_boundaries(pd_plan_dp *d, pd_plan_dp_exact *e, int x)
{
    int f0 = e->f0, f1 = e->f1;
    const double *a = e->a + (size_t)x * e->per_x;
    double *top = e->top + (size_t)x * e->top_per_x, *inner = e->inner + (size_t)x * (e->inner_per_x + 1);
    int *top_pick = e->top_pick + (size_t)x * e->top_per_x;
    int *inner_pick = e->inner_pick + (size_t)x * (e->inner_per_x + 1);

    for (size_t q = 0; q < e->top_per_x; q++) {
        top[q] = PD_PLAN_DP_NONE;
        top_pick[q] = 0;
    }
    for (int total = 1; total <= f1; total++) {
        double *run = top + (size_t)total * e->dn;
        int *pick = top_pick + (size_t)total * e->dn;
        for (int c = total; c >= 1; c--)
            for (int m = f0; m >= (d->fewer ? 1 : f0); m--)
                for (int r = 1; r <= m; r++) {
                    size_t q = ex_cell(e, total - c, c, m, r);
                    double t = dp_transfer(d, d->cut[x], c * r, e->outer);
                    for (int w = 1; w <= e->wmax[q]; w++) {
                        double v = a[e->woff[q] + (size_t)w - 1];
                        int D = c * r * w;
                        v = t > v ? t : v;
                        if (a[e->woff[q] + (size_t)w - 1] != PD_PLAN_DP_NONE && dp_better(v, run[D])) {
                            run[D] = v;
                            pick[D] = (int)q * e->wcap + w;
                        }
                    }
                }
        prefix_min(run, pick, e->dn);
    }
    for (int M = 0; M < f1; M++)
        for (int c = 1; c + M <= f1; c++)
            for (int m = 1; m < f0; m++)
                for (int rp = 1; rp + m <= f0; rp++) {
                    size_t iq = ex_cell(e, M, c, m, rp);
                    double *run = inner + e->uoff[iq];
                    int *pick = inner_pick + e->uoff[iq];
                    for (int u = 0; u <= e->umax[iq]; u++)
                        run[u] = PD_PLAN_DP_NONE;
                    for (int r = 1; r <= m; r++) {
                        size_t q = ex_cell(e, M, c, m, r);
                        int level = c > 1 && r != rp ? e->outer : 0;
                        double t = dp_transfer(d, d->cut[x], c * (r < rp ? r : rp), level);
                        for (int w = 1; w <= e->wmax[q]; w++) {
                            double v = a[e->woff[q] + (size_t)w - 1];
                            if (v == PD_PLAN_DP_NONE)
                                continue;
                            keep(run, pick, (size_t)(r * w), t > v ? t : v, r * e->wcap + w);
                        }
                    }
                    prefix_min(run, pick, e->umax[iq] + 1);
                }
}

pd_status pd_plan_exact_solve(pd_plan_dp *d, int exclude_z, double *value)
{
    pd_plan_dp_exact *e = &d->ex;
    int f0 = e->f0, f1 = e->f1;
    const double *a = e->a;

    for (int x = d->n - 2; x >= 0; x--) {
        ex_state(d, e, x, exclude_z);
        if (x > 0)
            ex_boundaries(d, e, x);
    }
    *value = PD_PLAN_DP_NONE;
    e->start_cell = -1;
    for (int total = f1; total >= (d->fewer ? 1 : f1); total--)
        for (int c = total; c >= 1; c--)
            for (int m = f0; m >= (d->fewer ? 1 : f0); m--)
                for (int r = 1; r <= m; r++) {
                    size_t q = ex_cell(e, total - c, c, m, r);
                    for (int w = 1; w <= e->wmax[q]; w++)
                        if (dp_better(a[e->woff[q] + (size_t)w - 1], *value)) {
                            *value = a[e->woff[q] + (size_t)w - 1];
                            e->start_cell = (int)q;
                            e->start_w = w;
                        }
                }
    return PD_OK;
}

int pd_plan_exact_first_cut(const pd_plan_dp *d)
{
    const pd_plan_dp_exact *e = &d->ex;
    int code = e->a_z[e->woff[e->start_cell] + (size_t)e->start_w - 1];
    return code < 0 ? -code - 1 : code;
}

pd_status pd_plan_exact_rebuild(const pd_plan_dp *d, pd_plan_span_list *out)
{
    const pd_plan_dp_exact *e = &d->ex;
    int q = e->start_cell, w = e->start_w, F0 = e->F0;
    int r = q % F0, m = q / F0 % F0, c = q / F0 / F0 % e->F1, M = q / F0 / F0 / e->F1;
    int x = 0, group = 0, offset = 0;

    for (;;) {
        int code = e->a_z[(size_t)x * e->per_x + e->woff[q] + (size_t)w - 1], z = code < 0 ? -code - 1 : code;
        PD_CHECK(pd_plan_span_list_add_groups(out, x, z, group, c, e->f0, offset, r));
        if (z == d->n - 1)
            return PD_OK;
        if (code < 0) {
            long long allowed = (long long)(w - 1) * c * r;
            int next = e->top_pick[(size_t)z * e->top_per_x + (size_t)M * e->dn +
                                   (size_t)(allowed < e->dn ? allowed : e->dn - 1)];
            group += c;
            offset = 0;
            q = next / e->wcap;
            w = next % e->wcap;
        } else {
            size_t iq = ex_cell(e, M, c, m - r, r);
            int allowed = (w - 1) * r;
            int next = e->inner_pick[(size_t)z * (e->inner_per_x + 1) + e->uoff[iq] +
                                     (size_t)(allowed < e->umax[iq] ? allowed : e->umax[iq])];
            offset += r;
            q = (int)ex_cell(e, M, c, m - r, next / e->wcap);
            w = next % e->wcap;
        }
        r = q % F0;
        m = q / F0 % F0;
        c = q / F0 / F0 % e->F1;
        M = q / F0 / F0 / e->F1;
        x = z;
    }
}
