/* The original PipeDream optimizer (optimizer_graph_hierarchical.py at
 * msr-fiddle/pipedream 7db6a1c), exactly as ../shared/PIPEDREAM-OPTIMIZER.md
 * gives it: one dynamic program per level of the hierarchy over ranges of
 * antichain states, each level's best times becoming the next level's
 * stage times; then a top-down reconstruction into stages whose ranks
 * follow the hierarchy.
 *
 * Entries are A[i][j][m]: the best time of the states of row i (the stage
 * starts after state i-1) up to state j on m+1 workers of the level, with
 * the cut and worker split that reach it. Times are seconds, as in the
 * original; an undefined entry (the original's None) is +infinity, which
 * compares exactly as None does where the original compares. */
#include "config.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_int.h"

/* Entries of all levels together may not exceed this many bytes. */
#define PDP_MAX_TABLE_BYTES (4.0 * 1024 * 1024 * 1024)

/* One level's table. */
typedef struct pdp_level {
    int M;          /* workers of the level (groups of the level below) */
    double B;       /* bandwidth, bytes/s */
    double W;       /* workers per group of the level below (1 at level 0) */
    int rows;       /* N + 1 below the last level, 1 at the last */
    double *time;   /* [rows][N][M] */
    int32_t *split; /* cut state k; -1: one stage */
    int16_t *split_m, *replicas;
} pdp_level;

typedef struct pdp {
    const pd_plan_states *s;
    int N, n_levels;
    double *comp; /* compute per state prefix, seconds */
    bool straight, memc, fewer;
    double mem, R; /* R: 0 when no compression ratio is given */
    pdp_level lv[PD_PLAN_MAX_LEVELS];
} pdp;

static inline size_t pdp_at(const pdp *c, const pdp_level *L, int i, int j)
{
    return ((size_t)i * (size_t)c->N + (size_t)j) * (size_t)L->M;
}

/* T of level l for row i, column j: the time of the range as one unit of
 * the level (compute at level 0, the level below's best otherwise). */
static inline double pdp_range_time(const pdp *c, int l, int i, int j)
{
    if (l == 0) {
        if (i == 0)
            return c->comp[j];
        return j > i - 1 ? c->comp[j] - c->comp[i - 1] : INFINITY;
    }
    const pdp_level *B = &c->lv[l - 1];
    return B->time[pdp_at(c, B, i, j) + (size_t)(B->M - 1)];
}

/* Sum over the range of row i up to j of a per-state prefix. */
static inline double pdp_range_sum(const double *prefix, int i, int j)
{
    return i == 0 ? prefix[j] : prefix[j] - prefix[i - 1];
}

static inline int ceil_div(int a, int b)
{
    return (a + b - 1) / b;
}

/* ---- one level ---- */

static void pdp_init_entry(pdp *c, int l, int i, int j)
{
    pdp_level *L = &c->lv[l];
    size_t at = pdp_at(c, L, i, j);
    double T = pdp_range_time(c, l, i, j);
    double act = pdp_range_sum(c->s->act_bytes, i, j), par = pdp_range_sum(c->s->par_bytes, i, j);
    int max_m = c->straight ? 1 : L->M;

    for (int m = 0; m < max_m; m++) {
        double stash = ceil_div(L->M - (m + 1), m + 1) * (act + par);
        if ((c->memc && stash > c->mem) || T == INFINITY)
            continue;
        double sync = (4.0 * m * par) / (L->B * (m + 1));
        sync /= L->W;
        L->time[at + m] = (T + sync) / (m + 1);
        L->replicas[at + m] = (int16_t)(m + 1);
    }
}

/* A split candidate: the last stage after cut k on r workers, the rest on
 * m + 1 - r (entry m of A[i][k]). */
typedef struct pdp_cand {
    double t;
    int k, m, r;
} pdp_cand;

/* Per-thread scratch of a level with M workers: the best candidate per
 * worker count, and per worker count of the last stage its time and its
 * output transfer. */
