/* The cluster of an MPI job: every rank describes its node, rank 0 gathers
 * the descriptions (sizes with MPI_Gather, then the JSON texts with
 * MPI_Gatherv), makes the cluster of them (cluster_ranks.c) and broadcasts
 * it as JSON, which every rank (rank 0 included) reads back, so that all
 * hold the same cluster. Built with MPI only; gather_none.c otherwise. */
#include "config.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include <pipedream/json.h>
#include <pipedream/log.h>

#include "topology/topo_int.h"

#define MESSAGE_BYTES 1024

static pd_status mpi_failed(int rc, const char *call)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;

    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof(text), "MPI error %d", rc);
    return PD_ERROR(PD_ECOMM, "cluster gather: %s failed: %s", call, text);
}

/* This rank's message (NUL included in *len), or NULL and 0 when there is
 * nothing to send: rank 0 then reports the failure and no rank waits. */
static char *describe_rank(const pd_topo *node, int *len)
{
    char host[MPI_MAX_PROCESSOR_NAME] = "";
    int host_len = 0;
    char *text;

    *len = 0;
    if (!node || MPI_Get_processor_name(host, &host_len) != MPI_SUCCESS ||
        !(text = pd_cluster_rank_message(node, host)))
        return NULL;
    if (strlen(text) >= INT_MAX) {
        free(text);
        return NULL;
    }
    *len = (int)strlen(text) + 1;
    return text;
}

/* Rank 0: the cluster as JSON text from every rank's message. */
static pd_status build_cluster(char *all, const int *lens, const int *displs, int ranks,
                               const pd_cluster_network *net, char **text)
{
    const char **messages = malloc((size_t)ranks * sizeof(*messages));
    pd_cluster *c = NULL;
    json_t *root;
    pd_status s;

    if (!messages)
        return PD_ERROR(PD_ENOMEM, "cluster gather: out of memory for %d ranks", ranks);
    for (int r = 0; r < ranks; r++)
        messages[r] = lens[r] > 0 && all[displs[r] + lens[r] - 1] == '\0' ? all + displs[r] : NULL;
    s = pd_cluster_from_ranks(messages, ranks, net, &c);
    free(messages);
    if (s != PD_OK)
        return s;
    root = pd_cluster_to_json(c);
    *text = root ? json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(root);
    pd_cluster_destroy(c);
    return *text ? PD_OK : PD_ERROR(PD_ENOMEM, "cluster gather: out of memory");
}

/* Rank 0: receives every rank's message and builds the cluster's text, or
 * the reason it could not. Collective with gather_send. */
static pd_status gather_build(MPI_Comm comm, int ranks, const char *mine, int len, const pd_cluster_network *net,
                              char **text)
{
    int *lens = malloc((size_t)ranks * sizeof(int)), *displs = malloc((size_t)ranks * sizeof(int));
    long long total = 0;
    int go = 0, rc;
    char *all = NULL;
    pd_status s = PD_OK;

    if (!lens || !displs) { /* the other ranks wait in MPI_Gather: nothing to do but fail */
        s = PD_ERROR(PD_ENOMEM, "cluster gather: out of memory for %d ranks", ranks);
        goto release;
    }
    if ((rc = MPI_Gather(&len, 1, MPI_INT, lens, 1, MPI_INT, 0, comm)) != MPI_SUCCESS) {
        s = mpi_failed(rc, "MPI_Gather");
        goto release;
    }
    for (int r = 0; r < ranks; r++) {
        displs[r] = (int)total;
        total += lens[r];
    }
    if (total > INT_MAX)
        s = PD_ERROR(PD_ENOMEM, "cluster gather: the nodes' descriptions take %lld bytes, more than one MPI message",
                     total);
    else if (!(all = malloc(total > 0 ? (size_t)total : 1)))
        s = PD_ERROR(PD_ENOMEM, "cluster gather: out of memory for %lld bytes", total);
    go = s == PD_OK;
    if ((rc = MPI_Bcast(&go, 1, MPI_INT, 0, comm)) != MPI_SUCCESS) {
        s = mpi_failed(rc, "MPI_Bcast");
        goto release;
    }
    if (!go)
        goto release;
    if ((rc = MPI_Gatherv(mine, len, MPI_CHAR, all, lens, displs, MPI_CHAR, 0, comm)) != MPI_SUCCESS) {
        s = mpi_failed(rc, "MPI_Gatherv");
        goto release;
    }
    s = build_cluster(all, lens, displs, ranks, net, text);
release:
    free(all);
    free(displs);
    free(lens);
    return s;
}

