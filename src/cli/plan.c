/* `pipedream plan`: partitions a profiled model over a hierarchy of workers
 * (or evaluates a hand-written partition), prints the plan as a table and
 * writes the `*.plan.json` the runtime and the simulator read. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream.h>
#include <pipedream/plan.h>
#include <pipedream/profile.h>

#include "cli/pd_cli.h"

typedef struct plan_args {
    pd_cli_inputs in;
    const char *override, *output;
    pd_plan_options opts;
    bool memory_given, optimizer_state_given, coarsen_given, json;
} plan_args;

enum {
    OPT_COST_MODEL = 256,
    OPT_MEMORY,
    OPT_OPTIMIZER_STATE,
    OPT_STRAIGHT,
    OPT_MEMORY_CONSTRAINT,
    OPT_FEWER_MACHINES,
    OPT_COMPRESSION,
    OPT_NO_FEWER_WORKERS,
    OPT_COLLAPSE,
    OPT_COARSEN,
    OPT_EXPLAIN,
    OPT_OVERRIDE,
    OPT_JSON,
};

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: pipedream plan (--profile FILE | --graph-txt FILE) (--levels LEVELS | --cluster FILE)\n"
            "                      [options]\n"
            "       pipedream plan (--profile FILE | --graph-txt FILE) --override PLAN\n"
            "                      [--levels LEVELS | --cluster FILE]\n"
            "\n"
            "Splits a profiled model's layers into pipeline stages, gives each stage a number\n"
            "of replicas and the ranks that run them, and predicts the time per minibatch:\n"
            "PipeDream's dynamic program, one level of the machine hierarchy at a time.\n"
            "Prints a table (per stage its layers, replicas, ranks, compute, weight sync and\n"
            "communication ms, memory per replica, in-flight minibatches, and which term\n"
            "bounds it) and the speedups over one worker and over data parallelism; -o\n"
            "writes the plan file (docs/plan-format.md).\n"
            "\n"
            "With --override, reads a plan file (one written by -o or a hand-written one:\n"
            "stage boundaries and replicas), checks it covers every layer once with no edge\n"
            "running backwards, and predicts its times under the default cost model.\n"
            "\n"
            "Options:\n"
            "  --profile FILE          a .profile.json (pipedream profile -o)\n"
            "  --graph-txt FILE        a PipeDream graph.txt profile; the model is named\n"
            "                          after its directory (vgg16/graph.txt: vgg16)\n"
            "  --batch-size N          the minibatch size graph.txt was measured with\n"
            "                          (shown in the plan; default 0 = unknown)\n"
            "  --levels LEVELS         workers per level and the level's bandwidth,\n"
            "                          innermost first, e.g. 4x12GB/s,4x10Gb/s (units B/s,\n"
            "                          KB/s, MB/s, GB/s, TB/s, b/s, Kb/s, Mb/s, Gb/s, Tb/s;\n"
            "                          a bare number is bytes/s). With --override, the\n"
            "                          plan file's cluster is used when it has one\n"
            "  --cluster FILE          the levels of a .cluster.json (pipedream topo -o, or\n"
            "                          the shipped clusters: cluster-a, cluster-b, ...)\n"
            "  --cost-model M          default: activation transfers overlapped with\n"
            "                          compute, ring all-reduce among replicas, data loading\n"
            "                          and memory per stage; pipedream: the original\n"
            "                          optimizer's model exactly (default: default)\n"
            "  --memory SIZE           device memory per worker, e.g. 16GB, 32GiB or bytes;\n"
            "                          plans that do not fit are refused (default model:\n"
            "                          default unlimited; pipedream model: with\n"
            "                          --use-memory-constraint, default 16GB)\n"
            "  --optimizer-state F     optimizer state bytes per weight byte: 0 plain SGD,\n"
            "                          1 SGD with momentum, 2 Adam (default 1; default model)\n"
            "  --no-fewer-workers      use every worker, even when fewer would be faster\n"
            "                          (default model)\n"
            "  --straight-pipeline     pipedream model: one replica per stage\n"
            "  --use-memory-constraint pipedream model: refuse stages over --memory\n"
            "  --use-fewer-machines    pipedream model: allow fewer workers than given\n"
            "  --activation-compression-ratio R\n"
            "                          pipedream model: count activation transfers,\n"
            "                          divided by R (without it they are not counted)\n"
            "  --collapse-branches     merge chains inside branches first (PipeDream's\n"
            "                          compress_graph_branches; for branchy models)\n"
            "  --coarsen auto|none     a graph with too many antichain states (NASNet):\n"
            "                          merge ranges of its layers, cutting where fewest\n"
            "                          activations are live, and say so (auto, default),\n"
            "                          or refuse it (none)\n"
            "  --explain               say why the next-best alternative lost\n"
            "  --override PLAN         evaluate this plan file instead of solving\n"
            "  -o, --output FILE       write the plan to FILE (*.plan.json)\n"
            "  --json                  print the plan file's JSON instead of the table\n"
            "  --help                  this text\n");
}

/* "16GB", "32GiB", "1.5e10": bytes, with an optional unit. */
static int parse_memory(const char *text, double *out)
{
    static const struct {
        const char *name;
        double bytes;
    } units[] = {{"B", 1},        {"KB", 1e3},          {"MB", 1e6},          {"GB", 1e9},
                 {"TB", 1e12},    {"KiB", 1024.0},      {"MiB", 1048576.0},   {"GiB", 1073741824.0},
                 {"TiB", 1099511627776.0}};
    char *end;
    double v;

    errno = 0;
    v = isdigit((unsigned char)text[0]) || (text[0] == '.' && isdigit((unsigned char)text[1])) ? strtod(text, &end)
                                                                                               : -1;
    if (v < 0) {
        pd_cli_error("plan: --memory: '%s' is not a size (e.g. 16GB, 32GiB or a number of bytes)", text);
        return -1;
    }
    if (*end) {
        size_t i;
        for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
            if (strcmp(end, units[i].name) == 0)
                break;
        if (i == sizeof(units) / sizeof(units[0])) {
            pd_cli_error("plan: --memory: unknown unit '%s' in '%s' (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", end,
                         text);
            return -1;
        }
        v *= units[i].bytes;
    }
    if (errno == ERANGE || !isfinite(v) || !(v > 0)) {
        pd_cli_error("plan: --memory: '%s' is not a size > 0", text);
        return -1;
    }
    *out = v;
    return 0;
}

