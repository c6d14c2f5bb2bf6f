/* Slurm's hostlist syntax, expanded as `scontrol show hostnames` does:
 * "node[01-03,7],gpu-a[1-2]" is node01 node02 node03 node7 gpu-a1 gpu-a2. */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream/slurm.h>

/* Numbers wider than this cannot be a host's index. */
#define MAX_DIGITS 18

/* One bracket of an item, expanded: its numbers as they will be printed. */
typedef struct group {
    const char *prefix; /* literal text before the bracket (not terminated) */
    size_t prefix_len;
    int count;
    char **numbers;
} group;

static void groups_free(group *groups, int n)
{
    for (int g = 0; g < n; g++) {
        for (int i = 0; i < groups[g].count; i++)
            free(groups[g].numbers[i]);
        free(groups[g].numbers);
    }
    free(groups);
}

static pd_status push_host(pd_slurm_hostlist *list, int *capacity, char *name)
{
    if (list->count == *capacity) {
        int grown = *capacity ? 2 * *capacity : 16;
        char **hosts = realloc(list->hosts, (size_t)grown * sizeof(*hosts));
        if (!hosts) {
            free(name);
            return PD_ERROR(PD_ENOMEM, "hostlist: out of memory at %d names", list->count);
        }
        list->hosts = hosts;
        *capacity = grown;
    }
    list->hosts[list->count++] = name;
    return PD_OK;
}

/* Reads a run of digits at *p: its value and width; false if there is none
 * or it is too long. */
static bool read_number(const char **p, const char *end, unsigned long long *value, int *width)
{
    const char *s = *p;
    unsigned long long v = 0;

    while (s < end && isdigit((unsigned char)*s) && s - *p < MAX_DIGITS)
        v = v * 10 + (unsigned long long)(*s++ - '0');
    if (s == *p || (s < end && isdigit((unsigned char)*s)))
        return false;
    *width = (int)(s - *p);
    *value = v;
    *p = s;
    return true;
}

/* Expands the inside of one bracket, [begin, end), into g->numbers. */
static pd_status expand_bracket(const char *begin, const char *end, int item_len, const char *item, group *g)
{
    const char *p = begin;
    int capacity = 0;

    for (;;) {
        unsigned long long lo, hi;
        int width, hi_width;
        const char *range = p;

        if (!read_number(&p, end, &lo, &width))
            goto bad_range;
        hi = lo;
        if (p < end && *p == '-') {
            p++;
            if (!read_number(&p, end, &hi, &hi_width) || hi < lo)
                goto bad_range;
        }
        if (p < end && *p != ',')
            goto bad_range;
        if (hi - lo >= (unsigned long long)PD_SLURM_HOSTLIST_MAX ||
            (unsigned long long)g->count + (hi - lo) >= (unsigned long long)PD_SLURM_HOSTLIST_MAX)
            return PD_ERROR(PD_EINVAL, "hostlist: '%.*s' names more than %d hosts", item_len, item,
                            PD_SLURM_HOSTLIST_MAX);
        for (unsigned long long v = lo; v <= hi; v++) {
            char buf[MAX_DIGITS + 2];
            if (g->count == capacity) {
                int grown = capacity ? 2 * capacity : 8;
                char **numbers = realloc(g->numbers, (size_t)grown * sizeof(*numbers));
                if (!numbers)
                    return PD_ERROR(PD_ENOMEM, "hostlist: out of memory expanding '%.*s'", item_len, item);
                g->numbers = numbers;
                capacity = grown;
            }
            snprintf(buf, sizeof(buf), "%0*llu", width, v);
            if (!(g->numbers[g->count] = strdup(buf)))
                return PD_ERROR(PD_ENOMEM, "hostlist: out of memory expanding '%.*s'", item_len, item);
            g->count++;
        }
        if (p == end)
            return PD_OK;
        p++; /* the comma */
        continue;
    bad_range:
        while (p < end && *p != ',')
            p++;
        return PD_ERROR(PD_EINVAL, "hostlist: '%.*s': invalid range '%.*s' (numbers or lo-hi with lo <= hi)",
                        item_len, item, (int)(p - range), range);
    }
}

