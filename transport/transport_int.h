/* Transport internals shared by the channel layer and the backends
 * (module-private): the channel object, the backend table laid over the
 * default "unsupported" one, the message header and its checks, the slot
 * ring, and the token handshake over a socket. */
#ifndef PD_TRANSPORT_INT_H
#define PD_TRANSPORT_INT_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <pipedream/kernels.h>
#include <pipedream/transport.h>

#define PD_TP_MAX_BACKENDS 4
#define PD_TP_ADDRESS_BYTES 512
#define PD_TP_MSG_MAGIC 0x314d4450u /* "PDM1": a message header */
#define PD_TP_MAX_DEPTH 1024
#define PD_TP_MAX_SLOT_BYTES ((size_t)1 << 32)
#define PD_TP_PAGE 4096
#define PD_TP_MAX_REGIONS 8 /* send regions a channel may declare */
#define PD_TP_WAIT_FDS 2 /* descriptors one channel gives a set to sleep on */
#define PD_TP_REASON_BYTES 200   /* why one backend failed, as kept for the summary */
#define PD_TP_ATTEMPTS_BYTES 840 /* the reasons of every backend tried, "verbs: ...; tcp: ..." */

/* The header in front of every message, at the start of its slot. Peers
 * are assumed to share byte order (checked through the magic). */
typedef struct pd_tp_header {
    uint32_t magic;
    uint32_t channel_id;
    uint32_t slot; /* must equal seq % depth */
    uint32_t flags;
    uint64_t seq;   /* must equal the number of messages before it */
    uint64_t bytes; /* payload bytes, <= slot_bytes */
    uint64_t minibatch;
    uint32_t kind;
    uint32_t version;
    uint8_t reserved[16];
} pd_tp_header;
_Static_assert(sizeof(pd_tp_header) == 64, "the header is one cache line");

/* The first page of the receiver's ring: the counters the shm backend
 * shares (each on its own cache line; other backends leave them alone). */
typedef struct pd_tp_ring_ctl {
    _Alignas(64) _Atomic uint64_t posted;   /* sender: messages written */
    _Alignas(64) _Atomic uint64_t released; /* receiver: slots given back */
    _Alignas(64) _Atomic uint32_t recv_sleeping;
    _Alignas(64) _Atomic uint32_t send_sleeping;
} pd_tp_ring_ctl;

/* Sender memory the caller declared for sends (pd_channel_register). */
typedef struct pd_tp_region {
    const void *data;
    size_t bytes;
    /* HOST for host memory; device memory: STAGED (its sends are copied)
     * until the backend registered it directly (DMABUF, PEERMEM). */
    pd_slot_path path;
} pd_tp_region;

/* One posted send. */
typedef struct pd_tp_send {
    const void *data;
    size_t bytes;
    pd_tp_header header;
} pd_tp_send;

typedef struct pd_tp_ops pd_tp_ops;

/* A backend: its name and its entries (NULL where it has none). */
typedef struct pd_tp_backend {
    const char *name;
    const pd_tp_ops *ops;
} pd_tp_backend;

struct pd_tp_ops {
    /* Receiver: start listening; write this backend's address part
     * ("tcp:host:port") into addr. */
    pd_status (*listen)(pd_channel *ch, void **listener, char *addr, size_t addr_size);
    /* Receiver: accept and authenticate without blocking; on a proven peer
     * set ch->be (and the caller then picks this backend). A failure is
     * that of one sender's attempt: the attempt is dropped and the
     * listener must be ready for the next one (the channel fails only on
     * a refusal, pd_tp_refuse). */
    pd_status (*accept)(pd_channel *ch, void *listener);
    void (*unlisten)(void *listener);
    /* Sender: connect to `addr` (this backend's part), waiting at most
     * until the set-up deadline (pd_tp_setup_left_ms). Any failure, here or
     * in progress before ch->ready, makes the channel try the next backend
     * unless it was a refusal; PD_ENOTSUP says that the backend does not
     * apply to this peer (e.g. shm to another node): skipped quietly. */
    pd_status (*connect)(pd_channel *ch, const char *addr);
    /* Both: handshake (sets ch->ready), transfers, credits; no blocking. */
    pd_status (*progress)(pd_channel *ch);
    /* Both: sleep up to timeout_ms until progress may find work. */
    pd_status (*wait)(pd_channel *ch, int timeout_ms);
    /* Receiver: tell the sender that ch->released slots are free. */
    pd_status (*give_credit)(pd_channel *ch);
    void (*close)(pd_channel *ch);
    int (*fd)(pd_channel *ch);
    /* Both, for a set about to sleep (set.c): announce the sleep, fill fds
     * (at most PD_TP_WAIT_FDS) with what to poll and return their count;
     * *poll_ms bounds the sleep (0: progress already has work; -1: no
     * bound). Default: no descriptor, poll again within 1 ms. */
    int (*wait_arm)(pd_channel *ch, struct pollfd *fds, int *poll_ms);
    /* Both: withdraw what wait_arm announced. */
    void (*wait_disarm)(pd_channel *ch);
    /* Both, optional (NULL: waits sleep at once): progress that is cheap
     * to repeat while a blocking wait spins (spin.c): no sleep announced,
     * no completion queue armed, no system call but those that move data. */
    pd_status (*poll)(pd_channel *ch);
};

