/* Running a pipeline rank, segment by segment: stage 0 puts its loaders at
 * the segment's first minibatch, the rank executes its action list of the
 * segment's schedule (executor.c), then every minibatch's loss, accuracy
 * and time and the test accuracy are gathered on rank 0, which writes the
 * metrics records and a line per evaluation. Segments end with a drained
 * pipeline, so the gathering is the only point where ranks meet. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#ifdef HAVE_MPI
#include <mpi.h>
#endif

#include <pipedream/log.h>

#include "runtime/pd_runtime_int.h"

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Stage 0: the training data at the segment's first minibatch (replica j
 * of r reads shard j, whose k-th minibatch is global minibatch k r + j),
 * the test data at its start. A loader already there keeps what it has
 * prefetched. */
static pd_status position_loaders(pd_pipeline *p, const pd_segment *seg)
{
    const int64_t r0 = p->plan->stages[0].replicas;
    const int64_t shard_epoch = p->parts.train_info.batches_per_epoch;
    int64_t epoch = 0, batch = 0;

    if (p->stage != 0)
        return PD_OK;
    if (p->per_epoch) {
        epoch = seg->first / p->per_epoch;
        batch = seg->first % p->per_epoch / r0;
    } else if (shard_epoch > 0) {
        epoch = seg->first / r0 / shard_epoch;
        batch = seg->first / r0 % shard_epoch;
    }
    PD_CHECK(pd_trainer_seek(p->trainer, false, epoch, batch));
    return seg->eval ? pd_trainer_seek(p->trainer, true, 0, 0) : PD_OK;
}

/* Brings the segment's per-minibatch records, the test hits and the
 * slowest rank's times to rank 0. Each minibatch's record is nonzero on
 * one last-stage rank only, so the sums are exact. */
