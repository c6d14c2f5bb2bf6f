/* `pipedream train --plan P --profile F ...`: one rank of a pipeline job
 * under mpirun (include/pipedream/pipeline.h). `--np N` re-executes the
 * same command line under `mpirun -np N` for a run on this machine. Rank 0
 * prints the JSON summary; a rank that fails prints its message and stops
 * the whole job. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pipedream/pipeline.h>

#include "cli/pd_cli.h"

void pd_cli_train_pipeline_usage(FILE *out)
{
    fprintf(out,
            "Pipeline (PipeDream) training, one process per rank under mpirun:\n"
            "  --plan FILE            a *.plan.json (pipedream plan); runs the pipeline:\n"
            "                         mpirun -np N pipedream train --plan P --profile F ...\n"
            "  --plan auto            rank 0 profiles the model (or reads --profile) and\n"
            "                         plans it for the job's ranks; the default with --np\n"
            "  --profile FILE         the profile the plan was made from (its node names\n"
            "                         are the model's)\n"
            "  --levels LEVELS        --plan auto: the ranks' levels, e.g. 4x10GB/s\n"
            "                         (default: all ranks on this node, at the bandwidth\n"
            "                         topology discovery finds)\n"
            "  --schedule NAME        1f1b (default), gpipe, dp or straight\n"
            "  --microbatches N       gpipe: minibatches per flush (default stages x replicas)\n"
            "  --vertical-sync        1f1b: every stage uses stage 0's weight version\n"
            "  --weight-versions 2    1f1b as PipeDream-2BW: two weight versions per stage\n"
            "                         (not one per minibatch in flight); the gradients of\n"
            "                         --accumulate minibatches make one update, batch k\n"
            "                         runs on the weights after k - 1 updates\n"
            "  --accumulate M         2BW: minibatches per update (default: the pipeline's\n"
            "                         depth, more when replicas need it)\n"
            "  --overlap-allreduce    1f1b, replicated stages: step after the next forward\n"
            "                         (which then runs on weights a round old) instead of\n"
            "                         right after the gradient all-reduce\n"
            "  --np N                 run N ranks here: executes mpirun -np N on this command\n"
            "                         ($MPIRUN overrides the launcher; Open MPI may\n"
            "                         oversubscribe the cores and run as root; each rank\n"
            "                         gets cores/N OpenMP threads unless OMP_NUM_THREADS)\n"
            "  --timeout S            fail when a peer is silent for S seconds (default 20)\n"
            "  --transport LIST       channel backends in preference order (default shm,tcp)\n"
            "  --bind auto|none       auto (default, or $PD_BIND): each rank binds to the GPU\n"
            "                         of its local rank (CUDA_VISIBLE_DEVICES), the NIC\n"
            "                         nearest to it and its NUMA node's share of the cores\n"
            "                         and memory (CPU-only: a share of the node's cores),\n"
            "                         from the topology ($PD_TOPO_XML: an hwloc XML instead\n"
            "                         of discovery) and prints where; none: no binding\n"
            "  --progress-every S     every rank prints a progress line every S seconds\n"
            "                         (default 10): samples/s, loss and accuracy (last\n"
            "                         stage), seconds spent waiting for each peer\n"
            "  --progress-thread on|off  on (default): a thread per rank progresses its\n"
            "                         channels while the rank computes (not with the mpi\n"
            "                         transport); off: only the compute thread does\n"
            "  --channel-memory host|device|auto  where the channels' send buffers and\n"
            "                         receive slots live: host (activations and gradients\n"
            "                         cross host memory), device (the rank's device memory:\n"
            "                         copied device to device, sent over the transport's\n"
            "                         direct path or staged through pinned host memory;\n"
            "                         on the cpu device it stages); auto (default): device\n"
            "                         unless the device is the cpu\n"
            "  --steps (a multiple of every stage's replicas) or --epochs (each rounded\n"
            "  down to such a multiple); the test split is evaluated through the pipeline\n"
            "  after every epoch, every --eval-every steps and at the end; rank 0 writes\n"
            "  --metrics with every minibatch's loss and the test accuracies.\n"
            "  --checkpoint-dir DIR: every stage writes DIR/step-N/stage-S-of-K.safetensors\n"
            "  (layer names as above) after the last step and every --checkpoint-every\n"
            "  steps, and rank 0 commits the set in DIR/checkpoint.json; --resume DIR\n"
            "  continues from the last committed set, also under another plan.\n"
            "  Rank 0's JSON summary: model, ranks, stages, batch, minibatches, epochs,\n"
            "  final_loss, test_accuracy, test_samples, train_seconds, eval_seconds,\n"
            "  images_per_s (all ranks together).\n");
}

/* For a run on this machine with no flags: Open MPI's mpirun refuses more
 * ranks than cores and root without these (other launchers ignore them),
 * and ranks sharing the cores run one OpenMP thread each unless told. */
