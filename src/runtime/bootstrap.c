/* Bootstrapping a pipeline rank through MPI: world and node-local ranks,
 * the job token (from $PD_JOB_TOKEN, else generated on rank 0 and
 * broadcast), one transport channel per ordered pair of ranks that exchange
 * messages in the schedule (receivers listen, the addresses travel by
 * MPI_Allgatherv, senders connect; all wait until every channel is up), and
 * the communicator of each stage's replicas. Without MPI a job is one rank. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HAVE_MPI
#include <mpi.h>
#endif

#include <pipedream/log.h>

#include "runtime/pd_runtime_int.h"

pd_status pd_boot_init(pd_boot *b)
{
    const char *env = getenv("PD_JOB_TOKEN");

    *b = (pd_boot){.ranks = 1};
#ifdef HAVE_MPI
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) {
        /* Funneled: only this thread calls MPI; the progress thread
         * (progress_thread.c) and the watchdog never do. */
        int provided;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return PD_ERROR(PD_ECOMM, "pipeline: MPI_Init_thread failed");
        b->mpi_initialised_here = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &b->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &b->ranks);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, b->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &b->local_rank);
    /* Every rank's process and node (named by its first world rank), so
     * that a rank can tell a dead neighbour on its node at once. */
    int64_t leader = b->rank;
    MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT64_T, MPI_MIN, node);
    int64_t mine[2] = {(int64_t)getpid(), leader};
    MPI_Comm_free(&node);
    if (!(b->procs = malloc(sizeof(*b->procs) * 2 * (size_t)b->ranks)))
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    MPI_Allgather(mine, 2, MPI_INT64_T, b->procs, 2, MPI_INT64_T, MPI_COMM_WORLD);
#else
    /* Launched as one of several ranks by a build that cannot talk to
     * them: every process would train alone, each believing it is rank 0. */
    static const char *const launcher_sizes[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof(launcher_sizes) / sizeof(launcher_sizes[0]); i++) {
        const char *v = getenv(launcher_sizes[i]);
        if (v && atoi(v) > 1)
            return PD_ERROR(PD_ENOTSUP, "pipeline: started as one of %s ranks (%s), but this build has no MPI "
                            "(configure found none; see --with-mpi)", v, launcher_sizes[i]);
    }
#endif
    if (env)
        return pd_transport_token_parse(env, &b->token);
    if (b->rank == 0)
        PD_CHECK(pd_transport_token_generate(&b->token));
#ifdef HAVE_MPI
    MPI_Bcast(b->token.bytes, (int)sizeof(b->token.bytes), MPI_BYTE, 0, MPI_COMM_WORLD);
#endif
    return PD_OK;
}

/* Marks in want[peer] (1: this rank receives from peer, 2: sends to) the
 * peers of this rank's transfers. */
static void channel_peers(const pd_sched *s, int rank, unsigned char *want)
{
    for (int i = 0; i < s->n_actions[rank]; i++) {
        const pd_sched_action *a = &s->actions[rank][i];
        if (a->op == PD_SCHED_RECV_ACT || a->op == PD_SCHED_RECV_GRAD)
            want[a->peer] |= 1;
        else if (a->op == PD_SCHED_SEND_ACT || a->op == PD_SCHED_SEND_GRAD)
            want[a->peer] |= 2;
    }
}

/* Bytes of the messages from rank `src` to rank `dst`. */
static size_t message_bytes(const pd_sched *s, int src, int dst, const size_t *cut, const size_t *cut_grad)
{
    int a = s->rank_stage[src], b = s->rank_stage[dst];

    return a < b ? cut[a] : cut_grad[b];
}

/* The send buffers of c: host memory, or memory of b->channel_dev that
 * the transport's direct paths can register (pd_channel_device_alloc). */
static pd_status alloc_buffers(pd_boot *b, pd_peer_channel *c)
{
    pd_device *dev = b->channel_dev;
    const size_t bytes = c->slot_bytes * (size_t)b->depth;
    void *data;

    if (!dev) {
        if (!(c->buffers = malloc(bytes)))
            return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory for send buffers to rank %d", c->peer);
        return PD_OK;
    }
    PD_CHECK(pd_channel_device_alloc(dev, bytes, &c->buffers_alloc, &data));
    c->buffers = data;
    return PD_OK;
}

