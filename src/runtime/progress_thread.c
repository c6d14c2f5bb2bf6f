/* The communication progress thread of a rank (--progress-thread): it
 * progresses all of the rank's channels through one channel set and sleeps
 * in the set's poll (eventfds, sockets) while nothing happens, so that a
 * send posted by the compute thread keeps leaving, and arriving messages
 * keep landing in their slots, while the compute thread runs a forward or
 * backward pass. The compute thread still posts sends, takes and releases
 * messages (every channel call locks the channel, transport.h); only
 * progress moves here. While the compute thread waits for a message or a
 * free send buffer it sleeps on a condition variable that this thread
 * signals after every event of the set. Channels on the mpi backend keep the thread off:
 * MPI is initialised single-threaded (MPI_THREAD_FUNNELED at most). */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <pipedream/log.h>

#include "runtime/pd_runtime_int.h"

/* Counts an event and wakes the compute thread if it sleeps on one. */
static void announce(pd_pipeline *p)
{
    pthread_mutex_lock(&p->comm_lock);
    p->comm_events++;
    pthread_cond_broadcast(&p->comm_cond);
    pthread_mutex_unlock(&p->comm_lock);
}

static void *serve(void *arg)
{
    pd_pipeline *p = arg;
    int active;

    while (!atomic_load(&p->comm_stop)) {
        if (pd_channel_set_wait(p->comm_set, -1, &active) != PD_OK)
            break; /* the channel keeps its failure: the compute thread's next call on it reports it */
        if (active > 0)
            announce(p);
    }
    atomic_store(&p->comm_live, false);
    announce(p);
    return NULL;
}

/* Whether a channel's backend may be driven off the MPI thread. */
static bool thread_safe_backend(pd_channel *ch) { return strcmp(pd_channel_backend(ch), "mpi") != 0; }

pd_status pd_progress_thread_start(pd_pipeline *p)
{
    pd_channel **chs;
    pd_status s;
    int err;

    if (p->opts.progress_thread < 0 || p->boot.n_channels <= 0)
        return PD_OK;
    /* By default not with replicated stages: there the compute thread polls
     * the all-reduce and the thread slowed a 2 x 2 run 4.6 times here. */
    for (int i = 0; p->opts.progress_thread == 0 && i < p->plan->n_stages; i++)
        if (p->plan->stages[i].replicas > 1) {
            PD_LOG_DEBUGF("pipeline rank %d: no progress thread by default: stage %d is replicated", p->boot.rank, i);
            return PD_OK;
        }
    for (int i = 0; i < p->boot.n_channels; i++)
        if (!thread_safe_backend(p->boot.channels[i].ch)) {
            PD_LOG_DEBUGF("pipeline rank %d: no progress thread: channel to or from rank %d uses mpi",
                          p->boot.rank, p->boot.channels[i].peer);
            return PD_OK;
        }
    if (!(chs = calloc((size_t)p->boot.n_channels, sizeof(*chs))))
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    for (int i = 0; i < p->boot.n_channels; i++)
        chs[i] = p->boot.channels[i].ch;
    s = pd_channel_set_create(chs, p->boot.n_channels, &p->comm_set);
    free(chs);
    PD_CHECK(s);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&p->comm_cond, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&p->comm_lock, NULL);
    p->comm_events = 0;
    atomic_store(&p->comm_stop, false);
    atomic_store(&p->comm_live, true);
    if ((err = pthread_create(&p->comm_thread, NULL, serve, p)) != 0) {
        atomic_store(&p->comm_live, false);
        pthread_cond_destroy(&p->comm_cond);
        pthread_mutex_destroy(&p->comm_lock);
        pd_channel_set_destroy(p->comm_set);
        p->comm_set = NULL;
        return PD_ERROR(PD_ESTATE, "pipeline: rank %d: cannot start the progress thread: %s", p->boot.rank,
                        strerror(err));
    }
    p->comm_running = true;
    PD_LOG_DEBUGF("pipeline rank %d: progress thread serves %d channels", p->boot.rank, p->boot.n_channels);
    return PD_OK;
}

bool pd_progress_thread_live(const pd_pipeline *p) { return p->comm_running && atomic_load(&p->comm_live); }

uint64_t pd_progress_thread_events(pd_pipeline *p)
{
    uint64_t n;

    pthread_mutex_lock(&p->comm_lock);
    n = p->comm_events;
    pthread_mutex_unlock(&p->comm_lock);
    return n;
}

void pd_progress_thread_sleep(pd_pipeline *p, uint64_t seen, int ms)
{
    struct timespec until;

    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&p->comm_lock);
    while (p->comm_events == seen && atomic_load(&p->comm_live))
        if (pthread_cond_timedwait(&p->comm_cond, &p->comm_lock, &until) != 0)
            break;
    pthread_mutex_unlock(&p->comm_lock);
}

void pd_progress_thread_stop(pd_pipeline *p)
{
    if (!p->comm_running)
        return;
    atomic_store(&p->comm_stop, true);
    pd_channel_set_wake(p->comm_set);
    pthread_join(p->comm_thread, NULL);
    pthread_cond_destroy(&p->comm_cond);
    pthread_mutex_destroy(&p->comm_lock);
    pd_channel_set_destroy(p->comm_set);
    p->comm_set = NULL;
    p->comm_running = false;
}