/* --coarsen auto|none. */
static int parse_coarsen(const char *text, pd_plan_coarsen *out)
{
    if (strcmp(text, "auto") == 0)
        *out = PD_PLAN_COARSEN_AUTO;
    else if (strcmp(text, "none") == 0)
        *out = PD_PLAN_COARSEN_NONE;
    else {
        pd_cli_error("plan: --coarsen: '%s' is not auto or none", text);
        return -1;
    }
    return 0;
}

/* The first option given that the chosen mode ignores, or NULL. */
static const char *misplaced_option(const plan_args *a)
{
    const pd_plan_options *o = &a->opts;

    if (a->override)
        return o->explain                     ? "--explain"
               : o->collapse_branches         ? "--collapse-branches"
               : a->coarsen_given             ? "--coarsen"
               : !o->allow_fewer_workers      ? "--no-fewer-workers"
               : o->straight_pipeline         ? "--straight-pipeline"
               : o->use_memory_constraint     ? "--use-memory-constraint"
               : o->use_fewer_machines        ? "--use-fewer-machines"
               : o->activation_compression_ratio ? "--activation-compression-ratio"
                                                 : NULL;
    if (o->cost_model == PD_PLAN_COST_PIPEDREAM)
        return a->optimizer_state_given                      ? "--optimizer-state"
               : !o->allow_fewer_workers                     ? "--no-fewer-workers"
               : a->memory_given && !o->use_memory_constraint ? "--memory (without --use-memory-constraint)"
                                                              : NULL;
    return o->straight_pipeline              ? "--straight-pipeline"
           : o->use_memory_constraint        ? "--use-memory-constraint"
           : o->use_fewer_machines           ? "--use-fewer-machines"
           : o->activation_compression_ratio ? "--activation-compression-ratio"
                                             : NULL;
}

