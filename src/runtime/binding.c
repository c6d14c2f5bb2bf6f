/* Binding a pipeline rank to its place on the node, before it allocates
 * anything: the GPU of its local rank (through the visible devices that
 * Slurm or the user set), the NIC nearest to that GPU, and its NUMA node's
 * memory and share of the cores; on a CPU-only node, the rank's share of
 * the node's cores. The choice (pd_binding_choose) reads a pd_topo only,
 * so that tests make it from real machines' hwloc XML; the act goes
 * through pd_topo_bind_cores on this machine's topology. */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "runtime/pd_runtime_int.h"

static void vadd(char *text, size_t size, const char *fmt, va_list ap)
{
    size_t used = strlen(text);

    if (used + 1 < size)
        vsnprintf(text + used, size - used, fmt, ap);
}

/* Appends to a text, truncating. */
__attribute__((format(printf, 3, 4))) static void add(char *text, size_t size, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vadd(text, size, fmt, ap);
    va_end(ap);
}

/* Appends a clause to a note, "; " between clauses. */
__attribute__((format(printf, 3, 4))) static void append(char *note, size_t size, const char *fmt, ...)
{
    va_list ap;

    if (note[0])
        add(note, size, "; ");
    va_start(ap, fmt);
    vadd(note, size, fmt, ap);
    va_end(ap);
}

/* A non-negative decimal integer, the whole text; -1 otherwise. */
static int parse_index(const char *text)
{
    char *end;
    long v;

    if (!text || !*text)
        return -1;
    errno = 0;
    v = strtol(text, &end, 10);
    return *end || errno || v < 0 || v > INT_MAX ? -1 : (int)v;
}

/* ---- the choice ---- */

/* Local rank q's CUDA ordinal (*cuda) and the node's GPU (*gpu), -1 for
 * none; why the GPU is not located goes to `notes` when not NULL. */
static void rank_gpu(const pd_binding_input *in, int q, int *cuda, int *gpu, char *notes, size_t size)
{
    const pd_slurm_env *env = in->env;
    const int n_gpus = in->topo->n_gpus;
    int ordinal = -1, physical;

    *cuda = *gpu = -1;
    if (env && env->gpus_on_node == 0) {
        if (notes)
            append(notes, size, env->n_visible_gpus == 0 ? "CUDA_VISIBLE_DEVICES shows no GPU" : "SLURM_GPUS_ON_NODE=0");
        return;
    }
    if (in->cuda_device >= 0) {
        ordinal = in->cuda_device;
    } else if (env && env->gpus_on_node > 0) {
        pd_slurm_env e = *env; /* the same environment, seen by local rank q */
        e.local_rank = q;
        ordinal = pd_slurm_env_gpu(&e);
    } else if (n_gpus > 0) {
        ordinal = q % n_gpus;
    }
    if (ordinal < 0)
        return;
    *cuda = ordinal;
    physical = ordinal;
    if (env && env->n_visible_gpus > 0) {
        if (ordinal >= env->n_visible_gpus) {
            if (notes)
                append(notes, size, "cuda:%d: CUDA_VISIBLE_DEVICES shows %d GPUs", ordinal, env->n_visible_gpus);
            return;
        }
        if ((physical = parse_index(env->visible_gpus[ordinal])) < 0) {
            if (notes)
                append(notes, size, "CUDA_VISIBLE_DEVICES entry '%s' is not an index: GPU not located",
                       env->visible_gpus[ordinal]);
            return;
        }
    }
    if (physical >= n_gpus) {
        if (notes)
            append(notes, size, "GPU %d is not in the topology (%d GPUs)", physical, n_gpus);
        return;
    }
    *gpu = physical;
}

/* The NUMA node of os index `os` among the topology's, or NULL. */
static const pd_topo_numa *find_numa(const pd_topo *t, int os)
{
    for (int i = 0; i < t->n_numa; i++)
        if (t->numa[i].os_index == os)
            return &t->numa[i];
    return NULL;
}

