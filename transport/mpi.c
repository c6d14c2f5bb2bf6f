/* mpi backend: channels between ranks of one MPI job (MPI initialised by
 * the caller) over MPI_COMM_WORLD. The receiver keeps an MPI_Irecv posted
 * at the start of every slot it has credited; the sender MPI_Isends into
 * them only with a credit. A small payload travels with its header in one
 * message (copied behind the header on the sender); a large one follows
 * its header as a message of its own, received straight into the slot
 * once the header checked (so MPI may copy it once, e.g. by CMA, and no
 * byte of it lands before the checks). The token handshake and everything
 * else travel as 64-byte control frames:
 *   sender -> receiver   HELLO {shape, nonce}, PROOF, CLOSE {sent}
 *   receiver -> sender   CHALLENGE {nonce, proof}, READY, REJECT,
 *                        CREDIT {released}, CLOSE
 * The receiver proves first; the sender sends its own proof before it
 * checks the receiver's (as both do at once over sockets), so a wrong token
 * is named on both ends. No slot receive is posted before the sender's
 * proof checked.
 *
 * Tags: the receiver picks a fresh base per channel (the only state of the
 * backend, like a port allocator) and publishes "mpi:<world rank>:<base>";
 * base+0 carries control to the receiver, base+1 headers, base+2 payloads,
 * base+3 control to the sender. MPI matches receives in posting order per
 * source and tag, so message n lands in the receive posted for it.
 *
 * Device memory: HELLO carries whether the sender may send from its device
 * memory itself (pd_tp_mpi_direct_check: a CUDA device and a CUDA-aware
 * library, or the cpu device forced), CHALLENGE whether the receiver may
 * receive into its device slots; both may: both ends take the
 * cuda-aware-mpi path, where every payload travels as a message of its
 * own (none inline), MPI_Isend from the sender's device buffer and
 * MPI_Irecv into the receiver's device slot, posted only once the header
 * (still in the host slot) checked. Otherwise both ends stage (slots.c).
 *
 * MPI has no descriptor to sleep on: waits poll, spinning only just after
 * activity and backing off to 1 ms sleeps when idle. Calls on channels in
 * different threads at once need MPI_THREAD_MULTIPLE. */
#include "config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <mpi.h>
#ifdef HAVE_MPI_EXT_H
#include <mpi-ext.h>
#endif

#include <pipedream/log.h>

#include "transport/transport_int.h"

#define FRAME_MAGIC 0x31504450u /* "PDP1" */
#define PROTO 2 /* 2: HELLO and CHALLENGE say whether the end may take cuda-aware-mpi */
#define TAG_FLOOR 1024 /* tags below are left to the application */
#define TAGS_PER_CHANNEL 4
#define OUT_FRAMES 8
#define INLINE_MAX 8192 /* payloads up to this many bytes travel with their header */
#define SPIN_NS 100000       /* after activity, poll without sleeping this long */
#define MAX_SLEEP_NS 1000000 /* an idle channel polls every millisecond */

enum { TAG_TO_RECEIVER = 0, TAG_HEADER = 1, TAG_PAYLOAD = 2, TAG_TO_SENDER = 3 };
enum { F_HELLO = 1, F_CHALLENGE, F_PROOF, F_READY, F_REJECT, F_CREDIT, F_CLOSE };

typedef struct mpi_frame {
    pd_tp_frame_head head;
    uint8_t nonce[16];
    uint64_t mac;
    uint64_t count; /* CREDIT: slots released; CLOSE: messages sent */
    uint8_t direct; /* HELLO, CHALLENGE: the end's pd_tp_mpi_direct */
    uint8_t reserved[7];
} mpi_frame;
_Static_assert(sizeof(mpi_frame) == 64, "control frames are 64 bytes");

/* A message's requests: its header (with the payload when inline), then a
 * large payload; which completed, and (receiver) how many bytes came. */
typedef struct msg_reqs {
    MPI_Request req[2];
    bool complete[2];
    bool checked; /* receiver: the header checked (a large payload's receive posted) */
    int bytes[2];
    pd_tp_header header; /* receiver: the trusted copy */
} msg_reqs;

