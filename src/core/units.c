/* Bandwidths with units: one parser for cluster files, options and levels. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/pd_units.h"

static const struct unit {
    const char *name;
    double bytes_per_s;
} units[] = {
    {"B/s", 1.0},         {"KB/s", 1e3},       {"MB/s", 1e6},        {"GB/s", 1e9},       {"TB/s", 1e12},
    {"b/s", 1.0 / 8.0},   {"Kb/s", 1e3 / 8.0}, {"Mb/s", 1e6 / 8.0},  {"Gb/s", 1e9 / 8.0}, {"Tb/s", 1e12 / 8.0},
};

/* The prefix letter is matched without case (kB/s = KB/s), the b/B exactly. */
static const struct unit *find_unit(const char *text)
{
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        const char *u = units[i].name;
        size_t n = strlen(u);
        if (strlen(text) == n && strcmp(text + n - 3, u + n - 3) == 0 && strncasecmp(text, u, n - 3) == 0)
            return &units[i];
    }
    return NULL;
}

pd_status pd_bandwidth_parse(const char *text, const char *what, double *bytes_per_s)
{
    const struct unit *unit = &units[0];
    char *end;
    double v;

    if (!text || !text[0] || isspace((unsigned char)text[0]))
        return PD_ERROR(PD_EINVAL, "%s: '%s' is not a bandwidth (e.g. 25Gb/s, 12.5GB/s)", what, text ? text : "");
    errno = 0;
    v = strtod(text, &end);
    if (end == text || errno == ERANGE || !isfinite(v))
        return PD_ERROR(PD_EINVAL, "%s: '%s' is not a bandwidth (e.g. 25Gb/s, 12.5GB/s)", what, text);
    if (*end == ' ')
        end++;
    if (*end && !(unit = find_unit(end)))
        return PD_ERROR(PD_EINVAL, "%s: '%s': unknown unit '%s' (B/s, KB/s, MB/s, GB/s, TB/s or b/s ... Tb/s)", what,
                        text, end);
    if (!(v > 0))
        return PD_ERROR(PD_EINVAL, "%s: '%s': a bandwidth must be > 0", what, text);
    *bytes_per_s = v * unit->bytes_per_s;
    return PD_OK;
}

char *pd_bandwidth_format(double bytes_per_s, char *buf, size_t size)
{
    static const char *const names[] = {"B/s", "KB/s", "MB/s", "GB/s", "TB/s"};
    int i = 0;

    while (i < 4 && bytes_per_s >= 1000.0) {
        bytes_per_s /= 1000.0;
        i++;
    }
    snprintf(buf, size, "%.4g %s", bytes_per_s, names[i]);
    return buf;
}