/* The NUMA node holding logical cores first..last, -1 if several or none. */
static int numa_of_cores(const pd_topo *t, int first, int last)
{
    for (int i = 0; i < t->n_numa; i++) {
        const pd_topo_numa *m = &t->numa[i];
        if (m->cores > 0 && first >= m->first_core && last < m->first_core + m->cores)
            return m->os_index;
    }
    return -1;
}

/* The NIC for CPUs of NUMA node `numa`: among RDMA NICs if the node has
 * any (as each GPU's nearest NIC is chosen), one on that node, then the
 * fastest, then the first. */
static int nearest_nic(const pd_topo *t, int numa)
{
    bool any_rdma = false;
    int best = -1;

    for (int k = 0; k < t->n_nics; k++)
        any_rdma |= t->nics[k].rdma;
    for (int k = 0; k < t->n_nics; k++) {
        const pd_topo_nic *n = &t->nics[k];
        if (any_rdma && !n->rdma)
            continue;
        if (best < 0) {
            best = k;
            continue;
        }
        bool local = numa >= 0 && n->numa == numa, best_local = numa >= 0 && t->nics[best].numa == numa;
        if ((local && !best_local) || (local == best_local && n->bytes_per_s > t->nics[best].bytes_per_s))
            best = k;
    }
    return best;
}

/* Share `index` of `count` of `cores` cores from `first`: *at, *n. */
static void share(int first, int cores, int index, int count, int *at, int *n)
{
    *at = first + (int)((long long)index * cores / count);
    *n = first + (int)((long long)(index + 1) * cores / count) - *at;
}

/* A rank with a GPU: its NUMA node's cores, shared out among the local
 * ranks whose GPUs that node holds. */
static void gpu_cores(const pd_binding_input *in, pd_pipeline_binding *b, char *why, size_t size)
{
    const pd_topo *t = in->topo;
    const pd_topo_numa *m = find_numa(t, b->numa);
    int sharers = 0, index = 0;

    if (b->numa < 0 || !m) {
        b->numa = -1;
        append(why, size, "the NUMA node of GPU %d is not known", b->gpu);
        return;
    }
    if (m->cores == 0)
        return; /* memory only: the line says no cores */
    for (int q = 0; q < in->local_ranks; q++) {
        int cuda, gpu;
        rank_gpu(in, q, &cuda, &gpu, NULL, 0);
        if (gpu >= 0 && t->gpus[gpu].numa == b->numa) {
            sharers++;
            index += q < in->local_rank;
        }
    }
    if (sharers <= m->cores) {
        share(m->first_core, m->cores, index, sharers, &b->first_core, &b->cores);
        b->sharing = 1;
    } else {
        b->first_core = m->first_core;
        b->cores = m->cores;
        b->sharing = sharers;
    }
}

/* A rank without a GPU: the worker is a group of the node's cores, bound
 * only when every local rank can have one core at least. */
static void node_cores(const pd_binding_input *in, pd_pipeline_binding *b, char *why, size_t size)
{
    const pd_topo *t = in->topo;
    int cores = 0;

    for (int i = 0; i < t->n_numa; i++)
        cores += t->numa[i].cores;
    if (cores == 0 || cores != t->cores) {
        append(why, size, "the cores of the NUMA nodes are not known");
        return;
    }
    if (in->local_ranks > cores) {
        append(why, size, "%d local ranks on %d core%s", in->local_ranks, cores, cores == 1 ? "" : "s");
        return;
    }
    share(0, cores, in->local_rank, in->local_ranks, &b->first_core, &b->cores);
    b->sharing = 1;
    b->numa = numa_of_cores(t, b->first_core, b->first_core + b->cores - 1);
}

