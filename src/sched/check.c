/* The dry-run checker: executes every rank's list with blocking semantics
 * (bounded channels, in-order receives, collective all-reduce rounds) and
 * reports the first thing that cannot happen in a real run. */
#include "config.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sched/sched_int.h"

/* Per rank and minibatch: what the rank holds. */
enum { HAS_INPUT = 1, FORWARDED = 2, HAS_GRAD = 4, BACKWARDED = 8, EVALUATED = 16 };

typedef struct message {
    pd_sched_op op;
    int mb;
    int64_t bytes;
    int rank, action; /* the sender's */
} message;

/* A channel per ordered pair of ranks: a ring of `depth` slots. */
typedef struct channel {
    int head, count;
} channel;

typedef struct checker {
    const pd_sched *s;
    int n_mb;          /* training + evaluation */
    int *pc;           /* per rank: next action */
    int *posted;       /* per rank: all-reduce rounds posted */
    int *newest;       /* per rank: the weight version its last step published */
    uint8_t *flags;    /* n_ranks x n_mb */
    channel *channels; /* n_ranks x n_ranks, [src][dst] */
    message *slots;    /* n_ranks x n_ranks x depth */
} checker;

static pd_status fail(const checker *c, int rank, int index, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static pd_status fail(const checker *c, int rank, int index, const char *fmt, ...)
{
    char what[128], reason[384];
    va_list ap;

    pd_sched_action_format(&c->s->actions[rank][index], what, sizeof(what));
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    return PD_ERROR(PD_ESTATE, "schedule %s: rank %d action %d (%s): %s", pd_sched_type_name(c->s->type), rank,
                    index, what, reason);
}

static channel *chan(const checker *c, int src, int dst) { return &c->channels[src * c->s->n_ranks + dst]; }

static message *slot(const checker *c, int src, int dst, int i)
{
    return &c->slots[((size_t)src * c->s->n_ranks + dst) * c->s->depth + (size_t)i % c->s->depth];
}

static bool is_send(pd_sched_op op) { return op == PD_SCHED_SEND_ACT || op == PD_SCHED_SEND_GRAD; }
static bool is_recv(pd_sched_op op) { return op == PD_SCHED_RECV_ACT || op == PD_SCHED_RECV_GRAD; }

/* Checks the fields of an action whatever the state. */
static pd_status check_fields(const checker *c, int rank, int i)
{
    const pd_sched *s = c->s;
    const pd_sched_action *a = &s->actions[rank][i];
    int stage = s->rank_stage[rank];

    if ((unsigned)a->op >= PD_SCHED_OP_COUNT)
        return fail(c, rank, i, "unknown operation %d", (int)a->op);
    if (a->stage != stage)
        return fail(c, rank, i, "the action is for stage %d, not the rank's", a->stage);
    if (a->op != PD_SCHED_STEP && a->op != PD_SCHED_ALLREDUCE && (a->minibatch < 0 || a->minibatch >= c->n_mb))
        return fail(c, rank, i, "minibatch %d does not exist", a->minibatch);
    if ((is_send(a->op) || is_recv(a->op)) && (a->peer < 0 || a->peer >= s->n_ranks || a->peer == rank))
        return fail(c, rank, i, "bad peer %d", a->peer);
    if (a->op == PD_SCHED_FORWARD || a->op == PD_SCHED_BACKWARD || a->op == PD_SCHED_EVAL || a->op == PD_SCHED_LOAD) {
        int owner = pd_sched_route(s, stage, a->minibatch);
        if (owner != rank)
            return fail(c, rank, i, "minibatch belongs to rank %d (replica mb mod r)", owner);
        if (a->op == PD_SCHED_LOAD && stage != 0)
            return fail(c, rank, i, "only stage 0 loads minibatches");
    }
    if ((a->op == PD_SCHED_FORWARD || a->op == PD_SCHED_BACKWARD) && a->minibatch >= s->minibatches)
        return fail(c, rank, i, "minibatch %d is an evaluation minibatch", a->minibatch);
    if (a->op == PD_SCHED_EVAL && a->minibatch < s->minibatches)
        return fail(c, rank, i, "minibatch %d is a training minibatch", a->minibatch);
    return PD_OK;
}

/* Tries to execute rank's next action: PD_OK and *moved when it ran,
 * PD_OK and !*moved when it blocks, an error when it is wrong. */
static pd_status step_rank(checker *c, int rank, bool *moved)
{
    const pd_sched *s = c->s;
    int i = c->pc[rank];
    const pd_sched_action *a = &s->actions[rank][i];
    uint8_t *f = a->minibatch >= 0 ? &c->flags[(size_t)rank * c->n_mb + a->minibatch] : NULL;
    int stage = s->rank_stage[rank], last = s->n_stages - 1;

    *moved = false;
    PD_CHECK(check_fields(c, rank, i));
    switch (a->op) {
    case PD_SCHED_LOAD:
        if (*f & HAS_INPUT)
            return fail(c, rank, i, "loaded twice");
        *f |= HAS_INPUT;
        break;
    case PD_SCHED_FORWARD:
    case PD_SCHED_EVAL:
        if (!(*f & HAS_INPUT))
            return fail(c, rank, i, "its input was neither loaded nor received before");
        if (*f & (FORWARDED | EVALUATED))
            return fail(c, rank, i, "forwarded twice");
        if (a->weight_version > c->newest[rank])
            return fail(c, rank, i, "weight version %d is not published yet (the newest is v%d)", a->weight_version,
                        c->newest[rank]);
        *f |= a->op == PD_SCHED_FORWARD ? FORWARDED : EVALUATED;
        break;
    case PD_SCHED_BACKWARD:
        if (!(*f & FORWARDED))
            return fail(c, rank, i, "no forward of this minibatch before");
        if (stage < last && !(*f & HAS_GRAD))
            return fail(c, rank, i, "its gradient was not received before");
        if (*f & BACKWARDED)
            return fail(c, rank, i, "backwarded twice");
        *f |= BACKWARDED;
        break;
    case PD_SCHED_SEND_ACT:
    case PD_SCHED_SEND_GRAD: {
        channel *ch = chan(c, rank, a->peer);
        if (a->op == PD_SCHED_SEND_ACT && !(*f & (FORWARDED | EVALUATED)))
            return fail(c, rank, i, "sends an activation not computed yet");
        if (a->op == PD_SCHED_SEND_GRAD && !(*f & BACKWARDED))
            return fail(c, rank, i, "sends a gradient not computed yet");
        if (ch->count == s->depth)
            return PD_OK; /* blocks on a full channel */
        *slot(c, rank, a->peer, ch->head + ch->count) =
            (message){.op = a->op, .mb = a->minibatch, .bytes = a->bytes, .rank = rank, .action = i};
        ch->count++;
        break;
    }
    case PD_SCHED_RECV_ACT:
    case PD_SCHED_RECV_GRAD: {
        channel *ch = chan(c, a->peer, rank);
        pd_sched_op want = a->op == PD_SCHED_RECV_ACT ? PD_SCHED_SEND_ACT : PD_SCHED_SEND_GRAD;
        const message *m;
        if (ch->count == 0)
            return PD_OK; /* blocks on an empty channel */
        m = slot(c, a->peer, rank, ch->head);
        if (m->op != want || m->mb != a->minibatch) {
            char other[128];
            pd_sched_action_format(&s->actions[m->rank][m->action], other, sizeof(other));
            return fail(c, rank, i, "the channel holds first rank %d's action %d (%s): sends and receives are "
                        "out of order", m->rank, m->action, other);
        }
        if (m->bytes != a->bytes)
            return fail(c, rank, i, "the message sent has %lld bytes", (long long)m->bytes);
        ch->head = (ch->head + 1) % s->depth;
        ch->count--;
        *f |= a->op == PD_SCHED_RECV_ACT ? HAS_INPUT : HAS_GRAD;
        break;
    }
    case PD_SCHED_ALLREDUCE:
        if (a->round != c->posted[rank])
            return fail(c, rank, i, "round posted out of order (expected round %d)", c->posted[rank]);
        c->posted[rank]++;
        break;
    case PD_SCHED_STEP:
        if (s->stage_replicas[stage] > 1) {
            if (c->posted[rank] <= a->round)
                return fail(c, rank, i, "the step's all-reduce round was not posted by this rank");
            for (int j = 0; j < s->stage_replicas[stage]; j++)
                if (c->posted[s->stage_ranks[stage][j]] <= a->round)
                    return PD_OK; /* waits for the round */
        }
        c->newest[rank] = a->weight_version;
        break;
    default: break;
    }
    c->pc[rank]++;
    *moved = true;
    return PD_OK;
}

/* Names every blocked rank in one message. */
static pd_status report_deadlock(const checker *c)
{
    const pd_sched *s = c->s;
    char text[1024] = "", what[128];
    size_t used = 0;
    int first = -1;

    for (int r = 0; r < s->n_ranks; r++) {
        if (c->pc[r] == s->n_actions[r])
            continue;
        const pd_sched_action *a = &s->actions[r][c->pc[r]];
        if (first < 0)
            first = r;
        /* A receive from a rank that has finished can never complete. */
        if (is_recv(a->op) && c->pc[a->peer] == s->n_actions[a->peer])
            return fail(c, r, c->pc[r], "unmatched receive: rank %d has finished without sending it", a->peer);
        pd_sched_action_format(a, what, sizeof(what));
        if (used < sizeof(text))
            used += snprintf(text + used, sizeof(text) - used, "%srank %d action %d (%s)", used ? "; " : "", r,
                             c->pc[r], what);
    }
    return PD_ERROR(PD_ESTATE, "schedule %s: deadlock: every unfinished rank is blocked: %s",
                    pd_sched_type_name(s->type), text);
}

static pd_status check_end(const checker *c)
{
    const pd_sched *s = c->s;

    for (int src = 0; src < s->n_ranks; src++)
        for (int dst = 0; dst < s->n_ranks; dst++) {
            const channel *ch = chan(c, src, dst);
            if (ch->count) {
                const message *m = slot(c, src, dst, ch->head);
                return fail(c, src, m->action, "unmatched send: rank %d never receives it", dst);
            }
        }
    for (int mb = 0; mb < c->n_mb; mb++)
        for (int st = 0; st < s->n_stages; st++) {
            int r = pd_sched_route(s, st, mb);
            uint8_t f = c->flags[(size_t)r * c->n_mb + mb];
            bool training = mb < s->minibatches;
            const char *missing = training ? (!(f & FORWARDED) ? "forward" : !(f & BACKWARDED) ? "backward" : NULL)
                                           : (!(f & EVALUATED) ? "eval" : NULL);
            if (missing)
                return PD_ERROR(PD_ESTATE,
                                "schedule %s: minibatch %d is never completed: no %s at stage %d (rank %d)",
                                pd_sched_type_name(s->type), mb, missing, st, r);
        }
    return PD_OK;
}

/* 2BW holds two weight versions: no rank may need more alive at once. */
static pd_status check_two_versions(const pd_sched *s)
{
    for (int r = 0; r < s->n_ranks; r++) {
        int in_flight, versions;
        PD_CHECK(pd_sched_rank_memory(s, r, &in_flight, &versions));
        if (versions > 2)
            return PD_ERROR(PD_ESTATE, "schedule %s: rank %d keeps %d weight versions alive at once; 2BW holds 2",
                            pd_sched_type_name(s->type), r, versions);
    }
    return PD_OK;
}

pd_status pd_sched_check(const pd_sched *s)
{
    checker c = {.s = s};
    size_t pairs;
    pd_status status = PD_OK;
    bool progress = true, done = false;

    if (!s || s->n_ranks < 1 || s->depth < 1)
        return PD_ERROR(PD_EINVAL, "schedule check: no schedule or channel depth < 1");
    pairs = (size_t)s->n_ranks * s->n_ranks;
    c.n_mb = s->minibatches + s->eval_minibatches;
    c.pc = calloc(s->n_ranks, sizeof(int));
    c.posted = calloc(s->n_ranks, sizeof(int));
    c.newest = calloc(s->n_ranks, sizeof(int));
    c.flags = calloc((size_t)s->n_ranks * (c.n_mb ? c.n_mb : 1), 1);
    c.channels = calloc(pairs, sizeof(channel));
    c.slots = malloc(pairs * s->depth * sizeof(message));
    if (!c.pc || !c.posted || !c.newest || !c.flags || !c.channels || !c.slots) {
        status = PD_ERROR(PD_ENOMEM, "schedule check: out of host memory");
        goto free_state;
    }
    if (s->type == PD_SCHED_1F1B_2BW)
        PD_CHECK_GOTO(check_two_versions(s), status, free_state);
    while (progress && !done) {
        progress = false;
        done = true;
        for (int r = 0; r < s->n_ranks; r++) {
            bool moved = true;
            while (moved && c.pc[r] < s->n_actions[r]) {
                PD_CHECK_GOTO(step_rank(&c, r, &moved), status, free_state);
                progress |= moved;
            }
            done &= c.pc[r] == s->n_actions[r];
        }
    }
    status = done ? check_end(&c) : report_deadlock(&c);
free_state:
    free(c.slots);
    free(c.channels);
    free(c.flags);
    free(c.newest);
    free(c.posted);
    free(c.pc);
    return status;
}