typedef struct mpi_state {
    int peer; /* world rank; MPI_ANY_SOURCE until a receiver hears HELLO */
    int base;
    uint8_t nonce[16], peer_nonce[16];
    bool got_hello, sent_ready;
    pd_tp_mpi_direct mine, peers; /* whether each end may take cuda-aware-mpi, or why not */
    bool direct;                  /* both may: payloads leave and land in device memory, never inline */
    mpi_frame in;
    MPI_Request in_req; /* the control receive, MPI_REQUEST_NULL when none */
    mpi_frame out[OUT_FRAMES];
    MPI_Request out_req[OUT_FRAMES];
    msg_reqs *msgs;      /* depth entries: slot i (receiver) or send i (sender) */
    uint8_t *staging;    /* sender: depth inline messages, header and payload */
    size_t staging_stride;
    uint64_t posted_for; /* receiver: messages with receives posted */
    int64_t peer_sent;   /* receiver: count in the sender's CLOSE, -1 before */
    uint64_t credit_sent; /* receiver: in the last credit frame sent */
    mpi_frame credit;    /* one credit in flight; later releases wait for it */
    MPI_Request credit_req;
    _Atomic int64_t active_ns; /* last time anything moved (read by waits without the lock) */
} mpi_state;

/* A receiver until its sender is proven: then the state moves to ch->be. */
typedef struct mpi_listener {
    mpi_state *pending;
} mpi_listener;

static _Atomic unsigned channels_opened;

static pd_status mpi_error(const pd_channel *ch, int rc, const char *call)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;

    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof(text), "MPI error %d", rc);
    return PD_ERROR(PD_ECOMM, "channel %u: mpi: %s failed: %s", ch->config.channel_id, call, text);
}

#define MPI_TRY(ch, call, what)                                                                                      \
    do {                                                                                                             \
        int rc_ = (call);                                                                                            \
        if (rc_ != MPI_SUCCESS)                                                                                      \
            return mpi_error((ch), rc_, (what));                                                                     \
    } while (0)

/* MPI is usable: initialised by the caller and not finalised. */
static pd_status mpi_usable(pd_status otherwise)
{
    int init = 0, fin = 0;

    MPI_Initialized(&init);
    if (init)
        MPI_Finalized(&fin);
    if (!init || fin)
        return PD_ERROR(otherwise, "mpi: MPI is not initialised (the caller must MPI_Init first)");
    return PD_OK;
}

static void state_free(mpi_state *st)
{
    if (!st)
        return;
    free(st->msgs);
    free(st->staging);
    free(st);
}

/* What a slot's first receive takes: the header and an inline payload. */
static size_t head_bytes(const pd_channel *ch)
{
    return sizeof(pd_tp_header) + (ch->config.slot_bytes < INLINE_MAX ? ch->config.slot_bytes : INLINE_MAX);
}

/* The largest payload that travels with its header: none on the
 * cuda-aware-mpi path (payloads are device memory). */
static uint64_t inline_max(const mpi_state *st) { return st->direct ? 0 : INLINE_MAX; }

int pd_tp_mpi_cuda_aware(void)
{
#if defined(HAVE_MPIX_QUERY_CUDA_SUPPORT) && defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
    return MPIX_Query_cuda_support() ? 1 : 0;
#else
    return -1;
#endif
}

/* Whether this end may take cuda-aware-mpi (tests force the cpu device
 * with $PD_TRANSPORT_FORCE_MPI_DIRECT=1). */
static pd_tp_mpi_direct direct_check(const pd_channel *ch)
{
    const char *forced = getenv("PD_TRANSPORT_FORCE_MPI_DIRECT");

    return pd_tp_mpi_direct_check(ch->config.device, ch->config.memory, pd_tp_mpi_cuda_aware(),
                                  forced && strcmp(forced, "1") == 0);
}

/* The handshake told this end the peer's check: both may, or not. */
static void direct_agree(mpi_state *st, uint8_t peers)
{
    st->peers = (pd_tp_mpi_direct)peers;
    st->direct = st->mine == PD_TP_MPI_DIRECT_OK && st->peers == PD_TP_MPI_DIRECT_OK;
}

static pd_status state_new(pd_channel *ch, int peer, int base, mpi_state **out)
{
    mpi_state *st = calloc(1, sizeof(*st));

    size_t depth = (size_t)ch->config.depth;

    if (st && ch->role == PD_TP_SENDER) {
        st->staging_stride = head_bytes(ch);
        st->staging = malloc(depth * st->staging_stride);
    }
    if (!st || !(st->msgs = calloc(depth, sizeof(*st->msgs))) || (ch->role == PD_TP_SENDER && !st->staging)) {
        state_free(st);
        return PD_ERROR(PD_ENOMEM, "channel %u: out of host memory", ch->config.channel_id);
    }
    st->peer = peer;
    st->base = base;
    st->peer_sent = -1;
    st->mine = direct_check(ch);
    st->in_req = MPI_REQUEST_NULL;
    st->credit_req = MPI_REQUEST_NULL;
    for (int i = 0; i < OUT_FRAMES; i++)
        st->out_req[i] = MPI_REQUEST_NULL;
    for (int i = 0; i < ch->config.depth; i++)
        st->msgs[i].req[0] = st->msgs[i].req[1] = MPI_REQUEST_NULL;
    st->active_ns = pd_tp_now_ns();
    if (getrandom(st->nonce, sizeof(st->nonce), 0) != (ssize_t)sizeof(st->nonce)) {
        state_free(st);
        return PD_ERROR(PD_EIO, "channel %u: mpi: getrandom failed", ch->config.channel_id);
    }
    *out = st;
    return PD_OK;
}