static void free_buffers(pd_boot *b, pd_peer_channel *c)
{
    if (c->buffers_alloc)
        b->channel_dev->mem->free(b->channel_dev, c->buffers_alloc);
    else
        free(c->buffers);
    c->buffers = NULL;
    c->buffers_alloc = NULL;
}

static pd_status add_channel(pd_boot *b, int peer, bool send, size_t bytes, const pd_channel_config *base)
{
    pd_peer_channel *c = &b->channels[b->n_channels];
    pd_channel_config cfg = *base;

    *c = (pd_peer_channel){.peer = peer, .send = send, .slot_bytes = bytes ? bytes : 1};
    cfg.slot_bytes = c->slot_bytes;
    cfg.channel_id = (uint32_t)(send ? b->rank * b->ranks + peer : peer * b->ranks + b->rank);
    if (!send) {
        PD_CHECK(pd_channel_listen(&cfg, &c->ch));
        b->n_channels++;
        return PD_OK;
    }
    if (!(c->seqs = malloc(sizeof(*c->seqs) * (size_t)b->depth)))
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory for send buffers to rank %d", peer);
    pd_status st = alloc_buffers(b, c);
    if (st != PD_OK) {
        free(c->seqs);
        c->seqs = NULL;
        return st;
    }
    for (int i = 0; i < b->depth; i++)
        c->seqs[i] = UINT64_MAX;
    b->n_channels++;
    return PD_OK;
}

#ifdef HAVE_MPI
/* Every rank's listening addresses, "<sender> <address>\n" per channel. */
static pd_status exchange_addresses(pd_boot *b, char **all, int **offsets)
{
    char *mine = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&mine, &len);
    int *lens = calloc((size_t)b->ranks, sizeof(int));

    *offsets = calloc((size_t)b->ranks + 1, sizeof(int));
    if (!f || !lens || !*offsets) {
        if (f)
            fclose(f);
        free(mine);
        free(lens);
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    }
    for (int i = 0; i < b->n_channels; i++)
        if (!b->channels[i].send)
            fprintf(f, "%d %s\n", b->channels[i].peer, pd_channel_address(b->channels[i].ch));
    fclose(f);
    int my_len = (int)len;
    MPI_Allgather(&my_len, 1, MPI_INT, lens, 1, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < b->ranks; r++)
        (*offsets)[r + 1] = (*offsets)[r] + lens[r];
    *all = malloc((size_t)(*offsets)[b->ranks] + 1);
    if (*all) {
        MPI_Allgatherv(mine, my_len, MPI_CHAR, *all, lens, *offsets, MPI_CHAR, MPI_COMM_WORLD);
        (*all)[(*offsets)[b->ranks]] = '\0';
    }
    free(mine);
    free(lens);
    return *all ? PD_OK : PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
}

/* The address rank `receiver` listens on for this rank, from its lines. */
static pd_status find_address(const pd_boot *b, const char *all, const int *offsets, int receiver, char *out,
                              size_t size)
{
    const char *p = all + offsets[receiver], *end = all + offsets[receiver + 1];

    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        int sender;
        char addr[1024];
        if (!nl)
            break;
        if (sscanf(p, "%d %1023s", &sender, addr) == 2 && sender == b->rank) {
            snprintf(out, size, "%s", addr);
            return PD_OK;
        }
        p = nl + 1;
    }
    return PD_ERROR(PD_ECOMM, "pipeline: rank %d published no channel address for rank %d", receiver, b->rank);
}
#endif

/* Device memory: registers every send channel's buffers, so that a
 * backend with a direct path (verbs: dmabuf, peermem) sends from them in
 * place; where the channel has none (PD_ENOTSUP) its sends are staged. */
static pd_status register_buffers(pd_boot *b)
{
    for (int i = 0; b->channel_dev && i < b->n_channels; i++) {
        pd_peer_channel *c = &b->channels[i];
        if (!c->send)
            continue;
        pd_status s = pd_channel_register(c->ch, c->buffers, c->slot_bytes * (size_t)b->depth);
        if (s != PD_OK && s != PD_ENOTSUP)
            return s;
    }
    return PD_OK;
}