static void local_run_environment(int64_t np)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    char threads[24];

    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
    if (geteuid() == 0) {
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    }
    snprintf(threads, sizeof(threads), "%ld", cores > np ? cores / (long)np : 1L);
    setenv("OMP_NUM_THREADS", threads, 0);
}

/* Replaces this process with `mpirun -np N <this program> <argv without
 * --np>`, adding `--plan auto` when no plan was given. */
static int exec_mpirun(int argc, char **argv, int64_t np, bool automatic)
{
    const char *mpirun = getenv("MPIRUN") ? getenv("MPIRUN") : "mpirun";
    char **args = calloc((size_t)argc + 8, sizeof(*args));
    char count[24], exe[4096];
    int n = 0;
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

    if (!args || len <= 0) {
        free(args);
        pd_cli_error("train: --np: cannot find this program to launch");
        return PD_CLI_FAILURE;
    }
    exe[len] = '\0';
    snprintf(count, sizeof(count), "%lld", (long long)np);
    args[n++] = (char *)mpirun;
    args[n++] = "-np";
    args[n++] = count;
    args[n++] = exe;
    args[n++] = "train";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--np") == 0) {
            i++;
            continue;
        }
        if (strncmp(argv[i], "--np=", 5) == 0)
            continue;
        args[n++] = argv[i];
    }
    if (automatic) {
        args[n++] = "--plan";
        args[n++] = "auto";
    }
    args[n] = NULL;
    local_run_environment(np);
    fflush(NULL);
    execvp(mpirun, args);
    pd_cli_error("train: --np: cannot run %s: %s", mpirun, strerror(errno));
    free(args);
    return PD_CLI_FAILURE;
}

static int check_args(pd_trainer_options *t, const pd_cli_pipeline_args *pa, pd_pipeline_options *o)
{
    const bool automatic = !pa->plan || strcmp(pa->plan, "auto") == 0;
    if (!automatic && !pa->profile) {
        pd_cli_error("train: --plan %s needs the --profile it was made from", pa->plan);
        return PD_CLI_USAGE;
    }
    if (pa->levels && !automatic) {
        pd_cli_error("train: --levels is for --plan auto (a plan file has its cluster)");
        return PD_CLI_USAGE;
    }
    if (pa->weight_versions && pa->weight_versions != PD_WEIGHT_VERSIONS_2BW) {
        pd_cli_error("train: --weight-versions %lld: only 2 (PipeDream-2BW, double-buffered weights); without the "
                     "option every minibatch in flight keeps its own version", (long long)pa->weight_versions);
        return PD_CLI_USAGE;
    }
    if (pa->accumulate && !pa->weight_versions) {
        pd_cli_error("train: --accumulate is for --weight-versions 2 (PipeDream-2BW)");
        return PD_CLI_USAGE;
    }
    if (pa->progress_thread && strcmp(pa->progress_thread, "on") != 0 && strcmp(pa->progress_thread, "off") != 0) {
        pd_cli_error("train: --progress-thread '%s': expected on or off", pa->progress_thread);
        return PD_CLI_USAGE;
    }
    *o = (pd_pipeline_options){
        .train = *t,
        .plan_path = automatic ? "auto" : pa->plan,
        .profile_path = pa->profile,
        .levels = pa->levels,
        .microbatches = (int)pa->microbatches,
        .vertical_sync = pa->vertical_sync,
        .overlap_allreduce = pa->overlap_allreduce,
        .weight_versions = (int)pa->weight_versions,
        .accumulate = (int)pa->accumulate,
        .backends = pa->transport,
        .timeout_ms = (int)(pa->timeout * 1000),
        .progress_seconds = pa->quiet ? -1.0 : pa->progress,
        .bind = pa->bind,
        .channel_memory = pa->channel_memory,
        .progress_thread = !pa->progress_thread ? 0 : strcmp(pa->progress_thread, "on") == 0 ? 1 : -1,
    };
    if (pa->schedule && pd_sched_type_parse(pa->schedule, &o->schedule) != PD_OK) {
        pd_cli_error("train: --schedule: %s", pd_last_error());
        return PD_CLI_USAGE;
    }
    if (pd_pipeline_check_bind(pa->bind) != PD_OK) {
        pd_cli_error("train: %s", pd_last_error());
        return PD_CLI_USAGE;
    }
    if (pd_pipeline_check_options(o) != PD_OK) {
        pd_cli_error("train: %s", pd_last_error());
        return PD_CLI_USAGE;
    }
    return -1;
}