pd_status pd_binding_choose(const pd_binding_input *in, pd_pipeline_binding *out, char *why, char *notes,
                            size_t size)
{
    const pd_topo *t = in->topo;
    pd_pipeline_binding b = {
        .local_rank = in->local_rank,
        .local_ranks = in->local_ranks,
        .gpu = -1,
        .cuda_device = -1,
        .nic = -1,
        .numa = -1,
    };

    if (in->local_ranks < 1 || in->local_rank < 0 || in->local_rank >= in->local_ranks)
        return PD_ERROR(PD_EINVAL, "binding: local rank %d of %d ranks", in->local_rank, in->local_ranks);
    why[0] = notes[0] = '\0';
    rank_gpu(in, in->local_rank, &b.cuda_device, &b.gpu, notes, size);
    if (b.gpu >= 0) {
        const pd_topo_gpu *g = &t->gpus[b.gpu];
        snprintf(b.gpu_busid, sizeof(b.gpu_busid), "%s", g->pci_busid);
        b.nic = g->nic;
        b.numa = g->numa;
        gpu_cores(in, &b, why, size);
    } else {
        node_cores(in, &b, why, size);
        b.nic = nearest_nic(t, b.numa >= 0 ? b.numa : numa_of_cores(t, b.first_core, b.first_core));
    }
    if (b.nic >= 0) {
        snprintf(b.nic_name, sizeof(b.nic_name), "%s", t->nics[b.nic].name);
        b.nic_rdma = t->nics[b.nic].rdma;
    }
    if (b.cores == 0 && b.numa < 0 && !why[0])
        append(why, size, "nothing to bind to");
    *out = b;
    return PD_OK;
}

/* ---- the line ---- */

void pd_binding_format(pd_pipeline_binding *b, int rank, const char *why, const char *notes)
{
    char *line = b->line;
    const size_t size = sizeof(b->line);

    snprintf(line, size, "rank %d (local %d of %d): ", rank, b->local_rank, b->local_ranks);
    if (b->gpu >= 0 && b->cuda_device >= 0)
        add(line, size, "GPU %d (%s, cuda:%d)", b->gpu, b->gpu_busid, b->cuda_device);
    else if (b->gpu >= 0)
        add(line, size, "GPU %d (%s)", b->gpu, b->gpu_busid);
    else if (b->cuda_device >= 0)
        add(line, size, "GPU cuda:%d (not in the topology)", b->cuda_device);
    else
        add(line, size, "no GPU");
    if (b->nic >= 0)
        add(line, size, ", NIC %s%s%s", b->nic_name, b->nic_address[0] ? " at " : "", b->nic_address);
    else
        add(line, size, ", no NIC");
    if (b->numa >= 0)
        add(line, size, ", NUMA %d", b->numa);
    if (b->cores == 1)
        add(line, size, ", core %d", b->first_core);
    else if (b->cores > 1)
        add(line, size, ", cores %d-%d", b->first_core, b->first_core + b->cores - 1);
    if (b->cores > 0 && b->sharing > 1)
        add(line, size, " shared by %d ranks", b->sharing);
    if (why && why[0])
        add(line, size, "; not bound: %s", why);
    if (notes && notes[0])
        add(line, size, "; %s", notes);
}

/* ---- start-up ---- */

#define SYSFS_IB "/sys/class/infiniband"

/* The mode: *none for "none"; `source` names where it came from. */
static pd_status parse_mode(const char *bind, bool *none, const char **source)
{
    const char *env = getenv("PD_BIND");
    const char *mode = bind ? bind : env && *env ? env : "auto";

    *source = bind ? "--bind " : "PD_BIND=";
    if (strcmp(mode, "auto") != 0 && strcmp(mode, "none") != 0)
        return bind ? PD_ERROR(PD_EINVAL, "bind '%s': expected auto or none", mode)
                    : PD_ERROR(PD_EINVAL, "PD_BIND='%s': expected auto or none", mode);
    *none = strcmp(mode, "none") == 0;
    return PD_OK;
}

pd_status pd_pipeline_check_bind(const char *bind)
{
    const char *xml = getenv("PD_TOPO_XML"), *source;
    bool none;
    FILE *f;

    PD_CHECK(parse_mode(bind, &none, &source));
    if (none || !xml || !*xml)
        return PD_OK;
    if (!(f = fopen(xml, "r")))
        return PD_ERROR(PD_EIO, "PD_TOPO_XML: %s: cannot open: %s", xml, strerror(errno));
    fclose(f);
    return PD_OK;
}

