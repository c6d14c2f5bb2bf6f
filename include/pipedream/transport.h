/* Transport: one-way, RDMA-shaped channels that move activations and
 * gradients between the ranks of neighbouring stages.
 *
 * A channel carries messages from one sender to one receiver into a ring of
 * `depth` receive slots of `slot_bytes` each, owned by the receiver. The
 * sender may only write into a slot the receiver has released (a credit);
 * the receiver consumes a slot in place (zero copy) and releases it. Every
 * message carries a header {magic, channel, slot, sequence, tag, bytes} that
 * the receiver checks before it exposes the slot: a violation fails the
 * channel, it never writes out of bounds. Peers prove a per-job token to
 * each other before any slot is exposed. docs/transport.md has the protocol.
 *
 * Setting up: the receiver calls pd_channel_listen() and hands the string of
 * pd_channel_address() to the sender out of band (the runtime's bootstrap);
 * the sender calls pd_channel_connect() with it. Both calls return at once;
 * the connection completes under pd_channel_progress() (or
 * pd_channel_wait_connected()), so ranks that open channels both ways in any
 * order do not deadlock.
 *
 * Backends: the address lists every backend the receiver listens on; the
 * sender tries them in its preference order and the first whose token
 * handshake completes wins. A backend that fails before that (no device,
 * no route, rdmacm reject, the peer gone mid-handshake) gives way to the
 * next one, with one log line saying why; only a refusal (wrong token,
 * another channel's id or shape) ends the set-up at once. When every
 * backend failed, the error names each one's reason. Order:
 * config.backends, else $PD_TRANSPORT, else every backend built: shm,
 * (verbs,) (mpi,) tcp. The mpi backend ("mpi:<world rank>:<tag base>")
 * needs MPI initialised by the caller, and MPI_THREAD_MULTIPLE when
 * channels are used from several threads at once.
 *
 * Threads: every call locks the channel, so a compute thread may post sends
 * and take received slots while another thread drives progress; calls never
 * block except the *_wait ones, which sleep until the peer acts, the peer
 * dies or the timeout passes; while messages stream they poll first, for
 * a bounded time (config.spin_us), so that a stream's messages cost no
 * wake-up each; an idle channel's waits sleep at once. One thread serves
 * many channels through a pd_channel_set (below), which never spins. */
#ifndef PIPEDREAM_TRANSPORT_H
#define PIPEDREAM_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <pipedream/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pd_channel pd_channel;

/* The per-job secret both ends of every channel prove they hold. */
typedef struct pd_transport_token {
    uint8_t bytes[16];
} pd_transport_token;

/* Parses 32 hexadecimal digits (the form of $PD_JOB_TOKEN). PD_EINVAL when
 * the text is not exactly that. */
pd_status pd_transport_token_parse(const char *hex, pd_transport_token *out);

/* A fresh random token (getrandom), e.g. for a launcher to export. */
pd_status pd_transport_token_generate(pd_transport_token *out);

/* Writes the token as 32 hexadecimal digits and a NUL into hex[33]. */
void pd_transport_token_format(const pd_transport_token *token, char hex[33]);

/* Where a channel's memory lives: the receiver's slots, the sender's send
 * buffers. PD_TRANSPORT_DEVICE is the memory of config.device (a CUDA
 * device in practice; PD_TRANSPORT_CUDA names the same value). */
typedef enum {
    PD_TRANSPORT_HOST = 0,
    PD_TRANSPORT_DEVICE = 1,
    PD_TRANSPORT_CUDA = PD_TRANSPORT_DEVICE,
} pd_transport_memory;

/* How a channel reaches memory of a device: the choice is explicit,
 * reported by pd_channel_slot_path() and, for device memory, in the
 * channel's log line once it is connected. docs/transport.md, "Device
 * memory". */
typedef enum {
    PD_SLOT_PATH_HOST = 0,     /* host memory: the backend moves the bytes, no device involved */
    PD_SLOT_PATH_STAGED = 1,   /* any backend: the bytes cross pinned host memory, one copy per end */
    PD_SLOT_PATH_CUDA_IPC = 2, /* shm: the sender writes the receiver's GPU slots through a CUDA IPC handle */
    PD_SLOT_PATH_DMABUF = 3,   /* verbs: GPU slots registered with ibv_reg_dmabuf_mr (GPUDirect RDMA) */
    PD_SLOT_PATH_PEERMEM = 4,  /* verbs: GPU slots registered with ibv_reg_mr (nvidia-peermem) */
    PD_SLOT_PATH_CUDA_AWARE_MPI = 5, /* mpi: MPI_Isend/MPI_Irecv on the GPU memory itself (CUDA-aware MPI) */
} pd_slot_path;