typedef struct pdp_scratch {
    pdp_cand *cand;
    double *last, *out_t;
} pdp_scratch;

static void pdp_scratch_free(pdp_scratch *w)
{
    free(w->cand);
    free(w->last);
    free(w->out_t);
}

static bool pdp_scratch_alloc(pdp_scratch *w, int M)
{
    w->cand = malloc(sizeof(*w->cand) * (size_t)M);
    w->last = malloc(sizeof(double) * (size_t)M);
    w->out_t = malloc(sizeof(double) * (size_t)M);
    return w->cand && w->last && w->out_t;
}

/* First index of preds[j] holding a cut k >= i: in row i the others are
 * undefined (k < i), and none is a predecessor of state i - 1. */
static int pdp_first_cut(const pd_plan_states *s, int i, int j)
{
    const int *preds = s->preds[j];
    int lo = 0, hi = s->n_preds[j];
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (preds[mid] < i)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The time of the last stage after cut k up to j on m2 workers, at least
 * its transfers when a compression ratio is given (out_t holds those of
 * j; the max of the same terms is exact in any order). */
static double pdp_last_stage(const pdp *c, const pdp_level *L, int k, int j, double T, int m2, const double *out_t)
{
    const pd_plan_states *s = c->s;
    double par = s->par_bytes[j] - s->par_bytes[k];
    /* on one worker this is T itself, bit for bit */
    double last = m2 == 1 ? T : (T + (4.0 * (m2 - 1) * par) / (L->B * m2)) / m2;

    if (c->R > 0) {
        double in_t = (2.0 * s->out_act_bytes[k]) / (L->B * m2) / c->R;
        last = in_t > last ? in_t : last;
        last = out_t[m2] > last ? out_t[m2] : last;
    }
    return last;
}

/* What the original's memory check multiplies for the last stage after
 * cut k up to j: its activations and weights. */
static inline double pdp_stash(const pd_plan_states *s, int k, int j)
{
    return (s->act_bytes[j] - s->act_bytes[k]) + (s->par_bytes[j] - s->par_bytes[k]);
}

/* Whether the split (k, m2) of A[i][j][m] might beat `best`: not when the
 * prefix alone (prev) is no faster, nor when the last stage's compute
 * alone is clearly slower (last >= T / m2 for T >= 0; the margin covers
 * rounding), so that most splits skip the divisions. */
static inline bool pdp_may_win(double prev, double T, int m2, double best)
{
    return prev < best && !(T >= 0 && T > m2 * best * (1 + 1e-12));
}

/* cand[m] (m = 1..M-1): the best split of A[i][j][m] in the original's
 * order (cuts k increasing, then workers m2 of the last stage), the first
 * strictly best kept. */
static void pdp_candidates(const pdp *c, int l, int i, int j, pdp_scratch *w)
{
    const pdp_level *L = &c->lv[l];
    const pd_plan_states *s = c->s;
    const int M = L->M, max_m2 = c->straight ? 1 : M - 1;
    const bool straight = c->straight, memc = c->memc;
    const double *row = L->time + pdp_at(c, L, i, 0);
    pdp_cand *restrict cand = w->cand;
    double *restrict last = w->last;

    for (int m = 1; m < M; m++)
        cand[m] = (pdp_cand){INFINITY, -1, 0, 0};
    for (int m2 = 1; m2 <= max_m2; m2++)
        w->out_t[m2] = c->R > 0 && j < c->N - 1 ? (2.0 * s->out_act_bytes[j]) / (L->B * m2) / c->R : 0;
    for (int e = pdp_first_cut(s, i, j); e < s->n_preds[j]; e++) {
        int k = s->preds[j][e];
        double T = pdp_range_time(c, l, k + 1, j);
        if (T == INFINITY)
            continue;
        const double *prev = row + (size_t)k * (size_t)M;
        for (int m2 = 1; m2 <= max_m2; m2++)
            last[m2] = NAN; /* computed when needed */
        for (int m = 1; m < M; m++) {
            int top = straight ? 1 : m;
            for (int m2 = 1; m2 <= top; m2++) {
                if (!pdp_may_win(prev[m - m2], T, m2, cand[m].t))
                    continue;
                if (memc && pdp_stash(s, k, j) * ceil_div(M - (m + 1), m2) > c->mem)
                    continue;
                if (isnan(last[m2]))
                    last[m2] = pdp_last_stage(c, L, k, j, T, m2, w->out_t);
                double t = prev[m - m2] > last[m2] ? prev[m - m2] : last[m2];
                if (t < cand[m].t)
                    cand[m] = (pdp_cand){t, k, m - m2, m2};
            }
        }
    }
}

static void pdp_copy_entry(pdp_level *L, size_t to, size_t from)
{
    L->time[to] = L->time[from];
    L->split[to] = L->split[from];
    L->split_m[to] = L->split_m[from];
    L->replicas[to] = L->replicas[from];
}

/* A[i][j][m] for m = 1..M-1: the entry (or, with --use_fewer_machines, the
 * one on a worker less when strictly faster) unless a split beats it.
 * `w` is the thread's scratch. */
static void pdp_recur_column(pdp *c, int l, int i, int j, pdp_scratch *w)
{
    pdp_level *L = &c->lv[l];
    size_t at = pdp_at(c, L, i, j);

    pdp_candidates(c, l, i, j, w);
    for (int m = 1; m < L->M; m++) {
        size_t base = at + (size_t)m;
        if (c->fewer && L->time[base - 1] < L->time[base])
            base--;
        const pdp_cand *best = &w->cand[m];
        if (best->t < L->time[base]) {
            L->time[at + m] = best->t;
            L->split[at + m] = best->k;
            L->split_m[at + m] = (int16_t)best->m;
            L->replicas[at + m] = (int16_t)best->r;
        } else if (base != at + (size_t)m) {
            pdp_copy_entry(L, at + (size_t)m, base);
        }
    }
}

/* Solves level l. Rows are independent (each reads its own row and the
 * level below), so they run in parallel. */
static pd_status pdp_solve_level(pdp *c, int l)
{
    const pdp_level *L = &c->lv[l];
    int failed = 0;

    for (int i = 0; i < L->rows; i++)
        for (int j = i; j < c->N; j++)
            pdp_init_entry(c, l, i, j);
#pragma omp parallel if (L->rows > 1) reduction(| : failed)
    {
        pdp_scratch w;
        bool ok = pdp_scratch_alloc(&w, L->M);
        failed = !ok;
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < L->rows; i++)
            for (int j = i + 1; j < c->N && ok; j++)
                pdp_recur_column(c, l, i, j, &w);
        pdp_scratch_free(&w);
    }
    if (failed)
        return PD_ERROR(PD_ENOMEM, "pipedream plan: out of memory");
    return PD_OK;
}