/* Spin-then-sleep state of a channel's blocking waits (spin.c). */
typedef struct pd_tp_spin {
    int64_t cap_ns;  /* longest spin; 0: never */
    int64_t last_ns; /* when the last blocking wait ended (0: none yet) */
    int64_t gap_ns;  /* smoothed interval between their ends, -1 before two */
    int64_t spun_ns, lost_ns; /* this window: time spinning, and in preemptions within it */
    int64_t quiet_until;      /* no spinning before this (the core was found shared) */
    unsigned quiets;          /* how often that happened */
    uint64_t spins, hits;     /* waits that spun; those that the spin ended */
} pd_tp_spin;

typedef enum { PD_TP_SENDER = 0, PD_TP_RECEIVER = 1 } pd_tp_role;

struct pd_channel {
    pthread_mutex_t lock;
    pd_tp_role role;
    pd_channel_config config; /* token points at `token` below */
    pd_transport_token token;
    int64_t setup_deadline_ns;
    pd_status failure; /* PD_OK until the channel fails */
    char failure_message[1024];
    char address[PD_TP_ADDRESS_BYTES];
    bool refused; /* set-up met a refusal (pd_tp_refuse): no other backend is tried */
    char attempts[PD_TP_ATTEMPTS_BYTES]; /* why backends failed so far ("verbs: ...; shm: ...") */

    /* Receiver: listeners until a peer is proven. */
    int listener_count;
    const pd_tp_backend *listener_backend[PD_TP_MAX_BACKENDS];
    void *listener[PD_TP_MAX_BACKENDS];
    int listener_failures[PD_TP_MAX_BACKENDS]; /* senders' attempts that failed there */

    /* Sender: the receiver's address and the backends of the preference it
     * offers, in order; candidate[next_candidate] is the next to try. */
    char peer_address[PD_TP_ADDRESS_BYTES];
    const pd_tp_backend *candidate[PD_TP_MAX_BACKENDS];
    int candidates, next_candidate;
    pd_status setup_status; /* PD_EINVAL while every candidate failed on a malformed part, else PD_ECOMM */

    const pd_tp_backend *backend; /* chosen one, NULL before */
    pd_tp_ops ops;                /* its entries over the defaults */
    void *be;                     /* its state */
    bool ready;                   /* handshake done */
    bool peer_closed;             /* the peer went away (error when more is expected) */
    pd_channel_set *set;          /* the set it belongs to (set.c), NULL if none */

    /* The ring (receiver: its slots; shm sender: the mapping of them). */
    int ring_fd;           /* memfd, -1 if none */
    size_t ring_bytes;
    pd_tp_ring_ctl *ctl;   /* first page */
    uint8_t *slots;        /* depth slots of stride bytes */
    size_t stride;         /* header + slot_bytes, page-aligned */

    /* Sender: posted sends in a ring of depth entries. */
    pd_tp_send *sendq;
    uint64_t posted, started, done; /* done <= started <= posted */
    uint64_t peer_released;         /* credits: the receiver freed this many */
    pd_tp_region regions[PD_TP_MAX_REGIONS]; /* pd_channel_register() */
    int nregions;

    /* Receiver. */
    pd_tp_header *arrived_headers; /* trusted copies, one per slot */
    uint64_t arrived, taken, released;
    uint64_t last_minibatch[4];
    bool seen_kind[4];

