/* Executing a rank's action list. Compute actions run the stage's nodes on
 * the graph; transfers go through the channels to the neighbouring stages'
 * replicas: a send is posted the moment its activation or gradient is
 * packed (into one of the channel's `depth` send buffers), receives land in
 * the receiver's pre-posted slots while this rank computes or waits, and
 * every wait progresses all of the rank's channels and the pending
 * all-reduce. A peer that fails or stays silent past the timeout stops the
 * rank with a message naming it. */
#include "config.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

static int peer_stage(const pd_pipeline *p, int peer)
{
    return peer >= 0 && peer < p->sched->n_ranks ? p->sched->rank_stage[peer] : -1;
}

/* Re-records a channel failure with who this rank and the peer are. */
static pd_status peer_failed(const pd_pipeline *p, int peer, pd_status s)
{
    char cause[512];

    snprintf(cause, sizeof(cause), "%s", pd_last_error());
    return PD_ERROR(s, "pipeline: rank %d (stage %d): rank %d (stage %d) is gone or failed: %s", p->boot.rank,
                    p->stage, peer, peer_stage(p, peer), cause);
}

/* Progresses the channels (unless the progress thread does) and the
 * pending all-reduce. */
static pd_status progress_all(pd_pipeline *p)
{
    for (int i = 0; !pd_progress_thread_live(p) && i < p->boot.n_channels; i++) {
        pd_status s = pd_channel_progress(p->boot.channels[i].ch);
        if (s != PD_OK)
            return peer_failed(p, p->boot.channels[i].peer, s);
    }
#ifdef HAVE_MPI
    if (p->allreduce_pending) {
        int done = 0;
        MPI_Test(p->allreduce, &done, MPI_STATUS_IGNORE);
        p->allreduce_pending = !done;
    }
#endif
    return PD_OK;
}

/* Before looking at a channel: what the progress thread has seen (0
 * without it). */
static uint64_t events_seen(pd_pipeline *p) { return pd_progress_thread_live(p) ? pd_progress_thread_events(p) : 0; }

/* Between polls: with the progress thread, sleep until it sees an event
 * after `seen` (at most 100 ms: deadlines); without it, or while an
 * all-reduce is pending (only this thread may test it), spin briefly,
 * then sleep a little. */
static void pause_poll(pd_pipeline *p, int *polls, uint64_t seen)
{
    if (++*polls > 1 && pd_progress_thread_live(p) && !p->allreduce_pending)
        pd_progress_thread_sleep(p, seen, 100);
    else if (*polls < 200)
        sched_yield();
    else
        usleep(50);
}

static pd_status timed_out(const pd_pipeline *p, int peer, const char *what)
{
    return PD_ERROR(PD_ETIMEOUT, "pipeline: rank %d (stage %d): waited %.0f s for %s rank %d (stage %d): is it "
                                 "alive?", p->boot.rank, p->stage, p->opts.timeout_ms / 1000.0, what, peer,
                    peer_stage(p, peer));
}

/* A message's minibatch tag: tags must increase on a channel, so the
 * segment's number goes above the schedule's minibatch (training ones,
 * then evaluation ones). */
static uint64_t message_tag(const pd_pipeline *p, int mb)
{
    return (uint64_t)(p->seg - p->segments) << 32 | (uint64_t)mb;
}

static pd_status wait_message(pd_pipeline *p, int peer, pd_msg_kind kind, int mb, pd_channel_msg *msg)
{
    pd_peer_channel *c = pd_boot_channel(&p->boot, peer, false);
    const double deadline = now_seconds() + p->opts.timeout_ms / 1000.0;
    int polls = 0;

    if (!c)
        return PD_ERROR(PD_ESTATE, "pipeline: rank %d has no channel from rank %d", p->boot.rank, peer);
    for (;;) {
        bool ready;
        const uint64_t seen = events_seen(p);
        pd_status s = pd_channel_recv(c->ch, msg, &ready);
        if (s != PD_OK)
            return peer_failed(p, peer, s);
        if (ready)
            break;
        PD_CHECK(progress_all(p));
        if (now_seconds() > deadline)
            return timed_out(p, peer, kind == PD_MSG_ACTIVATION ? "an activation from" : "a gradient from");
        pause_poll(p, &polls, seen);
    }
    if (polls)
        c->wait_s += now_seconds() - (deadline - p->opts.timeout_ms / 1000.0);
    if (msg->tag.kind != (uint32_t)kind || msg->tag.minibatch != message_tag(p, mb))
        return PD_ERROR(PD_ECOMM, "pipeline: rank %d: expected the %s of tag %llu from rank %d, got kind %u of "
                                  "tag %llu", p->boot.rank, kind == PD_MSG_ACTIVATION ? "activation" : "gradient",
                        (unsigned long long)message_tag(p, mb), peer, msg->tag.kind,
                        (unsigned long long)msg->tag.minibatch);
    return PD_OK;
}

