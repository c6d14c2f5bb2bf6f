/* Coarsening a planning graph whose antichain DAG is too big (NASNet's cells
 * hold a dozen parallel branches each: millions of antichains): the nodes
 * of contiguous ranges of a topological order become single nodes.
 *
 * Any such quotient is acyclic (an edge runs from a range to the same or a
 * later one), so a plan of it is a plan of the graph, and the dynamic
 * programs stay exact over the cuts that remain. Which ranges:
 *
 * - the order: greedy, the ready node after which the fewest outputs are
 *   live first (ties: the one with the longest path still to run, then
 *   the graph's order), which finishes a NASNet cell before it starts the
 *   next one;
 * - the cuts: only where the next range reads from the one before it, so
 *   that the ranges form a chain (antichains of one range each: as many
 *   states as ranges, K (K + 1) / 2 stage candidates for K; a quotient
 *   that keeps parallel ranges apart has far more states per range and
 *   gave NASNet coarser plans); of those, the ones with the fewest outputs
 *   live across them, then the fewest bytes (between two NASNet cells
 *   only the two cell outputs are), as many as the budget allows.
 *
 * A member's output read outside its merged node becomes one of the node's
 * exits, so the bytes crossing each cut stay those of the graph. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "plan/plan_int.h"

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Sorts list[0..n) and drops repeats; returns the new length. */
static int sort_unique(int *list, int n)
{
    int k = 0;
    qsort(list, (size_t)n, sizeof(int), cmp_int);
    for (int i = 0; i < n; i++)
        if (k == 0 || list[k - 1] != list[i])
            list[k++] = list[i];
    return k;
}

/* ---- the order ---- */

/* How the number of live outputs changes when ready node v runs: +1 for
 * its own output if anything reads it, -1 for each input whose last
 * unscheduled reader it is (`unread`: readers not yet scheduled). */
static int live_delta(const pd_plan_graph *g, int v, const int *unread)
{
    int delta = g->n_out[v] > 0;
    for (int e = 0; e < g->n_in[v]; e++) {
        int u = g->in[v][e], reads = 0, first = 1;
        for (int f = 0; f < g->n_in[v]; f++) {
            reads += g->in[v][f] == u;
            first &= !(f < e && g->in[v][f] == u);
        }
        delta -= first && unread[u] == reads;
    }
    return delta;
}

/* order[i]: the i-th node of the greedy order (see the file comment). */
static pd_status live_order(const pd_plan_graph *g, int *order)
{
    int n = g->n;
    int *height = calloc((size_t)n, sizeof(int)), *unread = malloc(sizeof(int) * (size_t)n);
    int *waiting = malloc(sizeof(int) * (size_t)n), *ready = malloc(sizeof(int) * (size_t)n);
    int n_ready = 0;

    if (!height || !unread || !waiting || !ready) {
        free(height);
        free(unread);
        free(waiting);
        free(ready);
        return PD_ERROR(PD_ENOMEM, "plan coarsening: out of memory");
    }
    for (int v = n - 1; v >= 0; v--)
        for (int e = 0; e < g->n_out[v]; e++)
            if (height[g->out[v][e]] + 1 > height[v])
                height[v] = height[g->out[v][e]] + 1;
    for (int v = 0; v < n; v++) {
        unread[v] = g->n_out[v];
        waiting[v] = g->n_in[v];
        if (waiting[v] == 0)
            ready[n_ready++] = v;
    }
    for (int i = 0; i < n; i++) {
        int best = 0, best_delta = 0;
        for (int k = 0; k < n_ready; k++) {
            int v = ready[k], delta = live_delta(g, v, unread), b = ready[best];
            if (k == 0 || delta < best_delta ||
                (delta == best_delta && (height[v] > height[b] || (height[v] == height[b] && v < b)))) {
                best = k;
                best_delta = delta;
            }
        }
        int v = ready[best];
        ready[best] = ready[--n_ready];
        order[i] = v;
        for (int e = 0; e < g->n_in[v]; e++)
            unread[g->in[v][e]]--;
        for (int e = 0; e < g->n_out[v]; e++)
            if (--waiting[g->out[v][e]] == 0)
                ready[n_ready++] = g->out[v][e];
    }
    free(height);
    free(unread);
    free(waiting);
    free(ready);
    return PD_OK;
}

/* ---- the cuts ---- */

/* A position p of the order (the cut between its nodes p-1 and p) and
 * what is live across it. */
typedef struct cut_rank {
    int position, live;
    double bytes;
} cut_rank;