static int in_tag(const pd_channel *ch, const mpi_state *st)
{
    return st->base + (ch->role == PD_TP_RECEIVER ? TAG_TO_RECEIVER : TAG_TO_SENDER);
}

static pd_status post_control_recv(pd_channel *ch, mpi_state *st)
{
    MPI_TRY(ch, MPI_Irecv(&st->in, (int)sizeof(st->in), MPI_BYTE, st->peer, in_tag(ch, st), MPI_COMM_WORLD,
                          &st->in_req),
            "MPI_Irecv (control)");
    return PD_OK;
}

/* Sends a control frame from one of the out buffers (PD_ESTATE-free: a
 * busy buffer is waited for, which takes the time of a small eager send). */
static pd_status send_frame(pd_channel *ch, mpi_state *st, int type, uint64_t count)
{
    int tag = st->base + (ch->role == PD_TP_RECEIVER ? TAG_TO_SENDER : TAG_TO_RECEIVER);
    int free_slot = -1;
    mpi_frame *f;

    for (int i = 0; i < OUT_FRAMES && free_slot < 0; i++) {
        int done = 1;
        if (st->out_req[i] != MPI_REQUEST_NULL)
            MPI_TRY(ch, MPI_Test(&st->out_req[i], &done, MPI_STATUS_IGNORE), "MPI_Test (control send)");
        if (done)
            free_slot = i;
    }
    if (free_slot < 0) {
        free_slot = 0;
        MPI_TRY(ch, MPI_Wait(&st->out_req[0], MPI_STATUS_IGNORE), "MPI_Wait (control send)");
    }
    f = &st->out[free_slot];
    memset(f, 0, sizeof(*f));
    pd_tp_frame_head_fill(&f->head, ch, FRAME_MAGIC, PROTO, type, ch->role);
    memcpy(f->nonce, st->nonce, sizeof(f->nonce));
    f->count = count;
    if (type == F_HELLO || type == F_CHALLENGE)
        f->direct = (uint8_t)st->mine;
    if (type == F_CHALLENGE || type == F_PROOF)
        f->mac = pd_tp_hs_proof(ch, (int)ch->role, st->peer_nonce, st->nonce);
    MPI_TRY(ch, MPI_Isend(f, (int)sizeof(*f), MPI_BYTE, st->peer, tag, MPI_COMM_WORLD, &st->out_req[free_slot]),
            "MPI_Isend (control)");
    return PD_OK;
}

/* The next control frame if one arrived (*have), its source in *source. */
static pd_status next_frame(pd_channel *ch, mpi_state *st, mpi_frame *f, int *source, bool *have)
{
    MPI_Status status;
    int done = 0;

    *have = false;
    if (st->in_req == MPI_REQUEST_NULL)
        return PD_OK;
    MPI_TRY(ch, MPI_Test(&st->in_req, &done, &status), "MPI_Test (control)");
    if (!done)
        return PD_OK;
    int bytes = 0;
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    if (bytes != (int)sizeof(*f) || st->in.head.magic != FRAME_MAGIC)
        return PD_ERROR(PD_ECOMM, "channel %u: mpi: the peer is not a pipedream channel (%d bytes, magic 0x%08x)",
                        ch->config.channel_id, bytes, st->in.head.magic);
    PD_CHECK(pd_tp_frame_head_check(ch, &st->in.head, PROTO, "mpi"));
    *f = st->in;
    *source = status.MPI_SOURCE;
    *have = true;
    st->active_ns = pd_tp_now_ns();
    return PD_OK;
}

/* Reports a handshake failure to the peer (best effort) and returns it. */
static pd_status reject(pd_channel *ch, mpi_state *st, pd_status status)
{
    char message[512];

    snprintf(message, sizeof(message), "%s", pd_last_error());
    if (st->peer != MPI_ANY_SOURCE)
        (void)send_frame(ch, st, F_REJECT, 0);
    return pd_error_at(__FILE__, __LINE__, status, "%s", message);
}

/* ---- receiver ---- */

/* Posts the header receives of messages up to released + depth, each at
 * the start of its slot (a message's slot is its sequence mod depth). */