/* Rank 0's JSON line. */
static void print_summary(const pd_trainer_options *t, const pd_pipeline_info *info, const pd_pipeline_result *r)
{
    printf("{\"model\":\"%s\",\"ranks\":%d,\"stages\":%d,\"batch\":%d,\"minibatches\":%lld,\"epochs\":%.4f,"
           "\"final_loss\":",
           t->model, info->ranks, info->n_stages, info->batch, (long long)r->minibatches, r->epochs);
    if (isfinite(r->final_loss))
        printf("%.6f", (double)r->final_loss);
    else
        printf("null");
    printf(",\"test_accuracy\":");
    if (isfinite(r->test_accuracy))
        printf("%.6f", r->test_accuracy);
    else
        printf("null");
    printf(",\"test_samples\":%lld,\"train_seconds\":%.3f,\"eval_seconds\":%.3f,\"images_per_s\":%.1f}\n",
           (long long)r->test_samples, r->seconds, r->eval_seconds, r->samples_per_s);
    fflush(stdout);
}

int pd_cli_train_pipeline(int argc, char **argv, struct pd_trainer_options *t, const pd_cli_pipeline_args *pa)
{
    pd_pipeline_options o;
    pd_pipeline *p = NULL;
    pd_pipeline_info info;
    pd_pipeline_binding binding;
    pd_pipeline_result r;
    pd_status s;
    int code;

#ifndef HAVE_MPI
    if (pa->np > 1) {
        pd_cli_error("train: --np %lld: this build has no MPI (configure found none; see --with-mpi)",
                     (long long)pa->np);
        return PD_CLI_USAGE;
    }
#endif
    /* Bad options stop here, before any rank starts. */
    if ((code = check_args(t, pa, &o)) >= 0)
        return code;
    if (pa->np)
        return exec_mpirun(argc, argv, pa->np, !pa->plan);
    if ((s = pd_pipeline_create(&o, &p)) != PD_OK)
        goto fail;
    pd_pipeline_get_info(p, &info);
    pd_pipeline_get_binding(p, &binding);
    if (!pa->quiet)
        fprintf(stderr, "pipedream: %s\n", binding.line);
    char accumulate[64] = "";
    if (info.accumulate)
        snprintf(accumulate, sizeof(accumulate), " (2BW, an update every %d minibatches)", info.accumulate);
    if (!pa->quiet)
        fprintf(stderr, "pipedream: rank %d of %d (pid %ld): stage %d of %d, replica %d of %d, %lld parameters, "
                        "%.2f of the model's %.2f MB allocated, %d in flight, %d weight versions%s, channels in %s\n", info.rank,
                info.ranks, (long)getpid(), info.stage, info.n_stages, info.replica, info.replicas,
                (long long)info.parameters, (double)info.allocated_bytes / 1e6, (double)info.model_bytes / 1e6,
                info.in_flight, info.weight_versions, accumulate, info.channel_memory);
    if ((s = pd_pipeline_run(p)) != PD_OK)
        goto fail;
    pd_pipeline_get_result(p, &r);
    if (info.rank == 0)
        print_summary(t, &info, &r);
    pd_pipeline_destroy(p);
    return PD_CLI_OK;
fail:
    pd_cli_error("train: %s", pd_last_error());
    code = pd_cli_exit_code(s);
    pd_pipeline_abort(code);
    pd_pipeline_destroy(p);
    return code;
}
