/* verbs backend internals (private to transport/verbs*.c and the transport
 * test): one RC queue pair per channel, set up through librdmacm.
 *
 * Set-up (docs/transport.md has the picture):
 *   sender    rdma_connect, private data HELLO {channel, shape, nonce}
 *   receiver  checks the shape, rdma_accept with {nonce, proof}
 *   sender    checks the receiver's proof; SEND PROOF {proof, credit word}
 *   receiver  checks the sender's proof, registers its slots (remote-write
 *             only) and SENDs READY {slot addresses, rkeys}
 * Then the sender writes each message (header + payload) into its slot with
 * RDMA WRITE WITH IMMEDIATE (immediate: slot | sequence bits), the payload
 * copied into a registered staging slot or, from memory the caller
 * registered (pd_channel_register), sent in place; the
 * receiver returns credits with a small RDMA WRITE WITH IMMEDIATE into the
 * sender's credit word. No memory region and no queue pair allows remote
 * reads. */
#ifndef PD_TRANSPORT_VERBS_INT_H
#define PD_TRANSPORT_VERBS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "transport/transport_int.h"

#define PD_VB_MAGIC 0x31564450u /* "PDV1" */
#define PD_VB_PROTO 2 /* 2: READY may offer device slots */
#define PD_VB_CREDIT_SLOTS 16   /* credit writes in flight at most */
#define PD_VB_SLOT_BITS 10      /* immediate: slot in the low bits (depth <= 1024) */
#define PD_VB_SEQ_MASK ((1u << (32 - PD_VB_SLOT_BITS)) - 1)

_Static_assert(PD_TP_MAX_DEPTH <= 1 << PD_VB_SLOT_BITS, "the immediate holds every slot number");

enum { PD_VB_HELLO = 1, PD_VB_ACCEPT = 2, PD_VB_REJECT = 3, PD_VB_PROOF = 4, PD_VB_READY = 5 };

/* Connect request private data (at most 56 bytes for RC over IB CM). */
typedef struct pd_vb_hello {
    uint32_t magic;
    uint16_t proto;
    uint8_t type;
    uint8_t role;
    uint32_t channel_id;
    uint32_t depth;
    uint64_t slot_bytes;
    uint64_t stride;
    uint8_t nonce[16];
} pd_vb_hello;
_Static_assert(sizeof(pd_vb_hello) <= 56, "fits the connect request");

/* Accept or reject private data. */
typedef struct pd_vb_reply {
    uint32_t magic;
    uint8_t type;
    uint8_t reason; /* reject: 1 shape, 2 busy */
    uint16_t proto;
    uint8_t nonce[16];
    uint64_t mac;
} pd_vb_reply;

/* A control message (SEND): PROOF from the sender, READY from the
 * receiver; READY carries one rkey per slot (every slot is its own memory
 * region, so no write can cross a slot's end) and, when the receiver's
 * slots are device memory registered directly (dmabuf, peermem), the
 * device slots' address, stride and rkeys after the host slots' ones: the
 * sender then writes a payload into the device slot and the header, with
 * the immediate, into the host slot, where the receiver checks it. */
typedef struct pd_vb_ctl {
    uint32_t magic;
    uint32_t type;
    uint64_t mac;    /* PROOF */
    uint64_t addr;   /* PROOF: the credit word; READY: slot 0 */
    uint64_t stride; /* READY */
    uint32_t rkey;   /* PROOF: the credit word */
    uint32_t depth;  /* READY */
    uint64_t dev_addr;   /* READY: device slot 0, 0 if the payloads go to the host slots */
    uint64_t dev_stride; /* READY: bytes between device slots (each a region of this size) */
    uint32_t slot_rkey[2 * PD_TP_MAX_DEPTH]; /* host slots', then device slots' */
} pd_vb_ctl;
#define PD_VB_CTL_HEAD offsetof(pd_vb_ctl, slot_rkey)

/* Work request ids: kind << 32 | index. */
enum {
    PD_VB_WR_CTL_RECV = 1,
    PD_VB_WR_CTL_SEND,
    PD_VB_WR_IMM_RECV,
    PD_VB_WR_MSG_WRITE,
    PD_VB_WR_CREDIT_WRITE,
    PD_VB_WR_PAYLOAD_WRITE, /* a payload into a device slot, before its header's write */
};

/* One connection: its cm id and event channel, its own device context
 * (never librdmacm's, which a forked child would share with its parent),
 * its queue pair and memory, and the protocol state. */
