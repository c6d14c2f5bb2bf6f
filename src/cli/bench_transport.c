/* `pipedream bench transport`: bandwidth and latency of a channel between
 * two ranks of this node (a forked pair), or between the two ranks of an
 * MPI job (--backend mpi, or any backend when mpirun started this
 * process), like perftest's ib_write_bw and ib_send_lat, one line per
 * message size; each size is measured against its reference in the same
 * run and the ratio printed: shm against a single-thread memcpy, tcp
 * against a plain pair of loopback sockets, and between MPI ranks against
 * plain MPI_Send/MPI_Recv. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
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

#include <pipedream/transport.h>

#include "cli/pd_cli.h"
#include "cli/transport_measure.h"

#define MAX_SIZES 16
#define WATCHDOG_S 600

typedef struct bench_args {
    const char *backend;
    int64_t sizes[MAX_SIZES];
    int nsizes;
    int64_t depth, iters, total_mb;
    int64_t lat_iters; /* ping-pongs per size, -1: as many as messages, at most 2000 */
} bench_args;

static const int64_t default_sizes[] = {64, 4096, 65536, 1 << 20, 4 << 20};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Messages per size: about total_mb MiB, at least 200, at most 20000. */
static int64_t iterations(const bench_args *a, int64_t size)
{
    int64_t n = a->iters > 0 ? a->iters : (a->total_mb << 20) / size;
    return a->iters > 0 ? n : n < 200 ? 200 : n > 20000 ? 20000 : n;
}

/* Ping-pongs per size: --latency-iters, else as many as messages, at most 2000. */
static int64_t latency_iterations(const bench_args *a, int64_t iters)
{
    return a->lat_iters >= 0 ? a->lat_iters : iters < 2000 ? iters : 2000;
}

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: pipedream bench transport --backend shm|tcp|verbs [--size BYTES] [--depth D]\n"
            "       mpirun -np 2 pipedream bench transport --backend mpi|verbs|tcp|shm [options]\n"
            "                                 [--iters N] [--total-mb M] [--latency-iters N]\n"
            "\n"
            "Measures a channel between two ranks of this node (a forked pair): the\n"
            "bandwidth of a stream of messages (like ib_write_bw) and the half round trip\n"
            "of a ping-pong (like ib_send_lat), one line per message size. The same run\n"
            "measures the reference at each size and prints the ratio: shm against a\n"
            "single-thread memcpy, tcp against a plain pair of loopback sockets.\n"
            "Started by mpirun (or mpiexec) as two ranks, on one node or two, it\n"
            "measures the channel between those ranks, over any backend (mpi needs\n"
            "them), against the same stream of plain MPI_Send/MPI_Recv between the\n"
            "same ranks: e.g. verbs between two nodes against the MPI library on the\n"
            "same fabric.\n"
            "\n"
            "Options:\n"
            "  --backend B     shm, tcp, verbs or mpi (required; verbs in a forked pair\n"
            "                  has no in-process reference: compare with perftest's\n"
            "                  ib_write_bw)\n"
            "  --size BYTES    one message size, suffix K or M allowed; repeatable\n"
            "                  (default 64, 4K, 64K, 1M, 4M)\n"
            "  --depth D       receive slots of the channel (default 8)\n"
            "  --iters N       messages per size (default: about --total-mb of data)\n"
            "  --total-mb M    MiB per size when --iters is not given (default 512)\n"
            "  --latency-iters N  ping-pongs per size (default: as many as messages, at\n"
            "                  most 2000; 0 skips the latency)\n"
            "  --spin-us N     while messages stream, a wait polls up to N us before it\n"
            "                  sleeps (shm, verbs; default $PD_TRANSPORT_SPIN_US, else\n"
            "                  2000); -1: every wait sleeps at once\n"
            "  --help          this text\n");
}

