/* PipeDream's graph.txt profiles (format in ../shared/pipedream-profiles/
 * README.md, after the original's graph.py):
 *
 *   node4 -- Conv2d(3, 64, ...) -- forward_compute_time=1.2, backward_compute_time=2.3, activation_size=4096.0, parameter_size=1792.0
 *   	node1 -- node4
 *
 * Import checks every line and names it by number; export writes numbers
 * that read back exactly. */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream/profile.h>

#include "core/pd_atomic_file.h"

#define SEPARATOR " -- "
#define SEPARATOR_LEN 4

/* A node line as read, before sorting. */
typedef struct txt_node {
    char *name, *description;
    double fwd_ms, bwd_ms;
    int64_t activation_bytes, weight_bytes;
    long line;
} txt_node;

/* An edge line: from -> to, as indices into the node lines. */
typedef struct txt_edge {
    int from, to;
    long line;
} txt_edge;

typedef struct txt_graph {
    const char *path;
    txt_node *nodes;
    int n_nodes, cap_nodes;
    txt_edge *edges;
    int n_edges, cap_edges;
    /* edges named by node id until all nodes are read */
    char **edge_names; /* [2 * cap_edges] */
} txt_graph;

static void txt_graph_free(txt_graph *t)
{
    for (int i = 0; i < t->n_nodes; i++) {
        free(t->nodes[i].name);
        free(t->nodes[i].description);
    }
    for (int i = 0; i < 2 * t->n_edges; i++)
        free(t->edge_names[i]);
    free(t->nodes);
    free(t->edges);
    free(t->edge_names);
}

static int find_node(const txt_graph *t, const char *name)
{
    for (int i = 0; i < t->n_nodes; i++)
        if (strcmp(t->nodes[i].name, name) == 0)
            return i;
    return -1;
}

/* ---- one line ---- */

/* An id: non-empty, no white space. */
static bool valid_id(const char *s, size_t len)
{
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++)
        if (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\v' || s[i] == '\f')
            return false;
    return true;
}

/* Parses all of text[0..len) as a finite number >= 0. */
static pd_status parse_number(const txt_graph *t, long line, const char *field, const char *text, size_t len,
                              double *out)
{
    char buf[64], *end;
    double v;

    if (len == 0 || len >= sizeof(buf))
        return PD_ERROR(PD_EFORMAT, "%s:%ld: %s: '%.*s' is not a number", t->path, line, field, (int)len, text);
    memcpy(buf, text, len);
    buf[len] = '\0';
    errno = 0;
    v = strtod(buf, &end);
    if (*end != '\0' || end == buf || buf[0] == ' ' || buf[0] == '\t')
        return PD_ERROR(PD_EFORMAT, "%s:%ld: %s: '%s' is not a number", t->path, line, field, buf);
    if (!isfinite(v) || errno == ERANGE || v < 0)
        return PD_ERROR(PD_EFORMAT, "%s:%ld: %s: %s is not a finite number >= 0", t->path, line, field, buf);
    *out = v;
    return PD_OK;
}

/* A byte count: a whole number below 2^63. */
static pd_status parse_bytes(const txt_graph *t, long line, const char *field, const char *text, size_t len,
                             int64_t *out)
{
    double v;

    PD_CHECK(parse_number(t, line, field, text, len, &v));
    if (v != floor(v) || v >= 9223372036854775808.0)
        return PD_ERROR(PD_EFORMAT, "%s:%ld: %s: %.*s is not a whole number of bytes", t->path, line, field, (int)len,
                        text);
    *out = (int64_t)v;
    return PD_OK;
}

/* "[a; b; c]": the sum of the entries, each a byte count. */
static pd_status parse_byte_list(const txt_graph *t, long line, const char *field, const char *text, size_t len,
                                 int64_t *out)
{
    int64_t sum = 0;
    const char *p = text + 1, *end = text + len - 1; /* inside the brackets */

    if (len < 3 || text[len - 1] != ']')
        return PD_ERROR(PD_EFORMAT, "%s:%ld: %s: '%.*s' is not a list '[a; b; ...]'", t->path, line, field, (int)len,
                        text);
    for (;;) {
        const char *sep = p;
        int64_t v;
        while (sep < end && *sep != ';')
            sep++;
        PD_CHECK(parse_bytes(t, line, field, p, (size_t)(sep - p), &v));
        if (v > INT64_MAX - sum)
            return PD_ERROR(PD_EFORMAT, "%s:%ld: %s: the entries overflow", t->path, line, field);
        sum += v;
        if (sep == end)
            break;
        p = sep + 1;
        if (*p == ' ')
            p++;
    }
    *out = sum;
    return PD_OK;
}

