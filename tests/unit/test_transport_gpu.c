/* Channels whose memory is a device's (docs/transport.md, "Device memory"):
 * the choice of path as a pure function, the capabilities a device offers
 * and the chain that tries the direct paths in order (every combination of
 * backend, device, dmabuf support and which registrations work);
 * configuration errors; and, for each of the "cpu" device (which runs the
 * same staging code on host memory) and a CUDA device (skipped without
 * one), messages written from device memory by a sender in another process
 * arrive intact in the receiver's device slots over shm and tcp, each end
 * reporting its path. Where an RDMA port is active (the soft-RoCE VM of
 * tests/integration/verbs_vm.sh) the same runs over verbs, staged, and
 * with $PD_TRANSPORT_FORCE_PEERMEM=1 on the peermem path for real
 * (ibv_reg_mr on the device slots and registered device buffers): the
 * messages arrive with no staging copy at either end. Over shm a CUDA
 * device takes the cuda-ipc path (no staging copy at either end); the
 * whole of that path (handshake offer and answer, the sender's writes
 * into the mapped slots and its wait before publishing, the receiver's
 * wait for the unmapping at close) also runs without a GPU on "ipc-fake",
 * a device of this test whose memory is shared memory (memfd) and whose
 * IPC handle names the descriptor (/proc/<pid>/fd/<n>), and on
 * "ipc-fake-noopen", whose open fails (both ends fall back to staging,
 * saying why). Over mpi (under `mpirun -np 2`, rank 0 receiving, rank 1
 * sending: tests/integration/transport_mpi.sh) both ends take the
 * cuda-aware-mpi path where both may (a CUDA device with a CUDA-aware MPI
 * library; the cpu device with $PD_TRANSPORT_FORCE_MPI_DIRECT=1, a real
 * run of that path, MPI sending from and receiving into its memory) and
 * stage otherwise, both saying why: the cpu device unforced, forced at one
 * end only, forced at both, and a CUDA device (skipped without one).
 * Plain TAP (no cmocka: the GPU machines may lack it). The sender is this
 * program run again ("--sender ..."): exec'd, so that it opens its device
 * in a fresh process. */
#include "config.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pipedream.h>
#ifdef HAVE_MPI
#include <mpi.h>
#endif

#include "test_tap.h"
#include "transport/transport_int.h"
#ifdef PD_TP_VERBS
#include "transport/verbs_int.h"
#endif

#define DEPTH 3
#define SLOT_BYTES (((size_t)1 << 20) + 3)
#define MESSAGES 7
#define TIMEOUT_MS 20000
#define TAG_TEST 7 /* under mpirun: the test's own messages (below the transport's tags) */

/* Over mpi: whether this pair must take cuda-aware-mpi (set per case). */
static bool mpi_want_direct;

/* Message i: its size and its bytes. */
static size_t msg_bytes(int i)
{
    static const size_t sizes[MESSAGES] = {1, SLOT_BYTES, 4097, 0, 65536, SLOT_BYTES - 1, 12345};
    return sizes[i];
}

static uint8_t pattern(int i, size_t j) { return (uint8_t)(i * 131 + j * 7 + (j >> 8)); }

/* ---- "ipc-fake": the cpu device's entries over memory that another
 * process can map, with IPC entries that map it ---- */

#define FAKE_BLOCKS 32
#define FAKE_MAGIC 0x46495043u /* "CPIF" */

typedef struct fake_block {
    void *ptr;
    size_t bytes;
    int fd; /* -1: a mapping of another process's block */
} fake_block;

typedef struct fake_handle {
    uint32_t magic;
    int32_t pid, fd;
    uint32_t unused;
    uint64_t bytes;
} fake_handle;

static fake_block fake_blocks[FAKE_BLOCKS];
static int fake_syncs;        /* synchronize calls: the sender's wait before publishing */
static bool fake_open_fails;  /* "ipc-fake-noopen" */

static fake_block *fake_find(const void *ptr)
{
    for (int i = 0; i < FAKE_BLOCKS; i++)
        if (fake_blocks[i].ptr == ptr)
            return &fake_blocks[i];
    return NULL;
}

static pd_status fake_map(int fd, size_t bytes, fake_block **out)
{
    fake_block *b = fake_find(NULL);
    void *p = b ? mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;

    if (p == MAP_FAILED)
        return PD_ERROR(PD_ENOMEM, "ipc-fake: cannot map %zu bytes", bytes);
    *b = (fake_block){p, bytes ? bytes : 1, -1};
    *out = b;
    return PD_OK;
}

static pd_status fake_alloc(pd_device *dev, size_t bytes, void **out)
{
    int fd = memfd_create("ipc-fake", MFD_CLOEXEC);
    fake_block *b;

    if (fd < 0 || ftruncate(fd, (off_t)(bytes ? bytes : 1)) != 0 || fake_map(fd, bytes, &b) != PD_OK) {
        if (fd >= 0)
            close(fd);
        return PD_ERROR(PD_ENOMEM, "ipc-fake: cannot allocate %zu bytes", bytes);
    }
    b->fd = fd;
    *out = b->ptr;
    return PD_OK;
}

static void fake_unmap(void *ptr)
{
    fake_block *b = ptr ? fake_find(ptr) : NULL;

    if (!b)
        return;
    munmap(b->ptr, b->bytes);
    if (b->fd >= 0)
        close(b->fd);
    *b = (fake_block){NULL, 0, -1};
}

static void fake_free(pd_device *dev, void *ptr) { fake_unmap(ptr); }

static pd_status fake_synchronize(pd_device *dev)
{
    fake_syncs++;
    return PD_OK;
}

static pd_status fake_ipc_export(pd_device *dev, void *ptr, uint8_t handle[PD_DEVICE_IPC_HANDLE_BYTES])
{
    fake_block *b = fake_find(ptr);
    fake_handle h = {FAKE_MAGIC, (int32_t)getpid(), b ? b->fd : -1, 0, b ? b->bytes : 0};

    if (!b || b->fd < 0)
        return PD_ERROR(PD_EINVAL, "ipc-fake: %p is no block of this process", ptr);
    memset(handle, 0, PD_DEVICE_IPC_HANDLE_BYTES);
    memcpy(handle, &h, sizeof(h));
    return PD_OK;
}