static int parse_size(const char *text, int64_t *out)
{
    char buf[64];
    size_t len = strlen(text);
    int64_t mult = 1;

    if (len == 0 || len >= sizeof(buf)) {
        pd_cli_error("bench transport: --size: '%s' is not a size", text);
        return -1;
    }
    memcpy(buf, text, len + 1);
    if (buf[len - 1] == 'K' || buf[len - 1] == 'k')
        mult = 1024;
    else if (buf[len - 1] == 'M' || buf[len - 1] == 'm')
        mult = 1 << 20;
    if (mult > 1)
        buf[len - 1] = '\0';
    if (pd_cli_parse_int64("bench transport: --size", buf, 1, ((int64_t)1 << 30) / mult, out) != 0)
        return -1;
    *out *= mult;
    return 0;
}

static int parse_args(int argc, char **argv, bench_args *a)
{
    enum { OPT_BACKEND = 256, OPT_SIZE, OPT_DEPTH, OPT_ITERS, OPT_TOTAL, OPT_LAT, OPT_SPIN };
    static const struct option options[] = {
        {"backend", required_argument, NULL, OPT_BACKEND}, {"size", required_argument, NULL, OPT_SIZE},
        {"depth", required_argument, NULL, OPT_DEPTH},     {"iters", required_argument, NULL, OPT_ITERS},
        {"total-mb", required_argument, NULL, OPT_TOTAL},  {"help", no_argument, NULL, 'h'},
        {"latency-iters", required_argument, NULL, OPT_LAT}, {"spin-us", required_argument, NULL, OPT_SPIN},
        {NULL, 0, NULL, 0},
    };
    int c;

    a->depth = 8;
    a->total_mb = 512;
    a->lat_iters = -1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        switch (c) {
        case OPT_BACKEND: a->backend = optarg; break;
        case OPT_SIZE:
            if (a->nsizes == MAX_SIZES) {
                pd_cli_error("bench transport: at most %d --size options", MAX_SIZES);
                return PD_CLI_USAGE;
            }
            if (parse_size(optarg, &a->sizes[a->nsizes++]) != 0)
                return PD_CLI_USAGE;
            break;
        case OPT_DEPTH:
            if (pd_cli_parse_int64("bench transport: --depth", optarg, 1, 1024, &a->depth) != 0)
                return PD_CLI_USAGE;
            break;
        case OPT_ITERS:
            if (pd_cli_parse_int64("bench transport: --iters", optarg, 2, 100000000, &a->iters) != 0)
                return PD_CLI_USAGE;
            break;
        case OPT_LAT:
            if (pd_cli_parse_int64("bench transport: --latency-iters", optarg, 0, 100000000, &a->lat_iters) != 0)
                return PD_CLI_USAGE;
            break;
        case OPT_SPIN: {
            int64_t us;
            if (pd_cli_parse_int64("bench transport: --spin-us", optarg, -1, 1000000, &us) != 0)
                return PD_CLI_USAGE;
            if (us == 0) {
                pd_cli_error("bench transport: --spin-us: 0 is neither a bound (1 to 1000000) nor -1 (never)");
                return PD_CLI_USAGE;
            }
            setenv("PD_TRANSPORT_SPIN_US", optarg, 1); /* every channel of this run and the forked peer's */
            break;
        }
        case OPT_TOTAL:
            if (pd_cli_parse_int64("bench transport: --total-mb", optarg, 1, 1 << 20, &a->total_mb) != 0)
                return PD_CLI_USAGE;
            break;
        case 'h': usage(stdout); return -1;
        default: pd_cli_option_error("bench transport", c, argv, optind); return PD_CLI_USAGE;
        }
    }
    if (optind < argc) {
        pd_cli_error("bench transport: unexpected argument '%s'", argv[optind]);
        return PD_CLI_USAGE;
    }
    if (!a->backend || (strcmp(a->backend, "shm") != 0 && strcmp(a->backend, "tcp") != 0 &&
                        strcmp(a->backend, "verbs") != 0 && strcmp(a->backend, "mpi") != 0)) {
        pd_cli_error("bench transport: --backend must be shm, tcp, verbs or mpi (see 'pipedream bench transport --help')");
        return PD_CLI_USAGE;
    }
