/* PipeDream's antichain DAG (PIPEDREAM-OPTIMIZER.md steps 2, 3 and 5, after
 * the original's Graph.antichain_dag):
 *
 * - The augmented form of an antichain adds, for each member a, every
 *   predecessor p of a with an output edge to a node that is neither a nor
 *   a predecessor of a (outputs still live after the cut).
 * - A successor replaces one augmented member u by an output v of u that is
 *   not in the antichain and has no successor in the augmented set, then
 *   drops the members that are predecessors of other members.
 * - States are the distinct antichains reached breadth first from the first
 *   source, numbered by the reverse post-order of a depth-first walk from
 *   the first state that follows edges in the order they were found.
 *
 * The original keeps the augmented extras in a Python set, whose order is
 * arbitrary; here they come in increasing node order, before the
 * antichain's own members in the order their replacements left them.
 * Nodes, antichains and prefixes are bit sets over the graph's nodes. */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_int.h"

/* Most states counted before giving up (pd_plan_states_count), and how
 * far a refused build counts to say how many there are. */
#define ENUM_HARD_LIMIT (1 << 22)
#define ENUM_REPORT_LIMIT 250000

static inline bool bit_get(const uint64_t *set, int i)
{
    return (set[i >> 6] >> (i & 63)) & 1u;
}

static inline void bit_set(uint64_t *set, int i)
{
    set[i >> 6] |= (uint64_t)1 << (i & 63);
}

static inline void bit_clear(uint64_t *set, int i)
{
    set[i >> 6] &= ~((uint64_t)1 << (i & 63));
}

static inline bool bits_meet(const uint64_t *a, const uint64_t *b, int words)
{
    for (int w = 0; w < words; w++)
        if (a[w] & b[w])
            return true;
    return false;
}

/* Calls out[k++] = i for each set bit i, increasing; returns k. */
static int bits_list(const uint64_t *set, int words, int *out)
{
    int k = 0;
    for (int w = 0; w < words; w++)
        for (uint64_t x = set[w]; x; x &= x - 1)
            out[k++] = w * 64 + __builtin_ctzll(x);
    return k;
}

/* ---- per-node relations ---- */

/* Transitive predecessors and successors of each node, and the extras each
 * node brings into an augmented antichain. */
typedef struct ac_nodes {
    int n, words;
    uint64_t *pred, *succ, *extra; /* [n * words] */
} ac_nodes;

static void ac_nodes_free(ac_nodes *r)
{
    free(r->pred);
    free(r->succ);
    free(r->extra);
}

static void ac_nodes_extra(const pd_plan_graph *g, ac_nodes *r)
{
    int *preds = malloc(sizeof(int) * (size_t)(g->n + 1));
    for (int a = 0; a < g->n && preds; a++) {
        const uint64_t *pa = r->pred + (size_t)a * r->words;
        int np = bits_list(pa, r->words, preds);
        for (int i = 0; i < np; i++) {
            int p = preds[i];
            for (int e = 0; e < g->n_out[p]; e++) {
                int w = g->out[p][e];
                if (w != a && !bit_get(pa, w)) {
                    bit_set(r->extra + (size_t)a * r->words, p);
                    break;
                }
            }
        }
    }
    free(preds);
}

static pd_status ac_nodes_init(const pd_plan_graph *g, ac_nodes *r)
{
    r->n = g->n;
    r->words = (g->n + 63) / 64;
    size_t sz = (size_t)g->n * (size_t)r->words;
    r->pred = calloc(sz, sizeof(uint64_t));
    r->succ = calloc(sz, sizeof(uint64_t));
    r->extra = calloc(sz, sizeof(uint64_t));
    if (!r->pred || !r->succ || !r->extra) {
        ac_nodes_free(r);
        return PD_ERROR(PD_ENOMEM, "antichain states: out of memory");
    }
    for (int v = 0; v < g->n; v++) {
        uint64_t *pv = r->pred + (size_t)v * r->words;
        for (int e = 0; e < g->n_in[v]; e++) {
            int u = g->in[v][e];
            const uint64_t *pu = r->pred + (size_t)u * r->words;
            for (int w = 0; w < r->words; w++)
                pv[w] |= pu[w];
            bit_set(pv, u);
        }
    }
    for (int v = g->n - 1; v >= 0; v--) {
        uint64_t *sv = r->succ + (size_t)v * r->words;
        for (int e = 0; e < g->n_out[v]; e++) {
            int x = g->out[v][e];
            const uint64_t *sx = r->succ + (size_t)x * r->words;
            for (int w = 0; w < r->words; w++)
                sv[w] |= sx[w];
            bit_set(sv, x);
        }
    }
    ac_nodes_extra(g, r);
    return PD_OK;
}

