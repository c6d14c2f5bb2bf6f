/* Channels whose memory is a device's (docs/transport.md, "Device memory"):
 * the choice of path as a pure function; configuration errors; and, for
 * each of the "cpu" device (which runs the same staging code on host
 * memory) and a CUDA device (skipped without one), messages written from
 * device memory by a sender in another process arrive intact in the
 * receiver's device slots over shm and tcp, each end reporting its path.
 * Plain TAP (no cmocka: the GPU machines may lack it). The sender is this
 * program run again ("--sender ..."): exec'd, so that it opens its device
 * in a fresh process. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pipedream.h>

#include "test_tap.h"

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

/* The other process: sends MESSAGES messages from device memory, then
 * waits until the receiver closes `done_fd`. Exit 0, or 1 on an error, 2
 * on a wrong path, 3 when registering device memory is not refused. */
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

    if (!host || pd_transport_token_parse(argv[5], &token) != PD_OK || pd_device_open(devname, &dev) != PD_OK)
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
    if (pd_channel_register(ch, bufs[0], 1) != PD_ENOTSUP)
        goto out;
    rc = 2;
    if (pd_channel_slot_path(ch) != PD_SLOT_PATH_STAGED || strcmp(pd_channel_backend(ch), backend) != 0)
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
    pd_device_close(dev);
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
    s = pd_device_open(devname, &dev);
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
        ok(pd_channel_slot_path(ch) == PD_SLOT_PATH_STAGED && strcmp(pd_channel_backend(ch), backend) == 0,
           "%s: the receiver took the %s path over %s", what, pd_slot_path_name(pd_channel_slot_path(ch)),
           pd_channel_backend(ch));
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
    pd_device_close(dev);
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
    test_bad_config();
    for (int d = 0; d < 2; d++) {
        run_pair("/proc/self/exe", devices[d], "shm");
        run_pair("/proc/self/exe", devices[d], "tcp");
    }
    printf("1..%d\n", tap_cases);
    return tap_failures ? 1 : 0;
}