#ifndef HAVE_MPI
    if (strcmp(a->backend, "mpi") == 0) {
        pd_cli_error("bench transport: --backend mpi: this build has no MPI (configure found none; see --with-mpi)");
        return PD_CLI_USAGE;
    }
#endif
    if (a->nsizes == 0) {
        a->nsizes = (int)(sizeof(default_sizes) / sizeof(default_sizes[0]));
        memcpy(a->sizes, default_sizes, sizeof(default_sizes));
    }
    return 0;
}

/* ---- references ---- */

/* Single-thread memcpy between two buffers of `size`, bytes/s. */
static double memcpy_reference(int64_t size, int64_t iters)
{
    char *src = malloc((size_t)size), *dst = malloc((size_t)size);
    double t0, t;

    if (!src || !dst) {
        free(src);
        free(dst);
        return 0;
    }
    memset(src, 1, (size_t)size);
    memset(dst, 2, (size_t)size);
    memcpy(dst, src, (size_t)size);
    t0 = now_s();
    for (int64_t i = 0; i < iters; i++) {
        memcpy(dst, src, (size_t)size);
        __asm__ __volatile__("" : : "r"(dst) : "memory"); /* keep every copy */
    }
    t = now_s() - t0;
    free(src);
    free(dst);
    return (double)size * (double)iters / t;
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A plain pair of loopback TCP sockets between two processes: the child
 * writes iters * size bytes in size-byte writes, the parent reads them.
 * Bytes/s as the reader sees them. */
static double socket_reference(int64_t size, int64_t iters)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1, fd;
    char *buf = calloc(1, (size_t)size);
    double t0 = 0, result = 0;
    int64_t total = size * iters, got = 0;
    pid_t pid;

    if (l < 0 || !buf || bind(l, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&sa, &len) != 0)
        goto out;
    pid = fork();
    if (pid == 0) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        alarm(WATCHDOG_S);
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) != 0)
            _exit(1);
        for (int64_t i = 0; i < iters; i++)
            if (write_all(s, buf, (size_t)size) != 0)
                _exit(1);
        _exit(0);
    }
    if (pid < 0)
        goto out;
    fd = accept(l, NULL, NULL);
    while (fd >= 0 && got < total) {
        ssize_t n = read(fd, buf, (size_t)(total - got < size ? total - got : size));
        if (n <= 0)
            break;
        if (got == 0)
            t0 = now_s();
        got += n;
    }
    if (got == total)
        result = (double)(total - size) / (now_s() - t0); /* the clock starts at the first bytes */
    if (fd >= 0)
        close(fd);
    waitpid(pid, NULL, 0);
out:
    if (l >= 0)
        close(l);
    free(buf);
    return result;
}

/* ---- the channel pair ---- */

/* How the channel's waits behave, for the header line. */
static const char *spin_text(pd_channel *ch, char *buf, size_t size)
{
    int us = pd_channel_spin_us(ch);

    if (us > 0)
        snprintf(buf, size, "waits spin up to %d us while streaming", us);
    else
        snprintf(buf, size, "waits sleep at once");
    return buf;
}

static pd_channel_config channel_config(const bench_args *a, const pd_transport_token *token, uint32_t id,
                                        int64_t slot_bytes)
{
    pd_channel_config c = {.channel_id = id, .depth = (int)a->depth, .slot_bytes = (size_t)slot_bytes,
                           .token = token, .backends = a->backend, .host = "127.0.0.1", .timeout_ms = 30000};
    return c;
}

/* The peer rank: streams each size, then answers as many pings. */
static int serve_sizes(pd_cli_link *link, const void *args)
{
    const bench_args *a = args;

    for (int k = 0; k < a->nsizes; k++) {
        int64_t iters = iterations(a, a->sizes[k]);
        if (pd_cli_link_serve(link, a->sizes[k], iters, latency_iterations(a, iters)) != PD_OK)
            return 1;
    }
    return 0;
}