/* ---- tables ---- */

static void pdp_free(pdp *c)
{
    for (int l = 0; l < c->n_levels; l++) {
        free(c->lv[l].time);
        free(c->lv[l].split);
        free(c->lv[l].split_m);
        free(c->lv[l].replicas);
    }
    free(c->comp);
}

static pd_status pdp_check(const pd_plan_states *s, const pd_plan_cluster *cl, const pd_plan_options *opts)
{
    if (cl->n_levels < 1 || cl->n_levels > PD_PLAN_MAX_LEVELS)
        return PD_ERROR(PD_EINVAL, "pipedream plan: %d levels, expected 1 to %d", cl->n_levels, PD_PLAN_MAX_LEVELS);
    for (int l = 0; l < cl->n_levels; l++) {
        const pd_plan_level *L = &cl->levels[l];
        if (L->fanout < 1 || L->fanout > INT16_MAX)
            return PD_ERROR(PD_EINVAL, "pipedream plan: level %d: fanout %d out of [1, %d]", l, L->fanout, INT16_MAX);
        if (!(L->bandwidth_bytes_per_s > 0) || !isfinite(L->bandwidth_bytes_per_s))
            return PD_ERROR(PD_EINVAL, "pipedream plan: level %d: bandwidth %g bytes/s must be > 0", l,
                            L->bandwidth_bytes_per_s);
    }
    if (!(opts->activation_compression_ratio >= 0) || !isfinite(opts->activation_compression_ratio))
        return PD_ERROR(PD_EINVAL, "pipedream plan: activation compression ratio %g must be >= 0 (0: not given)",
                        opts->activation_compression_ratio);
    if (!(opts->memory_bytes >= 0))
        return PD_ERROR(PD_EINVAL, "pipedream plan: memory %g bytes must be >= 0", opts->memory_bytes);
    double bytes = 0;
    for (int l = 0; l < cl->n_levels; l++) {
        double rows = l == cl->n_levels - 1 ? 1 : s->n + 1;
        bytes += rows * s->n * cl->levels[l].fanout * (sizeof(double) + sizeof(int32_t) + 2 * sizeof(int16_t));
    }
    if (bytes > PDP_MAX_TABLE_BYTES)
        return PD_ERROR(PD_ENOMEM, "pipedream plan: %d states on this hierarchy need %.1f GiB of tables (at most %.0f)",
                        s->n, bytes / (1024.0 * 1024 * 1024), PDP_MAX_TABLE_BYTES / (1024.0 * 1024 * 1024));
    return PD_OK;
}