/* What a build and machine offer for device memory beyond staging (bit
 * flags for pd_transport_slot_path). */
typedef enum {
    PD_SLOT_CAN_CUDA_IPC = 1, /* CUDA IPC handles between the ranks of a node */
    PD_SLOT_CAN_DMABUF = 2,   /* a dmabuf fd of device memory and ibv_reg_dmabuf_mr */
    PD_SLOT_CAN_PEERMEM = 4,  /* ibv_reg_mr accepts device pointers */
    PD_SLOT_CAN_CUDA_AWARE_MPI = 8, /* both ends' MPI takes device pointers (agreed in the handshake) */
} pd_slot_capability;

/* The path a channel over `backend` ("shm", "verbs", "tcp", "mpi") takes
 * to memory `memory` given the capabilities `caps` found: host memory is
 * always PD_SLOT_PATH_HOST; device memory takes, in this order, shm: CUDA
 * IPC; verbs: dmabuf, then peermem; mpi: CUDA-aware MPI; and staging when
 * none applies (tcp, or nothing found). A pure function. */
pd_slot_path pd_transport_slot_path(const char *backend, pd_transport_memory memory, unsigned caps);

/* "host", "staged", "cuda-ipc", "dmabuf", "peermem", "cuda-aware-mpi";
 * "?" for others. */
const char *pd_slot_path_name(pd_slot_path path);

/* What a message is, as the schedule names it. */
typedef enum {
    PD_MSG_ACTIVATION = 1, /* a stage's output, forward */
    PD_MSG_GRADIENT = 2,   /* the gradient of a stage's input, backward */
    PD_MSG_CONTROL = 3,    /* anything else (weights, barriers) */
} pd_msg_kind;

/* The tag every message carries. On one channel the minibatch ids of each
 * kind must increase strictly; the receiver checks this. */
typedef struct pd_msg_tag {
    uint64_t minibatch;
    uint32_t kind;    /* pd_msg_kind */
    uint32_t version; /* weight version the message was computed with */
} pd_msg_tag;

/* A channel's shape and how to reach and prove the peer. */
typedef struct pd_channel_config {
    uint32_t channel_id;              /* both ends give the same id; checked at set-up */
    int depth;                        /* receive slots, 1..1024 */
    size_t slot_bytes;                /* payload capacity of one slot, 1 byte..4 GiB */
    pd_transport_memory memory;       /* receiver: where the slots live; sender: where send buffers live */
    struct pd_device *device;         /* memory == PD_TRANSPORT_DEVICE: its device (kernels.h), used by the
                                       * thread that sends or receives, open until the channel closes */
    const pd_transport_token *token;  /* required; copied */
    const char *backends;             /* comma-separated preference, NULL for the default */
    const char *host;                 /* receiver, tcp: address to bind and advertise (NULL: this host's first non-loopback IPv4, else 127.0.0.1) */
    int timeout_ms;                   /* set-up deadline and peer-liveness bound; <= 0 means 10000 */
    int spin_us;                      /* while messages stream (blocking waits end less than this apart), a
                                       * blocking wait polls up to this long before it sleeps (verbs, shm);
                                       * 0: $PD_TRANSPORT_SPIN_US, else 2000; < 0: always sleep at once */
} pd_channel_config;

/* A received message: valid from pd_channel_recv() until its release. */
typedef struct pd_channel_msg {
    void *data;       /* the slot's payload, in the receiver's slot memory (config.memory) */
    size_t bytes;     /* checked <= slot_bytes */
    pd_msg_tag tag;
    uint64_t seq;     /* position of the message in the channel, from 0 */
} pd_channel_msg;

/* Creates the receiving end: allocates the slots (not exposed yet) and
 * listens on every backend of the preference that can listen here (a
 * backend named in config.backends or $PD_TRANSPORT that cannot is said
 * in one log line). A sender's attempt that fails on one listener (not a
 * refusal) is dropped and every listener goes on; the first proven sender
 * closes the others. The caller frees it with pd_channel_close(). */