/* The ranks on this rank's node (all of them share its first rank). */
static int count_local_ranks(const pd_boot *boot)
{
    int n = 0;

    if (!boot->procs)
        return 1;
    for (int r = 0; r < boot->ranks; r++)
        n += boot->procs[2 * r + 1] == boot->procs[2 * boot->rank + 1];
    return n;
}

/* The local rank from MPI (MPI_COMM_TYPE_SHARED) against the launcher's:
 * Open MPI's always, Slurm's when srun started this very rank (its
 * SLURM_PROCID and SLURM_NTASKS are MPI's: under mpirun in a batch job
 * they describe the batch step). MPI's is used. */
static void check_local_rank(const pd_boot *boot, const pd_slurm_env *env, char *notes, size_t size)
{
    const char *ompi = getenv("OMPI_COMM_WORLD_LOCAL_RANK");

    if (ompi && parse_index(ompi) != boot->local_rank)
        append(notes, size, "OMPI_COMM_WORLD_LOCAL_RANK=%s is not MPI's local rank %d (MPI's used)", ompi,
               boot->local_rank);
    if (env->local_rank >= 0 && env->rank == boot->rank && env->world_size == boot->ranks &&
        env->local_rank != boot->local_rank)
        append(notes, size, "SLURM_LOCALID=%d is not MPI's local rank %d (MPI's used)", env->local_rank,
               boot->local_rank);
}

/* The ordinal a device "cuda:N" names; -1 for any other. */
static int named_cuda_device(const char *device)
{
    return device && strncmp(device, "cuda:", 5) == 0 ? parse_index(device + 5) : -1;
}

/* Whether two topologies have the same cores in the same NUMA nodes. */
static bool same_cpus(const pd_topo *a, const pd_topo *b)
{
    if (a->cores != b->cores || a->n_numa != b->n_numa)
        return false;
    for (int i = 0; i < a->n_numa; i++)
        if (a->numa[i].os_index != b->numa[i].os_index || a->numa[i].cores != b->numa[i].cores ||
            a->numa[i].first_core != b->numa[i].first_core)
            return false;
    return true;
}

/* Binds this process as chosen, on this machine: the topology itself when
 * discovered here, else (PD_TOPO_XML) a quick discovery of this machine's
 * cores, used only when they are the XML's. */
static void bind_here(const pd_topo *topo, pd_pipeline_binding *b, char *why, size_t size)
{
    pd_topo *here = NULL;
    const pd_topo *place = topo;

    if (!topo->hwloc) {
        if (pd_topo_discover_cpus(&here) != PD_OK) {
            append(why, size, "%s", pd_last_error());
            return;
        }
        if (!same_cpus(topo, here)) {
            append(why, size, "PD_TOPO_XML describes another machine (%d cores in %d NUMA nodes; here %d in %d)",
                   topo->cores, topo->n_numa, here->cores, here->n_numa);
            pd_topo_destroy(here);
            return;
        }
        place = here;
    }
    if (pd_topo_bind_cores(place, b->first_core, b->cores, b->numa) == PD_OK)
        b->bound = true;
    else
        append(why, size, "%s", pd_last_error());
    pd_topo_destroy(here);
#ifdef _OPENMP
    /* The kernels' default, a thread per CPU of the whole machine, would
     * crowd the rank's share: one per core of it, unless told. */
    if (b->bound && b->cores > 0 && !getenv("OMP_NUM_THREADS"))
        omp_set_num_threads(b->cores / b->sharing > 1 ? b->cores / b->sharing : 1);
#endif
}

/* The IPv4 address of an RDMA NIC of this machine, from its network
 * interfaces: what the channels listen on (verbs binds that device). */
