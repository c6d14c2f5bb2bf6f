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
 * saying why).
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

#include "test_tap.h"
#include "transport/transport_int.h"
#ifdef PD_TP_VERBS
#include "transport/verbs_int.h"
#endif

#define DEPTH 3
#define SLOT_BYTES (((size_t)1 << 20) + 3)
#define MESSAGES 7
#define TIMEOUT_MS 20000

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
    return path == PD_SLOT_PATH_DMABUF || path == PD_SLOT_PATH_PEERMEM || path == PD_SLOT_PATH_CUDA_IPC;
}

/* Whether `path` is the one a pair of `devname` over `backend` must take:
 * over shm cuda-ipc for a device with working IPC (a GPU, ipc-fake), else
 * staging; over tcp staging; over verbs the forced cpu device takes
 * peermem and a GPU whatever its adapter allows (dmabuf, peermem or
 * staging: only consistency with the copies is checked then). */
static bool path_ok(const char *devname, const char *backend, pd_slot_path path)
{
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

/* The other process: sends MESSAGES messages from device memory, then
 * waits until the receiver closes `done_fd`. Exit 0, or 1 on an error, 2
 * on a wrong path, 3 when registering device memory is refused on a
 * direct path or not refused on the staged one, 4 when a direct path
 * still copied (or ipc-fake's cuda-ipc path published without waiting
 * for its copies). */
static int sender_main(char **argv)
{
    const char *devname = argv[2], *backend = argv[3], *address = argv[4];
    int done_fd = atoi(argv[6]), rc = 1;
    pd_transport_token token;
    pd_device *dev = NULL;
    pd_channel *ch = NULL;
    void *bufs[MESSAGES] = {0};
    uint8_t *host = malloc(SLOT_BYTES);
    pd_channel_config c;
    char byte;

    if (!host || pd_transport_token_parse(argv[5], &token) != PD_OK || open_device(devname, &dev) != PD_OK)
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
    while (read(done_fd, &byte, 1) > 0) {
    }
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "sender (%s over %s): exit %d: %s\n", devname, backend, rc, pd_last_error());
    pd_channel_close(ch);
    for (int i = 0; i < MESSAGES; i++)
        if (bufs[i])
            dev->mem->free(dev, bufs[i]);
    close_device(dev);
    free(host);
    return rc;
}

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
        ok(path_ok(devname, backend, pd_channel_slot_path(ch)) && strcmp(pd_channel_backend(ch), backend) == 0,
           "%s: the receiver took the %s path over %s", what, pd_slot_path_name(pd_channel_slot_path(ch)),
           pd_channel_backend(ch));
        ok(copies_ok(pd_channel_slot_path(ch), ch->staged_copies), "%s: the receiver made %llu staging copies",
           what, (unsigned long long)ch->staged_copies);
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
    ok(strcmp(pd_slot_path_name(PD_SLOT_PATH_HOST), "host") == 0 &&
           strcmp(pd_slot_path_name(PD_SLOT_PATH_STAGED), "staged") == 0 &&
           strcmp(pd_slot_path_name(PD_SLOT_PATH_CUDA_IPC), "cuda-ipc") == 0 &&
           strcmp(pd_slot_path_name(PD_SLOT_PATH_DMABUF), "dmabuf") == 0 &&
           strcmp(pd_slot_path_name(PD_SLOT_PATH_PEERMEM), "peermem") == 0 &&
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

int main(int argc, char **argv)
{
    static const char *const devices[] = {"cpu", "cuda"};

    if (argc == 7 && strcmp(argv[1], "--sender") == 0)
        return sender_main(argv);
    test_path_choice();
    test_slot_caps();
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