/* ---- enumeration ---- */

/* The states in discovery order, their antichains and the edges found. */
typedef struct ac_enum {
    const pd_plan_graph *g;
    const ac_nodes *r;
    int words, limit;
    int n, cap;
    uint64_t *key;         /* [cap * words]: each state's antichain */
    int *list_off;         /* [cap]: its members in list order, in pool */
    int *list_len;
    int *pool;
    size_t pool_len, pool_cap;
    int *slot;             /* hash table of state ids, -1: empty */
    size_t n_slots;
    int *edge_off;         /* [cap + 1]: edges of state s in edge_to[edge_off[s]..] */
    int *edge_to;
    size_t n_edges, edge_cap;
    /* scratch for one expansion */
    int *aug, *next;
    uint64_t *aug_set, *next_set;
} ac_enum;

static void ac_enum_free(ac_enum *e)
{
    free(e->key);
    free(e->list_off);
    free(e->list_len);
    free(e->pool);
    free(e->slot);
    free(e->edge_off);
    free(e->edge_to);
    free(e->aug);
    free(e->next);
    free(e->aug_set);
    free(e->next_set);
}

static size_t key_hash(const uint64_t *key, int words)
{
    uint64_t h = 0x9e3779b97f4a7c15u;
    for (int w = 0; w < words; w++) {
        h ^= key[w];
        h *= 0xff51afd7ed558ccdu;
        h ^= h >> 33;
    }
    return (size_t)h;
}

/* Makes room for `need` ints in *list (capacity *cap), doubling. */
static bool grow_ints(int **list, size_t *cap, size_t need)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    int *q = realloc(*list, sizeof(int) * c);
    if (!q)
        return false;
    *list = q;
    *cap = c;
    return true;
}

/* Makes room for one more state, doubling the per-state arrays. */
static bool ac_enum_grow_states(ac_enum *e)
{
    if (e->n < e->cap)
        return true;
    size_t cap = e->cap ? 2 * (size_t)e->cap : 64;
    uint64_t *key = realloc(e->key, sizeof(uint64_t) * (size_t)e->words * cap);
    if (key)
        e->key = key;
    int *off = key ? realloc(e->list_off, sizeof(int) * cap) : NULL;
    if (off)
        e->list_off = off;
    int *len = off ? realloc(e->list_len, sizeof(int) * cap) : NULL;
    if (len)
        e->list_len = len;
    int *edge_off = len ? realloc(e->edge_off, sizeof(int) * (cap + 1)) : NULL;
    if (!edge_off)
        return false;
    e->edge_off = edge_off;
    e->cap = (int)cap;
    return true;
}

/* Doubles the hash table once it is half full. */
static bool ac_enum_rehash(ac_enum *e)
{
    if ((size_t)e->n * 2 < e->n_slots)
        return true;
    size_t n_slots = e->n_slots ? e->n_slots * 2 : 1024;
    int *slot = malloc(sizeof(int) * n_slots);
    if (!slot)
        return false;
    memset(slot, 0xff, sizeof(int) * n_slots);
    for (int s = 0; s < e->n; s++) {
        size_t h = key_hash(e->key + (size_t)s * e->words, e->words) & (n_slots - 1);
        while (slot[h] >= 0)
            h = (h + 1) & (n_slots - 1);
        slot[h] = s;
    }
    free(e->slot);
    e->slot = slot;
    e->n_slots = n_slots;
    return true;
}

/* The state whose antichain is `list` (len members; key its bit set),
 * added if new. -1: out of memory; -2: over the limit. */
