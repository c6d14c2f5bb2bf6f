/* The watchdog: a thread beside the executor that, every
 * PD_WATCHDOG_PERIOD_MS, checks that the processes of the other ranks on
 * this node still exist, and dumps the flight recorder when the process
 * got SIGUSR1. A rank whose neighbour died learns it within a period,
 * wherever it is blocked (a channel, an all-reduce, an MPI collective):
 * the watchdog prints which rank is gone, dumps the flight recorder and
 * ends the process with exit code 1. Ranks on other nodes are noticed by
 * the transport (a closed connection) or by the peer timeout.
 *
 * The watchdog stops before the run's last barrier, so that a rank that
 * finished and left is never taken for a dead one. */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "runtime/pd_runtime_int.h"

#define PD_WATCHDOG_PERIOD_MS 200
#define PD_WATCHDOG_GRACE_S 1

/* SIGUSR1 arrived (the handler's only state; a signal handler can reach
 * nothing else). */
static volatile sig_atomic_t usr1_pending;

static void on_usr1(int sig)
{
    (void)sig;
    usr1_pending = 1;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Whether process `pid` is gone: it does not exist, or it is a zombie
 * (killed, not yet reaped by the launcher). */
static bool process_gone(pid_t pid)
{
    char path[64], stat[256];
    FILE *f;

    if (kill(pid, 0) != 0 && errno == ESRCH)
        return true;
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    if (!(f = fopen(path, "r")))
        return false; /* no /proc: trust kill */
    size_t n = fread(stat, 1, sizeof(stat) - 1, f);
    fclose(f);
    stat[n] = '\0';
    const char *close = strrchr(stat, ')'); /* "pid (comm) S ..." */
    return close && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X');
}

/* Prints every other rank of this node whose process is gone; false if
 * there is none. */
static bool report_dead(const pd_pipeline *p)
{
    const int64_t *procs = p->boot.procs;
    char *text = NULL;
    size_t len = 0;
    int dead = 0;
    FILE *f = open_memstream(&text, &len);

    if (!f)
        return false;
    for (int r = 0; procs && r < p->boot.ranks; r++) {
        if (r == p->boot.rank || procs[2 * r + 1] != procs[2 * p->boot.rank + 1] || !process_gone((pid_t)procs[2 * r]))
            continue;
        fprintf(f, "pipedream: rank %d (stage %d): rank %d (stage %d, pid %lld) is gone: its process ended during "
                   "the run; stopping\n",
                p->boot.rank, p->stage, r, p->rank_stage[r], (long long)procs[2 * r]);
        dead++;
    }
    if (fclose(f) == 0 && dead)
        fputs(text, stderr);
    free(text);
    return dead > 0;
}

static void *watch(void *arg)
{
    pd_pipeline *p = arg;
    const struct timespec period = {.tv_sec = 0, .tv_nsec = PD_WATCHDOG_PERIOD_MS * 1000000L};
    const struct timespec grace = {.tv_sec = PD_WATCHDOG_GRACE_S, .tv_nsec = 0};

    while (!atomic_load(&p->watchdog_stop)) {
        nanosleep(&period, NULL);
        if (usr1_pending) {
            usr1_pending = 0;
            pd_flight_dump(p, "SIGUSR1", now_seconds());
        }
        if (atomic_load(&p->watchdog_stop) || !report_dead(p))
            continue;
        pd_flight_dump(p, "a peer died", now_seconds());
        fflush(stdout);
        fflush(stderr);
        /* Still alive a moment, so that the other ranks of the node see
         * the rank that died first, not this one. */
        nanosleep(&grace, NULL);
        _exit(1);
    }
    return NULL;
}

pd_status pd_watchdog_start(pd_pipeline *p)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGUSR1, &sa, NULL) != 0)
        return PD_ERROR(PD_EIO, "pipeline: cannot install the SIGUSR1 handler: %s", strerror(errno));
    atomic_store(&p->watchdog_stop, false);
    int err = pthread_create(&p->watchdog, NULL, watch, p);
    if (err != 0)
        return PD_ERROR(PD_ENOMEM, "pipeline: cannot start the watchdog thread: %s", strerror(err));
    p->watchdog_running = true;
    return PD_OK;
}

void pd_watchdog_stop(pd_pipeline *p)
{
    if (!p->watchdog_running)
        return;
    atomic_store(&p->watchdog_stop, true);
    pthread_join(p->watchdog, NULL);
    p->watchdog_running = false;
}