static pd_status pdp_level_alloc(pdp *c, int l, const pd_plan_cluster *cl)
{
    pdp_level *L = &c->lv[l];
    L->M = cl->levels[l].fanout;
    L->B = cl->levels[l].bandwidth_bytes_per_s;
    L->W = l == 0 ? 1 : cl->levels[l - 1].fanout;
    L->rows = l == cl->n_levels - 1 ? 1 : c->N + 1;
    size_t n = (size_t)L->rows * (size_t)c->N * (size_t)L->M;
    L->time = malloc(sizeof(double) * n);
    L->split = malloc(sizeof(int32_t) * n);
    L->split_m = calloc(n, sizeof(int16_t));
    L->replicas = calloc(n, sizeof(int16_t));
    if (!L->time || !L->split || !L->split_m || !L->replicas)
        return PD_ERROR(PD_ENOMEM, "pipedream plan: out of memory for a table of %zu entries", n);
    for (size_t e = 0; e < n; e++) {
        L->time[e] = INFINITY;
        L->split[e] = -1;
    }
    return PD_OK;
}

static pd_status pdp_init(pdp *c, const pd_plan_states *s, const pd_plan_cluster *cl, const pd_plan_options *opts)
{
    memset(c, 0, sizeof(*c));
    c->s = s;
    c->N = s->n;
    c->straight = opts->straight_pipeline;
    c->memc = opts->use_memory_constraint;
    c->fewer = opts->use_fewer_machines;
    c->mem = opts->memory_bytes > 0 ? opts->memory_bytes : 16e9;
    c->R = opts->activation_compression_ratio;
    c->comp = malloc(sizeof(double) * (size_t)s->n);
    if (!c->comp)
        return PD_ERROR(PD_ENOMEM, "pipedream plan: out of memory");
    for (int j = 0; j < s->n; j++)
        c->comp[j] = s->compute_ms[j] / 1000.0;
    for (int l = 0; l < cl->n_levels; l++) {
        c->n_levels = l + 1;
        PD_CHECK(pdp_level_alloc(c, l, cl));
    }
    return PD_OK;
}

/* ---- reconstruction ---- */

/* One stage of a level: the states after `from` up to `to` on r workers. */
typedef struct pdp_cut {
    int from, to, r;
} pdp_cut;

/* The stages level l chose for the range after `from` up to `to`, in
 * pipeline order (at most the level's M); -1 when the range is undefined. */