static pd_status post_slot_recvs(pd_channel *ch, mpi_state *st)
{
    uint64_t depth = (uint64_t)ch->config.depth;

    for (; st->posted_for < ch->released + depth; st->posted_for++) {
        uint64_t slot = st->posted_for % depth;
        msg_reqs *m = &st->msgs[slot];

        *m = (msg_reqs){.req = {MPI_REQUEST_NULL, MPI_REQUEST_NULL}};
        MPI_TRY(ch, MPI_Irecv(ch->slots + slot * ch->stride,
                              (int)(st->direct ? sizeof(pd_tp_header) : head_bytes(ch)), MPI_BYTE, st->peer,
                              st->base + TAG_HEADER, MPI_COMM_WORLD, &m->req[0]),
                "MPI_Irecv (header)");
    }
    return PD_OK;
}

/* Tests a receive; on completion *bytes is what arrived. */
static pd_status test_recv(pd_channel *ch, msg_reqs *m, int k)
{
    MPI_Status status;
    int done = 0;

    MPI_TRY(ch, MPI_Test(&m->req[k], &done, &status), k ? "MPI_Test (payload)" : "MPI_Test (header)");
    if (done) {
        m->complete[k] = true;
        MPI_Get_count(&status, MPI_BYTE, &m->bytes[k]);
    }
    return PD_OK;
}

/* Checks the header of message ch->arrived (in its host slot `slot`,
 * complete) and either takes the inline payload as arrived or posts the
 * payload's receive: into the host slot behind the header, or on the
 * cuda-aware-mpi path into the device slot. */
static pd_status check_head(pd_channel *ch, mpi_state *st, msg_reqs *m, uint64_t index)
{
    uint8_t *slot = ch->slots + index * ch->stride;
    uint8_t *dst = st->direct ? ch->dev_slots + index * ch->dev_stride : slot + sizeof(pd_tp_header);
    const size_t hdr = sizeof(pd_tp_header);
    unsigned long long n = (unsigned long long)ch->arrived;
    uint32_t id = ch->config.channel_id;

    if (m->bytes[0] < (int)hdr)
        return PD_ERROR(PD_ECOMM, "channel %u: message %llu: %d bytes, shorter than a header", id, n, m->bytes[0]);
    /* A private copy: the checks run on what cannot change. */
    memcpy(&m->header, slot, hdr);
    PD_CHECK(pd_tp_header_check(ch, &m->header));
    m->checked = true;
    if (m->header.bytes <= inline_max(st)) {
        if ((uint64_t)m->bytes[0] != hdr + m->header.bytes)
            return PD_ERROR(PD_ECOMM, "channel %u: message %llu: header says %llu bytes, %d arrived", id, n,
                            (unsigned long long)m->header.bytes, m->bytes[0] - (int)hdr);
        m->complete[1] = true;
        return PD_OK;
    }
    if ((size_t)m->bytes[0] != hdr)
        return PD_ERROR(PD_ECOMM, "channel %u: message %llu: %d bytes came with a header of a large payload", id, n,
                        m->bytes[0] - (int)hdr);
    MPI_TRY(ch, MPI_Irecv(dst, (int)ch->config.slot_bytes, MPI_BYTE, st->peer, st->base + TAG_PAYLOAD,
                          MPI_COMM_WORLD, &m->req[1]),
            "MPI_Irecv (payload)");
    return PD_OK;
}

/* Sends a credit for every slot released, unless one is still in flight:
 * then the next progress sends the newest count. */
static pd_status send_credit(pd_channel *ch, mpi_state *st)
{
    int done = 1;

    if (st->credit_sent >= ch->released)
        return PD_OK;
    if (st->credit_req != MPI_REQUEST_NULL)
        MPI_TRY(ch, MPI_Test(&st->credit_req, &done, MPI_STATUS_IGNORE), "MPI_Test (credit)");
    if (!done)
        return PD_OK;
    st->credit = (mpi_frame){.count = ch->released};
    pd_tp_frame_head_fill(&st->credit.head, ch, FRAME_MAGIC, PROTO, F_CREDIT, ch->role);
    MPI_TRY(ch, MPI_Isend(&st->credit, (int)sizeof(st->credit), MPI_BYTE, st->peer, st->base + TAG_TO_SENDER,
                          MPI_COMM_WORLD, &st->credit_req),
            "MPI_Isend (credit)");
    st->credit_sent = ch->released;
    return PD_OK;
}

static pd_status check_slot_bytes(const pd_channel *ch)
{
    if (ch->config.slot_bytes > INT_MAX)
        return PD_ERROR(PD_ENOTSUP, "channel %u: mpi: slots of %zu bytes exceed one MPI message (%d)",
                        ch->config.channel_id, ch->config.slot_bytes, INT_MAX);
    return PD_OK;
}