/* "forward_compute_time=F, backward_compute_time=B, activation_size=A,
 * parameter_size=P", fields in this order. */
static pd_status parse_metadata(const txt_graph *t, long line, const char *text, txt_node *node)
{
    static const char *const keys[] = {"forward_compute_time", "backward_compute_time", "activation_size",
                                       "parameter_size"};
    const char *p = text;

    for (int k = 0; k < 4; k++) {
        size_t key_len = strlen(keys[k]);
        const char *value, *end;
        if (strncmp(p, keys[k], key_len) != 0 || p[key_len] != '=')
            return PD_ERROR(PD_EFORMAT, "%s:%ld: expected '%s=' at '%.40s'", t->path, line, keys[k], p);
        value = p + key_len + 1;
        end = k < 3 ? strstr(value, ", ") : value + strlen(value);
        if (!end)
            return PD_ERROR(PD_EFORMAT, "%s:%ld: expected ', %s=' after %s", t->path, line, keys[k + 1], keys[k]);
        size_t len = (size_t)(end - value);
        switch (k) {
        case 0: PD_CHECK(parse_number(t, line, keys[k], value, len, &node->fwd_ms)); break;
        case 1: PD_CHECK(parse_number(t, line, keys[k], value, len, &node->bwd_ms)); break;
        case 2:
            if (len > 0 && value[0] == '[')
                PD_CHECK(parse_byte_list(t, line, keys[k], value, len, &node->activation_bytes));
            else
                PD_CHECK(parse_bytes(t, line, keys[k], value, len, &node->activation_bytes));
            break;
        case 3: PD_CHECK(parse_bytes(t, line, keys[k], value, len, &node->weight_bytes)); break;
        }
        p = k < 3 ? end + 2 : end;
    }
    return PD_OK;
}

/* The last occurrence of SEPARATOR in s[0..len), or NULL. */
static const char *last_separator(const char *s, size_t len)
{
    for (size_t i = len >= SEPARATOR_LEN ? len - SEPARATOR_LEN + 1 : 0; i-- > 0;)
        if (memcmp(s + i, SEPARATOR, SEPARATOR_LEN) == 0)
            return s + i;
    return NULL;
}

/* Checks "stage_id=S" (written by PipeDream's optimizer; ignored here). */
static bool is_stage_id(const char *s)
{
    char *end;

    if (strncmp(s, "stage_id=", 9) != 0 || s[9] < '0' || s[9] > '9')
        return false;
    (void)strtol(s + 9, &end, 10);
    return *end == '\0';
}

static pd_status read_node_line(txt_graph *t, long line, const char *text)
{
    const char *first = strstr(text, SEPARATOR), *meta_sep, *meta;
    txt_node node = {.line = line};
    size_t len = strlen(text);
    int other;

    if (!first || !valid_id(text, (size_t)(first - text)))
        return PD_ERROR(PD_EFORMAT, "%s:%ld: expected 'ID -- DESCRIPTION -- forward_compute_time=...' with an ID "
                        "without spaces", t->path, line);
    meta_sep = last_separator(text, len);
    if (meta_sep && is_stage_id(meta_sep + SEPARATOR_LEN))
        meta_sep = last_separator(text, (size_t)(meta_sep - text));
    if (!meta_sep || meta_sep <= first)
        return PD_ERROR(PD_EFORMAT, "%s:%ld: expected 'ID -- DESCRIPTION -- forward_compute_time=...'", t->path, line);
    meta = meta_sep + SEPARATOR_LEN;
    {
        /* the metadata ends where a stage_id segment begins, if any */
        const char *stage = strstr(meta, SEPARATOR);
        size_t meta_len = stage ? (size_t)(stage - meta) : strlen(meta);
        char *meta_copy = strndup(meta, meta_len);
        pd_status s;
        if (!meta_copy)
            return PD_ERROR(PD_ENOMEM, "%s:%ld: out of host memory", t->path, line);
        s = parse_metadata(t, line, meta_copy, &node);
        free(meta_copy);
        PD_CHECK(s);
    }
    node.name = strndup(text, (size_t)(first - text));
    if (!node.name)
        return PD_ERROR(PD_ENOMEM, "%s:%ld: out of host memory", t->path, line);
    if ((other = find_node(t, node.name)) >= 0) {
        pd_status s = PD_ERROR(PD_EFORMAT, "%s:%ld: node '%s' is defined again (first on line %ld)", t->path, line,
                               node.name, t->nodes[other].line);
        free(node.name);
        return s;
    }
    node.description = strndup(first + SEPARATOR_LEN, (size_t)(meta_sep - first - SEPARATOR_LEN));
    if (node.description && t->n_nodes == t->cap_nodes) {
        int cap = t->cap_nodes ? 2 * t->cap_nodes : 64;
        txt_node *nodes = realloc(t->nodes, (size_t)cap * sizeof(*nodes));
        if (nodes) {
            t->nodes = nodes;
            t->cap_nodes = cap;
        }
    }
    if (!node.description || t->n_nodes == t->cap_nodes) {
        free(node.name);
        free(node.description);
        return PD_ERROR(PD_ENOMEM, "%s:%ld: out of host memory", t->path, line);
    }
    t->nodes[t->n_nodes++] = node;
    return PD_OK;
}