static int ac_enum_intern(ac_enum *e, const int *list, int len, const uint64_t *key)
{
    size_t h = key_hash(key, e->words) & (e->n_slots - 1);
    for (; e->slot[h] >= 0; h = (h + 1) & (e->n_slots - 1))
        if (memcmp(e->key + (size_t)e->slot[h] * e->words, key, sizeof(uint64_t) * (size_t)e->words) == 0)
            return e->slot[h];
    if (e->n >= e->limit)
        return -2;
    if (!ac_enum_grow_states(e) || !grow_ints(&e->pool, &e->pool_cap, e->pool_len + (size_t)len))
        return -1;
    int s = e->n++;
    memcpy(e->key + (size_t)s * e->words, key, sizeof(uint64_t) * (size_t)e->words);
    e->list_off[s] = (int)e->pool_len;
    e->list_len[s] = len;
    memcpy(e->pool + e->pool_len, list, sizeof(int) * (size_t)len);
    e->pool_len += (size_t)len;
    e->slot[h] = s;
    if (!ac_enum_rehash(e))
        return -1;
    return s;
}

/* aug (returned length) = the augmented antichain of state s: its extras
 * increasing, then its members in list order; aug_set the same as bits. */
static int ac_enum_augment(ac_enum *e, int s)
{
    const uint64_t *key = e->key + (size_t)s * e->words;
    const int *list = e->pool + e->list_off[s];
    int len = e->list_len[s], words = e->words;

    memset(e->aug_set, 0, sizeof(uint64_t) * (size_t)words);
    for (int i = 0; i < len; i++) {
        const uint64_t *x = e->r->extra + (size_t)list[i] * words;
        for (int w = 0; w < words; w++)
            e->aug_set[w] |= x[w];
    }
    int n = bits_list(e->aug_set, words, e->aug);
    for (int w = 0; w < words; w++)
        e->aug_set[w] |= key[w];
    memcpy(e->aug + n, list, sizeof(int) * (size_t)len);
    return n + len;
}

/* The antichain after replacing aug[at] by v, in e->next (returned length)
 * and e->next_set (its bit set): members with a successor in the set go. */
static int ac_enum_replace(ac_enum *e, int n_aug, int at, int v)
{
    int words = e->words, len = 0;
    memcpy(e->next_set, e->aug_set, sizeof(uint64_t) * (size_t)words);
    bit_clear(e->next_set, e->aug[at]);
    bit_set(e->next_set, v);
    for (int i = 0; i < n_aug; i++) {
        int x = i == at ? v : e->aug[i];
        if (!bits_meet(e->r->succ + (size_t)x * words, e->next_set, words))
            e->next[len++] = x;
    }
    memset(e->next_set, 0, sizeof(uint64_t) * (size_t)words);
    for (int i = 0; i < len; i++)
        bit_set(e->next_set, e->next[i]);
    return len;
}

static bool ac_enum_add_edge(ac_enum *e, int to)
{
    if (!grow_ints(&e->edge_to, &e->edge_cap, e->n_edges + 1))
        return false;
    e->edge_to[e->n_edges++] = to;
    return true;
}

/* Finds the successors of state s and records the edges to them. */
static pd_status ac_enum_expand(ac_enum *e, int s)
{
    const pd_plan_graph *g = e->g;
    int n_aug = ac_enum_augment(e, s);
    const uint64_t *key = e->key + (size_t)s * e->words;

    e->edge_off[s] = (int)e->n_edges;
    for (int i = 0; i < n_aug; i++) {
        int u = e->aug[i];
        for (int k = 0; k < g->n_out[u]; k++) {
            int v = g->out[u][k];
            if (bit_get(key, v) || bits_meet(e->r->succ + (size_t)v * e->words, e->aug_set, e->words))
                continue;
            int len = ac_enum_replace(e, n_aug, i, v);
            int t = ac_enum_intern(e, e->next, len, e->next_set);
            key = e->key + (size_t)s * e->words; /* the keys may have moved */
            if (t == -2)
                return PD_ERROR(PD_EINVAL, "antichain states: more than %d; collapse the graph's branches first",
                                e->limit);
            if (t < 0 || !ac_enum_add_edge(e, t))
                return PD_ERROR(PD_ENOMEM, "antichain states: out of memory");
        }
    }
    e->edge_off[s + 1] = (int)e->n_edges;
    return PD_OK;
}

/* Breadth first from the antichain of the first source (node 0 has no
 * inputs: the graph's order is topological). */