    /* Device memory (config.memory PD_TRANSPORT_DEVICE; slots.c). */
    pd_slot_path slot_path; /* the path taken (HOST for host memory) */
    bool slot_path_chosen;  /* chosen (and said) since the channel connected */
    uint8_t *staging;       /* sender: depth pinned buffers of slot_bytes */
    uint8_t *dev_slots;     /* receiver: depth device slots, dev_stride apart */
    size_t dev_stride;      /* receiver: slot_bytes, page-rounded when a direct path may be tried */
    void *dev_alloc;        /* receiver: the device allocation dev_slots lies in */
    unsigned slot_caps;     /* direct paths (PD_SLOT_CAN_*) this end may still try */
    uint64_t staged_copies; /* copies through pinned host memory so far (none on a direct path) */
    char slot_why[2 * PD_TP_REASON_BYTES]; /* why direct paths failed ("dmabuf: ...; peermem: ...") */
    /* CUDA IPC (shm's cuda-ipc path): the receiver's handle of dev_alloc,
     * exported once; the sender's mapping of the receiver's allocation and
     * where its device slots lie in it. */
    uint8_t ipc_handle[PD_DEVICE_IPC_HANDLE_BYTES];
    bool ipc_exported;   /* receiver: ipc_handle holds the export of dev_alloc */
    void *ipc_peer;      /* sender: the receiver's allocation, mapped; NULL if not */
    uint8_t *ipc_slots;  /* sender: the receiver's device slot 0 in that mapping */
    size_t ipc_stride;   /* sender: bytes between the receiver's device slots */
    bool dev_slots_kept; /* receiver: a sender may still map the slots: not freed at close */

    pd_tp_spin spin; /* blocking waits: spin or sleep (spin.c) */
};

/* The default table: every entry fails with PD_ENOTSUP naming itself. */
void pd_tp_ops_overlay(pd_tp_ops *table, const pd_tp_ops *backend);

/* Backends compiled in, and lookup by name (NULL if unknown). */
extern const pd_tp_backend pd_tp_backend_shm;
extern const pd_tp_backend pd_tp_backend_tcp;
#ifdef HAVE_MPI
extern const pd_tp_backend pd_tp_backend_mpi;
#endif
#if defined(HAVE_VERBS) && defined(HAVE_RDMACM)
#define PD_TP_VERBS 1 /* the verbs backend is built (transport/verbs*.c) */
extern const pd_tp_backend pd_tp_backend_verbs;
#endif
const pd_tp_backend *pd_tp_backend_find(const char *name);

/* A channel of a set had a send posted or a slot released: wakes the set
 * if it sleeps (its backend may need other descriptors now). */
void pd_tp_set_notify(pd_channel_set *set);
/* A channel of the set closes: the set forgets it. */
void pd_tp_set_forget(pd_channel_set *set, const pd_channel *ch);

/* Device memory (slots.c). Checks config.device for config.memory (a
 * device with memory and pinned-memory entries); PD_EINVAL otherwise. */
pd_status pd_tp_slots_check(const pd_channel_config *c);
/* Allocates what the channel's memory needs: the sender's pinned staging
 * (declared as a send region, so verbs writes from it directly), the
 * receiver's device slots. Nothing for host memory. */
pd_status pd_tp_slots_open(pd_channel *ch);
/* Frees what pd_tp_slots_open allocated; never fails. */
void pd_tp_slots_close(pd_channel *ch);
/* The channel connected: chooses ch->slot_path from its backend and what
 * this build offers, and says it in one log line for device memory. */
void pd_tp_slots_choose(pd_channel *ch);
/* Receiver over shm, before READY: exports the device slots' allocation
 * for CUDA IPC once, if this end may (PD_SLOT_CAN_CUDA_IPC); true if it
 * did. A failure clears the capability and is said in ch->slot_why. */
bool pd_tp_slots_ipc_export(pd_channel *ch);
/* Sender over shm: maps the receiver's offered slots (its handle, slot 0
 * at `offset` in the allocation, `stride` apart) and takes the cuda-ipc
 * path; false when it cannot (host memory, no IPC on its device, the
 * open failed: ch->slot_why says why, `reason` in a few words for the
 * receiver). PD_ECOMM (a refusal) for an offer of impossible layout. */
pd_status pd_tp_slots_ipc_open(pd_channel *ch, const uint8_t *handle, uint64_t offset, uint64_t stride, bool *mapped,
                               char *reason, size_t reason_size);