static int pdp_reconstruct(const pdp *c, int l, int from, int to, pdp_cut *out)
{
    const pdp_level *L = &c->lv[l];
    int row = from + 1, n = 0, end = to;
    size_t at = pdp_at(c, L, row, to) + (size_t)(L->M - 1);

    if (L->time[at] == INFINITY)
        return -1;
    while (L->split[at] >= 0) {
        int k = L->split[at];
        out[n++] = (pdp_cut){k, end, L->replicas[at]};
        end = k;
        at = pdp_at(c, L, row, k) + (size_t)L->split_m[at];
    }
    out[n++] = (pdp_cut){from, end, L->replicas[at]};
    for (int a = 0, b = n - 1; a < b; a++, b--) {
        pdp_cut t = out[a];
        out[a] = out[b];
        out[b] = t;
    }
    return n;
}

/* What a stage of one level adds to the time of the flattened stages in
 * it: its replicas r divide (time below + sync); a stage after the first of
 * its range also waits for its transfers in and out (compression ratio
 * given only). Seconds; in/out < 0: none. */
typedef struct pdp_term {
    int r;
    double sync, in, out;
} pdp_term;

static pdp_term pdp_term_of(const pdp *c, int l, const pdp_cut *cut, bool first)
{
    const pdp_level *L = &c->lv[l];
    const pd_plan_states *s = c->s;
    double par = pdp_range_sum(s->par_bytes, cut->from + 1, cut->to);
    pdp_term t = {.r = cut->r, .in = -1, .out = -1};

    t.sync = (4.0 * (cut->r - 1) * par) / (L->B * cut->r);
    if (first)
        t.sync /= L->W; /* the original divides by W only in a range's first stage */
    if (!first && c->R > 0) {
        t.in = (2.0 * s->out_act_bytes[cut->from]) / (L->B * cut->r) / c->R;
        if (cut->to < c->N - 1)
            t.out = (2.0 * s->out_act_bytes[cut->to]) / (L->B * cut->r) / c->R;
    }
    return t;
}

/* The flattened stages: spans with their ranks and, per level, the term of
 * the level's stage that holds them. */
typedef struct pdp_flat {
    int n, cap, n_levels;
    pd_plan_span *spans;
    pdp_term *terms; /* [cap][n_levels] */
} pdp_flat;

static void pdp_flat_free(pdp_flat *f)
{
    for (int p = 0; p < f->n; p++)
        free(f->spans[p].ranks);
    free(f->spans);
    free(f->terms);
}

/* Appends a flattened stage; takes `ranks`. */
static pd_status pdp_flat_add(pdp_flat *f, const pdp_cut *cut, int *ranks, int n_ranks, const pdp_term *chain)
{
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 16;
        pd_plan_span *spans = realloc(f->spans, sizeof(*spans) * (size_t)cap);
        if (spans)
            f->spans = spans;
        pdp_term *terms = spans ? realloc(f->terms, sizeof(*terms) * (size_t)cap * (size_t)f->n_levels) : NULL;
        if (!terms) {
            free(ranks);
            return PD_ERROR(PD_ENOMEM, "pipedream plan: out of memory");
        }
        f->terms = terms;
        f->cap = cap;
    }
    f->spans[f->n] = (pd_plan_span){cut->from, cut->to, n_ranks, ranks};
    memcpy(f->terms + (size_t)f->n * (size_t)f->n_levels, chain, sizeof(*chain) * (size_t)f->n_levels);
    f->n++;
    return PD_OK;
}

/* Splits the range after `from` up to `to` with level l, replicated over
 * the level-l groups starting at ranks bases[0..n_bases): a stage on r
 * groups of the level below takes r consecutive ones in each, and the
 * level below splits it again inside them. */
