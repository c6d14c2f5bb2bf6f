/* The simulator's numbers as a table. */
#include "config.h"

#include "sched/sched_int.h"

void pd_sched_result_print(const pd_sched_result *r, const pd_sched *s, FILE *out)
{
    fprintf(out, "schedule %s: %d ranks, %d stages, %d minibatches, channel depth %d\n",
            pd_sched_type_name(s->type), s->n_ranks, s->n_stages, s->minibatches, s->depth);
    fprintf(out, "run: %.3f ms; steady state %.4f ms per minibatch, %.3f minibatches/s", r->makespan_ms,
            r->ms_per_minibatch, r->minibatches_per_s);
    if (r->batch > 0)
        fprintf(out, ", %.1f samples/s (batch %d)", r->samples_per_s, r->batch);
    fprintf(out, "\n");
    fprintf(out, "communication: %.3f MB per minibatch", r->bytes_per_minibatch / 1e6);
    if (r->batch > 0)
        fprintf(out, ", %.1f KB per sample", r->bytes_per_sample / 1e3);
    fprintf(out, "\n\n%4s %5s %7s %10s %10s %6s %8s %8s %10s %10s\n", "rank", "stage", "replica", "busy ms", "idle ms",
            "util", "in-fl.", "versions", "memory MB", "sent MB");
    for (int k = 0; k < r->n_ranks; k++) {
        const pd_sched_rank_stats *st = &r->ranks[k];
        if (s->rank_stage[k] < 0) {
            fprintf(out, "%4d unused\n", k);
            continue;
        }
        fprintf(out, "%4d %5d %7d %10.3f %10.3f %5.1f%% %8d %8d %10.1f %10.3f\n", k, s->rank_stage[k],
                s->rank_replica[k], st->busy_ms, st->idle_ms, 100 * st->utilisation, st->max_in_flight,
                st->weight_versions, st->memory_bytes / 1e6, (double)st->bytes_sent / 1e6);
    }
    if (r->n_links) {
        fprintf(out, "\n%4s %4s %12s %10s\n", "from", "to", "MB", "busy ms");
        for (int i = 0; i < r->n_links; i++)
            fprintf(out, "%4d %4d %12.3f %10.3f\n", r->links[i].src, r->links[i].dst, (double)r->links[i].bytes / 1e6,
                    r->links[i].busy_ms);
    }
}