/* Like CUDA: a handle of this very process does not open. */
static pd_status fake_ipc_open(pd_device *dev, const uint8_t handle[PD_DEVICE_IPC_HANDLE_BYTES], void **ptr)
{
    fake_handle h;
    fake_block *b;
    char path[64];
    int fd;
    pd_status s;

    memcpy(&h, handle, sizeof(h));
    if (fake_open_fails || h.magic != FAKE_MAGIC || h.pid == (int32_t)getpid())
        return PD_ERROR(PD_EDEVICE, "ipc-fake: the handle does not open here");
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return PD_ERROR(PD_EDEVICE, "ipc-fake: cannot open %s", path);
    s = fake_map(fd, (size_t)h.bytes, &b);
    close(fd);
    if (s == PD_OK)
        *ptr = b->ptr;
    return s;
}

static void fake_ipc_close(pd_device *dev, void *ptr) { fake_unmap(ptr); }

/* Opens `name`: a device of the library, or "ipc-fake" / "ipc-fake-noopen"
 * (the cpu device's entries, copies and backend; the memory, its
 * synchronize and IPC above). */
static pd_status open_device(const char *name, pd_device **out)
{
    static pd_device_ops fake_ops;
    static pd_mem_ops fake_mem;
    static pd_device *cpu;
    static pd_device fake;

    if (strncmp(name, "ipc-fake", 8) != 0)
        return pd_device_open(name, out);
    if (!cpu)
        PD_CHECK(pd_device_open("cpu", &cpu));
    fake_mem = *cpu->mem;
    fake_mem.alloc = fake_alloc;
    fake_mem.free = fake_free;
    fake_mem.synchronize = fake_synchronize;
    fake_ops = *cpu->ops;
    fake_ops.ipc_export = fake_ipc_export;
    fake_ops.ipc_open = fake_ipc_open;
    fake_ops.ipc_close = fake_ipc_close;
    fake = *cpu;
    fake.kind = PD_DEVICE_CUDA; /* a device with memory of its own */
    snprintf(fake.name, sizeof(fake.name), "%s", name);
    fake.mem = &fake_mem;
    fake.ops = &fake_ops;
    fake_open_fails = strcmp(name, "ipc-fake-noopen") == 0;
    fake_syncs = 0;
    *out = &fake;
    return PD_OK;
}

static void close_device(pd_device *dev)
{
    if (dev && strncmp(dev->name, "ipc-fake", 8) != 0)
        pd_device_close(dev);
}

static bool ipc_device(const char *devname) { return strcmp(devname, "cpu") != 0 && strcmp(devname, "ipc-fake-noopen") != 0; }

static pd_channel_config channel_config(pd_device *dev, const pd_transport_token *token, const char *backend)
{
    pd_channel_config c = {0};

    c.channel_id = 77;
    c.depth = DEPTH;
    c.slot_bytes = SLOT_BYTES;
    c.memory = PD_TRANSPORT_DEVICE;
    c.device = dev;
    c.token = token;
    c.backends = backend;
    c.timeout_ms = TIMEOUT_MS;
    return c;
}

static bool forced_peermem(void)
{
    const char *force = getenv("PD_TRANSPORT_FORCE_PEERMEM");

    return force && strcmp(force, "1") == 0;
}

/* Whether device memory of `devname` may be registered for sends: where
 * the device offers a verbs path to try (a GPU; the cpu device forced). */
static bool may_register(const char *devname)
{
#ifdef PD_TP_VERBS
    return strcmp(devname, "cpu") != 0 || forced_peermem();
#else
    return false;
#endif
}

/* Paths that copy nothing through pinned host memory. */
static bool direct(pd_slot_path path)
{
    return path == PD_SLOT_PATH_DMABUF || path == PD_SLOT_PATH_PEERMEM || path == PD_SLOT_PATH_CUDA_IPC ||
           path == PD_SLOT_PATH_CUDA_AWARE_MPI;
}

/* Whether `path` is the one a pair of `devname` over `backend` must take:
 * over shm cuda-ipc for a device with working IPC (a GPU, ipc-fake), else
 * staging; over tcp staging; over verbs the forced cpu device takes
 * peermem and a GPU whatever its adapter allows (dmabuf, peermem or
 * staging: only consistency with the copies is checked then); over mpi
 * cuda-aware-mpi where the case wants it, else staging. */
static bool path_ok(const char *devname, const char *backend, pd_slot_path path)
{
    if (strcmp(backend, "mpi") == 0)
        return path == (mpi_want_direct ? PD_SLOT_PATH_CUDA_AWARE_MPI : PD_SLOT_PATH_STAGED);
    if (strcmp(backend, "shm") == 0)
        return path == (ipc_device(devname) ? PD_SLOT_PATH_CUDA_IPC : PD_SLOT_PATH_STAGED);
    if (strcmp(backend, "verbs") != 0)
        return path == PD_SLOT_PATH_STAGED;
    if (strcmp(devname, "cpu") == 0)
        return path == (forced_peermem() ? PD_SLOT_PATH_PEERMEM : PD_SLOT_PATH_STAGED);
    return path == PD_SLOT_PATH_STAGED || direct(path);
}

/* A direct path copies nothing; staging copies every message with bytes. */
static bool copies_ok(pd_slot_path path, uint64_t copies) { return direct(path) ? copies == 0 : copies > 0; }

/* Over mpi: whether the path line's reasons fit the path: none for
 * cuda-aware-mpi, a cuda-aware-mpi reason for staging. */
static bool mpi_why_ok(const pd_channel *ch)
{
    return mpi_want_direct ? !strstr(ch->slot_why, "cuda-aware-mpi") : strstr(ch->slot_why, "cuda-aware-mpi: ") != NULL;
}

/* Waits until the receiver has checked what it received: it closes its
 * end of the pipe `done_fd`, or (done_fd < 0, under mpirun) rank 0 says so. */
