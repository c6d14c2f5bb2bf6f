/* The inputs plan and simulate take alike: the profile (--profile, or
 * --graph-txt with --batch-size) and the cluster's options, checked and
 * read the same way for both; and the model name an imported profile gets
 * (also `profile --import`'s). */
#include "config.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream.h>

#include "cli/pd_cli.h"

void pd_cli_import_model_name(const char *path, char *buf, size_t size)
{
    char *copy = strdup(path), *copy2 = strdup(path);
    const char *base = copy ? basename(copy) : path;

    if (copy2 && strncmp(base, "graph", 5) == 0) {
        const char *dir = basename(dirname(copy2));
        snprintf(buf, size, "%s", strcmp(dir, ".") && strcmp(dir, "/") ? dir : "graph");
    } else {
        snprintf(buf, size, "%.*s", (int)strcspn(base, "."), base);
        if (!buf[0])
            snprintf(buf, size, "imported");
    }
    free(copy);
    free(copy2);
}

int pd_cli_inputs_option(pd_cli_inputs *in, int option, const char *value)
{
    switch (option) {
    case PD_CLI_OPT_PROFILE: in->profile = value; return 1;
    case PD_CLI_OPT_GRAPH_TXT: in->graph_txt = value; return 1;
    case PD_CLI_OPT_BATCH: return pd_cli_parse_int64("--batch-size", value, 1, 1 << 24, &in->batch) ? -1 : 1;
    case PD_CLI_OPT_LEVELS: in->levels = value; return 1;
    case PD_CLI_OPT_CLUSTER: in->cluster = value; return 1;
    default: return 0;
    }
}

int pd_cli_inputs_check(const char *verb, const pd_cli_inputs *in)
{
    if (!in->profile == !in->graph_txt) {
        pd_cli_error("%s: give one of --profile or --graph-txt (see 'pipedream %s --help')", verb, verb);
        return PD_CLI_USAGE;
    }
    if (in->profile && in->batch > 0) {
        pd_cli_error("%s: --batch-size applies to --graph-txt; a .profile.json has its batch", verb);
        return PD_CLI_USAGE;
    }
    if (in->levels && in->cluster) {
        pd_cli_error("%s: give --levels or --cluster, not both", verb);
        return PD_CLI_USAGE;
    }
    return -1;
}

int pd_cli_inputs_load_profile(const char *verb, const pd_cli_inputs *in, pd_profile **out)
{
    char model[256], context[64];
    pd_status s;

    if (in->profile) {
        s = pd_profile_read_json(in->profile, out);
        snprintf(context, sizeof(context), "%s: --profile", verb);
    } else {
        pd_cli_import_model_name(in->graph_txt, model, sizeof(model));
        s = pd_profile_import_graph_txt(in->graph_txt, model, in->batch > 0 ? (int)in->batch : 0, out);
        snprintf(context, sizeof(context), "%s: --graph-txt", verb);
    }
    return s == PD_OK ? -1 : pd_cli_fail(context, s);
}