/* Receiver: the sender did not map the offered slots (`reason`, its few
 * words): the capability is cleared and the channel stages. */
void pd_tp_slots_ipc_refused(pd_channel *ch, const char *reason);
/* Sender on the cuda-ipc path: queues the copy of message `seq` from
 * `data` (device memory, or its staging buffer when it was staged before
 * the path was known) into the receiver's device slot on the device's
 * stream; pd_tp_slots_ipc_sync waits until the copies queued are
 * complete, before the messages are published. */
pd_status pd_tp_slots_ipc_write(pd_channel *ch, uint64_t seq, const void *data, size_t bytes);
pd_status pd_tp_slots_ipc_sync(pd_channel *ch);
/* Sender: unmaps the receiver's slots (before the socket closes, which
 * tells the receiver they are unmapped); never fails. */
void pd_tp_slots_ipc_close(pd_channel *ch);

/* Whether one end of an mpi channel may take the cuda-aware-mpi path
 * (MPI sends from and receives into its device memory), or why not; the
 * code travels in the mpi handshake. */
typedef enum {
    PD_TP_MPI_DIRECT_OK = 0,
    PD_TP_MPI_HOST_MEMORY = 1,     /* its memory is host memory */
    PD_TP_MPI_CPU_DEVICE = 2,      /* the cpu device, not forced: it stages */
    PD_TP_MPI_NOT_BUILT = 3,       /* no mpi-ext.h, or MPIX_CUDA_AWARE_SUPPORT absent or 0 */
    PD_TP_MPI_NOT_AT_RUN_TIME = 4, /* MPIX_Query_cuda_support() returned 0 */
} pd_tp_mpi_direct;

/* A pure function of one end's facts: `memory` of `dev`, what the MPI
 * library says (cuda_aware: 1 CUDA-aware, 0 built for it but not at run
 * time, -1 this build cannot tell: pd_tp_mpi_cuda_aware) and whether the
 * cpu device is forced ($PD_TRANSPORT_FORCE_MPI_DIRECT=1, tests: MPI
 * then sends from and receives into its memory as from any host memory).
 * A GPU needs a CUDA-aware library; the cpu device stages unless forced. */
pd_tp_mpi_direct pd_tp_mpi_direct_check(const struct pd_device *dev, pd_transport_memory memory, int cuda_aware,
                                        bool force);
/* The reason in a few words ("its memory is host memory", ...). */
const char *pd_tp_mpi_direct_why(pd_tp_mpi_direct reason);
/* mpi, when the handshake agreed (this end's check and the peer's, as it
 * sent it): for device memory, both OK takes the cuda-aware-mpi path
 * (receiver: PD_SLOT_CAN_CUDA_AWARE_MPI for pd_tp_slots_choose; sender:
 * its slot_path), else the channel stages, the first reason in slot_why. */
void pd_tp_slots_mpi_decide(pd_channel *ch, pd_tp_mpi_direct mine, pd_tp_mpi_direct peers);
#ifdef HAVE_MPI
/* What the MPI library says of device pointers, for pd_tp_mpi_direct_check
 * (MPI initialised). */
int pd_tp_mpi_cuda_aware(void);
#endif

/* The verbs paths for device memory (PD_SLOT_CAN_DMABUF | _PEERMEM). */
#define PD_SLOT_CAN_VERBS (PD_SLOT_CAN_DMABUF | PD_SLOT_CAN_PEERMEM)

/* What memory of `dev` may try beyond staging, a pure function: for a
 * device with memory of its own (not the cpu's) the verbs paths, DMABUF
 * where it exports dma_buf (export_dmabuf) and the build has
 * ibv_reg_dmabuf_mr (have_dmabuf_mr), PEERMEM always (ibv_reg_mr on its
 * pointers works only where nvidia-peermem is loaded, which only trying
 * tells), and CUDA_IPC for shm where it has the ipc entries. The cpu
 * device stages, unless force_peermem (tests, through
 * $PD_TRANSPORT_FORCE_PEERMEM=1: its memory registered as a GPU's would
 * be with peermem). */
unsigned pd_tp_slot_caps(const struct pd_device *dev, bool have_dmabuf_mr, bool force_peermem);

/* One attempt at a direct path: registers what the caller needs through
 * `path` (DMABUF or PEERMEM); PD_OK, or a failure recorded with its
 * message, having left nothing behind. */
typedef pd_status (*pd_tp_slot_try)(void *ctx, pd_slot_path path);