static pd_status wait_send(pd_pipeline *p, pd_peer_channel *c, uint64_t seq)
{
    const double deadline = now_seconds() + p->opts.timeout_ms / 1000.0;
    int polls = 0;

    for (;;) {
        bool done;
        const uint64_t seen = events_seen(p);
        pd_status s = pd_channel_send_done(c->ch, seq, &done);
        if (s != PD_OK)
            return peer_failed(p, c->peer, s);
        if (done)
            break;
        PD_CHECK(progress_all(p));
        if (now_seconds() > deadline)
            return timed_out(p, c->peer, "a free slot at");
        pause_poll(p, &polls, seen);
    }
    if (polls)
        c->wait_s += now_seconds() - (deadline - p->opts.timeout_ms / 1000.0);
    return PD_OK;
}

/* Packs the tensors of `nodes` into a free send buffer and posts it. */
static pd_status post_send(pd_pipeline *p, const pd_sched_action *a, const int *nodes, int n, size_t bytes)
{
    const bool grads = a->op == PD_SCHED_SEND_GRAD;
    pd_peer_channel *c = pd_boot_channel(&p->boot, a->peer, true);
    pd_msg_tag tag = {.minibatch = message_tag(p, a->minibatch), .kind = grads ? PD_MSG_GRADIENT : PD_MSG_ACTIVATION,
                      .version = (uint32_t)(a->weight_version < 0 ? 0 : a->weight_version)};
    pd_status s;

    if (!c)
        return PD_ERROR(PD_ESTATE, "pipeline: rank %d has no channel to rank %d", p->boot.rank, a->peer);
    int idx = (int)(c->sent % (uint64_t)p->boot.depth);
    unsigned char *buf = c->buffers + (size_t)idx * c->slot_bytes;
    if (c->seqs[idx] != UINT64_MAX)
        PD_CHECK(wait_send(p, c, c->seqs[idx]));
    PD_CHECK(pd_stage_pack(&p->st, nodes, n, grads, buf, p->boot.channel_dev));
    if ((s = pd_channel_send(c->ch, buf, bytes, &tag, &c->seqs[idx])) != PD_OK)
        return peer_failed(p, a->peer, s);
    c->sent++;
    c->sent_msgs++;
    c->sent_bytes += bytes;
    return progress_all(p);
}

pd_status pd_executor_drain(pd_pipeline *p)
{
    for (int i = 0; i < p->boot.n_channels; i++) {
        pd_peer_channel *c = &p->boot.channels[i];
        for (int k = 0; c->send && k < p->boot.depth; k++)
            if (c->seqs[k] != UINT64_MAX)
                PD_CHECK(wait_send(p, c, c->seqs[k]));
    }
    return PD_OK;
}

/* The pin slot of minibatch mb (or a free one for mb = -1). */
static int pin_slot(const pd_pipeline *p, int64_t mb)
{
    for (int i = 0; i < p->n_pins; i++)
        if (p->pin_mb[i] == mb)
            return i;
    return -1;
}

/* Is the next compute action after `i` the backward of `mb`? Then the
 * graph still holds mb's forward state there and nothing is stashed. */