static pd_status pdp_place(const pdp *c, const pd_plan_cluster *cl, int l, int from, int to, const int *bases,
                           int n_bases, pdp_term *chain, pdp_flat *flat)
{
    pdp_cut *cuts = malloc(sizeof(*cuts) * (size_t)c->lv[l].M);
    int group = 1, unit = 0, n;
    pd_status st = PD_OK;

    if (!cuts)
        return PD_ERROR(PD_ENOMEM, "pipedream plan: out of memory");
    for (int q = 0; q < l; q++)
        group *= cl->levels[q].fanout;
    n = pdp_reconstruct(c, l, from, to, cuts);
    if (n < 0)
        st = PD_ERROR(PD_ENOTFOUND, "pipedream plan: level %d has no plan for states %d..%d", l, from + 1, to);
    for (int p = 0; p < n && st == PD_OK; p++) {
        int r = cuts[p].r, *ranks = malloc(sizeof(int) * (size_t)n_bases * (size_t)r);
        if (!ranks) {
            st = PD_ERROR(PD_ENOMEM, "pipedream plan: out of memory");
            break;
        }
        for (int b = 0; b < n_bases; b++)
            for (int g = 0; g < r; g++)
                ranks[b * r + g] = bases[b] + (unit + g) * group;
        chain[l] = pdp_term_of(c, l, &cuts[p], p == 0);
        if (l == 0) {
            st = pdp_flat_add(flat, &cuts[p], ranks, n_bases * r, chain);
        } else {
            st = pdp_place(c, cl, l - 1, cuts[p].from, cuts[p].to, ranks, n_bases * r, chain, flat);
            free(ranks);
        }
        unit += r;
    }
    free(cuts);
    return st;
}

/* ---- the plan's predicted fields ---- */

/* The model's terms of flattened stage p, level by level upwards: a level's
 * stage time is (time below + sync) / r, at least its transfers. Compute
 * and sync are kept so that (compute + sync) / replicas is the compute
 * term; recv and send are the transfer terms carried up the same way. */
static void pdp_fill_stage(const pdp *c, const pdp_flat *f, int p, pd_plan_stage *st)
{
    const pd_plan_span *span = &f->spans[p];
    const pdp_term *chain = f->terms + (size_t)p * (size_t)f->n_levels;
    double C = pdp_range_time(c, 0, span->from_state + 1, span->to_state);
    double v = C, S = 0, recv = -1, send = -1;
    int R = 1;

    for (int l = 0; l < f->n_levels; l++) {
        const pdp_term *t = &chain[l];
        v = (v + t->sync) / t->r;
        S += t->sync * R;
        R *= t->r;
        recv = recv >= 0 ? (recv + t->sync) / t->r : -1;
        send = send >= 0 ? (send + t->sync) / t->r : -1;
        if (t->in >= 0) {
            v = t->in > v ? t->in : v;
            recv = t->in > recv ? t->in : recv;
        }
        if (t->out >= 0) {
            v = t->out > v ? t->out : v;
            send = t->out > send ? t->out : send;
        }
    }
    st->compute_ms = C * 1e3;
    st->sync_ms = S * 1e3;
    st->recv_ms = recv > 0 ? recv * 1e3 : 0;
    st->send_ms = send > 0 ? send * 1e3 : 0;
    st->time_ms = v * 1e3;
    double compute_term = (C + S) / R;
    if (recv > compute_term || send > compute_term)
        st->bottleneck = recv >= send ? PD_PLAN_TERM_RECV : PD_PLAN_TERM_SEND;
    else
        st->bottleneck = C >= S ? PD_PLAN_TERM_COMPUTE : PD_PLAN_TERM_SYNC;
}

/* In-flight minibatches (NOAM-like: workers of this and later stages over
 * the replicas) and memory as the original's check sees it: in_flight - 1
 * stashed copies of the stage's activations and weights, no optimizer
 * state. */
static void pdp_fill_memory(const pdp *c, const pdp_flat *f, pd_plan *plan)
{
    int later = 0;
    for (int p = plan->n_stages - 1; p >= 0; p--) {
        pd_plan_stage *st = &plan->stages[p];
        const pd_plan_span *span = &f->spans[p];
        later += st->replicas;
        st->in_flight = ceil_div(later, st->replicas);
        st->weight_versions = st->in_flight - 1;
        st->weight_bytes = st->weight_versions * pdp_range_sum(c->s->par_bytes, span->from_state + 1, span->to_state);
        st->activation_bytes =
            st->weight_versions * pdp_range_sum(c->s->act_bytes, span->from_state + 1, span->to_state);
        st->optimizer_bytes = 0;
        st->memory_bytes = st->weight_bytes + st->activation_bytes;
    }
}