static int cmp_cut(const void *a, const void *b)
{
    const cut_rank *x = a, *y = b;
    if (x->live != y->live)
        return x->live < y->live ? -1 : 1;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? -1 : 1;
    return (x->position > y->position) - (x->position < y->position);
}

/* cuts[0..): the positions p with is_cut[p], ranked (best first). */
static pd_status rank_cuts(const pd_plan_graph *g, const int *pos, const int *is_cut, cut_rank *cuts)
{
    int n = g->n;
    int *live = calloc((size_t)n + 1, sizeof(int));
    double *bytes = calloc((size_t)n + 1, sizeof(double));

    if (!live || !bytes) {
        free(live);
        free(bytes);
        return PD_ERROR(PD_ENOMEM, "plan coarsening: out of memory");
    }
    /* Differences: an output of the node at p read last at q is live
     * across positions p+1..q. */
    for (int u = 0; u < n; u++) {
        pd_plan_exit one;
        const pd_plan_exit *exits;
        int n_exits = pd_plan_graph_exits(g, u, &one, &exits), p = pos[u], node_last = p;
        for (int x = 0; x < n_exits; x++) {
            int last = p;
            for (int k = 0; k < exits[x].n_to; k++)
                last = pos[exits[x].to[k]] > last ? pos[exits[x].to[k]] : last;
            bytes[p + 1] += exits[x].bytes;
            bytes[last + 1] -= exits[x].bytes;
            node_last = last > node_last ? last : node_last;
        }
        live[p + 1]++;
        live[node_last + 1]--;
    }
    int running = 0, n_cuts = 0;
    double running_bytes = 0;
    for (int p = 1; p < n; p++) {
        running += live[p];
        running_bytes += bytes[p];
        if (is_cut[p])
            cuts[n_cuts++] = (cut_rank){.position = p, .live = running, .bytes = running_bytes};
    }
    free(live);
    free(bytes);
    qsort(cuts, (size_t)n_cuts, sizeof(*cuts), cmp_cut);
    return PD_OK;
}

/* ---- the quotient ---- */

/* The quotient of g over the pieces piece_of[v] (n_pieces of them,
 * numbered along a topological order). */
static pd_status quotient(const pd_plan_graph *g, const int *piece_of, int n_pieces, pd_plan_graph **out)
{
    pd_plan_graph *q = pd_plan_graph_alloc(n_pieces, g->n_inputs, g->n_dropped);
    int *in_count = calloc((size_t)n_pieces, sizeof(int)), *exit_count = calloc((size_t)n_pieces, sizeof(int));
    int *readers = malloc(sizeof(int) * (size_t)(g->n + 1));
    pd_status st = PD_OK;

    if (!q || !in_count || !exit_count || !readers) {
        st = PD_ERROR(PD_ENOMEM, "plan coarsening: out of memory");
        goto out_free;
    }
    q->n_exits = calloc((size_t)n_pieces, sizeof(int));
    q->exits = calloc((size_t)n_pieces, sizeof(*q->exits));
    if (!q->n_exits || !q->exits) {
        st = PD_ERROR(PD_ENOMEM, "plan coarsening: out of memory");
        goto out_free;
    }
    /* Room: a piece's inputs and exits are at most its members'. */
    for (int v = 0; v < g->n; v++) {
        pd_plan_exit one;
        const pd_plan_exit *exits;
        in_count[piece_of[v]] += g->n_in[v];
        exit_count[piece_of[v]] += pd_plan_graph_exits(g, v, &one, &exits);
    }
    for (int w = 0; w < n_pieces; w++) {
        q->in[w] = malloc(sizeof(int) * (size_t)(in_count[w] + 1));
        q->exits[w] = calloc((size_t)exit_count[w] + 1, sizeof(pd_plan_exit));
        if (!q->in[w] || !q->exits[w]) {
            st = PD_ERROR(PD_ENOMEM, "plan coarsening: out of memory");
            goto out_free;
        }
    }
    for (int v = 0; v < g->n; v++) {
        int w = piece_of[v], n_exits;
        pd_plan_exit one;
        const pd_plan_exit *exits;
        PD_CHECK_GOTO(pd_plan_graph_add_member(q, w, g, v), st, out_free);
        q->act_bytes[w] += g->act_bytes[v];
        for (int e = 0; e < g->n_in[v]; e++)
            if (piece_of[g->in[v][e]] != w)
                q->in[w][q->n_in[w]++] = piece_of[g->in[v][e]];
        n_exits = pd_plan_graph_exits(g, v, &one, &exits);
        for (int x = 0; x < n_exits; x++) {
            int n_to = 0;
            for (int k = 0; k < exits[x].n_to; k++)
                if (piece_of[exits[x].to[k]] != w)
                    readers[n_to++] = piece_of[exits[x].to[k]];
            if (n_to == 0)
                continue;
            n_to = sort_unique(readers, n_to);
            pd_plan_exit *ex = &q->exits[w][q->n_exits[w]++];
            ex->bytes = exits[x].bytes;
            ex->n_to = n_to;
            if (!(ex->to = malloc(sizeof(int) * (size_t)n_to))) {
                st = PD_ERROR(PD_ENOMEM, "plan coarsening: out of memory");
                goto out_free;
            }
            memcpy(ex->to, readers, sizeof(int) * (size_t)n_to);
        }
    }
    for (int w = 0; w < n_pieces; w++) {
        qsort(q->members[w], (size_t)q->n_members[w], sizeof(int), cmp_int);
        q->n_in[w] = sort_unique(q->in[w], q->n_in[w]);
    }
    PD_CHECK_GOTO(pd_plan_graph_fill_outputs(q), st, out_free);
    PD_CHECK_GOTO(pd_plan_graph_copy_extras(q, g, piece_of), st, out_free);
    *out = q;
    q = NULL;
out_free:
    pd_plan_graph_destroy(q);
    free(in_count);
    free(exit_count);
    free(readers);
    return st;
}