/* "\tFROM -- TO"; the names are resolved once every node is read. */
static pd_status read_edge_line(txt_graph *t, long line, const char *text)
{
    const char *from = text, *sep, *to;

    while (*from == '\t' || *from == ' ')
        from++;
    sep = strstr(from, SEPARATOR);
    to = sep ? sep + SEPARATOR_LEN : NULL;
    if (!sep || !valid_id(from, (size_t)(sep - from)) || !valid_id(to, strlen(to)))
        return PD_ERROR(PD_EFORMAT, "%s:%ld: expected an edge '<tab>FROM -- TO' of two node ids", t->path, line);
    if (t->n_edges == t->cap_edges) {
        int cap = t->cap_edges ? 2 * t->cap_edges : 64;
        txt_edge *edges = realloc(t->edges, (size_t)cap * sizeof(*edges));
        if (edges)
            t->edges = edges;
        char **names = edges ? realloc(t->edge_names, (size_t)cap * 2 * sizeof(*names)) : NULL;
        if (!names)
            return PD_ERROR(PD_ENOMEM, "%s:%ld: out of host memory", t->path, line);
        t->edge_names = names;
        t->cap_edges = cap;
    }
    char *a = strndup(from, (size_t)(sep - from)), *b = strdup(to);
    if (!a || !b) {
        free(a);
        free(b);
        return PD_ERROR(PD_ENOMEM, "%s:%ld: out of host memory", t->path, line);
    }
    t->edge_names[2 * t->n_edges] = a;
    t->edge_names[2 * t->n_edges + 1] = b;
    t->edges[t->n_edges++] = (txt_edge){-1, -1, line};
    return PD_OK;
}

static pd_status read_lines(txt_graph *t, FILE *f)
{
    char *text = NULL;
    size_t cap = 0;
    ssize_t got;
    long line = 0;
    pd_status s = PD_OK;

    while (s == PD_OK && (got = getline(&text, &cap, f)) >= 0) {
        line++;
        while (got > 0 && (text[got - 1] == '\n' || text[got - 1] == '\r'))
            text[--got] = '\0';
        if ((size_t)got != strlen(text)) {
            s = PD_ERROR(PD_EFORMAT, "%s:%ld: the line holds a NUL byte (not a text file?)", t->path, line);
            break;
        }
        bool blank = true;
        for (ssize_t i = 0; i < got; i++)
            blank = blank && (text[i] == ' ' || text[i] == '\t');
        if (blank)
            continue;
        s = text[0] == '\t' ? read_edge_line(t, line, text) : read_node_line(t, line, text);
    }
    if (s == PD_OK && ferror(f))
        s = PD_ERROR(PD_EIO, "%s: read error after line %ld: %s", t->path, line, strerror(errno));
    free(text);
    return s;
}