static void wait_receiver(int done_fd)
{
    char byte;

    if (done_fd >= 0) {
        while (read(done_fd, &byte, 1) > 0) {
        }
        return;
    }
#ifdef HAVE_MPI
    MPI_Recv(&byte, 1, MPI_CHAR, 0, TAG_TEST, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
#endif
}

/* The sending end: sends MESSAGES messages from device memory, then waits
 * for the receiver (wait_receiver; under mpirun also after a failure).
 * Returns 0, or 1 on an error, 2 on a
 * wrong path, 3 when registering device memory is refused on a direct
 * path or not refused on the staged one, 4 when a direct path still
 * copied (or ipc-fake's cuda-ipc path published without waiting for its
 * copies), 5 when an mpi sender's reasons do not fit its path. */
static int send_all(const char *devname, const char *backend, const char *address, const char *hex, int done_fd)
{
    int rc = 1;
    pd_transport_token token;
    pd_device *dev = NULL;
    pd_channel *ch = NULL;
    void *bufs[MESSAGES] = {0};
    uint8_t *host = malloc(SLOT_BYTES);
    pd_channel_config c;

    if (!host || pd_transport_token_parse(hex, &token) != PD_OK || open_device(devname, &dev) != PD_OK)
        goto out;
    for (int i = 0; i < MESSAGES; i++) {
        for (size_t j = 0; j < msg_bytes(i); j++)
            host[j] = pattern(i, j);
        if (dev->mem->alloc(dev, SLOT_BYTES, &bufs[i]) != PD_OK ||
            dev->mem->copy(dev, bufs[i], host, msg_bytes(i), PD_COPY_HOST_TO_DEVICE) != PD_OK)
            goto out;
    }
    c = channel_config(dev, &token, backend);
    if (pd_channel_connect(&c, address, &ch) != PD_OK || pd_channel_wait_connected(&ch, 1, -1) != PD_OK)
        goto out;
    rc = 3;
    if (!may_register(devname)) {
        if (pd_channel_register(ch, bufs[0], 1) != PD_ENOTSUP)
            goto out;
    } else {
        for (int i = 0; i < MESSAGES; i++)
            if (pd_channel_register(ch, bufs[i], SLOT_BYTES) != PD_OK)
                goto out;
    }
    rc = 2;
    if (!path_ok(devname, backend, pd_channel_slot_path(ch)) || strcmp(pd_channel_backend(ch), backend) != 0)
        goto out;
    rc = 1;
    for (int i = 0; i < MESSAGES; i++) {
        pd_msg_tag tag = {(uint64_t)i, PD_MSG_ACTIVATION, (uint32_t)i + 100};
        uint64_t seq;

        if (i >= DEPTH && pd_channel_send_wait(ch, (uint64_t)(i - DEPTH), -1) != PD_OK)
            goto out;
        if (pd_channel_send(ch, bufs[i], msg_bytes(i), &tag, &seq) != PD_OK || seq != (uint64_t)i)
            goto out;
    }
    if (pd_channel_send_wait(ch, MESSAGES - 1, -1) != PD_OK)
        goto out;
    rc = 4;
    if (!copies_ok(pd_channel_slot_path(ch), ch->staged_copies) ||
        (strncmp(devname, "ipc-fake", 8) == 0 && pd_channel_slot_path(ch) == PD_SLOT_PATH_CUDA_IPC && fake_syncs == 0))
        goto out;
    rc = 5;
    if (strcmp(backend, "mpi") == 0 && !mpi_why_ok(ch))
        goto out;
    rc = 0;
out:
    /* Under mpirun rank 0's word comes whatever happened here. */
    if (rc == 0 || done_fd < 0)
        wait_receiver(done_fd);
    if (rc)
        fprintf(stderr, "sender (%s over %s): exit %d: %s (path %s%s%s)\n", devname, backend, rc, pd_last_error(),
                ch ? pd_slot_path_name(pd_channel_slot_path(ch)) : "none", ch && *ch->slot_why ? ", failed: " : "",
                ch ? ch->slot_why : "");
    pd_channel_close(ch);
    for (int i = 0; i < MESSAGES; i++)
        if (bufs[i])
            dev->mem->free(dev, bufs[i]);
    close_device(dev);
    free(host);
    return rc;
}

/* The other process (argv: --sender device backend address token fd). */
static int sender_main(char **argv) { return send_all(argv[2], argv[3], argv[4], argv[5], atoi(argv[6])); }

/* Receives the sender's messages into slots on `dev` and checks each. */
static bool receive_all(pd_channel *ch, pd_device *dev, const char *what)
{
    uint8_t *host = malloc(SLOT_BYTES);
    bool all = host != NULL;

    for (int i = 0; all && i < MESSAGES; i++) {
        pd_channel_msg msg;
        bool same = true;

        if (pd_channel_recv_wait(ch, &msg, -1) != PD_OK) {
            ok(false, "%s: message %d arrives", what, i);
            all = false;
            break;
        }
        if (msg.bytes == msg_bytes(i) && msg.bytes &&
            dev->mem->copy(dev, host, msg.data, msg.bytes, PD_COPY_DEVICE_TO_HOST) != PD_OK)
            same = false;
        for (size_t j = 0; same && j < msg.bytes && msg.bytes == msg_bytes(i); j++)
            same = host[j] == pattern(i, j);
        same = same && msg.bytes == msg_bytes(i) && msg.seq == (uint64_t)i && msg.tag.minibatch == (uint64_t)i &&
               msg.tag.version == (uint32_t)i + 100;
        ok(same, "%s: message %d (%zu bytes) intact in device memory", what, i, msg_bytes(i));
        all &= same && pd_channel_release(ch, &msg) == PD_OK;
    }
    free(host);
    return all;
}

/* The receiver's path, its copies and (mpi) its reasons, once every
 * message arrived. */
static void check_receiver(pd_channel *ch, const char *devname, const char *backend, const char *what)
{
    ok(path_ok(devname, backend, pd_channel_slot_path(ch)) && strcmp(pd_channel_backend(ch), backend) == 0,
       "%s: the receiver took the %s path over %s", what, pd_slot_path_name(pd_channel_slot_path(ch)),
       pd_channel_backend(ch));
    ok(copies_ok(pd_channel_slot_path(ch), ch->staged_copies), "%s: the receiver made %llu staging copies", what,
       (unsigned long long)ch->staged_copies);
    if (strcmp(backend, "mpi") == 0)
        ok(mpi_why_ok(ch), "%s: the receiver's reasons fit its path ('%s')", what, ch->slot_why);
}

/* Both ends with their memory on device `devname` over `backend`. */
static void run_pair(const char *self, const char *devname, const char *backend)
{
    char what[64], hex[33], fdarg[16];
    pd_transport_token token;
    pd_device *dev = NULL;
    pd_channel *ch = NULL;
    pd_channel_config c;
    int done[2] = {-1, -1}, status = -1;
    pid_t pid = -1;
    pd_status s;

    snprintf(what, sizeof(what), "%s slots over %s", devname, backend);
    s = open_device(devname, &dev);
    if (s != PD_OK) {
        skip("%s: no such device here: %s", what, pd_last_error());
        return;
    }
    if (pd_transport_token_generate(&token) != PD_OK || pipe(done) != 0) {
        ok(false, "%s: token and pipe", what);
        goto out;
    }
    pd_transport_token_format(&token, hex);
    c = channel_config(dev, &token, backend);
    if (pd_channel_listen(&c, &ch) != PD_OK) {
        ok(false, "%s: listen", what);
        goto out;
    }
    snprintf(fdarg, sizeof(fdarg), "%d", done[0]);
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        close(done[1]);
        execl(self, self, "--sender", devname, backend, pd_channel_address(ch), hex, fdarg, (char *)NULL);
        _exit(127);
    }
    close(done[0]);
    done[0] = -1;
    if (pid < 0) {
        ok(false, "%s: fork", what);
        goto out;
    }
    if (receive_all(ch, dev, what)) {
        check_receiver(ch, devname, backend, what);
        if (strcmp(backend, "shm") == 0 && strcmp(devname, "cpu") != 0)
            ok(ipc_device(devname) ? !strstr(ch->slot_why, "cuda-ipc")
                                   : strstr(ch->slot_why, "cuda-ipc: the sender did not map the slots: it cannot "
                                                          "open the handle") != NULL,
               "%s: the receiver says why cuda-ipc was not taken, if it was not ('%s')", what, ch->slot_why);
    }
out:
    if (done[1] >= 0)
        close(done[1]);
    if (done[0] >= 0)
        close(done[0]);
    if (pid > 0) {
        waitpid(pid, &status, 0);
        ok(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: the sender sent from device memory (status %d)",
           what, status);
    }
    pd_channel_close(ch);
    close_device(dev);
}