static int run(const bench_args *a)
{
    char spin[64];
    pd_transport_token token;
    int64_t max_size = 0;
    pd_channel_config c;
    pd_cli_link p = {0};
    int status, code = PD_CLI_FAILURE;
    pid_t pid = -1;
    pd_status s;

    for (int k = 0; k < a->nsizes; k++)
        max_size = a->sizes[k] > max_size ? a->sizes[k] : max_size;
    if (pd_transport_token_generate(&token) != PD_OK) {
        pd_cli_error("bench transport: cannot set up: %s", pd_last_error());
        return PD_CLI_FAILURE;
    }
    c = channel_config(a, &token, 1, max_size);
    if ((s = pd_cli_link_open_forked(&p, &c, serve_sizes, a, &pid)) != PD_OK) {
        pd_cli_error("bench transport: %s", pd_last_error());
        return pd_cli_exit_code(s);
    }
    printf("# pipedream bench transport: backend %s, depth %lld, %s; reference: %s\n", pd_channel_backend(p.rx),
           (long long)a->depth, spin_text(p.rx, spin, sizeof(spin)),
           strcmp(a->backend, "shm") == 0   ? "single-thread memcpy (target ratio >= 0.80 at 4 MiB)"
           : strcmp(a->backend, "tcp") == 0 ? "plain loopback socket pair (target ratio >= 0.70)"
                                            : "none in-process (perftest's ib_write_bw, target ratio >= 0.90)");
    printf("# %10s %10s %12s %12s %12s %8s\n", "bytes", "iters", "MB/s", "lat_us", "ref_MB/s", "ratio");
    for (int k = 0; k < a->nsizes; k++) {
        int64_t size = a->sizes[k];
        double bw, lat, ref;

        if (pd_cli_link_measure(&p, size, iterations(a, size), latency_iterations(a, iterations(a, size)), &bw, &lat) !=
            PD_OK) {
            pd_cli_error("bench transport: %s", pd_last_error());
            goto out;
        }
        if (strcmp(a->backend, "verbs") == 0) {
            printf("  %10lld %10lld %12.1f %12.2f %12s %8s\n", (long long)size, (long long)iterations(a, size),
                   bw / 1e6, lat, "-", "-");
            fflush(stdout);
            continue;
        }
        ref = strcmp(a->backend, "shm") == 0 ? memcpy_reference(size, iterations(a, size))
                                             : socket_reference(size, iterations(a, size));
        printf("  %10lld %10lld %12.1f %12.2f %12.1f %8.3g\n", (long long)size, (long long)iterations(a, size),
               bw / 1e6, lat, ref / 1e6, ref > 0 ? bw / ref : 0.0);
        fflush(stdout);
    }
    code = PD_CLI_OK;
out:
    pd_cli_link_close(&p);
    if (pid > 0) {
        if (code != PD_CLI_OK)
            kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        if (code == PD_CLI_OK && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            pd_cli_error("bench transport: the peer rank failed");
            code = PD_CLI_FAILURE;
        }
    }
    return code;
}

#ifdef HAVE_MPI
/* The size of the MPI job that mpirun or mpiexec started this process in
 * (their per-rank variables: Open MPI's, and PMI's of MPICH's Hydra and of
 * srun), 0 when none did. */
static int launched_ranks(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};

    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char *v = getenv(vars[i]);
        if (v)
            return atoi(v);
    }
    return 0;
}

/* Between the two ranks of an MPI job, over a->backend: rank 0 measures
 * and prints, rank 1 is its peer; per size the channel's stream and
 * ping-pong, then the same stream as plain MPI_Send/MPI_Recv between the
 * same ranks. */