static void nic_address(const pd_topo *t, pd_pipeline_binding *b)
{
    char path[300], names[sizeof(t->nics[0].netdevs)], *save = NULL;
    struct ifaddrs *list;

    snprintf(path, sizeof(path), SYSFS_IB "/%s", b->nic_name);
    if (b->nic < 0 || !b->nic_rdma || access(path, F_OK) != 0 || getifaddrs(&list) != 0)
        return;
    snprintf(names, sizeof(names), "%s", t->nics[b->nic].netdevs);
    for (char *name = strtok_r(names, " ", &save); name && !b->nic_address[0]; name = strtok_r(NULL, " ", &save))
        for (struct ifaddrs *i = list; i && !b->nic_address[0]; i = i->ifa_next)
            if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
                strcmp(i->ifa_name, name) == 0)
                inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr,
                          b->nic_address, sizeof(b->nic_address));
    freeifaddrs(list);
}

/* The trainer's device: "cuda" becomes the rank's "cuda:N"; a GPU chosen
 * for a CPU run is said to be unused. */
static void use_device(pd_pipeline *p, pd_pipeline_binding *b, char *notes, size_t size)
{
    const char *device = p->opts.train.device;

    if (device && strcmp(device, "cuda") == 0 && b->cuda_device >= 0) {
        snprintf(b->device, sizeof(b->device), "cuda:%d", b->cuda_device);
        p->opts.train.device = b->device;
    } else if ((!device || strncmp(device, "cuda", 4) != 0) && (b->gpu >= 0 || b->cuda_device >= 0)) {
#ifdef HAVE_CUDA
        append(notes, size, "the GPU is not used: device %s", device ? device : "cpu");
#else
        append(notes, size, "the GPU is not used: device %s, a build without CUDA", device ? device : "cpu");
#endif
    }
}

pd_status pd_binding_setup(pd_pipeline *p)
{
    pd_boot *boot = &p->boot;
    pd_pipeline_binding *b = &boot->binding;
    const char *xml = getenv("PD_TOPO_XML"), *source;
    char why[192] = "", notes[sizeof(why)] = "";
    pd_slurm_env *env = NULL;
    pd_topo *topo = NULL;
    pd_binding_input in;
    bool none;
    pd_status s = PD_OK;

    PD_CHECK(parse_mode(p->opts.bind, &none, &source));
    *b = (pd_pipeline_binding){.local_rank = boot->local_rank,
                               .local_ranks = count_local_ranks(boot),
                               .gpu = -1,
                               .cuda_device = -1,
                               .nic = -1,
                               .numa = -1};
    if (none) {
        snprintf(b->line, sizeof(b->line), "rank %d (local %d of %d): not bound (%snone)", boot->rank,
                 b->local_rank, b->local_ranks, source);
        return PD_OK;
    }
    PD_CHECK(pd_slurm_env_read(NULL, NULL, &env));
    if (xml && *xml) {
        PD_CHECK_GOTO(pd_topo_load_xml(xml, &topo), s, done); /* its message names the file */
    } else if (pd_topo_discover(&topo) != PD_OK) {
        append(why, sizeof(why), "%s", pd_last_error());
        goto line;
    }
    in = (pd_binding_input){
        .topo = topo,
        .local_rank = b->local_rank,
        .local_ranks = b->local_ranks,
        .env = env,
        .cuda_device = named_cuda_device(p->opts.train.device),
    };
    PD_CHECK_GOTO(pd_binding_choose(&in, b, why, notes, sizeof(why)), s, done);
    if (!why[0])
        bind_here(topo, b, why, sizeof(why));
    if (xml && *xml && b->bound)
        append(notes, sizeof(notes), "chosen from PD_TOPO_XML=%s", xml);
    nic_address(topo, b);
    use_device(p, b, notes, sizeof(notes));
line:
    check_local_rank(boot, env, notes, sizeof(notes));
    pd_binding_format(b, boot->rank, why, notes);
done:
    pd_topo_destroy(topo);
    pd_slurm_env_destroy(env);
    return s;
}

void pd_pipeline_get_binding(const pd_pipeline *p, pd_pipeline_binding *out) { *out = p->boot.binding; }