/* Over verbs, where an RDMA port is active: the cpu device staged, a GPU
 * (skipped without one) on whatever path its adapter allows, then the cpu
 * device on the peermem path for real (forced: ibv_reg_mr on its memory). */
static void run_verbs_pairs(void)
{
#ifdef PD_TP_VERBS
    char ip[64];

    if (pd_vb_find_address(NULL, ip, sizeof(ip)) != PD_OK) {
        printf("# verbs: no active RDMA port here; the verbs pairs are left out\n");
        return;
    }
    unsetenv("PD_TRANSPORT_FORCE_PEERMEM");
    run_pair("/proc/self/exe", "cpu", "verbs");
    run_pair("/proc/self/exe", "cuda", "verbs");
    setenv("PD_TRANSPORT_FORCE_PEERMEM", "1", 1);
    run_pair("/proc/self/exe", "cpu", "verbs");
    unsetenv("PD_TRANSPORT_FORCE_PEERMEM");
#else
    printf("# verbs: not built; the verbs pairs are left out\n");
#endif
}

static void test_path_choice(void)
{
    const unsigned all = PD_SLOT_CAN_CUDA_IPC | PD_SLOT_CAN_DMABUF | PD_SLOT_CAN_PEERMEM;
    static const char *const backends[] = {"shm", "verbs", "tcp", "mpi"};
    bool host = true;

    for (int i = 0; i < 4; i++)
        host &= pd_transport_slot_path(backends[i], PD_TRANSPORT_HOST, all) == PD_SLOT_PATH_HOST;
    ok(host, "host memory takes the host path on every backend");
    ok(pd_transport_slot_path("shm", PD_TRANSPORT_DEVICE, all) == PD_SLOT_PATH_CUDA_IPC &&
           pd_transport_slot_path("shm", PD_TRANSPORT_DEVICE, PD_SLOT_CAN_DMABUF | PD_SLOT_CAN_PEERMEM) ==
               PD_SLOT_PATH_STAGED,
       "shm: CUDA IPC when offered, else staging");
    ok(pd_transport_slot_path("verbs", PD_TRANSPORT_DEVICE, all) == PD_SLOT_PATH_DMABUF &&
           pd_transport_slot_path("verbs", PD_TRANSPORT_DEVICE, PD_SLOT_CAN_PEERMEM | PD_SLOT_CAN_CUDA_IPC) ==
               PD_SLOT_PATH_PEERMEM &&
           pd_transport_slot_path("verbs", PD_TRANSPORT_DEVICE, PD_SLOT_CAN_CUDA_IPC) == PD_SLOT_PATH_STAGED,
       "verbs: dmabuf, then peermem, then staging");
    ok(pd_transport_slot_path("tcp", PD_TRANSPORT_DEVICE, all) == PD_SLOT_PATH_STAGED &&
           pd_transport_slot_path("mpi", PD_TRANSPORT_DEVICE, all) == PD_SLOT_PATH_STAGED &&
           pd_transport_slot_path(NULL, PD_TRANSPORT_DEVICE, all) == PD_SLOT_PATH_STAGED,
       "tcp, mpi and no backend yet: staging");
    ok(pd_transport_slot_path("mpi", PD_TRANSPORT_DEVICE, PD_SLOT_CAN_CUDA_AWARE_MPI) ==
               PD_SLOT_PATH_CUDA_AWARE_MPI &&
           pd_transport_slot_path("mpi", PD_TRANSPORT_DEVICE, all | PD_SLOT_CAN_CUDA_AWARE_MPI) ==
               PD_SLOT_PATH_CUDA_AWARE_MPI &&
           pd_transport_slot_path("mpi", PD_TRANSPORT_HOST, PD_SLOT_CAN_CUDA_AWARE_MPI) == PD_SLOT_PATH_HOST &&
           pd_transport_slot_path("tcp", PD_TRANSPORT_DEVICE, PD_SLOT_CAN_CUDA_AWARE_MPI) == PD_SLOT_PATH_STAGED &&
           pd_transport_slot_path("shm", PD_TRANSPORT_DEVICE, PD_SLOT_CAN_CUDA_AWARE_MPI) == PD_SLOT_PATH_STAGED &&
           pd_transport_slot_path("verbs", PD_TRANSPORT_DEVICE, PD_SLOT_CAN_CUDA_AWARE_MPI) == PD_SLOT_PATH_STAGED,
       "mpi: cuda-aware-mpi when both ends agreed, only over mpi and only for device memory");
    ok(strcmp(pd_slot_path_name(PD_SLOT_PATH_HOST), "host") == 0 &&
           strcmp(pd_slot_path_name(PD_SLOT_PATH_STAGED), "staged") == 0 &&
           strcmp(pd_slot_path_name(PD_SLOT_PATH_CUDA_IPC), "cuda-ipc") == 0 &&
           strcmp(pd_slot_path_name(PD_SLOT_PATH_DMABUF), "dmabuf") == 0 &&
           strcmp(pd_slot_path_name(PD_SLOT_PATH_PEERMEM), "peermem") == 0 &&
           strcmp(pd_slot_path_name(PD_SLOT_PATH_CUDA_AWARE_MPI), "cuda-aware-mpi") == 0 &&
           strcmp(pd_slot_path_name((pd_slot_path)99), "?") == 0,
       "path names");
}