/* Fills *a from the command line. Returns -1 to go on, else an exit code. */
static int parse_args(int argc, char **argv, plan_args *a)
{
    static const struct option options[] = {
        PD_CLI_INPUT_OPTIONS,
        {"cost-model", required_argument, NULL, OPT_COST_MODEL},
        {"memory", required_argument, NULL, OPT_MEMORY},
        {"optimizer-state", required_argument, NULL, OPT_OPTIMIZER_STATE},
        {"straight-pipeline", no_argument, NULL, OPT_STRAIGHT},
        {"use-memory-constraint", no_argument, NULL, OPT_MEMORY_CONSTRAINT},
        {"use-fewer-machines", no_argument, NULL, OPT_FEWER_MACHINES},
        {"activation-compression-ratio", required_argument, NULL, OPT_COMPRESSION},
        {"no-fewer-workers", no_argument, NULL, OPT_NO_FEWER_WORKERS},
        {"collapse-branches", no_argument, NULL, OPT_COLLAPSE},
        {"coarsen", required_argument, NULL, OPT_COARSEN},
        {"explain", no_argument, NULL, OPT_EXPLAIN},
        {"override", required_argument, NULL, OPT_OVERRIDE},
        {"output", required_argument, NULL, 'o'},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *misplaced;
    int c, taken, bad = 0;

    *a = (plan_args){.opts = {.optimizer_state_factor = 1.0, .allow_fewer_workers = true}};
    opterr = 0;
    while (!bad && (c = getopt_long(argc, argv, ":ho:", options, NULL)) != -1) {
        if ((taken = pd_cli_inputs_option(&a->in, c, optarg)) != 0) {
            bad = taken < 0;
            continue;
        }
        switch (c) {
        case OPT_COST_MODEL: bad = pd_cli_parse_cost_model("plan", optarg, &a->opts.cost_model); break;
        case OPT_MEMORY:
            bad = parse_memory(optarg, &a->opts.memory_bytes);
            a->memory_given = true;
            break;
        case OPT_OPTIMIZER_STATE:
            bad = pd_cli_parse_double("--optimizer-state", optarg, 0, 64, &a->opts.optimizer_state_factor);
            a->optimizer_state_given = true;
            break;
        case OPT_STRAIGHT: a->opts.straight_pipeline = true; break;
        case OPT_MEMORY_CONSTRAINT: a->opts.use_memory_constraint = true; break;
        case OPT_FEWER_MACHINES: a->opts.use_fewer_machines = true; break;
        case OPT_COMPRESSION:
            bad = pd_cli_parse_double("--activation-compression-ratio", optarg, 1e-9, 1e9,
                                      &a->opts.activation_compression_ratio);
            break;
        case OPT_NO_FEWER_WORKERS: a->opts.allow_fewer_workers = false; break;
        case OPT_COLLAPSE: a->opts.collapse_branches = true; break;
        case OPT_COARSEN:
            bad = parse_coarsen(optarg, &a->opts.coarsen);
            a->coarsen_given = true;
            break;
        case OPT_EXPLAIN: a->opts.explain = true; break;
        case OPT_OVERRIDE: a->override = optarg; break;
        case 'o': a->output = optarg; break;
        case OPT_JSON: a->json = true; break;
        case 'h': usage(stdout); return PD_CLI_OK;
        default: pd_cli_option_error("plan", c, argv, optind); return PD_CLI_USAGE;
        }
    }
    if (bad)
        return PD_CLI_USAGE;
    if (optind < argc) {
        pd_cli_error("plan: unexpected argument '%s' (see 'pipedream plan --help')", argv[optind]);
        return PD_CLI_USAGE;
    }
    if ((c = pd_cli_inputs_check("plan", &a->in)) >= 0)
        return c;
    if (!a->in.levels && !a->in.cluster && !a->override) {
        pd_cli_error("plan: --levels or --cluster is needed, e.g. --levels 4x12GB/s,4x10Gb/s (see 'pipedream plan "
                     "--help')");
        return PD_CLI_USAGE;
    }
    if (a->output && !a->output[0]) {
        pd_cli_error("plan: -o: an empty file name");
        return PD_CLI_USAGE;
    }
    if ((misplaced = misplaced_option(a))) {
        pd_cli_error("plan: %s does not apply %s", misplaced,
                     a->override ? "to --override (it evaluates the given stages)"
                     : a->opts.cost_model == PD_PLAN_COST_PIPEDREAM ? "to --cost-model pipedream"
                                                                    : "to --cost-model default");
        return PD_CLI_USAGE;
    }
    return -1;
}

/* Whether two clusters have the same levels (names aside). */
static bool same_levels(const pd_plan_cluster *x, const pd_plan_cluster *y)
{
    if (x->n_levels != y->n_levels)
        return false;
    for (int i = 0; i < x->n_levels; i++)
        if (x->levels[i].fanout != y->levels[i].fanout ||
            x->levels[i].bandwidth_bytes_per_s != y->levels[i].bandwidth_bytes_per_s ||
            x->levels[i].latency_s != y->levels[i].latency_s)
            return false;
    return true;
}

/* Reads, checks and evaluates the --override plan on `cluster` (NULL: the
 * file's own). */
static int run_override(const plan_args *a, const pd_profile *profile, const pd_plan_cluster *cluster,
                        pd_plan **out)
{
    char context[1024], file_hash[17], profile_hash[17];
    pd_plan *plan;
    pd_status s;

    snprintf(context, sizeof(context), "plan: --override %s", a->override);
    if ((s = pd_plan_read_json(a->override, profile, &plan)) != PD_OK)
        return pd_cli_fail("plan: --override", s);
    if (plan->cluster.n_levels == 0 && !cluster) {
        pd_plan_destroy(plan);
        pd_cli_error("%s: the plan gives no cluster; give --levels or --cluster", context);
        return PD_CLI_USAGE;
    }
    if (plan->cluster.n_levels > 0 && cluster && !same_levels(&plan->cluster, cluster)) {
        pd_plan_destroy(plan);
        pd_cli_error("%s: the plan's cluster differs from %s; drop it or the plan's \"cluster\"",
                     context, a->in.levels ? a->in.levels : a->in.cluster);
        return PD_CLI_USAGE;
    }
    snprintf(file_hash, sizeof(file_hash), "%s", plan->profile_hash);
    if (cluster)
        plan->cluster = *cluster;
    if ((s = pd_plan_evaluate(profile, &a->opts, plan)) != PD_OK) {
        pd_plan_destroy(plan);
        return pd_cli_fail(context, s);
    }
    snprintf(profile_hash, sizeof(profile_hash), "%s", plan->profile_hash);
    if (file_hash[0] && strcmp(file_hash, profile_hash) != 0)
        fprintf(stderr, "pipedream: note: %s was made for another profile (hash %s; this one is %s)\n", a->override,
                file_hash, profile_hash);
    *out = plan;
    return -1;
}

int pd_cli_plan(int argc, char **argv)
{
    plan_args a;
    pd_profile *profile = NULL;
    pd_plan_cluster cluster;
    pd_plan *plan = NULL;
    pd_status s;
    int code;

    if ((code = parse_args(argc, argv, &a)) >= 0)
        return code;
    if (a.in.levels && (s = pd_plan_cluster_parse_levels(a.in.levels, &cluster)) != PD_OK)
        return pd_cli_fail("plan", s); /* "plan: levels: item 2 ..." */
    if (a.in.cluster && (s = pd_plan_cluster_read(a.in.cluster, &cluster)) != PD_OK)
        return pd_cli_fail("plan: --cluster", s);
    if ((code = pd_cli_inputs_load_profile("plan", &a.in, &profile)) >= 0)
        return code;
    if (a.override) {
        if ((code = run_override(&a, profile, a.in.levels || a.in.cluster ? &cluster : NULL, &plan)) >= 0)
            goto release;
    } else if ((s = pd_plan_solve(profile, &cluster, &a.opts, &plan)) != PD_OK) {
        code = pd_cli_fail("plan", s);
        goto release;
    }
    if (a.json) {
        if ((s = pd_plan_print_json(plan, profile, stdout)) != PD_OK) {
            code = pd_cli_fail("plan: --json", s);
            goto release;
        }
    } else {
        pd_plan_print(plan, profile, stdout);
    }
    if (a.output && (s = pd_plan_write_json(plan, profile, a.output)) != PD_OK) {
        code = pd_cli_fail("plan: -o", s);
        goto release;
    }
    code = PD_CLI_OK;
release:
    pd_plan_destroy(plan);
    pd_profile_destroy(profile);
    return code;
}
