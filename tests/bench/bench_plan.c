/* The partitioner's speed and memory on PipeDream's published profiles:
 * pd_plan_solve for VGG16, ResNet-50, GNMT-16 (gnmt_large), Inception-v3
 * (branches collapsed, graph_compressed.txt) and NASNet-A Mobile and Large
 * (coarsened: millions of antichain states otherwise) on 4x4 and 8x4
 * hierarchies, with both cost models. Each case runs in a child process of its own, so
 * that its peak resident memory (getrusage) is its own; the wall time is
 * that of pd_plan_solve alone (the profile import is not counted).
 *
 * Targets (issue 4): ResNet-50 on 8x4 under 1 s, GNMT-large on 4x4 under
 * 60 s, every case under 1 GiB. Exit status 0 when every target is met,
 * 1 when one is missed, 2 for bad usage or missing profiles.
 *
 *   bench_plan [--profiles DIR] [--csv] [--timeout S] [--only MODEL] */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pipedream.h>
#include <pipedream/plan.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static const struct model {
    const char *name, *file;
    int batch;
} models[] = {
    {"vgg16", "vgg16/graph.txt", 128},
    {"resnet50", "resnet50/graph.txt", 128},
    {"gnmt_large", "gnmt_large/graph.txt", 32},
    {"inception_v3", "inception_v3/graph_compressed.txt", 128},
    {"nasnetamobile", "nasnetamobile/graph.txt", 128},
    {"nasnetalarge", "nasnetalarge/graph.txt", 16},
};

/* Workers per node x nodes: NVLink/PCIe-class links inside a node,
 * Ethernet between nodes (the paper's clusters A and B). */
static const struct hierarchy {
    const char *name, *levels;
} hierarchies[] = {
    {"4x4", "4x12GB/s,4x10Gb/s"},
    {"8x4", "8x25GB/s,4x25Gb/s"},
};