pd_status pd_channel_listen(const pd_channel_config *config, pd_channel **out);

/* The receiver's address ("shm:...,verbs:ip:port,tcp:host:port": one part
 * per backend listening, fewer than 512 bytes), to give to the sender.
 * Owned by the channel. */
const char *pd_channel_address(const pd_channel *ch);

/* Creates the sending end towards `address` (from pd_channel_address()):
 * the backends of the preference that the address offers are tried in
 * order. A connect may wait (at most until the set-up deadline) for a
 * route or a socket; the token handshake completes under progress, which
 * also moves on to the next backend if the current one fails before the
 * handshake completed. Fails at once (PD_ECOMM, naming every backend's
 * reason) when no backend connects; PD_EINVAL for a malformed address.
 * The caller frees it with pd_channel_close(). */
pd_status pd_channel_connect(const pd_channel_config *config, const char *address, pd_channel **out);

/* Closes the channel and frees everything it owns; never fails. The peer
 * sees the channel closed (an error if it still expects messages). */
void pd_channel_close(pd_channel *ch);

/* The backend in use ("shm", "tcp", ...), or "none" before connecting. A
 * sender's may change until it is connected (falling back). */
const char *pd_channel_backend(const pd_channel *ch);

/* The longest a blocking wait of the connected channel polls before it
 * sleeps while messages stream (config.spin_us resolved), in us; 0 when
 * its waits sleep at once (spinning off, or a backend without a cheap
 * poll: tcp, mpi). */
int pd_channel_spin_us(pd_channel *ch);

/* How this end reaches its memory (config.memory): PD_SLOT_PATH_HOST for
 * host memory; for device memory the path its backend took once
 * connected (PD_SLOT_PATH_STAGED before): a receiver's for its slots, a
 * sender's that of the last buffer it registered directly (staged until
 * one is). Each end chooses its own path. */
pd_slot_path pd_channel_slot_path(pd_channel *ch);

/* Advances set-up, transfers and credits without blocking. Returns the
 * channel's failure (PD_ECOMM: protocol violation, wrong token, peer gone;
 * PD_ETIMEOUT: set-up deadline passed) once it has failed; then every later
 * call returns the same. */
pd_status pd_channel_progress(pd_channel *ch);

/* Whether the token handshake has completed and data can flow. */
bool pd_channel_connected(pd_channel *ch);

/* Progresses all `n` channels until every one is connected; PD_ETIMEOUT
 * naming a channel after `timeout_ms` (< 0: each channel's own timeout). */
pd_status pd_channel_wait_connected(pd_channel *const *chs, int n, int timeout_ms);

/* Posts a send of `bytes` (<= the receiver's slot_bytes) from `data` with
 * `tag`, and returns its sequence number in *seq. Does not block: the
 * message leaves when a credit is free. `data` must stay unchanged until
 * pd_channel_send_done() says so. PD_ESTATE when `depth` sends are already
 * posted and not done. With config.memory PD_TRANSPORT_DEVICE `data` is
 * memory of config.device; on the staged path it is copied into pinned
 * host memory before this returns (then `data` is free at once). */
pd_status pd_channel_send(pd_channel *ch, const void *data, size_t bytes, const pd_msg_tag *tag, uint64_t *seq);

/* Whether send `seq` has completed (its buffer may be reused). Progresses. */
pd_status pd_channel_send_done(pd_channel *ch, uint64_t seq, bool *done);

/* Sleeps until send `seq` has completed, the channel fails or `timeout_ms`
 * passes (PD_ETIMEOUT; < 0 means the channel's timeout). */
pd_status pd_channel_send_wait(pd_channel *ch, uint64_t seq, int timeout_ms);

/* Sender, optional: declares [data, data + bytes) memory (of config.memory)
 * that stays allocated (and is not moved) until the channel closes, so
 * that sends from inside it may leave without a copy: verbs registers it
 * once and writes from it directly, and such a send is done only when the
 * receiver has it. Sends from other memory are copied. Device memory is
 * registered directly (dmabuf, else peermem) once connected over verbs;
 * where neither works, or over another backend, its sends are staged.
 * PD_ESTATE on a receiving end or beyond 8 regions (7 for device
 * memory); PD_ENOTSUP on a sender whose device offers no direct path
 * (the cpu device: its sends are staged). */
