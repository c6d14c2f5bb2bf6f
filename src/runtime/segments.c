/* A pipeline run as segments: each segment is one schedule (the pipeline
 * fills, runs its minibatches and drains), after which every stage holds
 * the weights of the same minibatches, so evaluation and checkpoints go
 * between segments. Boundaries fall at the ends of epochs, every
 * eval_every and checkpoint_every minibatches (rounded up to the unit:
 * every stage's replicas, and gpipe's flush, divide each segment) and at
 * the end of the run. */
#include "config.h"

#include <stdlib.h>

#include "runtime/pd_runtime_int.h"

static int64_t round_up(int64_t n, int64_t unit) { return (n + unit - 1) / unit * unit; }

/* The next multiple of `every` after `at` (INT64_MAX for every = 0). */
static int64_t next_multiple(int64_t at, int64_t every)
{
    return every > 0 ? (at / every + 1) * every : INT64_MAX;
}

pd_status pd_segments_plan(const pd_segment_options *o, pd_segment **out, int *count)
{
    const int64_t unit = o->unit > 0 ? o->unit : 1;
    const int64_t eval_every = o->eval_every > 0 ? round_up(o->eval_every, unit) : 0;
    const int64_t ckpt_every = o->checkpoint_every > 0 ? round_up(o->checkpoint_every, unit) : 0;
    const int64_t per_epoch = o->per_epoch;
    pd_segment *seg;
    int n = 0;

    *out = NULL;
    *count = 0;
    if (o->total <= 0 || o->total % unit || o->start < 0 || o->start > o->total || o->start % unit ||
        (per_epoch && per_epoch % unit))
        return PD_ERROR(PD_EINVAL, "pipeline: %lld training minibatches (from %lld, %lld per epoch) are not whole "
                                   "multiples of %lld, the minibatches every stage's replicas (and a gpipe flush) "
                                   "divide",
                        (long long)o->total, (long long)o->start, (long long)per_epoch, (long long)unit);
    /* At most one segment per unit. */
    if (!(seg = calloc((size_t)((o->total - o->start) / unit + 1), sizeof(*seg))))
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    for (int64_t at = o->start; at < o->total;) {
        int64_t end = o->total, epoch_end = next_multiple(at, per_epoch);
        int64_t eval_at = next_multiple(at, eval_every), ckpt_at = next_multiple(at, ckpt_every);
        end = epoch_end < end ? epoch_end : end;
        end = eval_at < end ? eval_at : end;
        end = ckpt_at < end ? ckpt_at : end;
        const bool last = end == o->total;
        seg[n++] = (pd_segment){
            .first = at,
            .count = end - at,
            .eval = o->eval && (last || end == epoch_end || end == eval_at),
            .checkpoint = o->checkpoint && (last || end == ckpt_at),
        };
        at = end;
    }
    *out = seg;
    *count = n;
    return PD_OK;
}