/* Other ranks: their part of gather_build. */
static pd_status gather_send(MPI_Comm comm, const char *mine, int len)
{
    int go = 0, rc;

    if ((rc = MPI_Gather(&len, 1, MPI_INT, NULL, 1, MPI_INT, 0, comm)) != MPI_SUCCESS)
        return mpi_failed(rc, "MPI_Gather");
    if ((rc = MPI_Bcast(&go, 1, MPI_INT, 0, comm)) != MPI_SUCCESS)
        return mpi_failed(rc, "MPI_Bcast");
    if (go && (rc = MPI_Gatherv(mine, len, MPI_CHAR, NULL, NULL, NULL, MPI_CHAR, 0, comm)) != MPI_SUCCESS)
        return mpi_failed(rc, "MPI_Gatherv");
    return PD_OK;
}

/* Rank 0 sends {status, bytes} then the cluster's text or its error
 * message; every rank reads the cluster from the text. */
static pd_status broadcast(MPI_Comm comm, int rank, pd_status built, char *text, pd_cluster **out)
{
    char message[MESSAGE_BYTES];
    int header[2] = {built, 0}, rc;
    char *payload = NULL;
    const char *origin;
    pd_cluster *c = NULL;
    json_t *root = NULL;
    pd_status s;

    if (rank == 0) {
        payload = built == PD_OK ? text : message;
        if (built != PD_OK)
            snprintf(message, sizeof(message), "%s", pd_last_error());
        header[1] = (int)strlen(payload) + 1;
    }
    if ((rc = MPI_Bcast(header, 2, MPI_INT, 0, comm)) != MPI_SUCCESS)
        return mpi_failed(rc, "MPI_Bcast");
    if (rank != 0 && !(payload = malloc((size_t)header[1])))
        return PD_ERROR(PD_ENOMEM, "cluster gather: out of memory for %d bytes", header[1]);
    if ((rc = MPI_Bcast(payload, header[1], MPI_CHAR, 0, comm)) != MPI_SUCCESS) {
        s = mpi_failed(rc, "MPI_Bcast");
        goto release;
    }
    if (header[0] != PD_OK) {
        s = rank == 0 ? header[0] : PD_ERROR(header[0], "rank 0: %s", payload);
        goto release;
    }
    PD_CHECK_GOTO(pd_json_load_buffer(payload, (size_t)header[1] - 1, "cluster from rank 0", &root), s, release);
    if (!(c = calloc(1, sizeof(*c)))) {
        s = PD_ERROR(PD_ENOMEM, "cluster gather: out of memory");
        goto release;
    }
    PD_CHECK_GOTO(pd_cluster_from_json(root, "cluster from rank 0", c), s, release);
    origin = json_string_value(json_object_get(json_object_get(root, "node"), "origin"));
    if (c->node && origin) /* from_json names the text it read instead */
        PD_TOPO_SET(c->node->origin, origin);
    PD_LOG_DEBUGF("cluster gather: rank %d holds cluster %s: %d x %d workers, %d levels, %d bytes of JSON", rank,
                  c->name, c->nodes, c->workers_per_node, c->n_levels, header[1] - 1);
    *out = c;
    c = NULL;
release:
    pd_cluster_destroy(c);
    json_decref(root);
    if (rank != 0)
        free(payload);
    return s;
}

pd_status pd_cluster_gather(const pd_topo *node, const pd_cluster_network *net, pd_cluster **out)
{
    MPI_Comm comm = MPI_COMM_NULL;
    int initialized = 0, finalized = 0, rank, ranks, len, rc;
    char *mine = NULL, *text = NULL;
    pd_status s;

    if (MPI_Initialized(&initialized) != MPI_SUCCESS || !initialized || MPI_Finalized(&finalized) != MPI_SUCCESS ||
        finalized)
        return PD_ERROR(PD_ESTATE, "cluster gather: MPI is not initialised");
    /* A communicator of our own whose errors are returned, not fatal. */
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm)) != MPI_SUCCESS)
        return mpi_failed(rc, "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &ranks);
    mine = describe_rank(node, &len);
    if (rank == 0) {
        pd_status built = gather_build(comm, ranks, mine, len, net, &text);
        s = broadcast(comm, rank, built, text, out);
    } else {
        PD_CHECK_GOTO(gather_send(comm, mine, len), s, release);
        s = broadcast(comm, rank, PD_OK, NULL, out);
    }
release:
    free(text);
    free(mine);
    MPI_Comm_free(&comm);
    return s;
}