pd_status pd_boot_channels(pd_boot *b, const pd_sched *s, const size_t *cut, const size_t *cut_grad,
                           const char *backends, int timeout_ms, pd_device *dev)
{
    unsigned char *want = calloc((size_t)b->ranks, 1);
    pd_status st = PD_OK;

    b->channel_dev = dev;
    b->channels = calloc((size_t)(2 * b->ranks), sizeof(*b->channels));
    if (!want || !b->channels) {
        free(want);
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    }
    if (b->rank < s->n_ranks)
        channel_peers(s, b->rank, want);
    const pd_channel_config base = {.depth = b->depth,
                                    .token = &b->token,
                                    .backends = backends,
                                    .host = b->binding.nic_address[0] ? b->binding.nic_address : NULL,
                                    .timeout_ms = timeout_ms,
                                    .memory = dev ? PD_TRANSPORT_DEVICE : PD_TRANSPORT_HOST,
                                    .device = dev};
    for (int r = 0; r < b->ranks && st == PD_OK; r++)
        if (want[r] & 1)
            st = add_channel(b, r, false, message_bytes(s, r, b->rank, cut, cut_grad), &base);
#ifdef HAVE_MPI
    char *all = NULL;
    int *offsets = NULL;
    /* Every rank takes part in the exchange, also one that failed above. */
    pd_status ex = exchange_addresses(b, &all, &offsets);
    st = st != PD_OK ? st : ex;
    for (int r = 0; r < b->ranks && st == PD_OK; r++) {
        char addr[1024];
        if (!(want[r] & 2))
            continue;
        if ((st = add_channel(b, r, true, message_bytes(s, b->rank, r, cut, cut_grad), &base)) != PD_OK)
            break;
        pd_peer_channel *c = &b->channels[b->n_channels - 1];
        pd_channel_config cfg = base;
        cfg.slot_bytes = c->slot_bytes;
        cfg.channel_id = (uint32_t)(b->rank * b->ranks + r);
        if ((st = find_address(b, all, offsets, r, addr, sizeof(addr))) == PD_OK)
            st = pd_channel_connect(&cfg, addr, &c->ch);
    }
    free(all);
    free(offsets);
#endif
    free(want);
    if (st != PD_OK)
        return st;
    pd_channel **chs = malloc(sizeof(*chs) * (size_t)(b->n_channels ? b->n_channels : 1));
    if (!chs)
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    for (int i = 0; i < b->n_channels; i++)
        chs[i] = b->channels[i].ch;
    st = pd_channel_wait_connected(chs, b->n_channels, -1);
    free(chs);
    return st != PD_OK ? st : register_buffers(b);
}

pd_status pd_boot_replica_comm(pd_boot *b, const pd_sched *s)
{
#ifdef HAVE_MPI
    int stage = b->rank < s->n_ranks ? s->rank_stage[b->rank] : -1;
    int replica = b->rank < s->n_ranks ? s->rank_replica[b->rank] : 0;
    MPI_Comm *comm = malloc(sizeof(*comm));

    if (!comm)
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory");
    /* Collective over the world: unused ranks take part with no colour. */
    if (MPI_Comm_split(MPI_COMM_WORLD, stage >= 0 ? stage : MPI_UNDEFINED, replica, comm) != MPI_SUCCESS) {
        free(comm);
        return PD_ERROR(PD_ECOMM, "pipeline: MPI_Comm_split of the replicas of stage %d failed", stage);
    }
    b->replica_comm = comm;
#else
    (void)b;
    (void)s;
#endif
    return PD_OK;
}

pd_peer_channel *pd_boot_channel(pd_boot *b, int peer, bool send)
{
    for (int i = 0; i < b->n_channels; i++)
        if (b->channels[i].peer == peer && b->channels[i].send == send)
            return &b->channels[i];
    return NULL;
}

void pd_boot_close_channels(pd_boot *b)
{
    for (int i = 0; i < b->n_channels; i++) {
        pd_channel_close(b->channels[i].ch);
        free_buffers(b, &b->channels[i]);
        free(b->channels[i].seqs);
    }
    free(b->channels);
    b->channels = NULL;
    b->n_channels = 0;
}

void pd_boot_destroy(pd_boot *b)
{
    pd_boot_close_channels(b);
    free(b->procs);
#ifdef HAVE_MPI
    if (b->replica_comm) {
        MPI_Comm *comm = b->replica_comm;
        if (*comm != MPI_COMM_NULL)
            MPI_Comm_free(comm);
        free(comm);
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (b->mpi_initialised_here && !finalized)
        MPI_Finalize();
#endif
    *b = (pd_boot){0};
}