static pd_status ac_enum_run(const pd_plan_graph *g, const ac_nodes *r, int limit, ac_enum *e)
{
    memset(e, 0, sizeof(*e));
    e->g = g;
    e->r = r;
    e->words = r->words;
    e->limit = limit;
    e->aug = malloc(sizeof(int) * (size_t)(g->n + 1));
    e->next = malloc(sizeof(int) * (size_t)(g->n + 1));
    e->aug_set = calloc((size_t)e->words, sizeof(uint64_t));
    e->next_set = calloc((size_t)e->words, sizeof(uint64_t));
    if (!e->aug || !e->next || !e->aug_set || !e->next_set || !ac_enum_rehash(e))
        return PD_ERROR(PD_ENOMEM, "antichain states: out of memory");
    int first = 0;
    bit_set(e->next_set, first);
    if (ac_enum_intern(e, &first, 1, e->next_set) < 0)
        return PD_ERROR(PD_ENOMEM, "antichain states: out of memory");
    for (int s = 0; s < e->n; s++)
        PD_CHECK(ac_enum_expand(e, s));
    return PD_OK;
}

pd_status pd_plan_states_count(const pd_plan_graph *g, int limit, int *count)
{
    ac_nodes r;
    ac_enum e;
    pd_status st;

    if (limit < 1 || limit > ENUM_HARD_LIMIT)
        return PD_ERROR(PD_EINVAL, "antichain states: limit %d out of [1, %d]", limit, ENUM_HARD_LIMIT);
    PD_CHECK(ac_nodes_init(g, &r));
    st = ac_enum_run(g, &r, limit, &e);
    if (st == PD_OK || e.n >= limit) {
        *count = st == PD_OK ? e.n : limit + 1;
        st = PD_OK;
    }
    ac_enum_free(&e);
    ac_nodes_free(&r);
    return st;
}

/* ---- numbering ---- */

/* number[s]: the position of discovered state s in the reverse post-order
 * of a depth-first walk from state 0 that takes edges in the order found. */
static pd_status ac_number(const ac_enum *e, int *number)
{
    int *stack = malloc(sizeof(int) * (size_t)e->n), *next = malloc(sizeof(int) * (size_t)e->n);
    char *seen = calloc((size_t)e->n, 1);
    int depth = 0, finished = 0;

    if (!stack || !next || !seen) {
        free(stack);
        free(next);
        free(seen);
        return PD_ERROR(PD_ENOMEM, "antichain states: out of memory");
    }
    stack[depth++] = 0;
    seen[0] = 1;
    next[0] = e->edge_off[0];
    while (depth > 0) {
        int s = stack[depth - 1];
        if (next[s] < e->edge_off[s + 1]) {
            int t = e->edge_to[next[s]++];
            if (!seen[t]) {
                seen[t] = 1;
                next[t] = e->edge_off[t];
                stack[depth++] = t;
            }
            continue;
        }
        number[s] = e->n - 1 - finished++;
        depth--;
    }
    free(stack);
    free(next);
    free(seen);
    return PD_OK;
}

/* ---- the states' tables ---- */

void pd_plan_states_destroy(pd_plan_states *s)
{
    if (!s)
        return;
    free(s->compute_ms);
    free(s->act_bytes);
    free(s->par_bytes);
    free(s->out_act_bytes);
    free(s->cut_bytes);
    if (s->prefix)
        free(s->prefix[0]);
    free(s->prefix);
    free(s->n_preds);
    if (s->preds)
        free(s->preds[0]);
    free(s->preds);
    if (s->is_pred)
        free(s->is_pred[0]);
    free(s->is_pred);
    free(s->n_antichain);
    if (s->antichain)
        free(s->antichain[0]);
    free(s->antichain);
    free(s);
}

/* rows[i] = block + i * width, for n rows of `width` elements of `elem`
 * bytes in one zeroed block. */