/* The chain: tries the path pd_transport_slot_path(backend, DEVICE,
 * *caps) gives, while it is a direct one; a path that fails is cleared
 * from *caps, said in one debug line naming channel `id` and appended to
 * `why` ("dmabuf: <message>"), and the next one is tried. Returns the path
 * taken: a direct one, or STAGED when none is left (the caller's
 * fallback, nothing to try). */
pd_slot_path pd_tp_slot_walk(uint32_t id, const char *backend, unsigned *caps, pd_tp_slot_try try_path, void *ctx,
                             char *why, size_t why_size);

/* Receiver: its backend writes payloads straight into the device slots
 * (the path is DMABUF or PEERMEM): taking a message copies nothing, but
 * flushes the adapter's writes (the device's flush_rdma_writes). */
bool pd_tp_slots_direct(const pd_channel *ch);

/* Sender: the backend registered send region i through `path` (its
 * sends then leave from the device without a copy) or found no direct
 * path (STAGED, ch->slot_why says why); said in one info line. */
void pd_tp_slots_region_path(pd_channel *ch, int i, pd_slot_path path);

/* Sender: makes the bytes of send `seq` from `data` ready for the
 * backend; *out is where the backend reads them (data itself for host
 * memory, else its staging buffer). */
pd_status pd_tp_slots_stage_send(pd_channel *ch, uint64_t seq, const void *data, size_t bytes, const void **out);
/* Receiver: the payload of message `seq` arrived at `payload` in the host
 * ring; *out is where the caller gets it (payload itself for host memory,
 * else its device slot, filled: by a copy when staged, by the adapter on
 * a verbs direct path, by the sender on the cuda-ipc path). */
pd_status pd_tp_slots_deliver(pd_channel *ch, uint64_t seq, void *payload, size_t bytes, void **out);

/* Records the channel's failure once (later calls return it again). */
pd_status pd_tp_fail(pd_channel *ch, pd_status status);

/* Marks a set-up failure as a refusal and returns `status`: the peer is a
 * pipedream end of another channel or job (wrong token; another channel
 * id, shape or protocol; it rejected this end for that), which no other
 * backend can change. The sender then tries no other backend and the
 * receiver fails. Any other set-up failure rules out one backend (sender)
 * or one sender's attempt (receiver) only. */
pd_status pd_tp_refuse(pd_channel *ch, pd_status status);

/* Milliseconds left until the channel's set-up deadline, at least 1:
 * what a connect may wait. */
int pd_tp_setup_left_ms(const pd_channel *ch);

/* Nanoseconds on the monotonic clock. */
int64_t pd_tp_now_ns(void);

/* The spin cap of config in microseconds (-1: never): config->spin_us,
 * else $PD_TRANSPORT_SPIN_US, else 2000. PD_EINVAL names a bad value. */
pd_status pd_tp_spin_cap_us(const pd_channel_config *config, int *us);

/* Starts the spin state of a channel with a cap of cap_us (<= 0: never). */
void pd_tp_spin_init(pd_tp_spin *sp, int cap_us);

/* Until when a blocking wait starting at `now` polls before it sleeps:
 * now + min(cap, twice the smoothed interval between the ends of blocking
 * waits) while that interval is within the cap; 0 (sleep at once)
 * otherwise, before two waits ended, and while a shared core was found
 * (pd_tp_spin_account). */
int64_t pd_tp_spin_until(const pd_tp_spin *sp, int64_t now);

/* Records that a blocking wait ended at `now`. */
void pd_tp_spin_note(pd_tp_spin *sp, int64_t now);

/* Accounts dt_ns between two looks of a spin ending at `now`: a gap over
 * 50 us is a preemption. Once 100 ms were spun, if preemptions took over a
 * quarter of them the thread shares its core (with the peer, or, in a VM,
 * the host's other work) and its spinning slows whoever runs there: no
 * spinning for the next second. False when spinning must stop now. */
bool pd_tp_spin_account(pd_tp_spin *sp, int64_t dt_ns, int64_t now);

/* Whether [p, p + bytes) lies wholly inside [base, base + size) (no
 * overflow for any values). */
static inline bool pd_tp_span_within(const void *p, size_t bytes, const void *base, size_t size)
{
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)base;

    return a >= b && bytes <= size && a - b <= size - bytes;
}