/* A base no open channel of this process uses: tags are handed out in
 * turn and wrap only after (MPI_TAG_UB - 1024) / 4 channels. */
static pd_status pick_base(int *base)
{
    int *ub = NULL, flag = 0;
    unsigned bases;

    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    if (!flag || !ub || *ub < TAG_FLOOR + 4 * TAGS_PER_CHANNEL)
        return PD_ERROR(PD_ENOTSUP, "mpi: MPI_TAG_UB %d leaves no tags for channels", flag && ub ? *ub : 0);
    bases = (unsigned)(*ub - TAG_FLOOR + 1) / TAGS_PER_CHANNEL;
    *base = TAG_FLOOR + (int)(atomic_fetch_add(&channels_opened, 1) % bases) * TAGS_PER_CHANNEL;
    return PD_OK;
}

static pd_status mpi_listen(pd_channel *ch, void **listener, char *addr, size_t addr_size)
{
    mpi_listener *l;
    int rank = 0, base = 0;
    pd_status s;

    PD_CHECK(mpi_usable(PD_ENOTSUP));
    PD_CHECK(check_slot_bytes(ch));
    PD_CHECK(pick_base(&base));
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    l = calloc(1, sizeof(*l));
    if (!l)
        return PD_ERROR(PD_ENOMEM, "mpi: out of host memory");
    PD_CHECK_GOTO(state_new(ch, MPI_ANY_SOURCE, base, &l->pending), s, fail);
    PD_CHECK_GOTO(post_control_recv(ch, l->pending), s, fail);
    snprintf(addr, addr_size, "mpi:%d:%d", rank, base);
    *listener = l;
    return PD_OK;
fail:
    state_free(l->pending);
    free(l);
    return s;
}

/* Cancels and completes a receive (a send is left to complete). */
static void cancel_recv(MPI_Request *req)
{
    if (*req == MPI_REQUEST_NULL)
        return;
    MPI_Cancel(req);
    MPI_Wait(req, MPI_STATUS_IGNORE);
}