pd_status pd_channel_register(pd_channel *ch, const void *data, size_t bytes);

/* Device memory for buffers to register (pd_channel_register): `bytes` of
 * dev's memory at *data, on a host-page boundary and padded by a page on
 * each side, so that a dmabuf export of it (rounded out to pages) stays
 * inside the allocation. Free *alloc with dev->mem->free. */
pd_status pd_channel_device_alloc(struct pd_device *dev, size_t bytes, void **alloc, void **data);

/* Takes the next message if one has arrived (*ready true) without
 * blocking. The slot stays the caller's until pd_channel_release(). */
pd_status pd_channel_recv(pd_channel *ch, pd_channel_msg *msg, bool *ready);

/* Sleeps until the next message arrives (then as pd_channel_recv), the
 * channel fails, or `timeout_ms` passes (PD_ETIMEOUT; < 0: the channel's). */
pd_status pd_channel_recv_wait(pd_channel *ch, pd_channel_msg *msg, int timeout_ms);

/* Returns the slot of `msg` to the sender. Slots are released in the order
 * they were received (PD_ESTATE otherwise). */
pd_status pd_channel_release(pd_channel *ch, const pd_channel_msg *msg);

/* A descriptor that becomes readable when the channel may have work for
 * progress, or -1 if the backend has none (shm, mpi) or none is chosen yet
 * (it may change until the channel is connected). A thread serving
 * several channels uses a pd_channel_set instead, which every backend can
 * wake. */
int pd_channel_fd(pd_channel *ch);

/* ---- progressing many channels from one thread ---- */

/* A set of channels (both directions, any backends) that one thread, a
 * progress thread or the compute loop, progresses together and sleeps on
 * until any of them has an event. The set does not own its channels; a
 * channel belongs to at most one set, and closing it takes it out. The
 * set's calls are made by one thread at a time; other threads may use the
 * channels meanwhile (a send they post wakes a sleeping set). */
typedef struct pd_channel_set pd_channel_set;

/* What happened on a channel since the set last looked (bit flags). */
typedef enum {
    PD_CHANNEL_EV_CONNECTED = 1, /* the token handshake completed */
    PD_CHANNEL_EV_MESSAGE = 2,   /* receiver: new messages arrived, not taken yet */
    PD_CHANNEL_EV_SENT = 4,      /* sender: posted sends completed (buffers free) */
    PD_CHANNEL_EV_CLOSED = 8,    /* the peer closed or died */
    PD_CHANNEL_EV_FAILED = 16,   /* the channel failed */
} pd_channel_event;

/* Creates a set of the n channels (n >= 1, none in another set). The caller
 * frees it with pd_channel_set_destroy(). */
pd_status pd_channel_set_create(pd_channel *const *chs, int n, pd_channel_set **out);

/* Frees the set (not its channels); never fails. NULL is ignored. */
void pd_channel_set_destroy(pd_channel_set *set);

/* Progresses every channel once without blocking and records what
 * happened on each (pd_channel_set_events); *active (nullable) counts the
 * channels with an event. Returns the failure of the first failed channel
 * (naming it), every time, as a failed channel does. */
pd_status pd_channel_set_progress(pd_channel_set *set, int *active);

/* Progresses and sleeps (no busy spinning: shm and tcp sleep in poll on
 * the channels' eventfds and sockets; mpi, which has no descriptor, polls
 * with a back-off up to 1 ms) until some channel has an event (*active >
 * 0), pd_channel_set_wake() is called (*active may be 0), a channel fails
 * (its failure), or timeout_ms passes (PD_ETIMEOUT; < 0: no limit).
 * Events are edges: what the set already reported does not wake it again,
 * so a message left untaken does not make it spin. */
pd_status pd_channel_set_wait(pd_channel_set *set, int timeout_ms, int *active);

/* The events of channel i (the order given at creation) at the last
 * progress or wait: pd_channel_event flags. */
unsigned pd_channel_set_events(const pd_channel_set *set, int i);

/* Wakes the set's wait now, from any thread (e.g. to stop a progress
 * thread). Safe to call while nobody waits: the next wait returns at once. */
void pd_channel_set_wake(pd_channel_set *set);

/* The backends compiled in, in default preference order. */
int pd_transport_backends(const char *const **names);

#ifdef __cplusplus
}
#endif
#endif