/* What a child reports back through its pipe. */
typedef struct result {
    int status; /* pd_status of the solve */
    double wall_ms, predicted_ms, speedup;
    long max_rss_kib;
    int stages, workers_used;
    int coarsened_from, coarsened_to; /* the plan's; 0 when not coarsened */
    char replicas[96];
    char message[256];
} result;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* The child: import, solve, measure, report. */
static void run_case(const char *path, const struct model *m, const struct hierarchy *h, pd_plan_cost_model cost,
                     int fd)
{
    pd_plan_options opts = {.cost_model = cost, .optimizer_state_factor = 1.0, .allow_fewer_workers = true};
    pd_plan_cluster cluster;
    pd_profile *profile = NULL;
    pd_plan *plan = NULL;
    struct rusage ru;
    result r = {0};
    double t0;

    r.status = pd_profile_import_graph_txt(path, m->name, m->batch, &profile);
    if (r.status == PD_OK)
        r.status = pd_plan_cluster_parse_levels(h->levels, &cluster);
    if (r.status == PD_OK) {
        t0 = now_ms();
        r.status = pd_plan_solve(profile, &cluster, &opts, &plan);
        r.wall_ms = now_ms() - t0;
    }
    if (r.status == PD_OK) {
        size_t used = 0;
        r.predicted_ms = plan->time_ms;
        r.speedup = plan->time_ms > 0 ? plan->single_worker_ms / plan->time_ms : 0;
        r.stages = plan->n_stages;
        r.workers_used = plan->workers_used;
        r.coarsened_from = plan->coarsened_from;
        r.coarsened_to = plan->coarsened_to;
        for (int k = 0; k < plan->n_stages && used < sizeof(r.replicas); k++) {
            int n = snprintf(r.replicas + used, sizeof(r.replicas) - used, "%s%d", k ? "-" : "",
                             plan->stages[k].replicas);
            used += n > 0 ? (size_t)n : 0;
        }
    } else {
        snprintf(r.message, sizeof(r.message), "%s", pd_last_error());
    }
    getrusage(RUSAGE_SELF, &ru);
    r.max_rss_kib = ru.ru_maxrss;
    pd_plan_destroy(plan);
    pd_profile_destroy(profile);
    if (write(fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
        _exit(3);
    _exit(0);
}

/* Runs one case in a child killed after `timeout_s`; *r gets its report,
 * or r->status PD_ETIMEOUT. */
static void measure(const char *path, const struct model *m, const struct hierarchy *h, pd_plan_cost_model cost,
                    int timeout_s, result *r)
{
    int fds[2], wstatus;
    pid_t pid;
    ssize_t got;

    memset(r, 0, sizeof(*r));
    fflush(stdout);
    if (pipe(fds) != 0 || (pid = fork()) < 0) {
        r->status = PD_EIO;
        snprintf(r->message, sizeof(r->message), "pipe/fork: %s", strerror(errno));
        return;
    }
    if (pid == 0) {
        close(fds[0]);
        alarm((unsigned)timeout_s); /* SIGALRM ends a case that runs too long */
        run_case(path, m, h, cost, fds[1]);
    }
    close(fds[1]);
    do
        got = read(fds[0], r, sizeof(*r));
    while (got < 0 && errno == EINTR);
    close(fds[0]);
    while (waitpid(pid, &wstatus, 0) < 0 && errno == EINTR)
        ;
    if (got != (ssize_t)sizeof(*r)) {
        memset(r, 0, sizeof(*r));
        r->status = PD_ETIMEOUT;
        if (WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGALRM)
            snprintf(r->message, sizeof(r->message), "still running after %d s", timeout_s);
        else
            snprintf(r->message, sizeof(r->message), "the child died (status 0x%x)", wstatus);
    }
}

/* The target a case is held to: a wall-time limit (ms, 0: none) and the
 * memory limit. Returns "ok" or what was missed. */
static const char *verdict(const struct model *m, const struct hierarchy *h, const result *r, double *limit_ms)
{
    *limit_ms = 0;
    if (strcmp(m->name, "resnet50") == 0 && strcmp(h->name, "8x4") == 0)
        *limit_ms = 1000;
    if (strcmp(m->name, "gnmt_large") == 0 && strcmp(h->name, "4x4") == 0)
        *limit_ms = 60000;
    if (r->status == PD_ETIMEOUT)
        return "TIMEOUT";
    if (r->status != PD_OK)
        return "FAILED";
    if (*limit_ms > 0 && r->wall_ms >= *limit_ms)
        return "SLOW";
    if ((double)r->max_rss_kib * 1024.0 >= GIB)
        return "MEMORY";
    return "ok";
}

static void usage(FILE *out)
{
    fprintf(out, "Usage: bench_plan [--profiles DIR] [--csv] [--timeout S] [--only MODEL]\n"
                 "Times pd_plan_solve on PipeDream's profiles (DIR, default profiles/pipedream)\n"
                 "for vgg16, resnet50, gnmt_large, inception_v3, nasnetamobile and nasnetalarge on\n"
                 "4x4 and 8x4 hierarchies with both cost models, each case in its own process (peak\n"
                 "RSS by getrusage), and checks the targets: resnet50 8x4 < 1 s, gnmt_large 4x4 < 60 s,\n"
                 "every case < 1 GiB. \"graph\" gives the planning graph's nodes before and after\n"
                 "coarsening where the solver coarsened it.\n");
}

int main(int argc, char **argv)
{
    static const struct option options[] = {
        {"profiles", required_argument, NULL, 'p'}, {"csv", no_argument, NULL, 'c'},
        {"timeout", required_argument, NULL, 't'},  {"only", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    const char *dir = "profiles/pipedream", *only = NULL;
    bool csv = false;
    int timeout_s = 600, c, missed = 0, ran = 0;

    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        switch (c) {
        case 'p': dir = optarg; break;
        case 'c': csv = true; break;
        case 't': timeout_s = atoi(optarg); break;
        case 'm': only = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (timeout_s < 1 || optind < argc) {
        usage(stderr);
        return 2;
    }
    if (csv)
        printf("model,hierarchy,cost_model,wall_ms,max_rss_mib,predicted_ms,speedup,stages,replicas,workers_used,"
               "target_ms,verdict,coarsened_from,coarsened_to\n");
    else
        printf("%-13s %-5s %-10s %12s %12s %14s %8s %7s  %-28s %-9s %s\n", "model", "hier", "cost", "wall ms",
               "peak RSS MiB", "predicted ms", "speedup", "stages", "replicas", "graph", "verdict");
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        char path[4096];
        struct stat st;

        if (only && strcmp(only, models[i].name) != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, models[i].file);
        if (stat(path, &st) != 0) {
            fprintf(stderr, "bench_plan: %s: %s (give --profiles DIR)\n", path, strerror(errno));
            return 2;
        }
        for (size_t j = 0; j < sizeof(hierarchies) / sizeof(hierarchies[0]); j++)
            for (int cost = PD_PLAN_COST_DEFAULT; cost <= PD_PLAN_COST_PIPEDREAM; cost++) {
                const char *cost_name = cost == PD_PLAN_COST_PIPEDREAM ? "pipedream" : "default";
                const char *v;
                double limit_ms;
                char graph[32] = "-";
                result r;

                measure(path, &models[i], &hierarchies[j], (pd_plan_cost_model)cost, timeout_s, &r);
                v = verdict(&models[i], &hierarchies[j], &r, &limit_ms);
                missed += strcmp(v, "ok") != 0;
                ran++;
                if (r.coarsened_from > 0)
                    snprintf(graph, sizeof(graph), "%d->%d", r.coarsened_from, r.coarsened_to);
                if (csv)
                    printf("%s,%s,%s,%.3f,%.1f,%.6g,%.4f,%d,%s,%d,%.0f,%s,%d,%d\n", models[i].name,
                           hierarchies[j].name, cost_name, r.wall_ms, (double)r.max_rss_kib / 1024.0, r.predicted_ms,
                           r.speedup, r.stages, r.replicas, r.workers_used, limit_ms, v, r.coarsened_from,
                           r.coarsened_to);
                else
                    printf("%-13s %-5s %-10s %12.1f %12.1f %14.3f %8.3f %7d  %-28s %-9s %s%s%s\n", models[i].name,
                           hierarchies[j].name, cost_name, r.wall_ms, (double)r.max_rss_kib / 1024.0,
                           r.predicted_ms, r.speedup, r.stages, r.replicas, graph, v, r.message[0] ? ": " : "",
                           r.message);
                fflush(stdout);
            }
    }
    if (!csv)
        printf("%d case(s), %d missed a target (resnet50 8x4 < 1000 ms, gnmt_large 4x4 < 60000 ms, RSS < 1 GiB)\n",
               ran, missed);
    return missed ? 1 : 0;
}
