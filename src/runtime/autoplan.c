/* `--plan auto`: rank 0 profiles the model on its device for the run's
 * data (geometry and classes from the training data as the trainer
 * resolves them, images or S2VT's sequences, the run's batch),
 * or takes the profile it was given, and plans it for every rank of the
 * job on this node (one level of as many workers as ranks, at the
 * bandwidth and latency topology discovery finds between this node's
 * workers) or on the levels it was given. The profile and plan files
 * travel to every rank as text (MPI_Bcast), so that nothing but rank 0's
 * view of the machine decides, and every rank reads them as it would
 * files given on the command line. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef HAVE_MPI
#include <mpi.h>
#endif

#include <pipedream/log.h>
#include <pipedream/plan.h>
#include <pipedream/profile.h>
#include <pipedream/topology.h>

#include "runtime/pd_runtime_int.h"

#define PROFILE_WARMUP 1
#define PROFILE_ITERATIONS 3

static pd_status measure(const pd_pipeline_options *o, pd_profile **out)
{
    const pd_profile_options popts = {.warmup = PROFILE_WARMUP, .iterations = PROFILE_ITERATIONS};
    pd_model_options mo;
    pd_device *dev;
    pd_status s;

    PD_CHECK(pd_trainer_data_geometry(&o->train, &mo));
    PD_CHECK(pd_device_open(o->train.device ? o->train.device : "cpu", &dev));
    s = dev->ops->set_precision(dev, o->train.precision); /* timed as it will train */
    if (s == PD_OK)
        s = pd_profile_measure(o->train.model, &mo, dev, o->train.seed, &popts, out);
    pd_device_close(dev);
    return s;
}

/* `ranks` workers on one level at this node's innermost link. */
static pd_status local_cluster(int ranks, pd_plan_cluster *out)
{
    const pd_cluster_network net = {.bandwidth_bytes_per_s = 0, .latency_s = -1};
    pd_cluster *c = NULL;
    pd_topo *t;
    pd_status s;

    PD_CHECK(pd_topo_discover(&t));
    s = pd_cluster_build(t, 1, &net, &c);
    pd_topo_destroy(t);
    PD_CHECK(s);
    *out = (pd_plan_cluster){.n_levels = 1};
    snprintf(out->levels[0].name, sizeof(out->levels[0].name), "rank");
    out->levels[0].fanout = ranks;
    out->levels[0].bandwidth_bytes_per_s = c->levels[0].bandwidth_bytes_per_s;
    out->levels[0].latency_s = c->levels[0].latency_s;
    pd_cluster_destroy(c);
    return PD_OK;
}