/* Lets control sends finish (bounded) and then forgets them. */
static void finish_sends(MPI_Request *reqs, int n, int64_t deadline_ns)
{
    for (int i = 0; i < n; i++) {
        int done = 0;
        while (reqs[i] != MPI_REQUEST_NULL && MPI_Test(&reqs[i], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done &&
               pd_tp_now_ns() < deadline_ns) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
        if (reqs[i] != MPI_REQUEST_NULL)
            MPI_Request_free(&reqs[i]);
    }
}

/* Frees a listener's state: its control receive cancelled, its frames
 * (a REJECT) given a second to leave. */
static void pending_free(mpi_state *st)
{
    if (!st)
        return;
    cancel_recv(&st->in_req);
    finish_sends(st->out_req, OUT_FRAMES, pd_tp_now_ns() + 1000000000);
    state_free(st);
}

static void mpi_unlisten(void *listener)
{
    mpi_listener *l = listener;

    if (!l)
        return;
    pending_free(l->pending);
    free(l);
}

static pd_status receiver_handshake(pd_channel *ch, mpi_state *st, const mpi_frame *f, int source)
{
    uint32_t id = ch->config.channel_id;

    if (f->head.type == F_HELLO && !st->got_hello && f->head.role == PD_TP_SENDER) {
        st->peer = source;
        PD_CHECK(pd_tp_frame_head_check_shape(ch, &f->head));
        memcpy(st->peer_nonce, f->nonce, sizeof(st->peer_nonce));
        st->got_hello = true;
        direct_agree(st, f->direct);
        PD_CHECK(post_control_recv(ch, st));
        return send_frame(ch, st, F_CHALLENGE, 0);
    }
    if (f->head.type == F_PROOF && st->got_hello && source == st->peer) {
        if (f->mac != pd_tp_hs_proof(ch, PD_TP_SENDER, st->nonce, st->peer_nonce))
            return pd_tp_refuse(ch, PD_ERROR(PD_ECOMM, "channel %u: the peer failed to prove the job token", id));
        /* Proven: now the slots take messages, on the path agreed. */
        pd_tp_slots_mpi_decide(ch, st->mine, st->peers);
        PD_CHECK(post_slot_recvs(ch, st));
        PD_CHECK(post_control_recv(ch, st));
        PD_CHECK(send_frame(ch, st, F_READY, 0));
        st->sent_ready = true;
        return PD_OK;
    }
    if (f->head.type == F_REJECT)
        return pd_tp_refuse(
            ch, PD_ERROR(PD_ECOMM, "channel %u: the peer rejected this end (wrong job token or channel shape)", id));
    return PD_ERROR(PD_ECOMM, "channel %u: mpi: handshake: unexpected frame %u from rank %d", id, f->head.type,
                    source);
}

/* After a sender's failed attempt: a fresh state on the same tags, so the
 * listener takes the next sender (its failure stays the one reported). */
static void listener_reset(pd_channel *ch, mpi_listener *l)
{
    int base = l->pending->base;
    char message[512];

    pending_free(l->pending);
    l->pending = NULL;
    snprintf(message, sizeof(message), "%s", pd_last_error());
    if (state_new(ch, MPI_ANY_SOURCE, base, &l->pending) != PD_OK)
        l->pending = NULL;
    else if (post_control_recv(ch, l->pending) == PD_OK)
        return;
    state_free(l->pending);
    l->pending = NULL;
    (void)pd_error_at(__FILE__, __LINE__, PD_ECOMM, "%s", message); /* the attempt's failure, not this one */
}

static pd_status mpi_accept(pd_channel *ch, void *listener)
{
    mpi_listener *l = listener;
    mpi_state *st = l->pending;
    mpi_frame f;
    int source;
    bool have;
    pd_status s = PD_OK;

    if (!st)
        return PD_ERROR(PD_ECOMM, "channel %u: mpi: the listener could not be renewed after a failed attempt",
                        ch->config.channel_id);
    while (!st->sent_ready) {
        PD_CHECK_GOTO(next_frame(ch, st, &f, &source, &have), s, fail);
        if (!have)
            return PD_OK;
        if ((s = receiver_handshake(ch, st, &f, source)) != PD_OK) {
            if (f.head.type != F_REJECT)
                s = reject(ch, st, s);
            goto fail;
        }
    }
    ch->be = st;
    ch->ready = true;
    l->pending = NULL;
    return PD_OK;
fail:
    if (!ch->refused)
        listener_reset(ch, l);
    return s;
}

static pd_status receiver_progress(pd_channel *ch, mpi_state *st)
{
    uint64_t depth = (uint64_t)ch->config.depth;
    mpi_frame f;
    int source;
    bool have;

    PD_CHECK(next_frame(ch, st, &f, &source, &have));
    if (have) {
        if (f.head.type != F_CLOSE)
            return PD_ERROR(PD_ECOMM, "channel %u: mpi: unexpected frame %u from the sender", ch->config.channel_id,
                            f.head.type);
        st->peer_sent = (int64_t)f.count;
    }
    PD_CHECK(send_credit(ch, st));
    /* In order: message n's payload receive is posted before n + 1's. */
    while (ch->arrived < st->posted_for) {
        uint64_t slot = ch->arrived % depth;
        msg_reqs *m = &st->msgs[slot];

        if (!m->complete[0]) {
            PD_CHECK(test_recv(ch, m, 0));
            if (!m->complete[0])
                break;
        }
        if (!m->checked)
            PD_CHECK(check_head(ch, st, m, slot));
        if (!m->complete[1]) {
            PD_CHECK(test_recv(ch, m, 1));
            if (!m->complete[1])
                break;
            if ((uint64_t)m->bytes[1] != m->header.bytes)
                return PD_ERROR(PD_ECOMM, "channel %u: message %llu: header says %llu bytes, %d arrived",
                                ch->config.channel_id, (unsigned long long)ch->arrived,
                                (unsigned long long)m->header.bytes, m->bytes[1]);
        }
        pd_tp_header_accept(ch, &m->header);
        st->active_ns = pd_tp_now_ns();
    }
    if (st->peer_sent >= 0) {
        if (ch->arrived > (uint64_t)st->peer_sent)
            return PD_ERROR(PD_ECOMM, "channel %u: mpi: the sender closed after %lld messages, %llu arrived",
                            ch->config.channel_id, (long long)st->peer_sent, (unsigned long long)ch->arrived);
        if (ch->arrived == (uint64_t)st->peer_sent)
            ch->peer_closed = true;
    }
    return PD_OK;
}

static pd_status mpi_give_credit(pd_channel *ch)
{
    mpi_state *st = ch->be;

    PD_CHECK(post_slot_recvs(ch, st));
    return send_credit(ch, st);
}

/* ---- sender ---- */

static pd_status parse_address(pd_channel *ch, const char *addr, int *rank, int *base)
{
    char *end;
    long r = strtol(addr, &end, 10), b;
    int size;

    if (end == addr || *end != ':')
        return PD_ERROR(PD_EINVAL, "mpi: bad address '%s' (expected <world rank>:<tag base>)", addr);
    b = strtol(end + 1, &end, 10);
    if (*end || b < 0 || b > INT_MAX - TAGS_PER_CHANNEL)
        return PD_ERROR(PD_EINVAL, "mpi: bad address '%s' (expected <world rank>:<tag base>)", addr);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (r < 0 || r >= size)
        return PD_ERROR(PD_ENOTFOUND, "mpi: rank %ld is not in this job of %d ranks", r, size);
    *rank = (int)r;
    *base = (int)b;
    return PD_OK;
}

static pd_status mpi_connect(pd_channel *ch, const char *addr)
{
    int rank = 0, base = 0;
    mpi_state *st;
    pd_status s;

    PD_CHECK(mpi_usable(PD_ENOTSUP));
    PD_CHECK(check_slot_bytes(ch));
    PD_CHECK(parse_address(ch, addr, &rank, &base));
    PD_CHECK(state_new(ch, rank, base, &st));
    PD_CHECK_GOTO(post_control_recv(ch, st), s, fail);
    PD_CHECK_GOTO(send_frame(ch, st, F_HELLO, 0), s, fail);
    ch->be = st;
    return PD_OK;
fail:
    cancel_recv(&st->in_req);
    state_free(st);
    return s;
}

static pd_status sender_handshake(pd_channel *ch, mpi_state *st, const mpi_frame *f)
{
    uint32_t id = ch->config.channel_id;

    if (f->head.type == F_CHALLENGE && !st->got_hello) {
        PD_CHECK(pd_tp_frame_head_check_shape(ch, &f->head));
        memcpy(st->peer_nonce, f->nonce, sizeof(st->peer_nonce));
        st->got_hello = true;
        direct_agree(st, f->direct);
        PD_CHECK(send_frame(ch, st, F_PROOF, 0));
        if (f->mac != pd_tp_hs_proof(ch, PD_TP_RECEIVER, st->nonce, st->peer_nonce))
            return pd_tp_refuse(ch, PD_ERROR(PD_ECOMM, "channel %u: the peer failed to prove the job token", id));
        return post_control_recv(ch, st);
    }
    if (f->head.type == F_READY && st->got_hello) {
        /* Connected (no other backend follows): the path agreed. */
        pd_tp_slots_mpi_decide(ch, st->mine, st->peers);
        ch->ready = true;
        return post_control_recv(ch, st);
    }
    if (f->head.type == F_REJECT)
        return pd_tp_refuse(
            ch, PD_ERROR(PD_ECOMM, "channel %u: the peer rejected this end (wrong job token or channel shape)", id));
    return PD_ERROR(PD_ECOMM, "channel %u: mpi: handshake: unexpected frame %u", id, f->head.type);
}

static pd_status sender_control(pd_channel *ch, mpi_state *st)
{
    for (;;) {
        mpi_frame f;
        int source;
        bool have;
        pd_status s;

        PD_CHECK(next_frame(ch, st, &f, &source, &have));
        if (!have)
            return PD_OK;
        if (!ch->ready) {
            if ((s = sender_handshake(ch, st, &f)) != PD_OK)
                return f.head.type == F_REJECT ? s : reject(ch, st, s);
            continue;
        }
        if (f.head.type == F_CREDIT) {
            PD_CHECK(pd_tp_credit_update(ch, f.count));
            PD_CHECK(post_control_recv(ch, st));
        } else if (f.head.type == F_CLOSE) {
            ch->peer_closed = true;
            return PD_OK;
        } else {
            return PD_ERROR(PD_ECOMM, "channel %u: mpi: unexpected frame %u from the receiver",
                            ch->config.channel_id, f.head.type);
        }
    }
}

/* Counts the sends that completed, in order. */
static pd_status advance_done(pd_channel *ch, mpi_state *st)
{
    while (ch->done < ch->started) {
        msg_reqs *m = &st->msgs[ch->done % (uint64_t)ch->config.depth];

        for (int k = 0; k < 2; k++) {
            int done = 0;
            if (!m->complete[k]) {
                MPI_TRY(ch, MPI_Test(&m->req[k], &done, MPI_STATUS_IGNORE), "MPI_Test (send)");
                m->complete[k] = done;
            }
        }
        if (!m->complete[0] || !m->complete[1])
            break;
        ch->done++;
        st->active_ns = pd_tp_now_ns();
    }
    return PD_OK;
}

static pd_status sender_progress(pd_channel *ch, mpi_state *st)
{
    uint64_t depth = (uint64_t)ch->config.depth;
    pd_tp_send *q;

    PD_CHECK(sender_control(ch, st));
    if (!ch->ready)
        return PD_OK;
    while (!ch->peer_closed && (q = pd_tp_next_send(ch))) {
        uint64_t i = ch->started % depth;
        msg_reqs *m = &st->msgs[i];

        *m = (msg_reqs){.req = {MPI_REQUEST_NULL, MPI_REQUEST_NULL}};
        if (q->bytes <= inline_max(st)) {
            uint8_t *inl = st->staging + i * st->staging_stride;

            memcpy(inl, &q->header, sizeof(q->header));
            if (q->bytes)
                memcpy(inl + sizeof(q->header), q->data, q->bytes);
            MPI_TRY(ch, MPI_Isend(inl, (int)(sizeof(q->header) + q->bytes), MPI_BYTE, st->peer,
                                  st->base + TAG_HEADER, MPI_COMM_WORLD, &m->req[0]),
                    "MPI_Isend (message)");
            m->complete[1] = true;
        } else {
            MPI_TRY(ch, MPI_Isend(&q->header, (int)sizeof(q->header), MPI_BYTE, st->peer, st->base + TAG_HEADER,
                                  MPI_COMM_WORLD, &m->req[0]),
                    "MPI_Isend (header)");
            MPI_TRY(ch, MPI_Isend(q->data, (int)q->bytes, MPI_BYTE, st->peer, st->base + TAG_PAYLOAD,
                                  MPI_COMM_WORLD, &m->req[1]),
                    "MPI_Isend (payload)");
        }
        ch->started++;
        st->active_ns = pd_tp_now_ns();
    }
    return advance_done(ch, st);
}

static pd_status mpi_progress(pd_channel *ch)
{
    mpi_state *st = ch->be;

    return ch->role == PD_TP_SENDER ? sender_progress(ch, st) : receiver_progress(ch, st);
}

/* ---- waiting and closing ---- */

/* How long a poller may sleep now: not at all just after activity, then
 * longer the longer the channel has been idle, up to 1 ms. */
static int64_t backoff_ns(const mpi_state *st)
{
    int64_t idle = pd_tp_now_ns() - st->active_ns;

    if (idle < SPIN_NS)
        return 0;
    return idle / 4 < MAX_SLEEP_NS ? idle / 4 : MAX_SLEEP_NS;
}

static pd_status mpi_wait(pd_channel *ch, int timeout_ms)
{
    int64_t ns = backoff_ns(ch->be);

    if (ns > (int64_t)timeout_ms * 1000000)
        ns = (int64_t)timeout_ms * 1000000;
    if (ns > 0) {
        struct timespec ts = {0, (long)ns};
        nanosleep(&ts, NULL);
    }
    return PD_OK;
}

static int mpi_wait_arm(pd_channel *ch, struct pollfd *fds, int *poll_ms)
{
    *poll_ms = backoff_ns(ch->be) > 0 ? 1 : 0;
    return 0;
}

/* The peer learns of the close from a frame. A sender's CLOSE counts the
 * messages it started (those without a credit are dropped); it then lets
 * them reach the receiver (bounded by the timeout, and not once the
 * receiver has gone), so a close right after the last send loses nothing. */
static void mpi_close(pd_channel *ch)
{
    mpi_state *st = ch->be;
    int64_t deadline = pd_tp_now_ns() + (int64_t)ch->config.timeout_ms * 1000000;
    uint64_t depth = (uint64_t)ch->config.depth;

    if (ch->role == PD_TP_RECEIVER)
        finish_sends(&st->credit_req, 1, deadline); /* CLOSE follows it on the tag */
    if (ch->ready && !ch->peer_closed)
        (void)send_frame(ch, st, F_CLOSE, ch->started);
    if (ch->role == PD_TP_SENDER) {
        while (ch->ready && ch->done < ch->started && !ch->peer_closed && ch->failure == PD_OK &&
               pd_tp_now_ns() < deadline) {
            if (sender_control(ch, st) != PD_OK || advance_done(ch, st) != PD_OK)
                break;
            (void)mpi_wait(ch, 1);
        }
        for (uint64_t i = ch->done; i < ch->started; i++)
            finish_sends(st->msgs[i % depth].req, 2, 0);
    } else {
        for (uint64_t i = ch->arrived; i < st->posted_for; i++) {
            cancel_recv(&st->msgs[i % depth].req[0]);
            cancel_recv(&st->msgs[i % depth].req[1]);
        }
    }
    cancel_recv(&st->in_req);
    finish_sends(st->out_req, OUT_FRAMES, deadline);
    state_free(st);
}

static const pd_tp_ops mpi_ops = {
    .listen = mpi_listen,
    .accept = mpi_accept,
    .unlisten = mpi_unlisten,
    .connect = mpi_connect,
    .progress = mpi_progress,
    .wait = mpi_wait,
    .give_credit = mpi_give_credit,
    .close = mpi_close,
    .wait_arm = mpi_wait_arm,
};

const pd_tp_backend pd_tp_backend_mpi = {"mpi", &mpi_ops};