static bool backward_follows(const pd_pipeline *p, int i, int mb)
{
    const pd_sched_action *list = p->sched->actions[p->boot.rank];

    for (int k = i + 1; k < p->sched->n_actions[p->boot.rank]; k++) {
        pd_sched_op op = list[k].op;
        if (op == PD_SCHED_FORWARD || op == PD_SCHED_EVAL || op == PD_SCHED_LOAD || op == PD_SCHED_RECV_ACT)
            return false;
        if (op == PD_SCHED_BACKWARD)
            return list[k].minibatch == mb;
    }
    return false;
}

/* The run's index of a training minibatch of the segment's schedule (the
 * graph's minibatch id: it seeds dropout). */
static int64_t global_mb(const pd_pipeline *p, const pd_sched_action *a) { return p->seg->first + a->minibatch; }

/* Is the action's minibatch one of the evaluation? */
static bool is_eval_mb(const pd_pipeline *p, const pd_sched_action *a) { return a->minibatch >= p->seg->count; }

static pd_status forward(pd_pipeline *p, int i, const pd_sched_action *a)
{
    pd_weight_pin pin;
    int slot = pin_slot(p, -1);
    const int64_t mb = global_mb(p, a);

    if (slot < 0 || a->weight_version < 0 || a->weight_version >= p->n_versions ||
        p->version_of[a->weight_version] == UINT64_MAX)
        return PD_ERROR(PD_ESTATE, "pipeline: rank %d: forward of minibatch %lld: no pin slot or unknown weight "
                                   "version %d", p->boot.rank, (long long)mb, a->weight_version);
    uint64_t want = p->version_of[a->weight_version];
    /* Vertical sync and 2BW run a minibatch on the version the schedule
     * gives it, which may be older than the newest. */
    if (p->opts.vertical_sync || p->sched->type == PD_SCHED_1F1B_2BW) {
        PD_CHECK(pd_weight_ring_pin_version(p->ver.ring, want, &pin));
    } else {
        pd_weight_ring_pin_newest(p->ver.ring, &pin);
        if (pin.version != want) {
            pd_weight_ring_unpin(p->ver.ring, &pin);
            return PD_ERROR(PD_ESTATE, "pipeline: rank %d: minibatch %lld: the newest weight version is %llu, the "
                                       "schedule says %llu", p->boot.rank, (long long)mb,
                            (unsigned long long)pin.version, (unsigned long long)want);
        }
    }
    p->pins[slot] = pin;
    p->pin_mb[slot] = mb;
    PD_CHECK(pd_versions_load(&p->ver, &p->st, &pin));
    PD_CHECK(pd_graph_forward_nodes(p->st.g, p->st.nodes, p->st.n_nodes, mb, true));
    p->holds_mb = mb;
    p->progress.forwards++;
    if (p->st.index == p->st.n_stages - 1) {
        pd_graph *g = p->st.g;
        PD_CHECK(pd_trainer_count_correct(p->trainer, p->batch, &p->correct[mb], &p->counted[mb]));
        PD_CHECK(pd_tensor_copy_to_host(pd_graph_output(g, p->parts.io.loss), &p->losses[mb], sizeof(float)));
        if (!isfinite(p->losses[mb]))
            return PD_ERROR(PD_ESTATE, "training diverged at minibatch %lld: the loss is %g (try a lower learning "
                                       "rate, --lr)", (long long)mb + 1, (double)p->losses[mb]);
        p->mb_time[mb] = now_seconds() - p->run_start;
        p->progress.loss_sum += (double)p->losses[mb];
        p->progress.losses++;
        p->progress.correct += p->correct[mb];
        p->progress.counted += p->counted[mb];
    }
    if (!backward_follows(p, i, a->minibatch))
        PD_CHECK(pd_stage_stash_save(&p->st, mb));
    return PD_OK;
}

/* An evaluation forward in inference mode on the newest weights; the last
 * stage counts the hits among the batch's valid samples (S2VT: tokens). */