static pd_status read_text(const char *path, char **text, int64_t *len)
{
    FILE *f = fopen(path, "rb");
    long n;

    if (!f)
        return PD_ERROR(PD_EIO, "pipeline: cannot read %s: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0 ||
        !(*text = malloc((size_t)n + 1)) || fread(*text, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        return PD_ERROR(PD_EIO, "pipeline: cannot read %s", path);
    }
    fclose(f);
    *len = n;
    return PD_OK;
}

#ifdef HAVE_MPI
/* Other ranks write what rank 0 sent them. */
static pd_status write_text(const char *path, const char *text, int64_t len)
{
    FILE *f = fopen(path, "wb");

    if (!f)
        return PD_ERROR(PD_EIO, "pipeline: cannot write %s: %s", path, strerror(errno));
    size_t done = fwrite(text, 1, (size_t)len, f);
    if ((fclose(f) != 0) | (done != (size_t)len))
        return PD_ERROR(PD_EIO, "pipeline: cannot write %s", path);
    return PD_OK;
}
#endif

/* Rank 0: the profile and the plan, as files in `dir`. */
static pd_status make_plan(pd_pipeline *p, const char *profile_path, const char *plan_path)
{
    const pd_pipeline_options *o = &p->opts;
    const pd_plan_options popts = {
        .optimizer_state_factor = o->train.optimizer == PD_OPTIMIZER_ADAM ? 2.0 : o->train.momentum > 0 ? 1.0 : 0.0,
        .allow_fewer_workers = false,
    };
    pd_profile *profile = NULL;
    pd_plan_cluster cluster;
    pd_plan *plan = NULL;
    pd_status s;

    if (o->profile_path)
        PD_CHECK(pd_profile_read_json(o->profile_path, &profile));
    else
        PD_CHECK(measure(o, &profile));
    if (o->levels)
        s = pd_plan_cluster_parse_levels(o->levels, &cluster);
    else
        s = local_cluster(p->boot.ranks, &cluster);
    if (s == PD_OK && pd_plan_cluster_workers(&cluster) != p->boot.ranks)
        s = PD_ERROR(PD_EINVAL, "pipeline: the levels '%s' give %d workers, the job has %d ranks", o->levels,
                     pd_plan_cluster_workers(&cluster), p->boot.ranks);
    if (s == PD_OK)
        s = pd_plan_solve(profile, &cluster, &popts, &plan);
    if (s == PD_OK)
        s = pd_profile_write_json(profile, profile_path);
    if (s == PD_OK)
        s = pd_plan_write_json(plan, profile, plan_path);
    if (s == PD_OK && o->progress_seconds >= 0) {
        fprintf(stderr, "pipedream: --plan auto: %s profiled on rank 0, planned for %d ranks:\n", o->train.model,
                p->boot.ranks);
        pd_plan_print(plan, profile, stderr);
    }
    pd_plan_destroy(plan);
    pd_profile_destroy(profile);
    return s;
}

/* Sends the file at `path` from rank 0, where `made` says whether it
 * was made, to every rank, which writes it at `path` (its own temporary
 * directory). A rank that fails here returns at once: its caller aborts
 * the job. */
static pd_status share_file(pd_pipeline *p, const char *path, pd_status made)
{
    char *text = NULL;
    int64_t len = -1;
    pd_status s = made;

    if (p->boot.rank == 0 && s == PD_OK && (s = read_text(path, &text, &len)) != PD_OK)
        len = -1;
#ifdef HAVE_MPI
    MPI_Bcast(&len, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    if (len < 0)
        return p->boot.rank == 0 ? s : PD_ERROR(PD_ESTATE, "pipeline: --plan auto failed on rank 0 (see its message)");
    if (p->boot.rank != 0 && !(text = malloc((size_t)len + 1)))
        return PD_ERROR(PD_ENOMEM, "pipeline: out of host memory for the plan");
    for (int64_t at = 0; at < len; at += 1 << 30) {
        int chunk = (int)(len - at < (1 << 30) ? len - at : (1 << 30));
        MPI_Bcast(text + at, chunk, MPI_CHAR, 0, MPI_COMM_WORLD);
    }
    if (p->boot.rank != 0)
        s = write_text(path, text, len);
#endif
    free(text);
    return s;
}

pd_status pd_autoplan(pd_pipeline *p)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char dir[4096], profile_path[4200], plan_path[4200];
    pd_status s = PD_OK, made = PD_OK;

    if ((size_t)snprintf(dir, sizeof(dir), "%s/pipedream-plan-XXXXXX", tmp) >= sizeof(dir) || !mkdtemp(dir))
        s = PD_ERROR(PD_EIO, "pipeline: cannot create a temporary directory in %s: %s", tmp, strerror(errno));
    snprintf(profile_path, sizeof(profile_path), "%s/auto.profile.json", dir);
    snprintf(plan_path, sizeof(plan_path), "%s/auto.plan.json", dir);
    if (p->boot.rank == 0)
        made = s != PD_OK ? s : make_plan(p, profile_path, plan_path);
    pd_status a = share_file(p, profile_path, made);
    pd_status b = a == PD_OK ? share_file(p, plan_path, made) : a;
    s = s != PD_OK ? s : b;
    if (s == PD_OK)
        s = pd_profile_read_json(profile_path, &p->profile);
    if (s == PD_OK)
        s = pd_plan_read_json(plan_path, p->profile, &p->plan);
    unlink(profile_path);
    unlink(plan_path);
    rmdir(dir);
    return s;
}