static void gather(pd_pipeline *p, const pd_segment *seg, double times[2])
{
    times[0] = p->seg_train_s;
    times[1] = p->seg_eval_s;
#ifdef HAVE_MPI
    const int n = (int)seg->count, me = p->boot.rank;
    float *losses = p->losses + seg->first;
    int64_t *correct = p->correct + seg->first, *counted = p->counted + seg->first;
    double *at = p->mb_time + seg->first;

    MPI_Reduce(me == 0 ? MPI_IN_PLACE : losses, losses, n, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(me == 0 ? MPI_IN_PLACE : correct, correct, n, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(me == 0 ? MPI_IN_PLACE : counted, counted, n, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(me == 0 ? MPI_IN_PLACE : at, at, n, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(me == 0 ? MPI_IN_PLACE : &p->eval_correct, &p->eval_correct, 1, MPI_INT64_T, MPI_SUM, 0,
               MPI_COMM_WORLD);
    MPI_Reduce(me == 0 ? MPI_IN_PLACE : &p->eval_counted, &p->eval_counted, 1, MPI_INT64_T, MPI_SUM, 0,
               MPI_COMM_WORLD);
    MPI_Reduce(me == 0 ? MPI_IN_PLACE : times, times, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
#else
    (void)seg;
#endif
}

/* Fractional epochs after minibatch index `mb` (0 without epochs). */
static double epochs_at(const pd_pipeline *p, int64_t mb)
{
    const int64_t per_epoch = p->per_epoch ? p->per_epoch : p->train_batches;
    return per_epoch > 0 ? (double)(mb + 1) / (double)per_epoch : 0.0;
}

/* Accuracy from hits out of the samples (S2VT: tokens) counted. */
static double ratio(int64_t correct, int64_t counted)
{
    return counted > 0 ? (double)correct / (double)counted : NAN;
}

/* Rank 0's records of the segment: the trainer's columns, the test
 * accuracy on its last row when it was evaluated. */
static pd_status write_metrics(pd_pipeline *p, const pd_segment *seg, double seg_start, double accuracy)
{
    FILE *f = p->metrics;
    const bool csv = p->opts.train.metrics_format == PD_METRICS_CSV;

    for (int64_t mb = seg->first; f && mb < seg->first + seg->count; mb++) {
        const int64_t step_start = mb / p->mb_per_step * p->mb_per_step;
        const double lr = (double)(float)pd_lr_schedule_at(&p->lr, step_start, p->total);
        const double took = p->mb_time[mb] - seg_start;
        const double rate = took > 0 ? (double)((mb - seg->first + 1) * p->batch) / took : 0.0;
        const double acc = ratio(p->correct[mb], p->counted[mb]);
        const bool with_test = seg->eval && mb == seg->first + seg->count - 1;
        if (csv) {
            fprintf(f, "%lld,%.6f,%.6f,%.9g,%.6f,%.1f,%.6g,", (long long)mb + 1, epochs_at(p, mb), p->mb_time[mb],
                    (double)p->losses[mb], acc, rate, lr);
            if (with_test)
                fprintf(f, "%.6f", accuracy);
            fputc('\n', f);
            continue;
        }
        fprintf(f,
                "{\"iteration\":%lld,\"epoch\":%.6f,\"seconds\":%.6f,\"loss\":%.9g,\"train_accuracy\":%.6f,"
                "\"samples_per_s\":%.1f,\"lr\":%.6g",
                (long long)mb + 1, epochs_at(p, mb), p->mb_time[mb], (double)p->losses[mb], acc, rate, lr);
        if (with_test)
            fprintf(f, ",\"test_accuracy\":%.6f,\"test_samples\":%lld", accuracy,
                    (long long)p->result.test_samples);
        fputs("}\n", f);
    }
    if (f && (fflush(f) != 0 || ferror(f)))
        return PD_ERROR(PD_EIO, "pipeline: writing metrics file '%s' failed: %s", p->opts.train.metrics_path,
                        strerror(errno));
    return PD_OK;
}

/* Rank 0 after a segment: the result so far, the metrics, the line. */
static pd_status report(pd_pipeline *p, const pd_segment *seg, double seg_start, const double times[2])
{
    pd_pipeline_result *r = &p->result;
    const int64_t last = seg->first + seg->count - 1;
    double loss_sum = 0;
    int64_t hits = 0, counted = 0;

    for (int64_t mb = seg->first; mb <= last; mb++) {
        loss_sum += (double)p->losses[mb];
        hits += p->correct[mb];
        counted += p->counted[mb];
    }
    r->seconds += times[0];
    r->eval_seconds += times[1];
    r->final_loss = p->losses[last];
    r->train_accuracy = ratio(p->correct[last], p->counted[last]);
    r->epochs = p->per_epoch ? (double)(last + 1) / (double)p->per_epoch : 0.0;
    if (seg->eval) {
        r->test_correct = p->eval_correct;
        r->test_samples = p->eval_counted;
        r->test_accuracy = ratio(p->eval_correct, p->eval_counted);
    }
    PD_CHECK(write_metrics(p, seg, seg_start, r->test_accuracy));
    if (p->opts.progress_seconds < 0 || !seg->eval)
        return PD_OK;
    char when[64];
    if (p->per_epoch && (last + 1) % p->per_epoch == 0)
        snprintf(when, sizeof(when), "epoch %lld/%lld", (long long)((last + 1) / p->per_epoch),
                 (long long)(p->total / p->per_epoch));
    else
        snprintf(when, sizeof(when), "minibatch %lld/%lld", (long long)last + 1, (long long)p->total);
    fprintf(stderr, "pipedream: %s: test accuracy %.2f%% (%lld/%lld), training loss %.4f and accuracy %.1f%% over "
                    "the last %lld minibatches, %.0f samples/s\n",
            when, 100.0 * r->test_accuracy, (long long)r->test_correct, (long long)r->test_samples,
            loss_sum / (double)seg->count, 100.0 * ratio(hits, counted),
            (long long)seg->count, times[0] > 0 ? (double)(seg->count * p->batch) / times[0] : 0.0);
    return PD_OK;
}

static pd_status run_segment(pd_pipeline *p, const pd_segment *seg)
{
    double times[2];

    p->seg = seg;
    p->eval_correct = p->eval_counted = 0;
    p->seg_train_s = p->seg_eval_s = 0;
    PD_CHECK(pd_pipeline_schedule(p, seg));
    const double seg_start = now_seconds() - p->run_start;
    if (p->stage >= 0) {
        PD_CHECK(position_loaders(p, seg));
        PD_CHECK(pd_executor_run(p));
    }
    gather(p, seg, times);
    if (p->boot.rank == 0)
        PD_CHECK(report(p, seg, seg_start, times));
    if (!seg->checkpoint)
        return PD_OK;
    PD_CHECK(pd_pipeline_checkpoint_save(p, seg->first + seg->count));
    if (p->boot.rank == 0 && p->opts.progress_seconds >= 0)
        fprintf(stderr, "pipedream: checkpoint of minibatch %lld committed in %s\n",
                (long long)(seg->first + seg->count), p->opts.train.checkpoint_dir);
    return PD_OK;
}

pd_status pd_pipeline_run(pd_pipeline *p)
{
    if (!p || p->ran)
        return PD_ERROR(PD_ESTATE, "pipeline: pd_pipeline_run may be called once");
    p->ran = true;
#ifdef HAVE_MPI
    MPI_Barrier(MPI_COMM_WORLD); /* one clock for the records: every rank starts here */
#endif
    p->run_start = now_seconds();
    pd_progress_start(p);
    for (int i = 0; i < p->n_segments; i++)
        PD_CHECK(run_segment(p, &p->segments[i]));
    pd_progress_finish(p);
    /* From here a rank may finish and leave: not a death. */
    pd_watchdog_stop(p);
#ifdef HAVE_MPI
    /* Nobody closes a channel its peer still reads. */
    MPI_Barrier(MPI_COMM_WORLD);
#endif
    pd_pipeline_result *r = &p->result;
    r->minibatches = p->total - p->start;
    r->samples_per_s = r->seconds > 0 ? (double)(r->minibatches * p->batch) / r->seconds : 0.0;
    return PD_OK;
}