static pd_status fake_export(pd_device *dev, const void *ptr, size_t bytes, int *fd, uint64_t *offset)
{
    return PD_ERROR(PD_ENOTSUP, "not a real device");
}

/* What each kind of device offers: a GPU (any device with memory of its
 * own) the verbs paths, dmabuf only where it exports and the build
 * registers dma_buf, CUDA IPC where it has all three ipc entries; the cpu
 * device nothing unless forced (peermem). */
static void test_slot_caps(void)
{
    static const pd_device_ops export_ops = {.export_dmabuf = fake_export}, plain_ops = {0};
    static const pd_device_ops ipc_ops = {.ipc_export = fake_ipc_export, .ipc_open = fake_ipc_open,
                                          .ipc_close = fake_ipc_close};
    static const pd_device_ops half_ipc_ops = {.ipc_export = fake_ipc_export, .ipc_open = fake_ipc_open};
    pd_device gpu = {.kind = PD_DEVICE_CUDA, .ops = &export_ops}, old_gpu = {.kind = PD_DEVICE_CUDA, .ops = &plain_ops};
    pd_device cpu = {.kind = PD_DEVICE_CPU, .ops = &plain_ops}, ipc_gpu = {.kind = PD_DEVICE_CUDA, .ops = &ipc_ops};
    pd_device half_gpu = {.kind = PD_DEVICE_CUDA, .ops = &half_ipc_ops}, ipc_cpu = {.kind = PD_DEVICE_CPU, .ops = &ipc_ops};

    ok(pd_tp_slot_caps(&gpu, true, false) == (PD_SLOT_CAN_DMABUF | PD_SLOT_CAN_PEERMEM) &&
           pd_tp_slot_caps(&gpu, false, false) == PD_SLOT_CAN_PEERMEM &&
           pd_tp_slot_caps(&old_gpu, true, false) == PD_SLOT_CAN_PEERMEM,
       "a GPU offers dmabuf (where it exports and the build has ibv_reg_dmabuf_mr) and peermem");
    ok(pd_tp_slot_caps(&ipc_gpu, false, false) == (PD_SLOT_CAN_CUDA_IPC | PD_SLOT_CAN_PEERMEM) &&
           pd_tp_slot_caps(&half_gpu, false, false) == PD_SLOT_CAN_PEERMEM &&
           pd_tp_slot_caps(&ipc_cpu, true, false) == 0,
       "CUDA IPC is offered by a GPU with all three ipc entries only");
    ok(pd_tp_slot_caps(&cpu, true, false) == 0 && pd_tp_slot_caps(&cpu, false, false) == 0 &&
           pd_tp_slot_caps(NULL, true, true) == 0,
       "the cpu device offers nothing (it stages)");
    ok(pd_tp_slot_caps(&cpu, true, true) == PD_SLOT_CAN_PEERMEM,
       "the cpu device offers peermem when forced");
}

/* One end's facts for the mpi path: its device, its memory, what its MPI
 * library says (-1 not built, 0 not at run time, 1 CUDA-aware), forced. */
typedef struct mpi_end {
    const pd_device *dev;
    pd_transport_memory memory;
    int cuda_aware;
    bool force;
} mpi_end;

/* The answer docs/transport.md gives for one end. */
static pd_tp_mpi_direct mpi_expected(const mpi_end *e)
{
    if (e->memory == PD_TRANSPORT_HOST)
        return PD_TP_MPI_HOST_MEMORY;
    if (e->dev->kind == PD_DEVICE_CPU)
        return e->force ? PD_TP_MPI_DIRECT_OK : PD_TP_MPI_CPU_DEVICE;
    return e->cuda_aware < 0 ? PD_TP_MPI_NOT_BUILT : e->cuda_aware ? PD_TP_MPI_DIRECT_OK : PD_TP_MPI_NOT_AT_RUN_TIME;
}

/* Whether cuda-aware-mpi may be taken: for every end (cpu device or GPU,
 * host or device memory, MPI not built CUDA-aware / not at run time /
 * CUDA-aware, forced or not) the check against the rules; and for every
 * pair of such ends the decision each end makes from its own check and
 * the one its peer sent (pd_tp_slots_mpi_decide, then the receiver's
 * path from its capabilities as pd_tp_slots_choose takes it): both ends
 * on the same path, direct only where both may, and a staged device end
 * saying why (its own reason first, else the peer's). */