static void **rows_alloc(int n, size_t width, size_t elem)
{
    void **rows = malloc(sizeof(void *) * (size_t)n);
    char *block = calloc((size_t)n * width + 1, elem);
    if (!rows || !block) {
        free(rows);
        free(block);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        rows[i] = block + (size_t)i * width * elem;
    return rows;
}

static pd_plan_states *states_alloc(int n, int node_words, int n_members)
{
    pd_plan_states *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->n = n;
    s->words = node_words;
    s->compute_ms = calloc((size_t)n, sizeof(double));
    s->act_bytes = calloc((size_t)n, sizeof(double));
    s->par_bytes = calloc((size_t)n, sizeof(double));
    s->out_act_bytes = calloc((size_t)n, sizeof(double));
    s->cut_bytes = calloc((size_t)n, sizeof(double));
    s->n_preds = calloc((size_t)n, sizeof(int));
    s->n_antichain = calloc((size_t)n, sizeof(int));
    s->prefix = (uint64_t **)rows_alloc(n, (size_t)node_words, sizeof(uint64_t));
    s->is_pred = (uint64_t **)rows_alloc(n, (size_t)(n + 63) / 64, sizeof(uint64_t));
    s->antichain = malloc(sizeof(int *) * (size_t)n);
    if (s->antichain && !(s->antichain[0] = malloc(sizeof(int) * (size_t)(n_members + 1)))) {
        free(s->antichain);
        s->antichain = NULL;
    }
    if (!s->compute_ms || !s->act_bytes || !s->par_bytes || !s->out_act_bytes || !s->cut_bytes || !s->n_preds ||
        !s->n_antichain || !s->prefix || !s->is_pred || !s->antichain) {
        pd_plan_states_destroy(s);
        return NULL;
    }
    return s;
}

/* Antichain (increasing), prefix and the sums over it of state j, which
 * was discovered as state d; `aug` (words) and `nodes` (n) are scratch. */
static void states_fill_one(pd_plan_states *s, int j, const ac_enum *e, int d, uint64_t *aug, int *nodes)
{
    const pd_plan_graph *g = e->g;
    const ac_nodes *r = e->r;
    int words = r->words;
    const uint64_t *key = e->key + (size_t)d * words;
    uint64_t *prefix = s->prefix[j];

    s->n_antichain[j] = bits_list(key, words, s->antichain[j]);
    memcpy(aug, key, sizeof(uint64_t) * (size_t)words);
    memcpy(prefix, key, sizeof(uint64_t) * (size_t)words);
    for (int i = 0; i < s->n_antichain[j]; i++) {
        int a = s->antichain[j][i];
        const uint64_t *pa = r->pred + (size_t)a * words, *xa = r->extra + (size_t)a * words;
        for (int w = 0; w < words; w++) {
            prefix[w] |= pa[w];
            aug[w] |= xa[w];
        }
    }
    /* The original's state holds the augmented antichain, and its output
     * activation is summed over all of it: outputs still live. */
    int n_aug = bits_list(aug, words, nodes);
    for (int i = 0; i < n_aug; i++)
        s->out_act_bytes[j] += g->act_bytes[nodes[i]];
    int n_prefix = bits_list(prefix, words, nodes);
    for (int i = 0; i < n_prefix; i++) {
        int v = nodes[i];
        pd_plan_exit one;
        const pd_plan_exit *exits;
        int n_exits = pd_plan_graph_exits(g, v, &one, &exits);
        s->compute_ms[j] += g->fwd_ms[v] + g->bwd_ms[v];
        s->act_bytes[j] += g->act_bytes[v];
        s->par_bytes[j] += g->par_bytes[v];
        for (int x = 0; x < n_exits; x++)
            for (int k = 0; k < exits[x].n_to; k++)
                if (!bit_get(prefix, exits[x].to[k])) {
                    s->cut_bytes[j] += exits[x].bytes;
                    break;
                }
    }
    /* A coarsened node's activation sums all its members' outputs, most of
     * them read inside it: what is live after its cut is what crosses. */
    if (g->exits)
        s->out_act_bytes[j] = s->cut_bytes[j];
}

/* Antichains, prefixes and sums of all states, renumbered. */
static pd_status states_fill(pd_plan_states *s, const ac_enum *e, const int *number)
{
    uint64_t *aug = malloc(sizeof(uint64_t) * (size_t)e->words);
    int *nodes = malloc(sizeof(int) * (size_t)(e->g->n + 1));
    int *at = s->antichain[0];

    if (!aug || !nodes) {
        free(aug);
        free(nodes);
        return PD_ERROR(PD_ENOMEM, "antichain states: out of memory");
    }
    int *order = malloc(sizeof(int) * (size_t)s->n);
    if (!order) {
        free(aug);
        free(nodes);
        return PD_ERROR(PD_ENOMEM, "antichain states: out of memory");
    }
    for (int d = 0; d < e->n; d++)
        order[number[d]] = d;
    for (int j = 0; j < s->n; j++) {
        s->antichain[j] = at;
        at += e->list_len[order[j]];
        states_fill_one(s, j, e, order[j], aug, nodes);
    }
    free(order);
    free(aug);
    free(nodes);
    return PD_OK;
}

/* Transitive predecessors of each state in the renumbered DAG: edges go
 * from lower to higher numbers, so one pass in order suffices. */
static pd_status states_preds(pd_plan_states *s, const ac_enum *e, const int *number)
{
    int n = s->n, swords = (n + 63) / 64;
    size_t total = 0;

    for (int d = 0; d < e->n; d++)
        for (int k = e->edge_off[d]; k < e->edge_off[d + 1]; k++) {
            uint64_t *to = s->is_pred[number[e->edge_to[k]]];
            bit_set(to, number[d]);
        }
    /* is_pred[j] holds the direct predecessors so far; close it in order. */
    for (int j = 0; j < n; j++) {
        uint64_t *pj = s->is_pred[j];
        for (int w = 0; w < (j >> 6) + 1 && w < swords; w++)
            for (uint64_t x = pj[w]; x; x &= x - 1) {
                const uint64_t *pk = s->is_pred[w * 64 + __builtin_ctzll(x)];
                for (int v = 0; v < swords; v++)
                    pj[v] |= pk[v];
            }
        for (int w = 0; w < swords; w++)
            total += (size_t)__builtin_popcountll(pj[w]);
    }
    s->preds = malloc(sizeof(int *) * (size_t)n);
    int *block = malloc(sizeof(int) * (total + 1));
    if (!s->preds || !block) {
        free(block);
        return PD_ERROR(PD_ENOMEM, "antichain states: out of memory for %zu predecessors", total);
    }
    for (int j = 0; j < n; j++) {
        s->preds[j] = block;
        s->n_preds[j] = bits_list(s->is_pred[j], swords, block);
        block += s->n_preds[j];
    }
    return PD_OK;
}

/* Every node must be in the last state's prefix: the antichains grow from
 * the first source and reach only what is connected to it. */
static pd_status states_check_cover(const pd_plan_states *s, const pd_plan_graph *g)
{
    const uint64_t *last = s->prefix[s->n - 1];
    for (int v = 0; v < g->n; v++)
        if (!bit_get(last, v))
            return PD_ERROR(PD_EINVAL,
                            "antichain states: graph node %d (profile node %d) is not reached from the first "
                            "source; the graph is in pieces",
                            v, g->members[v][0]);
    return PD_OK;
}

pd_status pd_plan_states_build(const pd_plan_graph *g, pd_plan_states **out)
{
    ac_nodes r;
    ac_enum e;
    pd_plan_states *s = NULL;
    int *number = NULL;
    pd_status st;

    PD_CHECK(ac_nodes_init(g, &r));
    st = ac_enum_run(g, &r, PD_PLAN_MAX_STATES, &e);
    if (st != PD_OK && e.n >= PD_PLAN_MAX_STATES) {
        int count = 0;
        if (pd_plan_states_count(g, ENUM_REPORT_LIMIT, &count) == PD_OK)
            st = PD_ERROR(PD_EINVAL,
                          "antichain states: the graph has %s%d, more than the %d the planner can hold; "
                          "collapse its branches first, or coarsen it",
                          count > ENUM_REPORT_LIMIT ? "more than " : "",
                          count > ENUM_REPORT_LIMIT ? ENUM_REPORT_LIMIT : count, PD_PLAN_MAX_STATES);
    }
    if (st != PD_OK)
        goto out_free;
    number = malloc(sizeof(int) * (size_t)e.n);
    s = number ? states_alloc(e.n, r.words, (int)e.pool_len) : NULL;
    if (!s) {
        st = PD_ERROR(PD_ENOMEM, "antichain states: out of memory for %d states", e.n);
        goto out_free;
    }
    PD_CHECK_GOTO(ac_number(&e, number), st, out_free);
    PD_CHECK_GOTO(states_fill(s, &e, number), st, out_free);
    PD_CHECK_GOTO(states_preds(s, &e, number), st, out_free);
    PD_CHECK_GOTO(states_check_cover(s, g), st, out_free);
    *out = s;
    s = NULL;
out_free:
    pd_plan_states_destroy(s);
    free(number);
    ac_enum_free(&e);
    ac_nodes_free(&r);
    return st;
}
