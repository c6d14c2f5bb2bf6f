/* Per-rank progress lines: every few seconds each rank says on stderr what
 * it did since its last line (training forwards and backwards, evaluation
 * forwards, samples/s), the loss and accuracy where it is the last stage,
 * and how long it waited for each peer and for its replicas' all-reduce:
 * the stage that makes the others wait is the one nobody waits for. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/pd_runtime_int.h"

#define DEFAULT_EVERY_S 10.0

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void pd_progress_start(pd_pipeline *p)
{
    const double every = p->opts.progress_seconds;

    p->progress = (pd_rank_progress){
        .every_s = every < 0 || p->stage < 0 ? 0.0 : every > 0 ? every : DEFAULT_EVERY_S,
        .last_s = now_seconds(),
    };
    for (int i = 0; i < p->boot.n_channels; i++)
        p->boot.channels[i].wait_s = 0;
}

/* "rank 0 3.2 s" for each peer this rank waited for (receiving from it or
 * for a free slot at it, the two directions together), and the replicas'
 * all-reduce. */
static void print_waits(pd_pipeline *p, FILE *out)
{
    const char *sep = "";

    for (int i = 0; i < p->boot.n_channels; i++) {
        pd_peer_channel *c = &p->boot.channels[i];
        double waited = c->wait_s;
        bool first = true;
        for (int k = 0; k < i; k++)
            first &= p->boot.channels[k].peer != c->peer;
        if (!first)
            continue;
        for (int k = i + 1; k < p->boot.n_channels; k++)
            if (p->boot.channels[k].peer == c->peer)
                waited += p->boot.channels[k].wait_s;
        fprintf(out, "%s rank %d %.1f s", sep, c->peer, waited);
        sep = ",";
    }
    if (p->sched->stage_replicas[p->stage] > 1)
        fprintf(out, "%s all-reduce %.1f s", sep, p->progress.allreduce_wait_s);
    else if (!*sep)
        fputs(" nobody", out);
}

/* The line, built whole so that ranks' lines do not interleave. */
static void print_line(pd_pipeline *p, double span)
{
    const pd_rank_progress *g = &p->progress;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    if (!f)
        return;
    fprintf(f, "pipedream: rank %d (stage %d, replica %d): minibatches %lld-%lld of %lld", p->boot.rank, p->stage,
            p->replica, (long long)p->seg->first + 1, (long long)(p->seg->first + p->seg->count),
            (long long)p->total);
    if (p->per_epoch)
        fprintf(f, " (epoch %lld)", (long long)(p->seg->first / p->per_epoch + 1));
    fprintf(f, ": %lld forwards, %lld backwards, %lld evaluations, %.1f samples/s", (long long)g->forwards,
            (long long)g->backwards, (long long)g->evals, (double)(g->backwards * p->batch) / span);
    if (g->losses)
        fprintf(f, ", loss %.4f, accuracy %.1f%%", g->loss_sum / (double)g->losses,
                g->counted ? 100.0 * (double)g->correct / (double)g->counted : 0.0);
    fputs("; waited for", f);
    print_waits(p, f);
    fprintf(f, " in %.1f s\n", span);
    if (fclose(f) == 0)
        fputs(text, stderr);
    free(text);
}

void pd_progress_tick(pd_pipeline *p)
{
    pd_rank_progress *g = &p->progress;

    if (g->every_s <= 0)
        return;
    const double now = now_seconds(), span = now - g->last_s;
    if (span < g->every_s)
        return;
    print_line(p, span);
    const double every = g->every_s;
    p->progress = (pd_rank_progress){.every_s = every, .last_s = now};
    for (int i = 0; i < p->boot.n_channels; i++)
        p->boot.channels[i].wait_s = 0;
}