static void test_mpi_direct(void)
{
    static const pd_device_ops plain_ops = {0};
    static const pd_device cpu = {.kind = PD_DEVICE_CPU, .ops = &plain_ops};
    static const pd_device gpu = {.kind = PD_DEVICE_CUDA, .ops = &plain_ops};
    mpi_end ends[24];
    int n = 0, wrong = 0, pairs = 0, bad_pairs = 0;

    for (int d = 0; d < 2; d++)
        for (int m = 0; m < 2; m++)
            for (int a = -1; a <= 1; a++)
                for (int f = 0; f < 2; f++)
                    ends[n++] = (mpi_end){d ? &gpu : &cpu, m ? PD_TRANSPORT_DEVICE : PD_TRANSPORT_HOST, a, f == 1};
    for (int i = 0; i < n; i++) {
        pd_tp_mpi_direct got = pd_tp_mpi_direct_check(ends[i].dev, ends[i].memory, ends[i].cuda_aware, ends[i].force);
        if (got != mpi_expected(&ends[i])) {
            wrong++;
            printf("# %s, %s memory, cuda_aware %d, force %d: %s (want %s)\n",
                   ends[i].dev->kind == PD_DEVICE_CPU ? "cpu" : "gpu",
                   ends[i].memory == PD_TRANSPORT_HOST ? "host" : "device", ends[i].cuda_aware, ends[i].force,
                   pd_tp_mpi_direct_why(got), pd_tp_mpi_direct_why(mpi_expected(&ends[i])));
        }
    }
    ok(wrong == 0 && pd_tp_mpi_direct_check(NULL, PD_TRANSPORT_HOST, 1, true) == PD_TP_MPI_HOST_MEMORY,
       "mpi: an end may take cuda-aware-mpi with a GPU and a CUDA-aware MPI, or the cpu device forced (%d of %d "
       "wrong)", wrong, n);
    for (int r = 0; r < n; r++)
        for (int t = 0; t < n; t++) {
            pd_channel rx = {.role = PD_TP_RECEIVER}, tx = {.role = PD_TP_SENDER};
            pd_tp_mpi_direct rm = mpi_expected(&ends[r]), tm = mpi_expected(&ends[t]);
            bool both = rm == PD_TP_MPI_DIRECT_OK && tm == PD_TP_MPI_DIRECT_OK, good;
            pd_slot_path rpath, tpath;

            rx.config.memory = ends[r].memory;
            tx.config.memory = ends[t].memory;
            rx.slot_path = tx.slot_path = PD_SLOT_PATH_STAGED;
            pd_tp_slots_mpi_decide(&rx, rm, tm);
            pd_tp_slots_mpi_decide(&tx, tm, rm);
            rpath = ends[r].memory == PD_TRANSPORT_HOST ? PD_SLOT_PATH_HOST
                                                        : pd_transport_slot_path("mpi", rx.config.memory, rx.slot_caps);
            tpath = tx.slot_path;
            good = (both ? rpath == PD_SLOT_PATH_CUDA_AWARE_MPI && tpath == PD_SLOT_PATH_CUDA_AWARE_MPI
                         : rpath != PD_SLOT_PATH_CUDA_AWARE_MPI && tpath != PD_SLOT_PATH_CUDA_AWARE_MPI);
            /* A staged device end names a reason: its own, else its peer's. */
            if (!both && ends[r].memory == PD_TRANSPORT_DEVICE)
                good &= strstr(rx.slot_why, rm != PD_TP_MPI_DIRECT_OK ? pd_tp_mpi_direct_why(rm)
                                                                      : pd_tp_mpi_direct_why(tm)) != NULL &&
                        (rm != PD_TP_MPI_DIRECT_OK || strstr(rx.slot_why, "the sender: "));
            if (!both && ends[t].memory == PD_TRANSPORT_DEVICE)
                good &= strstr(tx.slot_why, tm != PD_TP_MPI_DIRECT_OK ? pd_tp_mpi_direct_why(tm)
                                                                      : pd_tp_mpi_direct_why(rm)) != NULL &&
                        (tm != PD_TP_MPI_DIRECT_OK || strstr(tx.slot_why, "the receiver: "));
            good &= ends[r].memory == PD_TRANSPORT_DEVICE || !*rx.slot_why;
            good &= ends[t].memory == PD_TRANSPORT_DEVICE || !*tx.slot_why;
            pairs++;
            if (!good) {
                bad_pairs++;
                printf("# receiver %d (%s), sender %d (%s): paths %s / %s, why '%s' / '%s'\n", r,
                       pd_tp_mpi_direct_why(rm), t, pd_tp_mpi_direct_why(tm), pd_slot_path_name(rpath),
                       pd_slot_path_name(tpath), rx.slot_why, tx.slot_why);
            }
        }
    ok(bad_pairs == 0,
       "mpi: both ends take cuda-aware-mpi only where both may, else both stage saying why (%d of %d pairs wrong)",
       bad_pairs, pairs);
}

/* A stand-in for the registrations and the IPC mapping: which paths
 * work, which were tried. */
typedef struct fake_reg {
    bool dmabuf_works, peermem_works, ipc_works;
    unsigned tried;
} fake_reg;

static pd_status fake_try(void *ctx, pd_slot_path path)
{
    fake_reg *f = ctx;
    bool works = path == PD_SLOT_PATH_DMABUF    ? f->dmabuf_works
                 : path == PD_SLOT_PATH_PEERMEM ? f->peermem_works
                                                : path == PD_SLOT_PATH_CUDA_IPC && f->ipc_works;

    f->tried |= 1u << path;
    return works ? PD_OK : PD_ERROR(PD_ECOMM, "%s refused", pd_slot_path_name(path));
}

/* The chain for every backend, device (cpu, GPU without and with the ipc
 * entries), dmabuf in the build or not, and each of dmabuf, peermem and
 * the IPC mapping working or not: the path taken and the paths tried,
 * against what docs/transport.md says. */