static pd_status evaluate(pd_pipeline *p, const pd_sched_action *a)
{
    const int64_t index = a->minibatch - p->seg->count;
    pd_weight_pin pin;
    pd_status s;

    pd_weight_ring_pin_newest(p->ver.ring, &pin);
    if ((s = pd_versions_load(&p->ver, &p->st, &pin)) == PD_OK)
        s = pd_graph_forward_nodes(p->st.g, p->st.nodes, p->st.n_nodes, index, false);
    pd_weight_ring_unpin(p->ver.ring, &pin);
    PD_CHECK(s);
    p->holds_mb = -1;
    p->progress.evals++;
    if (p->st.index < p->st.n_stages - 1)
        return PD_OK;
    const int64_t left = p->eval_samples - index * p->batch;
    const int valid = left < p->batch ? (int)left : p->batch;
    int64_t hits, counted;
    PD_CHECK(pd_trainer_count_correct(p->trainer, valid, &hits, &counted));
    p->eval_correct += hits;
    p->eval_counted += counted;
    return PD_OK;
}

static pd_status backward(pd_pipeline *p, const pd_sched_action *a)
{
    const int64_t mb = global_mb(p, a);
    int slot = pin_slot(p, mb);
    pd_stage *st = &p->st;

    if (slot < 0)
        return PD_ERROR(PD_ESTATE, "pipeline: rank %d: backward of minibatch %lld before its forward", p->boot.rank,
                        (long long)mb);
    if (p->holds_mb != mb)
        PD_CHECK(pd_stage_stash_restore(st, mb));
    PD_CHECK(pd_versions_load(&p->ver, st, &p->pins[slot]));
    PD_CHECK(pd_graph_backward_nodes(st->g, st->nodes, st->n_nodes, mb, st->n_seeds, st->seed_nodes,
                                     (const pd_tensor *const *)st->seeds));
    p->holds_mb = -1; /* gradients now share the activations' memory */
    pd_weight_ring_unpin(p->ver.ring, &p->pins[slot]);
    p->pin_mb[slot] = -1;
    p->progress.backwards++;
    if (p->grad_count++ == 0)
        return pd_stage_params_get(st, true, p->grad_acc);
    /* More than one backward pass per step (gpipe's flushes, 2BW's
     * batches): a sum, the second half of grad_acc as scratch. */
    PD_CHECK(pd_stage_params_get(st, true, p->grad_acc + st->n_weights));
    for (size_t k = 0; k < st->n_weights; k++)
        p->grad_acc[k] += p->grad_acc[st->n_weights + k];
    return PD_OK;
}

static pd_status allreduce(pd_pipeline *p)
{
#ifdef HAVE_MPI
    if (MPI_Iallreduce(MPI_IN_PLACE, p->grad_acc, (int)p->st.n_weights, MPI_FLOAT, MPI_SUM,
                       *(MPI_Comm *)p->boot.replica_comm, p->allreduce) != MPI_SUCCESS)
        return PD_ERROR(PD_ECOMM, "pipeline: rank %d: MPI_Iallreduce of stage %d's gradients failed", p->boot.rank,
                        p->stage);
    p->allreduce_pending = true;
    return PD_OK;
#else
    return PD_ERROR(PD_ENOTSUP, "pipeline: replicated stages need MPI (rank %d)", p->boot.rank);
#endif
}

static pd_status step(pd_pipeline *p, const pd_sched_action *a)
{
    const double start = now_seconds(), deadline = start + p->opts.timeout_ms / 1000.0;
    const int replicas = p->sched->stage_replicas[p->stage];
    int polls = 0;
    uint64_t published;

    while (p->allreduce_pending) {
        PD_CHECK(progress_all(p));
        if (p->allreduce_pending && now_seconds() > deadline)
            return PD_ERROR(PD_ETIMEOUT, "pipeline: rank %d (stage %d): the replicas' all-reduce did not finish in "
                                         "%.0f s", p->boot.rank, p->stage, p->opts.timeout_ms / 1000.0);
        pause_poll(p, &polls, events_seen(p));
    }
    if (polls)
        p->progress.allreduce_wait_s += now_seconds() - start;
    const int total = p->grad_count * (replicas > 1 ? replicas : 1);
    if (total > 1)
        for (size_t k = 0; k < p->st.n_weights; k++)
            p->grad_acc[k] /= (float)total;
    PD_CHECK(pd_stage_params_set(&p->st, true, p->grad_acc));
    /* The lr of the step's first minibatch in the whole run, as the
     * single-process trainer would use it there. */
    double lr = pd_lr_schedule_at(&p->lr, p->seg->first + (int64_t)a->round * p->mb_per_step, p->total);
    PD_CHECK(pd_versions_step(&p->ver, &p->st, p->opt, (float)lr, &published));
    if (a->weight_version >= 0 && a->weight_version < p->n_versions)
        p->version_of[a->weight_version] = published;
    p->grad_count = 0;
    return PD_OK;
}

