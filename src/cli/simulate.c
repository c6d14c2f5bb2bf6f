/* `pipedream simulate`: generates a plan's schedule, checks it and times
 * it with the discrete-event simulator; or compares PipeDream's plan with
 * data parallelism, GPipe and straight model parallelism. */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream.h>
#include <pipedream/plan.h>
#include <pipedream/profile.h>
#include <pipedream/sched.h>

#include "cli/pd_cli.h"

/* The longest run simulate takes: every plan's rounds must fit in it. */
#define MAX_MINIBATCHES (1 << 20)

/* The most minibatches simulate picks by itself when fewer hold 4 whole
 * periods of every plan. */
#define DEFAULT_MINIBATCHES 8192

/* Room for a plan's replicas in --csv ("15-1"; hundreds of stages). */
#define STAGES_CHARS 1024

typedef struct simulate_args {
    pd_cli_inputs in;
    const char *plan, *trace, *plot, *schedule;
    int64_t minibatches, microbatches, eval, depth;
    double optimizer_state;
    pd_plan_cost_model cost_model;
    bool cost_model_given, compare, csv, print_schedule, defer_step, warmup_from_costs;
} simulate_args;

enum {
    OPT_PLAN = 256,
    OPT_COST_MODEL,
    OPT_SCHEDULE,
    OPT_MINIBATCHES,
    OPT_MICROBATCHES,
    OPT_EVAL,
    OPT_DEPTH,
    OPT_OPTIMIZER_STATE,
    OPT_TRACE,
    OPT_PLOT,
    OPT_COMPARE,
    OPT_CSV,
    OPT_PRINT_SCHEDULE,
    OPT_DEFER_STEP,
    OPT_WARMUP_FROM_COSTS,
};

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: pipedream simulate --plan P.plan.json (--profile F | --graph-txt F) [options]\n"
            "       pipedream simulate --compare (--profile F | --graph-txt F)\n"
            "                          (--levels L | --cluster FILE | --plan P) [options]\n"
            "\n"
            "Generates every rank's action list for the plan's schedule, checks it for\n"
            "deadlocks and unmatched transfers, and times it: compute from the profile's\n"
            "layers, transfers at bytes / bandwidth + latency of the link between two ranks\n"
            "(the cluster's level joining them; one transfer at a time per link), replicas'\n"
            "gradients by a ring all-reduce over their slowest link. Prints the predicted\n"
            "throughput, per-rank utilisation, idle time and peak memory, and bytes per link.\n"
            "\n"
            "--compare plans with PipeDream's partitioner (or reads --plan) and simulates it\n"
            "(1f1b), data parallelism (dp), GPipe on PipeDream's stages and straight model\n"
            "parallelism on the same profile and cluster, and prints them side by side. All\n"
            "four run the same minibatches: by default a multiple of every plan's replicas\n"
            "and of GPipe's flush, 64 rounds of the widest plan and 16 flushes (up to 8192\n"
            "minibatches, or 4 rounds of all plans together when that is more).\n"
            "\n"
            "Options:\n"
            "  --plan FILE           plan to simulate (pipedream plan -o)\n"
            "  --profile FILE        the plan's profile (.profile.json)\n"
            "  --graph-txt FILE      or a PipeDream graph.txt profile\n"
            "  --batch-size N        the graph.txt profile's batch (samples per minibatch)\n"
            "  --levels L            the cluster, e.g. 4x16GB/s,4x1.25GB/s (with --plan:\n"
            "                        instead of the plan's)\n"
            "  --cluster FILE        or the levels of a .cluster.json (pipedream topo -o,\n"
            "                        topology/clusters/*.cluster.json)\n"
            "  --cost-model M        --compare's planning: default or pipedream (the\n"
            "                        original optimizer's model; see pipedream plan --help)\n"
            "  --schedule S          1f1b (default), 1f1b-vsync, 1f1b-2bw, gpipe, dp,\n"
            "                        straight\n"
            "  --defer-step          1f1b on replicated stages: step after the next backward\n"
            "                        (same weight versions; two gradient buffers)\n"
            "  --warmup-from-costs   1f1b: more warm-up forwards where transfers and stage\n"
            "                        times need them to keep the pipeline full\n"
            "  --minibatches N       training minibatches (default: 64 x the least common\n"
            "                        multiple of the replicas; gpipe: 16 flushes)\n"
            "  --microbatches M      gpipe: minibatches per flush, a multiple of every\n"
            "                        stage's replicas (default: 4 x stages, rounded up to\n"
            "                        one, or the nearest that divides --minibatches);\n"
            "                        1f1b-2bw: minibatches per weight version (default:\n"
            "                        the pipeline's depth, more when replicas need it)\n"
            "  --eval N              evaluation minibatches after training (default 0)\n"
            "  --depth D             slots per channel (default 2)\n"
            "  --optimizer-state F   optimizer bytes per weight byte (default 1: momentum)\n"
            "  --trace FILE          Chrome trace-event JSON (Perfetto, chrome://tracing)\n"
            "  --plot FILE.png       per-rank timeline: FILE.png.dat and FILE.png.gp for\n"
            "                        gnuplot, run when gnuplot is installed\n"
            "  --print-schedule      print every rank's action list\n"
            "  --csv                 --compare: print the rows as CSV\n"
            "  --help                this text\n");
}

