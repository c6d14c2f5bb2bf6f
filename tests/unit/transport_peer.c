/* Peers of transport test cases: forked processes, or threads of MPI rank 1
 * (transport_peer.h). MPI waits poll with short sleeps so that an idle
 * rank does not take a core from the other on a small machine. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef HAVE_MPI
#include <mpi.h>
#endif

#include "tests/unit/transport_peer.h"

#define WATCHDOG_S 30
#define MAX_PEERS 32

static const tp_child_fn *child_table;
static int child_count;

void tp_peer_init(const tp_child_fn *children, int n)
{
    child_table = children;
    child_count = n;
}

bool tp_peer_under_mpirun(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

static void child_fail(const char *what)
{
    fprintf(stderr, "child: %s failed: %s\n", what, strerror(errno));
    _exit(1);
}

/* ---- forked peers ---- */

static struct {
    pid_t pid;
    int fd;
} forked[MAX_PEERS];
static int child_fd = -1; /* in a forked child: its end of the pair */

static int io_all(int fd, void *buf, size_t len, bool out)
{
    uint8_t *p = buf;

    while (len) {
        ssize_t n = out ? write(fd, p, len) : read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int forked_fd(pid_t peer)
{
    for (int i = 0; i < MAX_PEERS; i++)
        if (forked[i].pid == peer)
            return forked[i].fd;
    fail_msg("no peer %d", (int)peer);
    return -1;
}

static pid_t fork_start(tp_child_fn child, const char *address, long arg, pd_channel *parent_only)
{
    char copy[1024];
    int sv[2], slot = -1;
    pid_t pid;

    for (int i = 0; i < MAX_PEERS && slot < 0; i++) {
        /* A case that failed left its peers: forget those that ended. */
        if (forked[i].pid != 0 && waitpid(forked[i].pid, NULL, WNOHANG) == forked[i].pid) {
            close(forked[i].fd);
            forked[i].pid = 0;
        }
        if (forked[i].pid == 0)
            slot = i;
    }
    assert_true(slot >= 0);
    snprintf(copy, sizeof(copy), "%s", address ? address : "");
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(sv[0]);
        child_fd = sv[1];
        pd_channel_close(parent_only);
        alarm(WATCHDOG_S);
        child(address ? copy : NULL, arg);
        _exit(0);
    }
    close(sv[1]);
    forked[slot].pid = pid;
    forked[slot].fd = sv[0];
    return pid;
}

static void fork_finish(pid_t peer)
{
    int status;

    assert_int_equal(waitpid(peer, &status, 0), peer);
    for (int i = 0; i < MAX_PEERS; i++)
        if (forked[i].pid == peer) {
            close(forked[i].fd);
            forked[i].pid = 0;
        }
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- MPI peers ---- */

#ifdef HAVE_MPI
enum { TAG_COMMAND = 1, TAG_PEERS = 100, MAX_IDS = 300 };
#define TAG_TO_CHILD(id) (TAG_PEERS + 3 * (id))
#define TAG_TO_PARENT(id) (TAG_PEERS + 3 * (id) + 1)
#define TAG_DONE(id) (TAG_PEERS + 3 * (id) + 2)

typedef struct command {
    int child; /* index, -1: stop */
    int id;
    long arg;
    int has_address;
    char address[1024];
} command;

static bool mpi_mode;
static int next_id;
static _Thread_local int my_id = -1; /* rank 1: the command a thread runs */

/* Completes a request, sleeping between tests. */
static void wait_request(MPI_Request *req)
{
    int done = 0;

    while (MPI_Test(req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

static void mpi_io(void *buf, size_t len, int peer, int tag, bool out)
{
    MPI_Request req;

    if (out)
        MPI_Isend(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req);
    else
        MPI_Irecv(buf, (int)len, MPI_BYTE, peer, tag, MPI_COMM_WORLD, &req);
    wait_request(&req);
}

static pid_t mpi_start(tp_child_fn child, const char *address, long arg)
{
    command c = {.child = -1, .id = next_id, .arg = arg, .has_address = address != NULL};

    for (int i = 0; i < child_count; i++)
        if (child_table[i] == child)
            c.child = i;
    if (c.child < 0)
        fail_msg("the child function is not in the table given to tp_peer_init");
    next_id = (next_id + 1) % MAX_IDS;
    snprintf(c.address, sizeof(c.address), "%s", address ? address : "");
    mpi_io(&c, sizeof(c), 1, TAG_COMMAND, true);
    return c.id;
}

static void mpi_finish(pid_t peer)
{
    int status = -1;

    mpi_io(&status, sizeof(status), 1, TAG_DONE(peer), false);
    assert_int_equal(status, 0);
}

static void *run_command(void *arg)
{
    command *c = arg;
    int status = 0;

    my_id = c->id;
    child_table[c->child](c->has_address ? c->address : NULL, c->arg);
    mpi_io(&status, sizeof(status), 0, TAG_DONE(c->id), true);
    free(c);
    return NULL;
}

/* Rank 1: runs every child rank 0 starts in a thread of its own, until
 * rank 0 says stop. */
static void serve(void)
{
    for (;;) {
        command *c = calloc(1, sizeof(*c));
        pthread_t t;

        if (!c)
            child_fail("calloc");
        mpi_io(c, sizeof(*c), 0, TAG_COMMAND, false);
        if (c->child < 0 || c->child >= child_count) {
            free(c);
            return;
        }
        if (pthread_create(&t, NULL, run_command, c) != 0)
            child_fail("pthread_create");
        pthread_detach(t);
    }
}

bool tp_peer_mpi_begin(pd_transport_token *token)
{
    int provided = 0, rank = 0, size = 0;

    MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (provided < MPI_THREAD_MULTIPLE || size != 2) {
        fprintf(stderr, "transport test under MPI: needs 2 ranks with MPI_THREAD_MULTIPLE (have %d ranks, level %d)\n",
                size, provided);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Bcast(token->bytes, (int)sizeof(token->bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
    mpi_mode = true;
    if (rank == 0)
        return true;
    serve();
    MPI_Finalize();
    return false;
}

void tp_peer_mpi_end(void)
{
    command stop = {.child = -1};

    mpi_io(&stop, sizeof(stop), 1, TAG_COMMAND, true);
    MPI_Finalize();
}

bool tp_peer_mpi(void) { return mpi_mode; }
#else
bool tp_peer_mpi_begin(pd_transport_token *token)
{
    fprintf(stderr, "transport test: this build has no MPI\n");
    exit(1);
}

void tp_peer_mpi_end(void) {}

bool tp_peer_mpi(void) { return false; }
#endif

/* ---- either ---- */

pid_t tp_peer_start(tp_child_fn child, const char *address, long arg, pd_channel *parent_only)
{
#ifdef HAVE_MPI
    if (mpi_mode)
        return mpi_start(child, address, arg);
#endif
    return fork_start(child, address, arg, parent_only);
}

void tp_peer_finish(pid_t peer)
{
#ifdef HAVE_MPI
    if (mpi_mode) {
        mpi_finish(peer);
        return;
    }
#endif
    fork_finish(peer);
}

void tp_peer_send(pid_t peer, const void *buf, size_t len)
{
#ifdef HAVE_MPI
    if (mpi_mode) {
        mpi_io((void *)buf, len, 1, TAG_TO_CHILD(peer), true);
        return;
    }
#endif
    assert_int_equal(io_all(forked_fd(peer), (void *)buf, len, true), 0);
}

void tp_peer_recv(pid_t peer, void *buf, size_t len)
{
#ifdef HAVE_MPI
    if (mpi_mode) {
        mpi_io(buf, len, 1, TAG_TO_PARENT(peer), false);
        return;
    }
#endif
    assert_int_equal(io_all(forked_fd(peer), buf, len, false), 0);
}

void tp_child_send(const void *buf, size_t len)
{
#ifdef HAVE_MPI
    if (mpi_mode) {
        mpi_io((void *)buf, len, 0, TAG_TO_PARENT(my_id), true);
        return;
    }
#endif
    if (io_all(child_fd, (void *)buf, len, true) != 0)
        child_fail("write to the parent");
}

void tp_child_recv(void *buf, size_t len)
{
#ifdef HAVE_MPI
    if (mpi_mode) {
        mpi_io(buf, len, 0, TAG_TO_CHILD(my_id), false);
        return;
    }
#endif
    if (io_all(child_fd, buf, len, false) != 0)
        child_fail("read from the parent");
}
