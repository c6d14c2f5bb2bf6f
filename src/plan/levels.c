/* The machine hierarchy as the command line gives it: "4x12GB/s,4x10Gb/s",
 * innermost level first; its checks and its printed form. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream/topology.h>

#include "core/pd_units.h"
#include "plan/plan_int.h"

/* Most workers of a cluster: far beyond any machine the dynamic programs
 * could plan for, and small enough that every product fits an int. */
#define MAX_WORKERS (1 << 20)

/* Parses one "COUNTxBANDWIDTH" item (`len` bytes at `item`, the n-th). */
static pd_status parse_item(const char *item, size_t len, int n, pd_plan_level *out)
{
    char text[128], what[192], *x;
    long count;
    double bandwidth;

    if (len == 0)
        return PD_ERROR(PD_EINVAL, "levels: item %d is empty (expected e.g. 4x12GB/s,4x10Gb/s)", n);
    if (len >= sizeof(text))
        return PD_ERROR(PD_EINVAL, "levels: item %d is too long", n);
    memcpy(text, item, len);
    text[len] = '\0';
    x = strchr(text, 'x');
    if (!x || x == text || !x[1])
        return PD_ERROR(PD_EINVAL, "levels: item %d (\"%s\"): expected COUNTxBANDWIDTH, e.g. 4x12GB/s", n, text);
    for (const char *c = text; c < x; c++)
        if (!isdigit((unsigned char)*c))
            return PD_ERROR(PD_EINVAL, "levels: item %d (\"%s\"): the count '%.*s' is not an integer >= 1", n, text,
                            (int)(x - text), text);
    errno = 0;
    count = strtol(text, NULL, 10);
    if (errno == ERANGE || count < 1 || count > MAX_WORKERS)
        return PD_ERROR(PD_EINVAL, "levels: item %d (\"%s\"): the count must be in [1, %d]", n, text, MAX_WORKERS);
    snprintf(what, sizeof(what), "levels: item %d (\"%s\")", n, text);
    PD_CHECK(pd_bandwidth_parse(x + 1, what, &bandwidth));
    *out = (pd_plan_level){.fanout = (int)count, .bandwidth_bytes_per_s = bandwidth, .latency_s = 0};
    snprintf(out->name, sizeof(out->name), "level%d", n);
    return PD_OK;
}

pd_status pd_plan_cluster_parse_levels(const char *text, pd_plan_cluster *out)
{
    pd_plan_cluster c = {0};
    const char *item;

    if (!text || !text[0])
        return PD_ERROR(PD_EINVAL, "levels: empty (expected e.g. 4x12GB/s,4x10Gb/s: workers per level and its "
                        "bandwidth, innermost first)");
    item = text;
    for (;;) {
        size_t len = strcspn(item, ",");
        if (c.n_levels == PD_PLAN_MAX_LEVELS)
            return PD_ERROR(PD_EINVAL, "levels: more than %d levels in \"%s\"", PD_PLAN_MAX_LEVELS, text);
        PD_CHECK(parse_item(item, len, c.n_levels + 1, &c.levels[c.n_levels]));
        c.n_levels++;
        if (!item[len])
            break;
        item += len + 1;
    }
    PD_CHECK(pd_plan_cluster_check(&c));
    *out = c;
    return PD_OK;
}

pd_status pd_plan_cluster_read(const char *path, pd_plan_cluster *out)
{
    pd_cluster_level levels[PD_CLUSTER_MAX_LEVELS];
    pd_plan_cluster c = {0};
    int n = 0;

    PD_CHECK(pd_cluster_read_levels(path, levels, &n));
    if (n > PD_PLAN_MAX_LEVELS)
        return PD_ERROR(PD_EFORMAT, "%s: levels: %d levels, the partitioner takes at most %d", path, n,
                        PD_PLAN_MAX_LEVELS);
    c.n_levels = n;
    for (int i = 0; i < n; i++) {
        snprintf(c.levels[i].name, sizeof(c.levels[i].name), "%.31s", levels[i].name);
        c.levels[i].fanout = levels[i].fanout;
        c.levels[i].bandwidth_bytes_per_s = levels[i].bandwidth_bytes_per_s;
        c.levels[i].latency_s = levels[i].latency_s;
    }
    PD_CHECK(pd_plan_cluster_check(&c));
    *out = c;
    return PD_OK;
}

int pd_plan_cluster_workers(const pd_plan_cluster *c)
{
    long long workers = 1;

    if (!c || c->n_levels < 1)
        return 0;
    for (int i = 0; i < c->n_levels && i < PD_PLAN_MAX_LEVELS; i++) {
        workers *= c->levels[i].fanout > 0 ? c->levels[i].fanout : 0;
        if (workers > MAX_WORKERS)
            return MAX_WORKERS + 1;
    }
    return (int)workers;
}

pd_status pd_plan_cluster_check(const pd_plan_cluster *c)
{
    if (!c || c->n_levels < 1)
        return PD_ERROR(PD_EINVAL, "cluster: no levels (give e.g. --levels 4x12GB/s,4x10Gb/s)");
    if (c->n_levels > PD_PLAN_MAX_LEVELS)
        return PD_ERROR(PD_EINVAL, "cluster: %d levels; at most %d", c->n_levels, PD_PLAN_MAX_LEVELS);
    for (int i = 0; i < c->n_levels; i++) {
        const pd_plan_level *l = &c->levels[i];
        if (l->fanout < 1)
            return PD_ERROR(PD_EINVAL, "cluster: levels[%d].fanout: %d is not >= 1", i, l->fanout);
        if (!isfinite(l->bandwidth_bytes_per_s) || !(l->bandwidth_bytes_per_s > 0))
            return PD_ERROR(PD_EINVAL, "cluster: levels[%d].bandwidth_bytes_per_s: %g is not a finite number > 0", i,
                            l->bandwidth_bytes_per_s);
        if (!isfinite(l->latency_s) || l->latency_s < 0)
            return PD_ERROR(PD_EINVAL, "cluster: levels[%d].latency_s: %g is not a finite number >= 0", i,
                            l->latency_s);
    }
    if (pd_plan_cluster_workers(c) > MAX_WORKERS)
        return PD_ERROR(PD_EINVAL, "cluster: more than %d workers", MAX_WORKERS);
    return PD_OK;
}

void pd_plan_cluster_format(const pd_plan_cluster *c, char *buf, size_t size)
{
    size_t used = 0;

    if (size == 0)
        return;
    buf[0] = '\0';
    for (int i = 0; c && i < c->n_levels && i < PD_PLAN_MAX_LEVELS && used < size; i++) {
        char bandwidth[32];
        int n = snprintf(buf + used, size - used, "%s%dx%s", i ? "," : "", c->levels[i].fanout,
                         pd_bandwidth_format(c->levels[i].bandwidth_bytes_per_s, bandwidth, sizeof(bandwidth)));
        used += n > 0 ? (size_t)n : 0;
    }
}
