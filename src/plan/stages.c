/* From the spans a dynamic program chose to a plan's stages: graph nodes to
 * profile layers, ranks copied. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "plan/plan_int.h"

static inline int prefix_has(const pd_plan_states *s, int state, int v)
{
    return (int)((s->prefix[state][v >> 6] >> (v & 63)) & 1u);
}

/* stage_of[v]: the first span whose prefix(to_state) holds graph node v,
 * as the original assigns stage ids; a node of prefix(from_state) must
 * have been placed by an earlier span. */
static pd_status assign_nodes(const pd_plan_graph *g, const pd_plan_states *s, int n, const pd_plan_span *spans,
                              int *stage_of)
{
    for (int v = 0; v < g->n; v++)
        stage_of[v] = -1;
    for (int p = 0; p < n; p++) {
        int from = spans[p].from_state, to = spans[p].to_state;
        if (from < -1 || from >= s->n || to < 0 || to >= s->n)
            return PD_ERROR(PD_EINVAL, "plan stages: span %d runs from state %d to %d, outside [-1, %d]", p, from, to,
                            s->n - 1);
        if (spans[p].n_ranks < 1)
            return PD_ERROR(PD_EINVAL, "plan stages: span %d has %d ranks", p, spans[p].n_ranks);
        for (int v = 0; v < g->n; v++) {
            if (stage_of[v] >= 0 || !prefix_has(s, to, v))
                continue;
            if (from >= 0 && prefix_has(s, from, v))
                return PD_ERROR(PD_EINVAL, "plan stages: span %d starts after state %d, whose node %d no earlier span holds",
                                p, from, v);
            stage_of[v] = p;
        }
    }
    for (int v = 0; v < g->n; v++)
        if (stage_of[v] < 0)
            return PD_ERROR(PD_EINVAL, "plan stages: graph node %d is in no span", v);
    return PD_OK;
}

/* The stage a dropped `__getitem__` sink joins: the latest of its inputs'. */
static int dropped_stage(const pd_plan_graph *g, int d, const int *stage_of)
{
    int stage = 0;
    for (int e = 0; e < g->n_dropped_in[d]; e++)
        if (stage_of[g->dropped_in[d][e]] > stage)
            stage = stage_of[g->dropped_in[d][e]];
    return stage;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Appends profile layer `layer` to stage p (room counted beforehand). */
static void add_layer(pd_plan_stage *stages, int p, int layer)
{
    stages[p].layers[stages[p].n_layers++] = layer;
}

/* Counts, allocates and fills the layer lists of the stages. */
static pd_status fill_layers(pd_plan_stage *stages, int n, const pd_plan_graph *g, const int *stage_of)
{
    int *count = calloc((size_t)n, sizeof(int));
    if (!count)
        return PD_ERROR(PD_ENOMEM, "plan stages: out of memory");
    count[0] += g->n_inputs;
    for (int v = 0; v < g->n; v++)
        count[stage_of[v]] += g->n_members[v];
    for (int d = 0; d < g->n_dropped; d++)
        count[dropped_stage(g, d, stage_of)]++;
    for (int p = 0; p < n; p++)
        if (!(stages[p].layers = malloc(sizeof(int) * (size_t)(count[p] + 1)))) {
            free(count);
            return PD_ERROR(PD_ENOMEM, "plan stages: out of memory");
        }
    free(count);
    for (int i = 0; i < g->n_inputs; i++)
        add_layer(stages, 0, g->inputs[i]);
    for (int v = 0; v < g->n; v++)
        for (int m = 0; m < g->n_members[v]; m++)
            add_layer(stages, stage_of[v], g->members[v][m]);
    for (int d = 0; d < g->n_dropped; d++)
        add_layer(stages, dropped_stage(g, d, stage_of), g->dropped[d]);
    for (int p = 0; p < n; p++) {
        if (stages[p].n_layers == 0)
            return PD_ERROR(PD_EINVAL, "plan stages: stage %d holds no layer", p);
        qsort(stages[p].layers, (size_t)stages[p].n_layers, sizeof(int), cmp_int);
    }
    return PD_OK;
}

static void free_stages(pd_plan_stage *stages, int n)
{
    for (int p = 0; stages && p < n; p++) {
        free(stages[p].layers);
        free(stages[p].ranks);
    }
    free(stages);
}

pd_status pd_plan_set_stages(pd_plan *plan, const pd_plan_graph *g, const pd_plan_states *s, int n,
                             const pd_plan_span *spans)
{
    pd_plan_stage *stages = NULL;
    int *stage_of = NULL;
    pd_status st;

    if (n < 1)
        return PD_ERROR(PD_EINVAL, "plan stages: %d spans", n);
    stage_of = malloc(sizeof(int) * (size_t)g->n);
    stages = calloc((size_t)n, sizeof(*stages));
    if (!stage_of || !stages) {
        st = PD_ERROR(PD_ENOMEM, "plan stages: out of memory");
        goto out_free;
    }
    PD_CHECK_GOTO(assign_nodes(g, s, n, spans, stage_of), st, out_free);
    PD_CHECK_GOTO(fill_layers(stages, n, g, stage_of), st, out_free);
    int used = 0;
    for (int p = 0; p < n; p++) {
        stages[p].replicas = spans[p].n_ranks;
        stages[p].ranks = malloc(sizeof(int) * (size_t)spans[p].n_ranks);
        if (!stages[p].ranks) {
            st = PD_ERROR(PD_ENOMEM, "plan stages: out of memory");
            goto out_free;
        }
        memcpy(stages[p].ranks, spans[p].ranks, sizeof(int) * (size_t)spans[p].n_ranks);
        used += spans[p].n_ranks;
    }
    free_stages(plan->stages, plan->n_stages);
    plan->stages = stages;
    plan->n_stages = n;
    plan->workers_used = used;
    stages = NULL;
out_free:
    free_stages(stages, n);
    free(stage_of);
    return st;
}
