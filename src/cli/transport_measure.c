/* Measuring a link of two channels between two ranks (transport_measure.h):
 * the loops both verbs share, the set-up of a link between MPI ranks, and
 * plain MPI's stream as the reference for the mpi backend. */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_MPI
#include <mpi.h>
#endif

#include "cli/pd_cli.h"
#include "cli/transport_measure.h"

#define ADDRESS_BYTES 1024
#define TAG_ADDRESS 77   /* MPI tags below the transport's (1024 and up) */
#define TAG_REFERENCE 78
#define SETUP_TIMEOUT_MS 30000
#define PEER_WATCHDOG_S 600

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

pd_status pd_cli_link_measure(pd_cli_link *link, int64_t size, int64_t iters, int64_t lat_iters, double *bw,
                              double *lat_us)
{
    pd_channel_msg m;
    double t0 = 0, t1;
    uint64_t seq;

    for (int64_t i = 0; i < iters; i++) {
        PD_CHECK(pd_channel_recv_wait(link->rx, &m, -1));
        if (i == 0)
            t0 = now_s();
        PD_CHECK(pd_channel_release(link->rx, &m));
    }
    t1 = now_s();
    *bw = iters > 1 ? (double)size * (double)(iters - 1) / (t1 - t0) : 0;
    *lat_us = 0;
    t0 = now_s();
    for (int64_t i = 0; i < lat_iters; i++) {
        pd_msg_tag tag = {.minibatch = link->minibatch++, .kind = PD_MSG_ACTIVATION};
        PD_CHECK(pd_channel_send(link->tx, link->buf, (size_t)size, &tag, &seq));
        PD_CHECK(pd_channel_send_wait(link->tx, seq, -1));
        PD_CHECK(pd_channel_recv_wait(link->rx, &m, -1));
        PD_CHECK(pd_channel_release(link->rx, &m));
    }
    if (lat_iters > 0)
        *lat_us = (now_s() - t0) / (double)lat_iters / 2 * 1e6;
    return PD_OK;
}

pd_status pd_cli_link_serve(pd_cli_link *link, int64_t size, int64_t iters, int64_t lat_iters)
{
    uint64_t seq = 0;

    for (int64_t i = 0; i < iters; i++) {
        pd_msg_tag tag = {.minibatch = link->minibatch++, .kind = PD_MSG_ACTIVATION};
        if (i >= link->depth)
            PD_CHECK(pd_channel_send_wait(link->tx, seq + 1 - (uint64_t)link->depth, -1));
        PD_CHECK(pd_channel_send(link->tx, link->buf, (size_t)size, &tag, &seq));
    }
    /* A wait progresses only its own channel: let the stream drain before
     * the ping-pong waits on the other. */
    if (iters > 0)
        PD_CHECK(pd_channel_send_wait(link->tx, seq, -1));
    for (int64_t i = 0; i < lat_iters; i++) {
        pd_channel_msg m;
        pd_msg_tag tag = {.minibatch = link->minibatch++, .kind = PD_MSG_ACTIVATION};
        PD_CHECK(pd_channel_recv_wait(link->rx, &m, -1));
        PD_CHECK(pd_channel_release(link->rx, &m));
        PD_CHECK(pd_channel_send(link->tx, link->buf, (size_t)size, &tag, &seq));
        PD_CHECK(pd_channel_send_wait(link->tx, seq, -1));
    }
    return PD_OK;
}

void pd_cli_link_close(pd_cli_link *link)
{
    pd_channel_close(link->tx);
    pd_channel_close(link->rx);
    free(link->buf);
    *link = (pd_cli_link){0};
}

/* The forked child: the other side of the link, then peer_main. */
static int forked_peer(const pd_channel_config *config, const char *address, int fd, pd_cli_peer_main peer_main,
                       const void *arg)
{
    pd_channel_config c = *config;
    pd_cli_link link = {.depth = c.depth};
    const char *mine;
    int status = 1;

    c.channel_id = 2;
    mine = pd_channel_listen(&c, &link.rx) == PD_OK ? pd_channel_address(link.rx) : "";
    /* The parent reads up to the NUL; an empty address says "failed". */
    if (write(fd, mine, strlen(mine) + 1) != (ssize_t)(strlen(mine) + 1) || !*mine)
        goto out;
    c.channel_id = 1;
    if (pd_channel_connect(&c, address, &link.tx) != PD_OK ||
        pd_channel_wait_connected((pd_channel *[]){link.rx, link.tx}, 2, SETUP_TIMEOUT_MS) != PD_OK ||
        !(link.buf = calloc(1, c.slot_bytes)))
        goto out;
    (void)pd_channel_register(link.tx, link.buf, c.slot_bytes); /* sent in place where the backend can (verbs) */
    status = peer_main(&link, arg);
out:
    if (status)
        pd_cli_error("peer process: %s", pd_last_error());
    pd_cli_link_close(&link);
    return status ? 1 : 0;
}