/* Stage 0: the minibatch into the model's inputs (all of them: what later
 * stages read travels with the activations). */
static pd_status load(pd_pipeline *p, const pd_sched_action *a)
{
    int valid;

    return pd_trainer_load(p->trainer, is_eval_mb(p, a), &valid);
}

static pd_status execute(pd_pipeline *p, int i)
{
    const pd_sched_action *a = &p->sched->actions[p->boot.rank][i];
    pd_stage *st = &p->st;
    pd_channel_msg msg;
    pd_status s;

    switch (a->op) {
    case PD_SCHED_LOAD: return load(p, a);
    case PD_SCHED_FORWARD: return forward(p, i, a);
    case PD_SCHED_EVAL: return evaluate(p, a);
    case PD_SCHED_BACKWARD: return backward(p, a);
    case PD_SCHED_SEND_ACT: return post_send(p, a, st->cut_out, st->n_cut_out, st->act_out_bytes);
    case PD_SCHED_SEND_GRAD: return post_send(p, a, st->cut_in, st->n_cut_in, st->grad_out_bytes);
    case PD_SCHED_RECV_ACT:
    case PD_SCHED_RECV_GRAD: {
        const bool act = a->op == PD_SCHED_RECV_ACT;
        PD_CHECK(wait_message(p, a->peer, act ? PD_MSG_ACTIVATION : PD_MSG_GRADIENT, a->minibatch, &msg));
        s = act ? pd_stage_unpack_act(st, msg.data, msg.bytes, p->boot.channel_dev)
                : pd_stage_unpack_grad(st, msg.data, msg.bytes, p->boot.channel_dev);
        PD_CHECK(s);
        if ((s = pd_channel_release(pd_boot_channel(&p->boot, a->peer, false)->ch, &msg)) != PD_OK)
            return peer_failed(p, a->peer, s);
        return PD_OK;
    }
    case PD_SCHED_ALLREDUCE: return allreduce(p);
    case PD_SCHED_STEP: return step(p, a);
    default:
        return PD_ERROR(PD_ENOTSUP, "pipeline: rank %d: action %d (%s) is not supported by the runtime",
                        p->boot.rank, i, pd_sched_op_name(a->op));
    }
}

pd_status pd_executor_run(pd_pipeline *p)
{
    const int rank = p->boot.rank;
    const double start = now_seconds();
    double eval_start = 0;

    /* A training schedule gives a version to each step's result: version
     * 0 is what the ring holds now. */
    for (int64_t v = 0; v < p->n_versions; v++)
        p->version_of[v] = UINT64_MAX;
    p->version_of[0] = pd_weight_ring_newest_version(p->ver.ring);
    const int segment = (int)(p->seg - p->segments);
    pd_status s = PD_OK;
    for (int i = 0; i < p->sched->n_actions[rank] && s == PD_OK; i++) {
        const pd_sched_action *a = &p->sched->actions[rank][i];
        const double began = now_seconds();
        if (!eval_start && a->minibatch >= 0 && is_eval_mb(p, a))
            eval_start = began;
        pd_flight_begin(&p->flight, segment, i, a, began);
        if ((s = execute(p, i)) == PD_OK)
            pd_flight_end(&p->flight, now_seconds());
        pd_progress_tick(p);
    }
    if (s == PD_OK)
        s = pd_executor_drain(p);
    if (s != PD_OK) {
        pd_flight_dump(p, s == PD_ETIMEOUT ? "timeout" : "error", now_seconds());
        return s;
    }
    const double end = now_seconds();
    p->seg_train_s = (eval_start ? eval_start : end) - start;
    p->seg_eval_s = eval_start ? end - eval_start : 0;
    return PD_OK;
}
