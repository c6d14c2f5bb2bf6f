/* Per-rank progress lines: every few seconds each rank says on stderr what
 * it did since its last line (training forwards and backwards, evaluation
 * forwards, samples/s), the loss and accuracy where it is the last stage,
 * the messages and bytes it sent to each peer (activations and gradients
 * as they travel: bf16 cut tensors are half of f32's), and how long it
 * waited for each peer and for its replicas' all-reduce: the stage that
 * makes the others wait is the one nobody waits for. A last line at the
 * end of the run covers the rest, so a rank's lines add up to its run. */
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

/* A new span: no waits, nothing sent yet. */
static void reset_channels(pd_pipeline *p)
{
    for (int i = 0; i < p->boot.n_channels; i++) {
        p->boot.channels[i].wait_s = 0;
        p->boot.channels[i].sent_bytes = p->boot.channels[i].sent_msgs = 0;
    }
}

void pd_progress_start(pd_pipeline *p)
{
    const double every = p->opts.progress_seconds;

    p->progress = (pd_rank_progress){
        .every_s = every < 0 || p->stage < 0 ? 0.0 : every > 0 ? every : DEFAULT_EVERY_S,
        .last_s = now_seconds(),
    };
    reset_channels(p);
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

/* "; sent rank 1 12 messages, 49536 bytes" for each peer this rank sends
 * to (one channel per peer and direction); nothing without one. */
static void print_sent(const pd_pipeline *p, FILE *out)
{
    const char *sep = "; sent";

    for (int i = 0; i < p->boot.n_channels; i++) {
        const pd_peer_channel *c = &p->boot.channels[i];
        if (!c->send)
            continue;
        fprintf(out, "%s rank %d %llu messages, %llu bytes", sep, c->peer, (unsigned long long)c->sent_msgs,
                (unsigned long long)c->sent_bytes);
        sep = ",";
    }
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
    print_sent(p, f);
    fputs("; waited for", f);
    print_waits(p, f);
    fprintf(f, " in %.1f s\n", span);
    if (fclose(f) == 0)
        fputs(text, stderr);
    free(text);
}

/* Prints the line of the `span` seconds up to `now` and starts the next. */
static void line_and_restart(pd_pipeline *p, double now, double span)
{
    const double every = p->progress.every_s;

    print_line(p, span);
    p->progress = (pd_rank_progress){.every_s = every, .last_s = now};
    reset_channels(p);
}

void pd_progress_tick(pd_pipeline *p)
{
    pd_rank_progress *g = &p->progress;

    if (g->every_s <= 0)
        return;
    const double now = now_seconds(), span = now - g->last_s;
    if (span < g->every_s)
        return;
    line_and_restart(p, now, span);
}

void pd_progress_finish(pd_pipeline *p)
{
    const pd_rank_progress *g = &p->progress;

    if (g->every_s <= 0 || !p->seg || g->forwards + g->backwards + g->evals == 0)
        return;
    const double now = now_seconds();
    line_and_restart(p, now, now - g->last_s > 0 ? now - g->last_s : 1e-9);
}