typedef struct pd_vb_conn {
    pid_t owner; /* only the process that made it tears it down */
    pd_tp_role role;
    struct rdma_event_channel *ec;
    struct rdma_cm_id *id;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *comp;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    int epfd; /* completion and cm descriptors together */
    bool armed, established, disconnected, hs_done, peer_proven;
    uint8_t nonce[16], peer_nonce[16];
    uint64_t sq_posted, sq_done; /* send queue: every request signalled */

    /* Control messages: ctl[0] received, ctl[1] sent. */
    pd_vb_ctl *ctl;
    struct ibv_mr *ctl_mr;

    /* Sender: staging slots (local read only), the credit word (the one
     * remote-writable region of a sender), the receiver's slots. */
    uint8_t *staging;
    size_t staging_bytes;
    struct ibv_mr *staging_mr;
    uint64_t *credit_word;
    struct ibv_mr *credit_mr;
    uint64_t slot_addr;
    uint32_t *slot_rkey;           /* depth host slots', then (dev_slot_addr) depth device slots' */
    uint64_t dev_slot_addr;        /* the receiver's device slot 0, 0: payloads go to the host slots */
    uint64_t dev_slot_stride;
    uint64_t acked;                /* message writes completed */
    uint8_t *direct;               /* per staging slot: written from a registered region */
    struct ibv_mr *region_mr[PD_TP_MAX_REGIONS]; /* ch->regions, NULL where registration failed */
    int region_mrs;                /* regions looked at so far */

    /* Receiver: one region per slot (local + remote write), the sender's
     * credit word, the sources of credit writes. */
    struct ibv_mr **slot_mr;
    int slot_mrs; /* registered so far */
    struct ibv_mr **dev_mr; /* depth device slots registered directly, NULL if staged */
    uint64_t credit_addr;
    uint32_t credit_rkey;
    uint64_t *credit_src;
    struct ibv_mr *credit_src_mr;
    uint64_t credit_posted, credit_done, credit_sent;
} pd_vb_conn;

/* The IPv4 address a verbs channel listens on: `host` unless it is NULL or
 * a loopback address (which RDMA cannot use), else that of the first active
 * RDMA port (its IPv4-mapped RoCE GIDs, else its network interfaces), read
 * from sysfs without opening a device. PD_ENOTFOUND if there is none. */
pd_status pd_vb_find_address(const char *host, char *ip, size_t size);

/* Creates the connection of cm id `id` (events on `ec`, or on a fresh
 * channel the id migrates to when ec is NULL): device context, protection
 * domain, completion queue and channel, RC queue pair, control and role
 * memory. Takes ownership of ec and id, also on failure. */
pd_status pd_vb_conn_create(pd_channel *ch, pd_tp_role role, struct rdma_event_channel *ec, struct rdma_cm_id *id,
                            pd_vb_conn **out);

/* Records PD_ECOMM "channel N: verbs: <what>: <strerror(errno)>". */
pd_status pd_vb_errno(const pd_channel *ch, const char *what);

/* Frees everything; in a forked child only what is the child's own. */
void pd_vb_conn_destroy(pd_vb_conn *c);

/* Moves the queue pair to `state` with the attributes the cm computes
 * (path, GID, PSNs), allowing remote writes and never remote reads. */
pd_status pd_vb_qp_modify(pd_channel *ch, pd_vb_conn *c, enum ibv_qp_state state);

/* Posts the control receive and `count` receives for immediates. */
pd_status pd_vb_post_recvs(pd_channel *ch, pd_vb_conn *c, int count);

/* Sends control message ctl[1] of `bytes`. */
pd_status pd_vb_post_ctl(pd_channel *ch, pd_vb_conn *c, size_t bytes);

/* Receiver: registers every slot for local and remote write. */
pd_status pd_vb_register_slots(pd_channel *ch, pd_vb_conn *c);

/* Registers `count` ranges of `bytes`, `stride` apart from `base`, of the
 * channel's device memory (a region each, `access`) through the first
 * direct path of ch->slot_caps that works: dmabuf, then peermem (each
 * failure cleared from slot_caps, said at debug and kept in ch->slot_why).
 * Returns DMABUF or PEERMEM with mrs[0..count) filled, or STAGED with none
 * (the caller stages). */
pd_slot_path pd_vb_reg_device(pd_channel *ch, pd_vb_conn *c, void *base, size_t count, size_t stride, size_t bytes,
                              int access, struct ibv_mr **mrs);

/* One step of a connection without blocking: completion events, work
 * completions, cm events, then sends (sender) or credits (receiver), and
 * re-arms the completion queue. Drives the handshake until c->hs_done. */
pd_status pd_vb_step(pd_channel *ch, pd_vb_conn *c);

/* The part of a step that a spinning wait repeats: work completions, then
 * sends or credits; no event read, nothing armed. */
pd_status pd_vb_poll(pd_channel *ch, pd_vb_conn *c);

/* In verbs.c: the connection's cm events (the sender's handshake, the
 * peer's disconnect) and a control message arrived in ctl[0]. */
pd_status pd_vb_cm_events(pd_channel *ch, pd_vb_conn *c);
pd_status pd_vb_on_ctl(pd_channel *ch, pd_vb_conn *c, size_t bytes);

/* Receiver: writes ch->released to the sender's credit word when a write
 * is free (else a later step does). */
pd_status pd_vb_flush_credit(pd_channel *ch, pd_vb_conn *c);

#endif