pd_status pd_cli_link_open_forked(pd_cli_link *link, const pd_channel_config *config, pd_cli_peer_main peer_main,
                                  const void *arg, pid_t *pid)
{
    pd_channel_config c = *config;
    char address[ADDRESS_BYTES];
    int fds[2] = {-1, -1};
    size_t got = 0;
    pd_status s;

    *link = (pd_cli_link){.depth = c.depth};
    *pid = -1;
    c.channel_id = 1;
    PD_CHECK(pd_channel_listen(&c, &link->rx));
    snprintf(address, sizeof(address), "%s", pd_channel_address(link->rx));
    if (pipe(fds) != 0) {
        s = PD_ERROR(PD_EIO, "pipe: %s", strerror(errno));
        goto fail;
    }
    fflush(stdout);
    fflush(stderr);
    *pid = fork();
    if (*pid < 0) {
        s = PD_ERROR(PD_EIO, "fork: %s", strerror(errno));
        goto fail;
    }
    if (*pid == 0) {
        close(fds[0]);
        pd_channel_close(link->rx); /* the parent's slots are not the child's */
        alarm(PEER_WATCHDOG_S);
        _exit(forked_peer(&c, address, fds[1], peer_main, arg));
    }
    close(fds[1]);
    fds[1] = -1;
    while (got < sizeof(address) - 1 && read(fds[0], address + got, 1) == 1 && address[got] != '\0')
        got++;
    address[got] = '\0';
    if (got == 0) {
        s = PD_ERROR(PD_ECOMM, "the peer process could not listen for a channel");
        goto fail;
    }
    c.channel_id = 2;
    PD_CHECK_GOTO(pd_channel_connect(&c, address, &link->tx), s, fail);
    PD_CHECK_GOTO(pd_channel_wait_connected((pd_channel *[]){link->rx, link->tx}, 2, SETUP_TIMEOUT_MS), s, fail);
    if (!(link->buf = calloc(1, c.slot_bytes))) {
        s = PD_ERROR(PD_ENOMEM, "out of host memory for %zu bytes", c.slot_bytes);
        goto fail;
    }
    (void)pd_channel_register(link->tx, link->buf, c.slot_bytes); /* sent in place where the backend can (verbs) */
    close(fds[0]);
    return PD_OK;
fail:
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    pd_cli_link_close(link);
    if (*pid > 0) {
        kill(*pid, SIGKILL);
        waitpid(*pid, NULL, 0);
        *pid = -1;
    }
    return s;
}

#ifdef HAVE_MPI
pd_status pd_cli_link_open_mpi(pd_cli_link *link, int peer, bool measuring, const char *backends,
                               const pd_transport_token *token, int64_t max_size, int64_t depth)
{
    /* The stream (peer to measurer) is channel 1, the pings channel 2. */
    pd_channel_config c = {.channel_id = measuring ? 1 : 2, .depth = (int)depth, .slot_bytes = (size_t)max_size,
                           .token = token, .backends = backends, .timeout_ms = SETUP_TIMEOUT_MS};
    char mine[ADDRESS_BYTES], theirs[ADDRESS_BYTES] = "";
    pd_status s;

    *link = (pd_cli_link){.depth = depth};
    s = pd_channel_listen(&c, &link->rx);
    snprintf(mine, sizeof(mine), "%s", s == PD_OK ? pd_channel_address(link->rx) : "");
    /* An empty address tells the peer that this rank could not listen. */
    if (measuring) {
        MPI_Send(mine, sizeof(mine), MPI_CHAR, peer, TAG_ADDRESS, MPI_COMM_WORLD);
        MPI_Recv(theirs, sizeof(theirs), MPI_CHAR, peer, TAG_ADDRESS, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(theirs, sizeof(theirs), MPI_CHAR, peer, TAG_ADDRESS, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(mine, sizeof(mine), MPI_CHAR, peer, TAG_ADDRESS, MPI_COMM_WORLD);
    }
    theirs[sizeof(theirs) - 1] = '\0';
    if (s != PD_OK)
        goto fail;
    if (!theirs[0]) {
        s = PD_ERROR(PD_ECOMM, "rank %d could not listen for a channel", peer);
        goto fail;
    }
    c.channel_id = measuring ? 2 : 1;
    PD_CHECK_GOTO(pd_channel_connect(&c, theirs, &link->tx), s, fail);
    PD_CHECK_GOTO(pd_channel_wait_connected((pd_channel *[]){link->rx, link->tx}, 2, SETUP_TIMEOUT_MS), s, fail);
    if (!(link->buf = calloc(1, (size_t)max_size))) {
        s = PD_ERROR(PD_ENOMEM, "out of host memory for %lld bytes", (long long)max_size);
        goto fail;
    }
    (void)pd_channel_register(link->tx, link->buf, (size_t)max_size); /* sent in place where the backend can (verbs) */
    return PD_OK;
fail:
    pd_cli_link_close(link);
    return s;
}

double pd_cli_mpi_stream_recv(int peer, char *buf, int64_t size, int64_t iters)
{
    double t0 = 0;

    for (int64_t i = 0; i < iters; i++) {
        MPI_Recv(buf, (int)size, MPI_BYTE, peer, TAG_REFERENCE, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (i == 0)
            t0 = now_s();
    }
    return iters > 1 ? (double)size * (double)(iters - 1) / (now_s() - t0) : 0;
}

void pd_cli_mpi_stream_send(int peer, const char *buf, int64_t size, int64_t iters)
{
    for (int64_t i = 0; i < iters; i++)
        MPI_Send(buf, (int)size, MPI_BYTE, peer, TAG_REFERENCE, MPI_COMM_WORLD);
}
#endif