static void test_chain(void)
{
    static const char *const backends[] = {"verbs", "shm", "tcp", "mpi"};
    static const pd_device_ops export_ops = {.export_dmabuf = fake_export}, plain_ops = {0};
    static const pd_device_ops ipc_ops = {.export_dmabuf = fake_export, .ipc_export = fake_ipc_export,
                                          .ipc_open = fake_ipc_open, .ipc_close = fake_ipc_close};
    pd_device gpu = {.kind = PD_DEVICE_CUDA, .ops = &export_ops}, cpu = {.kind = PD_DEVICE_CPU, .ops = &plain_ops};
    pd_device ipc_gpu = {.kind = PD_DEVICE_CUDA, .ops = &ipc_ops};
    pd_device *const devices[] = {&cpu, &gpu, &ipc_gpu};
    int cases = 0, wrong = 0;

    for (int b = 0; b < 4; b++)
        for (int d = 0; d < 3; d++)
            for (int m = 0; m < 2; m++)
                for (int w = 0; w < 8; w++) {
                    bool verbs = b == 0, shm = b == 1, is_gpu = d >= 1, has_ipc = d == 2, have_mr = m == 1;
                    fake_reg f = {.dmabuf_works = w & 1, .peermem_works = (w & 2) != 0, .ipc_works = (w & 4) != 0};
                    unsigned caps = pd_tp_slot_caps(devices[d], have_mr, false);
                    char why[2 * PD_TP_REASON_BYTES] = "";
                    pd_slot_path got = pd_tp_slot_walk(7, backends[b], &caps, fake_try, &f, why, sizeof(why));
                    pd_slot_path want = PD_SLOT_PATH_STAGED;
                    unsigned want_tried = 0;

                    if (shm && has_ipc) {
                        want_tried = 1u << PD_SLOT_PATH_CUDA_IPC;
                        if (f.ipc_works)
                            want = PD_SLOT_PATH_CUDA_IPC;
                    }
                    if (verbs && is_gpu) {
                        if (have_mr)
                            want_tried |= 1u << PD_SLOT_PATH_DMABUF;
                        if (have_mr && f.dmabuf_works)
                            want = PD_SLOT_PATH_DMABUF;
                        else {
                            want_tried |= 1u << PD_SLOT_PATH_PEERMEM;
                            if (f.peermem_works)
                                want = PD_SLOT_PATH_PEERMEM;
                        }
                    }
                    cases++;
                    if (got != want || f.tried != want_tried ||
                        (want == PD_SLOT_PATH_STAGED && verbs && is_gpu && !strstr(why, "peermem: peermem refused")) ||
                        (have_mr && verbs && is_gpu && !f.dmabuf_works && !strstr(why, "dmabuf: dmabuf refused")) ||
                        (shm && has_ipc && !f.ipc_works && !strstr(why, "cuda-ipc: cuda-ipc refused")) ||
                        (!verbs && !(shm && has_ipc) && *why)) {
                        wrong++;
                        printf("# %s, %s, dmabuf MR %s, dmabuf %s, peermem %s, ipc %s: path %s (want %s), tried 0x%x "
                               "(want 0x%x), why '%s'\n",
                               backends[b], has_ipc ? "gpu with ipc" : is_gpu ? "gpu" : "cpu",
                               have_mr ? "built" : "absent", f.dmabuf_works ? "works" : "fails",
                               f.peermem_works ? "works" : "fails", f.ipc_works ? "works" : "fails",
                               pd_slot_path_name(got), pd_slot_path_name(want), f.tried, want_tried, why);
                    }
                }
    ok(wrong == 0,
       "the chain takes the first working path: shm cuda-ipc, verbs dmabuf then peermem, else staging (%d of %d "
       "cases wrong)",
       wrong, cases);
}

/* The device layer's dma_buf export: the cpu device has none; a GPU
 * (skipped without one) gives a descriptor for the page-rounded range
 * and the offset of the pointer in it, or says why it cannot. */
static void test_export_dmabuf(void)
{
    pd_device *dev = NULL;
    void *p = NULL;
    long page = sysconf(_SC_PAGESIZE);
    uint64_t offset = 1;
    int fd = -1;
    pd_status s;

    if (pd_device_open("cpu", &dev) == PD_OK)
        ok(dev->ops->export_dmabuf == NULL, "the cpu device exports no dma_buf (it stages)");
    pd_device_close(dev);
    dev = NULL;
    if (pd_device_open("cuda", &dev) != PD_OK) {
        skip("cuda: export_dmabuf: no such device here: %s", pd_last_error());
        return;
    }
    if (!dev->ops->export_dmabuf || dev->mem->alloc(dev, 4 * (size_t)page, &p) != PD_OK) {
        ok(false, "cuda: the device has export_dmabuf and 4 pages of memory");
        goto out;
    }
    /* A range from inside the first page to inside the third. */
    s = dev->ops->export_dmabuf(dev, (uint8_t *)p + 100, 2 * (size_t)page, &fd, &offset);
    if (s == PD_ENOTSUP) {
        skip("cuda: export_dmabuf: %s", pd_last_error());
    } else {
        uintptr_t start = ((uintptr_t)p + 100) & ~(uintptr_t)(page - 1);
        off_t size = fd >= 0 ? lseek(fd, 0, SEEK_END) : -1;

        ok(s == PD_OK && fd >= 0 && offset == (uintptr_t)p + 100 - start,
           "cuda: export_dmabuf gives a descriptor (%d) and the offset in the rounded range (%llu)", fd,
           (unsigned long long)offset);
        printf("# cuda: the dma_buf is %lld bytes (the range rounded to pages: %lld)\n", (long long)size,
               (long long)(((uintptr_t)p + 100 + 2 * (size_t)page + (size_t)page - 1) / (size_t)page * (size_t)page -
                           start));
    }
    if (fd >= 0)
        close(fd);
out:
    if (p)
        dev->mem->free(dev, p);
    pd_device_close(dev);
}