static pd_status resolve_edges(txt_graph *t)
{
    if (t->n_nodes == 0)
        return PD_ERROR(PD_EFORMAT, "%s: no node lines", t->path);
    for (int e = 0; e < t->n_edges; e++) {
        txt_edge *edge = &t->edges[e];
        edge->from = find_node(t, t->edge_names[2 * e]);
        edge->to = find_node(t, t->edge_names[2 * e + 1]);
        if (edge->from < 0 || edge->to < 0)
            return PD_ERROR(PD_EFORMAT, "%s:%ld: edge %s node '%s', which has no node line", t->path, edge->line,
                            edge->from < 0 ? "from" : "to", t->edge_names[2 * e + (edge->from < 0 ? 0 : 1)]);
        if (edge->from == edge->to)
            return PD_ERROR(PD_EFORMAT, "%s:%ld: edge from node '%s' to itself", t->path, edge->line,
                            t->nodes[edge->from].name);
    }
    return PD_OK;
}

/* ---- import ---- */

/* The module class: "Conv2d" of "Conv2d(3, 64, ...)"; inputs get the
 * profile's input type. */
static void node_type(const char *description, char *buf, size_t size)
{
    size_t len = 0;

    if (strncmp(description, "Input", 5) == 0) {
        snprintf(buf, size, "%s", PD_PROFILE_INPUT_TYPE);
        return;
    }
    while (description[len] && description[len] != '(' && description[len] != ' ' && description[len] != '\t')
        len++;
    if (len == 0)
        snprintf(buf, size, "unknown");
    else
        snprintf(buf, size, "%.*s", (int)(len < size ? len : size - 1), description);
}

/* Kahn's algorithm taking, among the nodes whose inputs are all placed, the
 * one earliest in the file; order[i] = node line of the i-th node. */
static pd_status sort_nodes(const txt_graph *t, int *order)
{
    int n = t->n_nodes;
    int *missing = calloc((size_t)n, sizeof(int));
    bool *placed = calloc((size_t)n, sizeof(bool));
    pd_status s = PD_OK;

    if (!missing || !placed) {
        s = PD_ERROR(PD_ENOMEM, "%s: out of host memory sorting %d nodes", t->path, n);
        goto release;
    }
    for (int e = 0; e < t->n_edges; e++)
        missing[t->edges[e].to]++;
    for (int i = 0; i < n; i++) {
        int next = -1;
        for (int k = 0; k < n && next < 0; k++)
            if (!placed[k] && missing[k] == 0)
                next = k;
        if (next < 0) {
            int stuck = 0;
            while (placed[stuck])
                stuck++;
            s = PD_ERROR(PD_EFORMAT, "%s: the edges form a cycle through node '%s' (line %ld)", t->path,
                         t->nodes[stuck].name, t->nodes[stuck].line);
            goto release;
        }
        placed[next] = true;
        order[i] = next;
        for (int e = 0; e < t->n_edges; e++)
            if (t->edges[e].from == next)
                missing[t->edges[e].to]--;
    }
release:
    free(missing);
    free(placed);
    return s;
}

static pd_status build_profile(const txt_graph *t, const int *order, pd_profile *p)
{
    int *index_of = malloc((size_t)t->n_nodes * sizeof(int));
    int *inputs = malloc((size_t)(t->n_edges ? t->n_edges : 1) * sizeof(int));
    pd_status s = PD_OK;

    if (!index_of || !inputs) {
        s = PD_ERROR(PD_ENOMEM, "%s: out of host memory", t->path);
        goto release;
    }
    for (int i = 0; i < t->n_nodes; i++) {
        const txt_node *tn = &t->nodes[order[i]];
        char type[64];
        int n_inputs = 0;

        for (int e = 0; e < t->n_edges; e++)
            if (t->edges[e].to == order[i])
                inputs[n_inputs++] = index_of[t->edges[e].from];
        node_type(tn->description, type, sizeof(type));
        const pd_profile_node node = {
            .name = tn->name,
            .type = type,
            .description = tn->description,
            .fwd_ms = tn->fwd_ms,
            .bwd_ms = tn->bwd_ms,
            .activation_bytes = tn->activation_bytes,
            .weight_bytes = tn->weight_bytes,
            .flops = -1,
            .n_inputs = n_inputs,
            .inputs = inputs,
        };
        s = pd_profile_add_node(p, &node, &index_of[order[i]]);
        if (s != PD_OK) {
            char reason[1024];
            snprintf(reason, sizeof(reason), "%s", pd_last_error());
            s = PD_ERROR(s == PD_EINVAL ? PD_EFORMAT : s, "%s:%ld: %s", t->path, tn->line, reason);
            goto release;
        }
    }
release:
    free(index_of);
    free(inputs);
    return s;
}