/* Expands one item, [item, item + len), onto the list. */
static pd_status expand_item(const char *item, int len, pd_slurm_hostlist *list, int *capacity)
{
    const char *end = item + len, *p = item, *literal = item;
    group *groups = NULL;
    int n_groups = 0;
    long long combinations = 1;
    int *digit = NULL;
    pd_status st = PD_OK;

    while (p < end) {
        const char *close;
        group *grown;

        if (*p == ']') {
            st = PD_ERROR(PD_EINVAL, "hostlist: '%.*s': ']' without '['", len, item);
            goto out;
        }
        if (*p != '[') {
            p++;
            continue;
        }
        close = memchr(p + 1, ']', (size_t)(end - p - 1));
        if (!close || memchr(p + 1, '[', (size_t)(close - p - 1))) {
            st = PD_ERROR(PD_EINVAL, "hostlist: '%.*s': unbalanced '['", len, item);
            goto out;
        }
        if (!(grown = realloc(groups, (size_t)(n_groups + 1) * sizeof(*groups)))) {
            st = PD_ERROR(PD_ENOMEM, "hostlist: out of memory");
            goto out;
        }
        groups = grown;
        groups[n_groups] = (group){.prefix = literal, .prefix_len = (size_t)(p - literal)};
        n_groups++;
        PD_CHECK_GOTO(expand_bracket(p + 1, close, len, item, &groups[n_groups - 1]), st, out);
        combinations *= groups[n_groups - 1].count;
        if (combinations + list->count > PD_SLURM_HOSTLIST_MAX) {
            st = PD_ERROR(PD_EINVAL, "hostlist: '%.*s' names more than %d hosts", len, item, PD_SLURM_HOSTLIST_MAX);
            goto out;
        }
        p = literal = close + 1;
    }
    if (n_groups == 0) {
        char *name = strndup(item, (size_t)len);
        if (!name)
            return PD_ERROR(PD_ENOMEM, "hostlist: out of memory");
        return push_host(list, capacity, name);
    }
    /* Slurm refuses "n[1-2]x": text may stand between brackets, not after. */
    if (literal != end) {
        st = PD_ERROR(PD_EINVAL, "hostlist: '%.*s': text after the last ']'", len, item);
        goto out;
    }
    if (!(digit = calloc((size_t)n_groups, sizeof(*digit)))) {
        st = PD_ERROR(PD_ENOMEM, "hostlist: out of memory");
        goto out;
    }
    /* Every combination, the last bracket counting fastest. */
    for (long long c = 0; c < combinations; c++) {
        size_t size = 1;
        char *name, *w;

        for (int g = 0; g < n_groups; g++)
            size += groups[g].prefix_len + strlen(groups[g].numbers[digit[g]]);
        if (!(name = malloc(size))) {
            st = PD_ERROR(PD_ENOMEM, "hostlist: out of memory");
            goto out;
        }
        w = name;
        for (int g = 0; g < n_groups; g++) {
            size_t n = strlen(groups[g].numbers[digit[g]]);
            memcpy(w, groups[g].prefix, groups[g].prefix_len);
            w += groups[g].prefix_len;
            memcpy(w, groups[g].numbers[digit[g]], n);
            w += n;
        }
        *w = '\0';
        PD_CHECK_GOTO(push_host(list, capacity, name), st, out);
        for (int g = n_groups - 1; g >= 0 && ++digit[g] == groups[g].count; g--)
            digit[g] = 0;
    }
out:
    free(digit);
    groups_free(groups, n_groups);
    return st;
}

pd_status pd_slurm_hostlist_expand(const char *text, pd_slurm_hostlist *out)
{
    pd_slurm_hostlist list = {0, NULL};
    int capacity = 0;
    pd_status st = PD_OK;
    const char *p = text ? text : "";

    while (*p) {
        const char *start;
        int depth = 0;

        while (*p == ',' || isspace((unsigned char)*p))
            p++;
        start = p;
        /* An item ends at a comma or space outside brackets. */
        while (*p && (depth > 0 || (*p != ',' && !isspace((unsigned char)*p)))) {
            depth += *p == '[' ? 1 : *p == ']' ? -1 : 0;
            p++;
        }
        if (p > start)
            PD_CHECK_GOTO(expand_item(start, (int)(p - start), &list, &capacity), st, fail);
    }
    *out = list;
    return PD_OK;
fail:
    pd_slurm_hostlist_clear(&list);
    return st;
}

void pd_slurm_hostlist_clear(pd_slurm_hostlist *list)
{
    if (!list)
        return;
    for (int i = 0; i < list->count; i++)
        free(list->hosts[i]);
    free(list->hosts);
    list->count = 0;
    list->hosts = NULL;
}
