/* pd_cluster_gather in a build without MPI. */
#include "config.h"

#include <pipedream/topology.h>

pd_status pd_cluster_gather(const pd_topo *node, const pd_cluster_network *net, pd_cluster **out)
{
    (void)node;
    (void)net;
    (void)out;
    return PD_ERROR(PD_ENOTSUP, "cluster gather: this build has no MPI (configure found none; see --with-mpi)");
}