pd_status pd_profile_import_graph_txt(const char *path, const char *model, int batch, pd_profile **out)
{
    txt_graph t = {.path = path};
    pd_profile *p = NULL;
    int *order = NULL;
    char source[1024];
    FILE *f;
    pd_status s;

    if (!model || !model[0] || batch < 0)
        return PD_ERROR(PD_EINVAL, "graph.txt import of '%s': a model name and a batch >= 0 are needed", path);
    f = fopen(path, "r");
    if (!f)
        return PD_ERROR(errno == ENOENT ? PD_ENOTFOUND : PD_EIO, "cannot read '%s': %s", path, strerror(errno));
    s = read_lines(&t, f);
    fclose(f);
    PD_CHECK_GOTO(s, s, release);
    PD_CHECK_GOTO(resolve_edges(&t), s, release);
    order = malloc((size_t)t.n_nodes * sizeof(int));
    if (!order) {
        s = PD_ERROR(PD_ENOMEM, "%s: out of host memory", path);
        goto release;
    }
    PD_CHECK_GOTO(sort_nodes(&t, order), s, release);

    snprintf(source, sizeof(source), "graph.txt: %s", path);
    const pd_profile_info info = {
        .model = model,
        .batch = batch,
        .dtype = PD_F32,
        .device = "unknown (imported)",
        .source = source,
        .data_note = "graph.txt: the forward time of its Input nodes",
    };
    PD_CHECK_GOTO(pd_profile_create(&info, &p), s, release);
    PD_CHECK_GOTO(build_profile(&t, order, p), s, release);
    *out = p;
    p = NULL;
release:
    pd_profile_destroy(p);
    free(order);
    txt_graph_free(&t);
    return s;
}

/* ---- export ---- */

/* Three decimals (PipeDream's style) when they read back exactly. */
static void format_ms(double v, char *buf, size_t size)
{
    snprintf(buf, size, "%.3f", v);
    if (strtod(buf, NULL) != v)
        snprintf(buf, size, "%.17g", v);
}

static void write_node(FILE *f, const pd_profile_node *n)
{
    char fwd[40], bwd[40];
    bool input = strcmp(n->type, PD_PROFILE_INPUT_TYPE) == 0;

    format_ms(n->fwd_ms, fwd, sizeof(fwd));
    format_ms(n->bwd_ms, bwd, sizeof(bwd));
    fprintf(f, "%s -- ", n->name);
    if (input && strncmp(n->description, "Input", 5) != 0)
        fprintf(f, n->description[0] ? "Input(%s)" : "Input%s", n->description);
    else
        fputs(n->description[0] ? n->description : n->type, f);
    fprintf(f,
            " -- forward_compute_time=%s, backward_compute_time=%s, activation_size=%" PRId64
            ".000, parameter_size=%" PRId64 ".000\n",
            fwd, bwd, n->activation_bytes, n->weight_bytes);
}

pd_status pd_profile_export_graph_txt(const pd_profile *p, const char *path)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    pd_atomic_file file;
    pd_status s;

    if (!f)
        return PD_ERROR(PD_ENOMEM, "cannot write '%s': out of host memory", path);
    for (int i = 0; i < pd_profile_size(p); i++)
        write_node(f, pd_profile_node_at(p, i));
    for (int i = 0; i < pd_profile_size(p); i++) {
        const pd_profile_node *n = pd_profile_node_at(p, i);
        for (int k = 0; k < n->n_inputs; k++)
            fprintf(f, "\t%s -- %s\n", pd_profile_node_at(p, n->inputs[k])->name, n->name);
    }
    if (fclose(f) != 0 || !text) {
        free(text);
        return PD_ERROR(PD_ENOMEM, "cannot write '%s': out of host memory", path);
    }
    s = pd_atomic_file_begin(path, &file);
    if (s == PD_OK) {
        s = pd_atomic_file_write(&file, text, size);
        if (s == PD_OK)
            s = pd_atomic_file_commit(&file);
        else
            pd_atomic_file_abort(&file);
    }
    free(text);
    return s;
}