static void test_bad_config(void)
{
    pd_transport_token token;
    pd_channel_config c;
    pd_channel *ch = NULL;

    pd_transport_token_generate(&token);
    c = channel_config(NULL, &token, "tcp");
    ok(pd_channel_listen(&c, &ch) == PD_EINVAL && strstr(pd_last_error(), "config.device"),
       "device memory without a device is refused");
    c.memory = (pd_transport_memory)7;
    ok(pd_channel_listen(&c, &ch) == PD_EINVAL && strstr(pd_last_error(), "memory 7"),
       "an unknown memory kind is refused");
    c.memory = PD_TRANSPORT_HOST;
    c.slot_bytes = 64;
    ok(pd_channel_listen(&c, &ch) == PD_OK && pd_channel_slot_path(ch) == PD_SLOT_PATH_HOST,
       "a host channel reports the host path");
    pd_channel_close(ch);
}

#ifdef HAVE_MPI
/* Under mpirun: whether both ranks say yes. */
static bool both_ranks(bool mine)
{
    int in = mine, all = 0;

    MPI_Allreduce(&in, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all != 0;
}

/* One mpi pair with device memory: rank 0 receives (its end forced to
 * the direct path on the cpu device if force_recv), rank 1 sends
 * (force_send); both must take cuda-aware-mpi where both may, else stage. */
static void run_mpi_pair(int rank, const char *devname, bool force_recv, bool force_send)
{
    char what[96], msg[PD_TP_ADDRESS_BYTES + 40];
    pd_transport_token token;
    pd_device *dev = NULL;
    pd_channel *ch = NULL;
    pd_channel_config c;
    bool opened, listening;
    int rc = 1;

    snprintf(what, sizeof(what), "%s slots over mpi, forced at the receiver %s, at the sender %s", devname,
             force_recv ? "yes" : "no", force_send ? "yes" : "no");
    if ((rank == 0 ? force_recv : force_send))
        setenv("PD_TRANSPORT_FORCE_MPI_DIRECT", "1", 1);
    else
        unsetenv("PD_TRANSPORT_FORCE_MPI_DIRECT");
    opened = open_device(devname, &dev) == PD_OK;
    if (!both_ranks(opened)) {
        if (rank == 0)
            skip("%s: no such device at both ranks%s%s", what, opened ? "" : ": ", opened ? "" : pd_last_error());
        goto out;
    }
    /* Both ranks run one library: CUDA-aware for the GPU or not. */
    mpi_want_direct = strcmp(devname, "cpu") == 0 ? force_recv && force_send : pd_tp_mpi_cuda_aware() == 1;
    if (rank == 1) {
        MPI_Recv(msg, (int)sizeof(msg), MPI_CHAR, 0, TAG_TEST, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        msg[sizeof(msg) - 1] = 0;
        if (*msg) {
            rc = send_all(devname, "mpi", msg + 33, msg, -1);
        } else {
            wait_receiver(-1);
            rc = 1;
        }
        MPI_Send(&rc, 1, MPI_INT, 0, TAG_TEST, MPI_COMM_WORLD);
        goto out;
    }
    memset(msg, 0, sizeof(msg));
    listening = pd_transport_token_generate(&token) == PD_OK;
    c = channel_config(dev, &token, "mpi");
    listening = listening && pd_channel_listen(&c, &ch) == PD_OK;
    if (listening) {
        pd_transport_token_format(&token, msg);
        snprintf(msg + 33, sizeof(msg) - 33, "%s", pd_channel_address(ch));
    }
    ok(listening, "%s: listen (%s)", what, listening ? pd_channel_address(ch) : pd_last_error());
    MPI_Send(msg, (int)sizeof(msg), MPI_CHAR, 1, TAG_TEST, MPI_COMM_WORLD);
    if (listening && receive_all(ch, dev, what))
        check_receiver(ch, devname, "mpi", what);
    printf("# %s: receiver's path %s%s%s\n", what, ch ? pd_slot_path_name(pd_channel_slot_path(ch)) : "none",
           ch && *ch->slot_why ? ", failed: " : "", ch ? ch->slot_why : "");
    MPI_Send("", 1, MPI_CHAR, 1, TAG_TEST, MPI_COMM_WORLD);
    MPI_Recv(&rc, 1, MPI_INT, 1, TAG_TEST, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    ok(rc == 0, "%s: the sender sent from device memory on the same path (status %d)", what, rc);
out:
    pd_channel_close(ch);
    close_device(dev);
    unsetenv("PD_TRANSPORT_FORCE_MPI_DIRECT");
}

/* Under mpirun -np 2: the mpi pairs, rank 0 printing the TAP. */
static int mpi_main(void)
{
    int rank = 0, size = 0;

    MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        fprintf(stderr, "test_transport_gpu under MPI: needs 2 ranks (have %d)\n", size);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0)
        printf("# mpi: this build's MPI says %d of device pointers (1 CUDA-aware, 0 not at run time, -1 not "
               "built)\n", pd_tp_mpi_cuda_aware());
    run_mpi_pair(rank, "cpu", false, false);
    run_mpi_pair(rank, "cpu", true, true);
    run_mpi_pair(rank, "cpu", true, false);
    run_mpi_pair(rank, "cpu", false, true);
    run_mpi_pair(rank, "cuda", false, false);
    MPI_Finalize();
    if (rank != 0)
        return 0;
    printf("1..%d\n", tap_cases);
    return tap_failures ? 1 : 0;
}
#endif

int main(int argc, char **argv)
{
    static const char *const devices[] = {"cpu", "cuda"};

    if (argc == 7 && strcmp(argv[1], "--sender") == 0)
        return sender_main(argv);
#ifdef HAVE_MPI
    if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK"))
        return mpi_main();
#endif
    test_path_choice();
    test_slot_caps();
    test_mpi_direct();
    test_chain();
    test_export_dmabuf();
    test_bad_config();
    for (int d = 0; d < 2; d++) {
        run_pair("/proc/self/exe", devices[d], "shm");
        run_pair("/proc/self/exe", devices[d], "tcp");
    }
    run_pair("/proc/self/exe", "ipc-fake", "shm");
    run_pair("/proc/self/exe", "ipc-fake-noopen", "shm");
    run_verbs_pairs();
    printf("1..%d\n", tap_cases);
    return tap_failures ? 1 : 0;
}