/* Data parallelism over the whole hierarchy, as the original compares. */
static double pdp_data_parallel(const pdp *c, const pd_plan_cluster *cl)
{
    double t = c->comp[c->N - 1], params = c->s->par_bytes[c->N - 1];
    for (int l = 0; l < cl->n_levels; l++) {
        double n = cl->levels[l].fanout, W = l == 0 ? 1 : cl->levels[l - 1].fanout;
        double sync = ((4 * (n - 1) * params) / (cl->levels[l].bandwidth_bytes_per_s * n)) / W;
        t = (t + sync) / n;
    }
    return t;
}

static pd_status pdp_fill_plan(const pdp *c, const pd_plan_graph *g, const pd_plan_cluster *cl, const pdp_flat *f,
                               pd_plan *plan)
{
    PD_CHECK(pd_plan_set_stages(plan, g, c->s, f->n, f->spans));
    plan->cost_model = PD_PLAN_COST_PIPEDREAM;
    plan->cluster = *cl;
    plan->workers = pd_plan_cluster_workers(cl);
    const pdp_level *top = &c->lv[c->n_levels - 1];
    plan->time_ms = top->time[pdp_at(c, top, 0, c->N - 1) + (size_t)(top->M - 1)] * 1e3;
    plan->single_worker_ms = c->comp[c->N - 1] * 1e3;
    plan->data_parallel_ms = pdp_data_parallel(c, cl) * 1e3;
    plan->bottleneck_stage = 0;
    for (int p = 0; p < plan->n_stages; p++) {
        pdp_fill_stage(c, f, p, &plan->stages[p]);
        if (plan->stages[p].time_ms > plan->stages[plan->bottleneck_stage].time_ms)
            plan->bottleneck_stage = p;
    }
    pdp_fill_memory(c, f, plan);
    return PD_OK;
}

pd_status pd_plan_solve_pipedream(const pd_profile *profile, const pd_plan_graph *g, const pd_plan_states *s,
                                  const pd_plan_cluster *cluster, const pd_plan_options *opts, pd_plan *plan)
{
    pdp c;
    pdp_flat flat = {.n_levels = cluster->n_levels};
    pdp_term chain[PD_PLAN_MAX_LEVELS];
    int base = 0;
    pd_status st;

    (void)profile;
    PD_CHECK(pdp_check(s, cluster, opts));
    PD_CHECK_GOTO(pdp_init(&c, s, cluster, opts), st, out_free);
    for (int l = 0; l < c.n_levels; l++)
        PD_CHECK_GOTO(pdp_solve_level(&c, l), st, out_free);
    const pdp_level *top = &c.lv[c.n_levels - 1];
    if (top->time[pdp_at(&c, top, 0, c.N - 1) + (size_t)(top->M - 1)] == INFINITY) {
        if (c.memc)
            st = PD_ERROR(PD_ENOTFOUND,
                          "no plan fits in %.0f bytes of device memory per worker (PipeDream's stash of activations "
                          "and weights)",
                          c.mem);
        else
            st = PD_ERROR(PD_ENOTFOUND, "no plan: a straight pipeline of %d states cannot use every worker", c.N);
        goto out_free;
    }
    PD_CHECK_GOTO(pdp_place(&c, cluster, c.n_levels - 1, -1, c.N - 1, &base, 1, chain, &flat), st, out_free);
    PD_CHECK_GOTO(pdp_fill_plan(&c, g, cluster, &flat, plan), st, out_free);
out_free:
    pdp_flat_free(&flat);
    pdp_free(&c);
    return st;
}
