/* A plan as a table for people: one row per stage, then the totals. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "plan/plan_int.h"

/* Longest ranks cell; longer lists end in "...". */
#define RANKS_WIDTH 40

/* "0-2,5,8-11": the ranks as runs of consecutive numbers. */
static void format_ranks(const pd_plan_stage *st, char *buf, size_t size)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int r = 0; r < st->replicas;) {
        int end = r;
        char run[32];
        while (end + 1 < st->replicas && st->ranks[end + 1] == st->ranks[end] + 1)
            end++;
        if (end > r)
            snprintf(run, sizeof(run), "%s%d-%d", r ? "," : "", st->ranks[r], st->ranks[end]);
        else
            snprintf(run, sizeof(run), "%s%d", r ? "," : "", st->ranks[r]);
        if (used + strlen(run) + 4 > size || used + strlen(run) > RANKS_WIDTH) {
            snprintf(buf + used, size - used, ",...");
            return;
        }
        snprintf(buf + used, size - used, "%s", run);
        used += strlen(run);
        r = end + 1;
    }
}

static void format_layers(const pd_plan_stage *st, const pd_profile *profile, char *buf, size_t size)
{
    const char *first = pd_profile_node_at(profile, st->layers[0])->name;
    const char *last = pd_profile_node_at(profile, st->layers[st->n_layers - 1])->name;

    if (st->n_layers == 1)
        snprintf(buf, size, "%s", first);
    else
        snprintf(buf, size, "%s..%s", first, last);
}

static int max_int(int a, int b) { return a > b ? a : b; }

void pd_plan_print(const pd_plan *plan, const pd_profile *profile, FILE *out)
{
    char levels[256], layers[256], ranks[RANKS_WIDTH + 8];
    int layers_w = (int)strlen("layers"), ranks_w = (int)strlen("ranks");
    const pd_plan_stage *bottleneck = NULL;

    pd_plan_cluster_format(&plan->cluster, levels, sizeof(levels));
    fprintf(out, "plan for %s", plan->model ? plan->model : pd_profile_get_info(profile)->model);
    if (plan->batch > 0)
        fprintf(out, " (batch %d)", plan->batch);
    fprintf(out, ", cost model %s, cluster %s (%d workers): %d stage%s, replicas ",
            plan->cost_model == PD_PLAN_COST_PIPEDREAM ? "pipedream" : "default", levels, plan->workers,
            plan->n_stages, plan->n_stages == 1 ? "" : "s");
    for (int k = 0; k < plan->n_stages; k++)
        fprintf(out, "%s%d", k ? "-" : "", plan->stages[k].replicas);
    fprintf(out, "\n");
    if (plan->coarsened_from > 0)
        fprintf(out,
                "graph coarsened: %d planning nodes merged into %d ranges (too many antichain states); the plan is "
                "the best only over cuts between the ranges\n",
                plan->coarsened_from, plan->coarsened_to);

    for (int k = 0; k < plan->n_stages; k++) {
        format_layers(&plan->stages[k], profile, layers, sizeof(layers));
        format_ranks(&plan->stages[k], ranks, sizeof(ranks));
        layers_w = max_int(layers_w, (int)strlen(layers));
        ranks_w = max_int(ranks_w, (int)strlen(ranks));
    }
    if (plan->bottleneck_stage >= 0 && plan->bottleneck_stage < plan->n_stages)
        bottleneck = &plan->stages[plan->bottleneck_stage];

    fprintf(out, "  %5s  %-*s %6s %8s  %-*s %11s %9s %9s %10s %10s %9s  %s\n", "stage", layers_w, "layers", "count",
            "replicas", ranks_w, "ranks", "compute ms", "sync ms", "comm ms", "time ms", "memory MB", "in-flight",
            "bottleneck");
    for (int k = 0; k < plan->n_stages; k++) {
        const pd_plan_stage *st = &plan->stages[k];
        format_layers(st, profile, layers, sizeof(layers));
        format_ranks(st, ranks, sizeof(ranks));
        fprintf(out, "%c %5d  %-*s %6d %8d  %-*s %11.3f %9.3f %9.3f %10.3f %10.1f %9d  %s\n",
                st == bottleneck ? '*' : ' ', k, layers_w, layers, st->n_layers, st->replicas, ranks_w, ranks,
                st->compute_ms, st->sync_ms, st->recv_ms + st->send_ms, st->time_ms, st->memory_bytes / 1e6,
                st->in_flight, pd_plan_term_name(st->bottleneck));
    }
    fprintf(out, "(* the bottleneck stage; comm = recv + send; times per minibatch; memory per replica)\n");

    fprintf(out, "predicted time per minibatch: %.3f ms", plan->time_ms);
    if (bottleneck)
        fprintf(out, " (stage %d, %s)", plan->bottleneck_stage, pd_plan_term_name(bottleneck->bottleneck));
    fprintf(out, "\n");
    if (plan->time_ms > 0) {
        fprintf(out, "speedup: %.3fx over one worker (%.3f ms), %.3fx over data parallelism on %d workers (%.3f ms)\n",
                plan->single_worker_ms / plan->time_ms, plan->single_worker_ms,
                plan->data_parallel_ms / plan->time_ms, plan->workers, plan->data_parallel_ms);
    }
    fprintf(out, "workers used: %d of %d\n", plan->workers_used, plan->workers);
    if (plan->explanation)
        fprintf(out, "%s\n", plan->explanation);
}