/* Sender: the next posted send that has a credit and has not started, or
 * NULL. The caller starts it and increments ch->started (ch->done when
 * its buffer is no longer needed). */
pd_tp_send *pd_tp_next_send(pd_channel *ch);

/* Receiver: checks a header arriving for message ch->arrived: magic,
 * channel, slot, sequence, length <= slot_bytes, tag order. PD_ECOMM naming
 * the field on any violation. */
pd_status pd_tp_header_check(const pd_channel *ch, const pd_tp_header *h);

/* Receiver: records a checked header (a trusted copy) and counts the
 * message as arrived. */
void pd_tp_header_accept(pd_channel *ch, const pd_tp_header *h);

/* Sender: credits the receiver reports; PD_ECOMM if impossible. */
pd_status pd_tp_credit_update(pd_channel *ch, uint64_t released);

/* The ring in shared memory: maps a fresh memfd (receiver) or a received
 * one (shm sender), checking its size against the channel's shape. */
pd_status pd_tp_ring_create(pd_channel *ch);
pd_status pd_tp_ring_map(pd_channel *ch, int fd);
void pd_tp_ring_destroy(pd_channel *ch);

/* Message authentication: SipHash-2-4 of `data` under the token. */
uint64_t pd_tp_siphash(const uint8_t key[16], const void *data, size_t len);

/* The handshake's proof: MAC(token, "pipedream-proof", prover's role,
 * channel, verifier's nonce, prover's nonce), bound to one connection. */
uint64_t pd_tp_hs_proof(const pd_channel *ch, int prover_role, const uint8_t *verifier_nonce,
                        const uint8_t *prover_nonce);

/* The start of every handshake frame, the socket handshake's and the mpi
 * backend's control frames: which protocol, which end, which channel of
 * which shape. */
typedef struct pd_tp_frame_head {
    uint32_t magic;
    uint8_t type;
    uint8_t role;
    uint16_t proto;
    uint32_t channel_id;
    uint32_t depth;
    uint64_t slot_bytes;
} pd_tp_frame_head;
_Static_assert(sizeof(pd_tp_frame_head) == 24, "a frame head is 24 bytes");

/* Fills a frame head for this end of the channel (role as it speaks). */
void pd_tp_frame_head_fill(pd_tp_frame_head *head, const pd_channel *ch, uint32_t magic, uint16_t proto, int type,
                           pd_tp_role role);

/* Checks the head of a peer's frame: the protocol `proto` and this
 * channel's id. PD_ECOMM naming `who` ("handshake", "mpi") otherwise, a
 * refusal (pd_tp_refuse). */
pd_status pd_tp_frame_head_check(pd_channel *ch, const pd_tp_frame_head *head, uint16_t proto, const char *who);

/* Checks that the peer's channel has this one's depth and slot size;
 * PD_ECOMM otherwise, a refusal. */
pd_status pd_tp_frame_head_check_shape(pd_channel *ch, const pd_tp_frame_head *head);

/* The token handshake over a connected socket (tcp stream or unix
 * seqpacket), non-blocking, identical for every socket backend:
 *   both send HELLO {role, channel, nonce};
 *   both send PROOF = MAC(token, role, peer nonce, own nonce) (+ fds);
 *   the receiver, once the sender's proof checks, sends READY {depth,
 *   slot_bytes, stride} (+ fds); the sender accepts READY only after the
 *   receiver's proof checked.
 *   shm with CUDA IPC offered (ipc_offer; READY says so): the receiver
 *   follows READY with IPC_LOW {offset, handle[0..32)} and IPC_HIGH
 *   {stride, handle[32..64)}; the sender's handshake is done with both,
 *   it tries to map them and sends IPC_ANSWER {mapped, reason}
 *   (pd_tp_hs_ipc_answer); the receiver's is done with the answer.
 * Descriptors travel with PROOF (sender) and READY (receiver) on unix
 * sockets only. */