static int parse_args(int argc, char **argv, simulate_args *a)
{
    static const struct option options[] = {
        {"plan", required_argument, NULL, OPT_PLAN},
        PD_CLI_INPUT_OPTIONS,
        {"cost-model", required_argument, NULL, OPT_COST_MODEL},
        {"schedule", required_argument, NULL, OPT_SCHEDULE},
        {"minibatches", required_argument, NULL, OPT_MINIBATCHES},
        {"microbatches", required_argument, NULL, OPT_MICROBATCHES},
        {"eval", required_argument, NULL, OPT_EVAL},
        {"depth", required_argument, NULL, OPT_DEPTH},
        {"optimizer-state", required_argument, NULL, OPT_OPTIMIZER_STATE},
        {"trace", required_argument, NULL, OPT_TRACE},
        {"plot", required_argument, NULL, OPT_PLOT},
        {"compare", no_argument, NULL, OPT_COMPARE},
        {"csv", no_argument, NULL, OPT_CSV},
        {"print-schedule", no_argument, NULL, OPT_PRINT_SCHEDULE},
        {"defer-step", no_argument, NULL, OPT_DEFER_STEP},
        {"warmup-from-costs", no_argument, NULL, OPT_WARMUP_FROM_COSTS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c, taken, bad = 0;

    *a = (simulate_args){.schedule = "1f1b", .depth = 2, .optimizer_state = 1.0};
    opterr = 0;
    while (!bad && (c = getopt_long(argc, argv, ":h", options, NULL)) != -1) {
        if ((taken = pd_cli_inputs_option(&a->in, c, optarg)) != 0) {
            bad = taken < 0;
            continue;
        }
        switch (c) {
        case OPT_PLAN: a->plan = optarg; break;
        case OPT_COST_MODEL:
            bad = pd_cli_parse_cost_model("simulate", optarg, &a->cost_model);
            a->cost_model_given = true;
            break;
        case OPT_SCHEDULE: a->schedule = optarg; break;
        case OPT_MINIBATCHES: bad = pd_cli_parse_int64("--minibatches", optarg, 1, 1 << 20, &a->minibatches); break;
        case OPT_MICROBATCHES: bad = pd_cli_parse_int64("--microbatches", optarg, 1, 1 << 16, &a->microbatches); break;
        case OPT_EVAL: bad = pd_cli_parse_int64("--eval", optarg, 0, 1 << 20, &a->eval); break;
        case OPT_DEPTH: bad = pd_cli_parse_int64("--depth", optarg, 1, 1 << 16, &a->depth); break;
        case OPT_OPTIMIZER_STATE:
            bad = pd_cli_parse_double("--optimizer-state", optarg, 0, 64, &a->optimizer_state);
            break;
        case OPT_TRACE: a->trace = optarg; break;
        case OPT_PLOT: a->plot = optarg; break;
        case OPT_COMPARE: a->compare = true; break;
        case OPT_CSV: a->csv = true; break;
        case OPT_PRINT_SCHEDULE: a->print_schedule = true; break;
        case OPT_DEFER_STEP: a->defer_step = true; break;
        case OPT_WARMUP_FROM_COSTS: a->warmup_from_costs = true; break;
        case 'h': usage(stdout); return PD_CLI_OK;
        default: pd_cli_option_error("simulate", c, argv, optind); return PD_CLI_USAGE;
        }
    }
    if (bad)
        return PD_CLI_USAGE;
    if (optind < argc) {
        pd_cli_error("simulate: unexpected argument '%s' (see 'pipedream simulate --help')", argv[optind]);
        return PD_CLI_USAGE;
    }
    if ((c = pd_cli_inputs_check("simulate", &a->in)) >= 0)
        return c;
    if (!a->compare && !a->plan) {
        pd_cli_error("simulate: --plan is needed (or --compare with --levels or --cluster)");
        return PD_CLI_USAGE;
    }
    if (a->compare && !a->plan && !a->in.levels && !a->in.cluster) {
        pd_cli_error("simulate: --compare needs --levels, --cluster or --plan");
        return PD_CLI_USAGE;
    }
    if (a->compare && (a->trace || a->plot || a->print_schedule)) {
        pd_cli_error("simulate: --trace, --plot and --print-schedule apply to one schedule, not --compare");
        return PD_CLI_USAGE;
    }
    if (a->cost_model_given && (!a->compare || a->plan)) {
        pd_cli_error("simulate: --cost-model applies to --compare's planning, not to a --plan file");
        return PD_CLI_USAGE;
    }
    if (a->csv && !a->compare) {
        pd_cli_error("simulate: --csv applies to --compare");
        return PD_CLI_USAGE;
    }
    return -1;
}

/* The cluster of --levels or --cluster into *out; *given says whether
 * either was. Returns -1 to go on, else an exit code. */
static int read_cluster(const simulate_args *a, pd_plan_cluster *out, bool *given)
{
    pd_status s;

    *given = a->in.levels || a->in.cluster;
    if (a->in.levels && (s = pd_plan_cluster_parse_levels(a->in.levels, out)) != PD_OK)
        return pd_cli_fail("simulate: --levels", s);
    if (a->in.cluster && (s = pd_plan_cluster_read(a->in.cluster, out)) != PD_OK)
        return pd_cli_fail("simulate: --cluster", s);
    return -1;
}

static int gcd(int x, int y) { return y ? gcd(y, x % y) : x; }

/* The least common multiple, or -1 past the largest run simulate allows. */
static int lcm(int x, int y)
{
    int64_t v;

    if (x < 0 || y < 0)
        return -1;
    v = (int64_t)(x / gcd(x, y)) * y;
    return v > MAX_MINIBATCHES ? -1 : (int)v;
}

/* The least common multiple of the stages' replicas. */
static int replica_period(const pd_plan *plan)
{
    int period = 1;
    for (int i = 0; i < plan->n_stages; i++)
        period = lcm(period, plan->stages[i].replicas);
    return period;
}

/* "15-1" for 15 replicas of one stage then 1 of the next; cut to
 * size - 1 characters, the last three "...", when longer. */
static void describe_plan(const pd_plan *plan, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < plan->n_stages && used < size; i++)
        used += snprintf(buf + used, size - used, "%s%d", i ? "-" : "", plan->stages[i].replicas);
    if (used >= size && size > 4)
        strcpy(buf + size - 4, "...");
}

/* The minibatches every simulated schedule runs, and GPipe's flush. */
typedef struct sim_counts {
    int minibatches, microbatches;
} sim_counts;

/* One schedule to simulate: a plan, its schedule and its row's name. */
typedef struct sim_case {
    const char *name;
    const pd_plan *plan;
    pd_sched_type type;
} sim_case;

/* The GPipe flush when the user gave none: 4 x stages rounded up to a
 * multiple of `period`, or, when the minibatches are given, the multiple
 * of `period` dividing them that is nearest to that (0 if none). */
static int default_flush(int period, int n_stages, int minibatches)
{
    int target = (4 * n_stages + period - 1) / period * period, best = 0;

    if (!minibatches)
        return target;
    for (int m = period; m <= minibatches; m += period)
        if (minibatches % m == 0 && (!best || abs(m - target) < abs(best - target) ||
                                     (abs(m - target) == abs(best - target) && m > best)))
            best = m;
    return best;
}

/* Chooses (or checks the user's) minibatches and flush so that every case
 * runs whole rounds of its replicas and GPipe whole flushes. Returns -1 to
 * go on, else an exit code. */
static int choose_counts(const simulate_args *a, const sim_case *cases, int n, sim_counts *out)
{
    char why[512]; /* "whole rounds of the replicas of pipedream 3-1, dp 4; whole gpipe flushes of 12" */
    size_t used = 0;
    int rounds = 1, widest = 1, unit, gpipe_period = 0, gpipe_stages = 0, m = (int)a->microbatches;
    int64_t want;

    why[0] = '\0';
    for (int k = 0; k < n; k++) {
        char stages[21];
        int period = cases[k].type == PD_SCHED_STRAIGHT ? 1 : replica_period(cases[k].plan);
        if (period < 0) {
            pd_cli_error("simulate: %s: the replicas' least common multiple is over %d minibatches", cases[k].name,
                         MAX_MINIBATCHES);
            return PD_CLI_USAGE;
        }
        describe_plan(cases[k].plan, stages, sizeof(stages));
        if (cases[k].type == PD_SCHED_GPIPE) {
            gpipe_period = gpipe_period ? lcm(gpipe_period, period) : period;
            gpipe_stages = cases[k].plan->n_stages > gpipe_stages ? cases[k].plan->n_stages : gpipe_stages;
        } else {
            rounds = lcm(rounds, period);
            widest = period > widest ? period : widest;
            used += snprintf(why + used, used < sizeof(why) ? sizeof(why) - used : 0, "%s%s %s",
                             used ? ", " : "whole rounds of the replicas of ", cases[k].name, stages);
        }
    }
    if (gpipe_period) {
        if (m && m % gpipe_period) {
            pd_cli_error("simulate: --microbatches %d: gpipe needs a multiple of %d, the least common multiple of its "
                         "stages' replicas", m, gpipe_period);
            return PD_CLI_USAGE;
        }
        if (!m)
            m = default_flush(gpipe_period, gpipe_stages, (int)a->minibatches);
        if (!m)
            m = gpipe_period; /* --minibatches is then refused below */
        used += snprintf(why + used, used < sizeof(why) ? sizeof(why) - used : 0, "%swhole gpipe flushes of %d",
                         used ? "; " : "", m);
    }
    unit = gpipe_period ? lcm(rounds, m) : rounds;
    if (unit < 0) {
        pd_cli_error("simulate: %s take over %d minibatches", why, MAX_MINIBATCHES);
        return PD_CLI_USAGE;
    }
    if (a->minibatches && a->minibatches % unit) {
        pd_cli_error("simulate: --minibatches %lld: need a multiple of %d (%s)", (long long)a->minibatches, unit, why);
        return PD_CLI_USAGE;
    }
    want = a->minibatches;
    if (!want) {
        /* 64 rounds of the widest plan and 16 flushes, but no more than
         * DEFAULT_MINIBATCHES when 4 common periods take fewer. */
        want = 64 * (int64_t)widest > 16 * (int64_t)m ? 64 * (int64_t)widest : 16 * (int64_t)m;
        want = want < DEFAULT_MINIBATCHES ? want : DEFAULT_MINIBATCHES;
        want = (want + unit - 1) / unit * unit;
        if (want < 4 * (int64_t)unit)
            want = 4 * (int64_t)unit;
        if (want > MAX_MINIBATCHES)
            want = MAX_MINIBATCHES / unit * unit;
    }
    *out = (sim_counts){.minibatches = (int)want, .microbatches = m};
    return -1;
}

/* Generates, checks and simulates one case. */
static pd_status run_one(const simulate_args *a, const sim_case *c, const sim_counts *counts,
                         const pd_profile *profile, pd_sched **sched, pd_sched_result **result)
{
    pd_sched_costs costs = {0};
    pd_sched_options o = {.type = c->type,
                          .minibatches = counts->minibatches,
                          .microbatches = c->type == PD_SCHED_STRAIGHT ? 1 : counts->microbatches,
                          .eval_minibatches = (int)a->eval,
                          .depth = (int)a->depth,
                          .defer_step = a->defer_step,
                          .warmup_from_costs = a->warmup_from_costs};
    pd_status s;

    PD_CHECK(pd_sched_costs_from_profile(c->plan, profile, a->optimizer_state, &costs));
    PD_CHECK_GOTO(pd_sched_generate(c->plan, &costs, &o, sched), s, free_costs);
    PD_CHECK_GOTO(pd_sched_simulate(*sched, &costs, &c->plan->cluster, c->plan->batch, result), s, free_sched);
    pd_sched_costs_destroy(&costs);
    return PD_OK;
free_sched:
    pd_sched_destroy(*sched);
    *sched = NULL;
free_costs:
    pd_sched_costs_destroy(&costs);
    return s;
}

static double peak_memory(const pd_sched_result *r)
{
    double memory = 0;
    for (int i = 0; i < r->n_ranks; i++)
        if (r->ranks[i].memory_bytes > memory)
            memory = r->ranks[i].memory_bytes;
    return memory;
}

/* The compared rows as a table or as CSV. */
static void print_compare(const simulate_args *a, const pd_profile *profile, const pd_plan_cluster *cluster,
                          const sim_case *cases, pd_sched_result *const *results, int n, const sim_counts *counts)
{
    const pd_plan *plan = cases[0].plan;
    const pd_sched_result *dp = results[1];
    const char *model = pd_profile_get_info(profile)->model;
    const char *cost_model = plan->cost_model == PD_PLAN_COST_PIPEDREAM ? "pipedream" : "default";
    int batch = plan->batch > 0 ? plan->batch : 1;
    char levels[256];
    size_t used = 0;

    levels[0] = '\0';
    for (int l = 0; l < cluster->n_levels && used < sizeof(levels); l++)
        used += snprintf(levels + used, sizeof(levels) - used, "%s%dx%.4gGB/s", l ? " " : "", cluster->levels[l].fanout,
                         cluster->levels[l].bandwidth_bytes_per_s / 1e9);
    if (a->csv)
        printf("model,batch,workers,levels,cost_model,schedule,stages,predicted_ms,predicted_dp_ms,ms_per_minibatch,"
               "samples_per_s,speedup_vs_dp,bytes_per_sample,peak_memory_gb,minibatches\n");
    else {
        printf("model %s, batch %d, %d workers (%s); %d minibatches, gpipe flushes of %d\n", model, plan->batch,
               pd_plan_cluster_workers(cluster), levels, counts->minibatches, counts->microbatches);
        if (plan->time_ms > 0)
            printf("plan (cost model %s): predicted %.3f ms per minibatch, %.2fx over its data parallelism\n",
                   cost_model, plan->time_ms, plan->data_parallel_ms > 0 ? plan->data_parallel_ms / plan->time_ms : 0);
        printf("\n%-10s %-20s %9s %12s %9s %12s %9s %9s\n", "schedule", "stages", "ms/mb", "samples/s", "vs dp",
               "KB/sample", "vs dp", "mem GB");
    }
    for (int k = 0; k < n; k++) {
        const pd_sched_result *r = results[k];
        char stages[STAGES_CHARS], shown[21];
        double per_kb = r->bytes_per_minibatch / batch / 1e3, dp_kb = dp->bytes_per_minibatch / batch / 1e3;
        double rate = r->samples_per_s > 0 ? r->samples_per_s : r->minibatches_per_s;

        describe_plan(cases[k].plan, stages, sizeof(stages));
        describe_plan(cases[k].plan, shown, sizeof(shown));
        if (a->csv) {
            char predicted[64] = ""; /* the partitioner's, its plan and its data parallelism */
            if (k == 0 && plan->time_ms > 0)
                snprintf(predicted, sizeof(predicted), "%.6g,%.6g", plan->time_ms, plan->data_parallel_ms);
            else
                snprintf(predicted, sizeof(predicted), ",");
            printf("%s,%d,%d,%s,%s,%s,%s,%s,%.6g,%.6g,%.6g,%.6g,%.6g,%d\n", model, plan->batch,
                   pd_plan_cluster_workers(cluster), levels, cost_model, cases[k].name, stages, predicted,
                   r->ms_per_minibatch, rate, dp->ms_per_minibatch / r->ms_per_minibatch,
                   r->bytes_per_minibatch / batch, peak_memory(r) / 1e9, counts->minibatches);
        } else
            printf("%-10s %-20s %9.3f %12.1f %8.2fx %12.1f %8.1f%% %9.2f\n", cases[k].name, shown, r->ms_per_minibatch,
                   rate, dp->ms_per_minibatch / r->ms_per_minibatch, per_kb,
                   dp_kb > 0 ? 100.0 * (1.0 - per_kb / dp_kb) : 0.0, peak_memory(r) / 1e9);
    }
    if (!a->csv)
        printf("\n(samples/s is minibatches/s when the profile's batch is unknown; 'vs dp': speedup and\n"
               "reduction of bytes communicated per sample; mem: the largest per-rank peak)\n");
}

/* --plan, on --levels/--cluster when given. A plan without predictions
 * (hand-written) or moved to another cluster gets the default cost
 * model's. Returns -1 to go on, else an exit code. */
static int read_plan(const simulate_args *a, const pd_profile *profile, pd_plan **out)
{
    pd_plan_options opts = {.optimizer_state_factor = a->optimizer_state};
    pd_plan_cluster cluster;
    bool given;
    int code = read_cluster(a, &cluster, &given);
    pd_status s;

    if (code >= 0)
        return code;
    if ((s = pd_plan_read_json(a->plan, profile, out)) != PD_OK)
        return pd_cli_fail("simulate: --plan", s);
    if (given) {
        (*out)->cluster = cluster;
        (*out)->workers = pd_plan_cluster_workers(&cluster);
    }
    if ((*out)->cluster.n_levels == 0) {
        pd_cli_error("simulate: --plan %s gives no cluster; give --levels or --cluster", a->plan);
        return PD_CLI_USAGE;
    }
    if ((given || !((*out)->time_ms > 0)) && (s = pd_plan_evaluate(profile, &opts, *out)) != PD_OK)
        return pd_cli_fail("simulate: --plan", s);
    return -1;
}

/* PipeDream's plan: --plan's (on --levels/--cluster when given) or the
 * partitioner's. Returns -1 to go on, else an exit code. */
static int compare_plan(const simulate_args *a, const pd_profile *profile, pd_plan_cluster *cluster, pd_plan **out)
{
    bool given;
    int code;
    pd_status s;

    if (a->plan) {
        if ((code = read_plan(a, profile, out)) < 0)
            *cluster = (*out)->cluster;
        return code;
    }
    if ((code = read_cluster(a, cluster, &given)) >= 0)
        return code;
    pd_plan_options opts = {.cost_model = a->cost_model,
                            .optimizer_state_factor = a->optimizer_state,
                            .allow_fewer_workers = true};
    if ((s = pd_plan_solve(profile, cluster, &opts, out)) != PD_OK)
        return pd_cli_fail("simulate: planning", s);
    return -1;
}

static int run_compare(const simulate_args *a, const pd_profile *profile)
{
    pd_plan *plan = NULL, *dp = NULL, *straight = NULL;
    pd_sched_result *results[4] = {NULL, NULL, NULL, NULL};
    pd_plan_cluster cluster;
    sim_counts counts;
    pd_status s;
    int code = compare_plan(a, profile, &cluster, &plan);

    if (code >= 0)
        return code;
    if ((s = pd_sched_plan_data_parallel(profile, &cluster, &dp)) != PD_OK ||
        (s = pd_sched_plan_straight(profile, &cluster, &straight)) != PD_OK) {
        code = pd_cli_fail("simulate: baselines", s);
        goto done;
    }
    const sim_case cases[4] = {{"pipedream", plan, PD_SCHED_1F1B},
                               {"dp", dp, PD_SCHED_DP},
                               {"gpipe", plan, PD_SCHED_GPIPE},
                               {"straight", straight, PD_SCHED_STRAIGHT}};
    if ((code = choose_counts(a, cases, 4, &counts)) >= 0)
        goto done;
    for (int k = 0; k < 4; k++) {
        pd_sched *sched = NULL;
        if ((s = run_one(a, &cases[k], &counts, profile, &sched, &results[k])) != PD_OK) {
            char context[64];
            snprintf(context, sizeof(context), "simulate: %s", cases[k].name);
            code = pd_cli_fail(context, s);
            goto done;
        }
        pd_sched_destroy(sched);
    }
    print_compare(a, profile, &cluster, cases, results, 4, &counts);
    code = PD_CLI_OK;
done:
    for (int k = 0; k < 4; k++)
        pd_sched_result_destroy(results[k]);
    pd_plan_destroy(plan);
    pd_plan_destroy(dp);
    pd_plan_destroy(straight);
    return code;
}

static int write_outputs(const simulate_args *a, const pd_sched *sched, const pd_sched_result *r)
{
    pd_status s;

    if (a->trace && (s = pd_sched_write_trace(sched, r, a->trace)) != PD_OK)
        return pd_cli_fail("simulate: --trace", s);
    if (a->plot) {
        size_t n = strlen(a->plot) + 8;
        char *data = malloc(n), *script = malloc(n);
        int code = PD_CLI_OK;
        if (!data || !script) {
            free(data);
            free(script);
            pd_cli_error("simulate: out of host memory");
            return PD_CLI_FAILURE;
        }
        snprintf(data, n, "%s.dat", a->plot);
        snprintf(script, n, "%s.gp", a->plot);
        if ((s = pd_sched_write_plot(sched, r, data, script, a->plot)) != PD_OK)
            code = pd_cli_fail("simulate: --plot", s);
        else if (system("command -v gnuplot >/dev/null 2>&1") == 0) {
            char *cmd = malloc(2 * n + 32);
            if (cmd) {
                snprintf(cmd, 2 * n + 32, "gnuplot '%s'", script);
                if (system(cmd) != 0)
                    fprintf(stderr, "pipedream: simulate: gnuplot failed on %s\n", script);
                free(cmd);
            }
        } else
            fprintf(stderr, "pipedream: simulate: gnuplot is not installed: wrote %s and %s; run 'gnuplot %s'\n",
                    data, script, script);
        free(data);
        free(script);
        return code;
    }
    return PD_CLI_OK;
}

int pd_cli_simulate(int argc, char **argv)
{
    simulate_args a;
    pd_profile *profile = NULL;
    pd_plan *plan = NULL;
    pd_sched *sched = NULL;
    pd_sched_result *result = NULL;
    sim_counts counts;
    sim_case one;
    pd_status s;
    int code = parse_args(argc, argv, &a);

    if (code >= 0)
        return code;
    one = (sim_case){.name = a.schedule};
    if ((s = pd_sched_type_parse(a.schedule, &one.type)) != PD_OK)
        return pd_cli_fail("simulate: --schedule", s);
    if ((code = pd_cli_inputs_load_profile("simulate", &a.in, &profile)) >= 0)
        return code;
    if (a.compare) {
        code = run_compare(&a, profile);
        goto done;
    }
    if ((code = read_plan(&a, profile, &plan)) >= 0)
        goto done;
    one.plan = plan;
    if ((code = choose_counts(&a, &one, 1, &counts)) >= 0)
        goto done;
    if ((s = run_one(&a, &one, &counts, profile, &sched, &result)) != PD_OK) {
        code = pd_cli_fail("simulate", s);
        goto done;
    }
    if (a.print_schedule)
        pd_sched_print(sched, stdout);
    pd_sched_result_print(result, sched, stdout);
    printf("plan: predicted %.4f ms per minibatch (cost model %s)\n", plan->time_ms,
           plan->cost_model == PD_PLAN_COST_PIPEDREAM ? "pipedream" : "default");
    code = write_outputs(&a, sched, result);
done:
    pd_sched_result_destroy(result);
    pd_sched_destroy(sched);
    pd_plan_destroy(plan);
    pd_profile_destroy(profile);
    return code;
}
