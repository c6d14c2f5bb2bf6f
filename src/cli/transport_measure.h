/* Measuring channels between two ranks, for `pipedream bench transport`
 * and `pipedream topo --measure` (CLI-internal). A link is a pair of
 * channels: the measuring rank receives a stream on its rx (bandwidth, like
 * perftest's ib_write_bw) and ping-pongs over its tx (half round trip, like
 * ib_send_lat); the peer rank does the mirror image, size by size in the
 * same order. */
#ifndef PD_CLI_TRANSPORT_MEASURE_H
#define PD_CLI_TRANSPORT_MEASURE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <pipedream/transport.h>

typedef struct pd_cli_link {
    pd_channel *rx, *tx;
    int64_t depth;      /* of both channels: the sends kept in flight */
    uint64_t minibatch; /* the next tag */
    char *buf;          /* what is sent: the largest size's bytes */
} pd_cli_link;

/* Measuring rank: *bw, bytes/s of `iters` messages of `size` (clocked from
 * the first arrival); *lat_us, the half round trip of `lat_iters`
 * ping-pongs (not measured when 0). */
pd_status pd_cli_link_measure(pd_cli_link *link, int64_t size, int64_t iters, int64_t lat_iters, double *bw,
                              double *lat_us);

/* Peer rank: sends the stream and answers the pings of pd_cli_link_measure. */
pd_status pd_cli_link_serve(pd_cli_link *link, int64_t size, int64_t iters, int64_t lat_iters);

/* Closes both channels and frees the buffer; the link can be opened again. */
void pd_cli_link_close(pd_cli_link *link);

/* What a peer rank runs on its side of an open link; non-zero fails it. */
typedef int (*pd_cli_peer_main)(pd_cli_link *link, const void *arg);

/* Opens a link with a forked peer process of this node: channels shaped as
 * `config` (its id is set here), the measuring side here; the child opens
 * the other side, runs peer_main(link, arg) and exits with its result.
 * *pid is the child's, for waitpid (killed and reaped here on failure). */
pd_status pd_cli_link_open_forked(pd_cli_link *link, const pd_channel_config *config, pd_cli_peer_main peer_main,
                                  const void *arg, pid_t *pid);

#ifdef HAVE_MPI
/* Opens a link with MPI rank `peer` (collective with the peer's call, the
 * other role): both listen on `backends`, swap addresses as MPI messages,
 * connect and wait. Channels of `max_size` slots and `depth`; a rank that
 * fails tells the other, so that neither waits. */
pd_status pd_cli_link_open_mpi(pd_cli_link *link, int peer, bool measuring, const char *backends,
                               const pd_transport_token *token, int64_t max_size, int64_t depth);

/* The same stream as plain MPI: the peer MPI_Sends `iters` messages of
 * `size`, this rank MPI_Recvs them; bytes/s clocked from the first. */
double pd_cli_mpi_stream_recv(int peer, char *buf, int64_t size, int64_t iters);
void pd_cli_mpi_stream_send(int peer, const char *buf, int64_t size, int64_t iters);
#endif

struct pd_cluster;
struct pd_topo;

/* `pipedream topo --measure` (topo_measure.c): measures the bandwidth and
 * latency at each level of `cluster` with the transport and prints them
 * beside the discovered ones. With `mpi` it is collective over the job's
 * ranks (rank 0 prints); `node` (nullable) is this rank's node, used to
 * bind it near its worker. Returns an exit code (PD_CLI_FAILURE when a
 * measurement failed). */
int pd_cli_topo_measure(const struct pd_cluster *cluster, const struct pd_topo *node, bool mpi, FILE *out);

#endif