#define PD_TP_HS_MAX_FDS 2
typedef struct pd_tp_hs {
    int fd;
    bool stream; /* tcp: frames may arrive in pieces */
    pd_tp_role role;
    uint8_t nonce[16], peer_nonce[16];
    bool sent_hello, got_hello, sent_proof, peer_proven, sent_ready, done;
    uint8_t in[64];
    size_t in_len;
    int fds_out[PD_TP_HS_MAX_FDS], nfds_out;
    int fds_in[PD_TP_HS_MAX_FDS], nfds_in;
    /* CUDA IPC: the receiver's offer (set before READY: ipc_offer, the
     * handle, where slot 0 lies in the allocation and the slots' stride),
     * as the sender received it (ipc_offered by READY, ipc_parts frames of
     * 2 so far), and the sender's answer (ipc_answer: -1 awaited, 0 not
     * mapped, 1 mapped; ipc_reason its few words). */
    bool ipc_offer, ipc_offered;
    uint8_t ipc_handle[PD_DEVICE_IPC_HANDLE_BYTES];
    uint64_t ipc_offset, ipc_stride;
    int ipc_parts, ipc_answer;
    char ipc_reason[32];
} pd_tp_hs;

pd_status pd_tp_hs_init(pd_tp_hs *hs, int fd, bool stream, pd_tp_role role);

/* Advances the handshake; *done once it completed. The socket must be
 * non-blocking. PD_ECOMM on a wrong token, a foreign peer or a closed
 * socket. */
pd_status pd_tp_hs_step(pd_channel *ch, pd_tp_hs *hs, bool *done);

/* Closes descriptors received and not taken. */
void pd_tp_hs_cleanup(pd_tp_hs *hs);

/* Sender, its handshake done with a CUDA IPC offer: tells the receiver
 * whether it mapped the slots (`reason`, at most 31 bytes of it, says why
 * not). */
pd_status pd_tp_hs_ipc_answer(pd_channel *ch, pd_tp_hs *hs, bool mapped, const char *reason);

/* Socket helpers. */
pd_status pd_tp_set_nonblocking(int fd);
/* Reads up to len bytes without blocking: *got may be 0 (nothing yet);
 * PD_ECOMM when the peer closed or reset the connection. */
pd_status pd_tp_read_some(pd_channel *ch, int fd, void *buf, size_t len, size_t *got);
/* Sleeps on fd for `events` up to timeout_ms (EINTR is a wake-up). */
pd_status pd_tp_poll1(int fd, short events, int timeout_ms, short *revents);

/* A connection of a socket backend (tcp, shm): the backend's state begins
 * with this part. */
typedef struct pd_tp_sock {
    int sock;
    pd_tp_hs hs;
} pd_tp_sock;

/* What the socket backends share beyond their state: */
typedef struct pd_tp_sock_ops {
    const char *name; /* "tcp", "shm": in messages */
    /* Makes the state of a connected socket, taking the socket (closed on
     * failure). */
    pd_status (*conn_new)(pd_channel *ch, int sock, pd_tp_role role, pd_tp_sock **out);
    /* Optional: the handshake completed; takes what came with it. */
    pd_status (*conn_proven)(pd_channel *ch, pd_tp_sock *conn);
    void (*conn_free)(pd_tp_sock *conn);
} pd_tp_sock_ops;

/* Allocates a connection state of `bytes` (zeroed, beginning with a
 * pd_tp_sock) for a connected socket, made non-blocking, its handshake
 * initialised. Takes the socket: on failure it is closed. The caller frees
 * the state with free() after pd_tp_sock_conn_close(). */
pd_status pd_tp_sock_conn_new(pd_channel *ch, int sock, bool stream, pd_tp_role role, size_t bytes,
                              pd_tp_sock **out);

/* Closes the socket and the descriptors received and not taken. */
void pd_tp_sock_conn_close(pd_tp_sock *conn);

/* A socket backend's listener: a listening socket and the connection
 * whose handshake is under way (one at a time). */
typedef struct pd_tp_sock_listener {
    const pd_tp_sock_ops *ops;
    int fd;
    pd_tp_sock *pending;
} pd_tp_sock_listener;

/* Makes a listener of a listening, non-blocking socket, taking it
 * (closed on failure). Freed by pd_tp_sock_unlisten. */
pd_status pd_tp_sock_listen(const pd_tp_sock_ops *ops, int fd, pd_tp_sock_listener **out);

/* pd_tp_ops entries for socket backends: accept (and prove) a sender
 * without blocking, and free a listener with its pending connection. */
pd_status pd_tp_sock_accept(pd_channel *ch, void *listener);
void pd_tp_sock_unlisten(void *listener);

/* Runs the handshake of ch->be (a connection of `ops`) without blocking;
 * sets ch->ready once it completed. */
pd_status pd_tp_sock_handshake(pd_channel *ch, const pd_tp_sock_ops *ops);

#endif