/* ---- which cuts ---- */

/* The positions where a new range may start so that the ranges form a
 * chain: each range reads from the one before it (its first node does), so
 * the quotient's antichains are single nodes and its states the ranges.
 * Merging neighbours of a chain keeps it a chain. Marks them in is_cut;
 * returns how many. */
static int chain_cuts(const pd_plan_graph *g, const int *order, const int *pos, int *is_cut)
{
    int start = 0, count = 0;
    for (int p = 0; p < g->n; p++) {
        int v = order[p];
        is_cut[p] = 0;
        for (int e = 0; p > 0 && e < g->n_in[v] && !is_cut[p]; e++)
            is_cut[p] = pos[g->in[v][e]] >= start;
        if (is_cut[p]) {
            start = p;
            count++;
        }
    }
    return count;
}

pd_status pd_plan_graph_coarsen(const pd_plan_graph *g, int max_states, long long max_pairs, pd_plan_graph **out)
{
    size_t n = (size_t)(g->n > 0 ? g->n : 1);
    int *order = malloc(sizeof(int) * n), *pos = malloc(sizeof(int) * n);
    int *is_cut = malloc(sizeof(int) * n), *piece_of = malloc(sizeof(int) * n);
    cut_rank *cuts = malloc(sizeof(cut_rank) * n);
    long long ranges = 1;
    int n_cuts, keep, piece = 0;
    pd_status st;

    if (!order || !pos || !is_cut || !piece_of || !cuts) {
        st = PD_ERROR(PD_ENOMEM, "plan coarsening: out of memory");
        goto out_free;
    }
    if (max_states < 1 || max_pairs < 1) {
        st = PD_ERROR(PD_EINVAL, "plan coarsening: a budget of %d states and %lld stage candidates holds no graph",
                      max_states, max_pairs);
        goto out_free;
    }
    /* A chain of K ranges has K states and K (K + 1) / 2 stage candidates. */
    if (max_states > PD_PLAN_MAX_STATES)
        max_states = PD_PLAN_MAX_STATES;
    while (ranges < max_states && (ranges + 1) * (ranges + 2) / 2 <= max_pairs)
        ranges++;
    PD_CHECK_GOTO(live_order(g, order), st, out_free);
    for (int p = 0; p < g->n; p++)
        pos[order[p]] = p;
    n_cuts = chain_cuts(g, order, pos, is_cut);
    PD_CHECK_GOTO(rank_cuts(g, pos, is_cut, cuts), st, out_free);
    keep = n_cuts < ranges - 1 ? n_cuts : (int)ranges - 1;
    memset(is_cut, 0, sizeof(int) * n);
    for (int i = 0; i < keep; i++)
        is_cut[cuts[i].position] = 1;
    for (int p = 0; p < g->n; p++) {
        piece += p > 0 && is_cut[p];
        piece_of[order[p]] = piece;
    }
    st = quotient(g, piece_of, piece + 1, out);
out_free:
    free(order);
    free(pos);
    free(is_cut);
    free(piece_of);
    free(cuts);
    return st;
}