static int run_mpi(const bench_args *a)
{
    char spin[64];
    pd_transport_token token = {{0}};
    pd_cli_link link = {0};
    int64_t max_size = 0;
    int rank = 0, ranks = 0, ok, all_ok = 0, code = PD_CLI_FAILURE, len = 0;
    char hosts[2][MPI_MAX_PROCESSOR_NAME] = {{0}};

    if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
        pd_cli_error("bench transport: MPI_Init failed");
        return PD_CLI_FAILURE;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (ranks != 2) {
        if (rank == 0)
            pd_cli_error("bench transport: between MPI ranks it runs as two (mpirun -np 2), this job has %d", ranks);
        MPI_Finalize();
        return PD_CLI_USAGE;
    }
    MPI_Get_processor_name(hosts[rank], &len);
    MPI_Sendrecv(hosts[rank], MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 1 - rank, 0, hosts[1 - rank],
                 MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 1 - rank, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    for (int k = 0; k < a->nsizes; k++)
        max_size = a->sizes[k] > max_size ? a->sizes[k] : max_size;
    ok = rank != 0 || pd_transport_token_generate(&token) == PD_OK;
    MPI_Bcast(token.bytes, (int)sizeof(token.bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
    ok = ok && pd_cli_link_open_mpi(&link, 1 - rank, rank == 0, a->backend, &token, max_size, a->depth) == PD_OK;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        if (!ok)
            pd_cli_error("bench transport (rank %d): %s", rank, pd_last_error());
        goto out;
    }
    if (rank == 0) {
        printf("# pipedream bench transport: backend %s, depth %lld, %s, 2 MPI ranks (%s, %s); reference: plain "
               "MPI_Send/MPI_Recv stream%s\n",
               pd_channel_backend(link.rx), (long long)a->depth, spin_text(link.rx, spin, sizeof(spin)), hosts[0],
               hosts[1],
               strcmp(a->backend, "mpi") == 0 ? " (target ratio >= 0.80 at 4 MiB)" : "");
        printf("# %10s %10s %12s %12s %12s %8s\n", "bytes", "iters", "MB/s", "lat_us", "ref_MB/s", "ratio");
    }
    for (int k = 0; k < a->nsizes; k++) {
        int64_t size = a->sizes[k], iters = iterations(a, size);
        double bw = 0, lat = 0, ref;
        pd_status s = rank == 0 ? pd_cli_link_measure(&link, size, iters, latency_iterations(a, iters), &bw, &lat)
                                : pd_cli_link_serve(&link, size, iters, latency_iterations(a, iters));

        if (s != PD_OK) { /* the other rank waits on the channel: end the job */
            pd_cli_error("bench transport (rank %d): %s", rank, pd_last_error());
            MPI_Abort(MPI_COMM_WORLD, PD_CLI_FAILURE);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank != 0) {
            pd_cli_mpi_stream_send(0, link.buf, size, iters);
            continue;
        }
        ref = pd_cli_mpi_stream_recv(1, link.buf, size, iters);
        printf("  %10lld %10lld %12.1f %12.2f %12.1f %8.3g\n", (long long)size, (long long)iters, bw / 1e6, lat,
               ref / 1e6, ref > 0 ? bw / ref : 0.0);
        fflush(stdout);
    }
    code = PD_CLI_OK;
out:
    pd_cli_link_close(&link);
    MPI_Finalize();
    return code;
}
#endif

int pd_cli_bench(int argc, char **argv)
{
    bench_args a = {0};
    int r;

    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        if (argc < 2)
            pd_cli_error("bench: what to measure? (pipedream bench transport --help, bench step --help)");
        else
            usage(stdout);
        return argc < 2 ? PD_CLI_USAGE : PD_CLI_OK;
    }
    if (strcmp(argv[1], "step") == 0)
        return pd_cli_bench_step(argc - 1, argv + 1);
    if (strcmp(argv[1], "transport") != 0) {
        pd_cli_error("bench: unknown benchmark '%s' (expected transport or step)", argv[1]);
        return PD_CLI_USAGE;
    }
    signal(SIGPIPE, SIG_IGN);
    r = parse_args(argc - 1, argv + 1, &a);
    if (r < 0)
        return PD_CLI_OK; /* --help */
    if (r > 0)
        return r;
#ifdef HAVE_MPI
    if (strcmp(a.backend, "mpi") == 0 || launched_ranks() > 1)
        return run_mpi(&a);
#endif
    return run(&a);
}
