/* JSON helpers: loading good and bad files (messages name path, line and
 * field), typed getters and their ranges, locations, atomic writes. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pipedream/json.h>

typedef struct fixture {
    char dir[64];
} fixture;

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof(*fx));

    if (!fx)
        return -1;
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/pd_test_json.XXXXXX");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    pd_error_clear();
    *state = fx;
    return 0;
}

/* Removes the directory and what the test left in it (one level deep). */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[PATH_MAX];

    if (!d)
        return;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (unlink(path) != 0)
            remove_tree(path);
    }
    closedir(d);
    rmdir(dir);
}

static int teardown(void **state)
{
    fixture *fx = *state;

    remove_tree(fx->dir);
    free(fx);
    return 0;
}

static const char *write_text(const fixture *fx, const char *name, const char *text, char *path, size_t size)
{
    FILE *f;

    snprintf(path, size, "%s/%s", fx->dir, name);
    f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    return path;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    assert_non_null(d);
    while ((e = readdir(d)))
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

/* The recorded message begins with `prefix` (a " (file:line)" suffix follows). */
static void assert_message_starts(const char *prefix)
{
    const char *msg = pd_last_error();

    if (strncmp(msg, prefix, strlen(prefix)) != 0)
        fail_msg("message \"%s\" does not begin with \"%s\"", msg, prefix);
}

static void assert_message_contains(const char *part)
{
    if (!strstr(pd_last_error(), part))
        fail_msg("message \"%s\" does not contain \"%s\"", pd_last_error(), part);
}

static const char *cluster_text = "{\n"
                                  "  \"name\": \"two-nodes\",\n"
                                  "  \"levels\": [\n"
                                  "    {\"name\": \"gpu\", \"fanout\": 4, \"bandwidth_bytes_per_s\": 1.5e11,\n"
                                  "     \"latency_s\": 0},\n"
                                  "    {\"name\": \"node\", \"fanout\": 2, \"bandwidth_bytes_per_s\": -3}\n"
                                  "  ],\n"
                                  "  \"big\": 1e9,\n"
                                  "  \"ratio\": 0.25,\n"
                                  "  \"enabled\": true,\n"
                                  "  \"nothing\": null\n"
                                  "}\n";

static void test_load_and_get(void **state)
{
    fixture *fx = *state;
    char path[PATH_MAX], where[256];
    json_t *root, *levels, *level;
    const char *name;
    size_t n_levels;
    int64_t fanout, big;
    double bw, ratio, latency;
    bool enabled;
    int ifanout;

    write_text(fx, "cluster.json", cluster_text, path, sizeof(path));
    assert_int_equal(pd_json_load_file(path, &root), PD_OK);
    assert_int_equal(pd_json_get_string(root, "name", "cluster.json", &name), PD_OK);
    assert_string_equal(name, "two-nodes");
    assert_int_equal(pd_json_get_array(root, "levels", "cluster.json", &levels, &n_levels), PD_OK);
    assert_int_equal(n_levels, 2);

    level = json_array_get(levels, 0);
    pd_json_where(where, sizeof(where), "cluster.json", "levels", 0);
    assert_string_equal(where, "cluster.json: levels[0]");
    assert_int_equal(pd_json_get_int64(level, "fanout", where, 1, 1024, &fanout), PD_OK);
    assert_int_equal(fanout, 4);
    assert_int_equal(pd_json_get_int(level, "fanout", where, 1, 4, &ifanout), PD_OK);
    assert_int_equal(ifanout, 4);
    assert_int_equal(pd_json_get_double(level, "bandwidth_bytes_per_s", where, PD_JSON_POSITIVE, &bw), PD_OK);
    assert_true(bw == 1.5e11);
    /* an integer 0 is a number too */
    assert_int_equal(pd_json_get_double(level, "latency_s", where, PD_JSON_NONNEGATIVE, &latency), PD_OK);
    assert_true(latency == 0.0);

    /* the bad level is named by file, index and field, with the value */
    level = json_array_get(levels, 1);
    pd_json_where(where, sizeof(where), "cluster.json", "levels", 1);
    bw = 42.0;
    assert_int_equal(pd_json_get_double(level, "bandwidth_bytes_per_s", where, PD_JSON_POSITIVE, &bw), PD_EFORMAT);
    assert_message_starts("cluster.json: levels[1].bandwidth_bytes_per_s: expected a number > 0, got -3");
    assert_true(bw == 42.0); /* outputs are set only on success */
    /* missing required field, optional default */
    assert_int_equal(pd_json_get_double(level, "latency_s", where, PD_JSON_NONNEGATIVE, &latency), PD_EFORMAT);
    assert_message_starts("cluster.json: levels[1].latency_s: required field is missing");
    assert_int_equal(pd_json_opt_double(level, "latency_s", where, PD_JSON_NONNEGATIVE, 2e-6, &latency), PD_OK);
    assert_true(latency == 2e-6);

    /* an integral real reads as an integer */
    assert_int_equal(pd_json_get_int64(root, "big", "cluster.json", 0, INT64_MAX, &big), PD_OK);
    assert_int_equal(big, 1000000000);
    assert_int_equal(pd_json_get_double(root, "ratio", "cluster.json", PD_JSON_CLOSED(0.0, 1.0), &ratio), PD_OK);
    assert_true(ratio == 0.25);
    assert_int_equal(pd_json_get_bool(root, "enabled", "cluster.json", &enabled), PD_OK);
    assert_true(enabled);
    /* present-but-null is a type error, not "absent" */
    assert_int_equal(pd_json_opt_bool(root, "nothing", "cluster.json", false, &enabled), PD_EFORMAT);
    assert_message_starts("cluster.json: nothing: expected true or false, got null");
    assert_int_equal(pd_json_opt_bool(root, "absent", "cluster.json", false, &enabled), PD_OK);
    assert_false(enabled);
    json_decref(root);
}

static void test_load_errors(void **state)
{
    fixture *fx = *state;
    char path[PATH_MAX], expect[PATH_MAX + 64];
    json_t *root = NULL;

    /* missing file: PD_EIO with the path and the system's reason */
    snprintf(path, sizeof(path), "%s/absent.json", fx->dir);
    assert_int_equal(pd_json_load_file(path, &root), PD_EIO);
    assert_message_contains(path);
    assert_message_contains("No such file or directory");
    assert_null(root);
    /* a directory is not a file */
    assert_int_equal(pd_json_load_file(fx->dir, &root), PD_EIO);
    assert_message_contains("Is a directory");

    /* syntax error on line 3: "path:3:column: jansson's text" */
    write_text(fx, "bad.json", "{\n  \"a\": 1,\n  \"b\": ,\n  \"c\": 2\n}\n", path, sizeof(path));
    assert_int_equal(pd_json_load_file(path, &root), PD_EFORMAT);
    snprintf(expect, sizeof(expect), "%s:3:", path);
    assert_message_starts(expect);
    assert_message_contains("unexpected token");
    assert_null(root);

    /* unterminated document */
    write_text(fx, "cut.json", "{\"a\": [1, 2,\n", path, sizeof(path));
    assert_int_equal(pd_json_load_file(path, &root), PD_EFORMAT);
    snprintf(expect, sizeof(expect), "%s:", path);
    assert_message_starts(expect);

    /* duplicate keys are an error, not "last one wins" */
    write_text(fx, "dup.json", "{\"a\": 1,\n \"a\": 2}\n", path, sizeof(path));
    assert_int_equal(pd_json_load_file(path, &root), PD_EFORMAT);
    snprintf(expect, sizeof(expect), "%s:2:", path);
    assert_message_starts(expect);
    assert_message_contains("duplicate");

    /* empty file */
    write_text(fx, "empty.json", "", path, sizeof(path));
    assert_int_equal(pd_json_load_file(path, &root), PD_EFORMAT);

    /* the buffer form names what it was given */
    assert_int_equal(pd_json_load_buffer("[1, 2", 5, "header of x", &root), PD_EFORMAT);
    assert_message_starts("header of x:1:");
}

static void test_int_ranges(void **state)
{
    json_t *doc = json_pack("{s:i, s:i, s:f, s:s, s:I, s:I, s:f}", "lo", 1, "hi", 8, "half", 2.5, "text", "3", "max",
                            (json_int_t)INT64_MAX, "min", (json_int_t)INT64_MIN, "huge", 1e19);
    int64_t v = -7;
    int iv;

    (void)state;
    assert_non_null(doc);
    /* bounds are inclusive */
    assert_int_equal(pd_json_get_int64(doc, "lo", "f.json", 1, 8, &v), PD_OK);
    assert_int_equal(v, 1);
    assert_int_equal(pd_json_get_int64(doc, "hi", "f.json", 1, 8, &v), PD_OK);
    assert_int_equal(v, 8);
    assert_int_equal(pd_json_get_int64(doc, "lo", "f.json", 2, 8, &v), PD_EFORMAT);
    assert_message_starts("f.json: lo: expected an integer in [2, 8], got 1");
    assert_int_equal(pd_json_get_int64(doc, "hi", "f.json", 1, 7, &v), PD_EFORMAT);
    assert_message_starts("f.json: hi: expected an integer in [1, 7], got 8");
    assert_int_equal(pd_json_get_int(doc, "hi", "f.json", 9, INT32_MAX, &iv), PD_EFORMAT);
    assert_message_starts("f.json: hi: expected an integer in [9, 2147483647], got 8");
    assert_int_equal(pd_json_get_int64(doc, "hi", "f.json", 9, INT64_MAX, &v), PD_EFORMAT);
    assert_message_starts("f.json: hi: expected an integer >= 9, got 8");
    assert_int_equal(v, 8); /* untouched by the failures */
    /* a fraction, a string, an out-of-range real are not integers */
    assert_int_equal(pd_json_get_int64(doc, "half", "f.json", INT64_MIN, INT64_MAX, &v), PD_EFORMAT);
    assert_message_starts("f.json: half: expected an integer, got 2.5");
    assert_int_equal(pd_json_get_int64(doc, "text", "f.json", INT64_MIN, 5, &v), PD_EFORMAT);
    assert_message_starts("f.json: text: expected an integer <= 5, got \"3\"");
    assert_int_equal(pd_json_get_int64(doc, "huge", "f.json", INT64_MIN, INT64_MAX, &v), PD_EFORMAT);
    /* the extremes of int64 survive */
    assert_int_equal(pd_json_get_int64(doc, "max", "f.json", INT64_MIN, INT64_MAX, &v), PD_OK);
    assert_true(v == INT64_MAX);
    assert_int_equal(pd_json_get_int64(doc, "min", "f.json", INT64_MIN, INT64_MAX, &v), PD_OK);
    assert_true(v == INT64_MIN);
    /* optional: absent gives the fallback, present is range-checked */
    assert_int_equal(pd_json_opt_int64(doc, "none", "f.json", 0, 10, 3, &v), PD_OK);
    assert_int_equal(v, 3);
    assert_int_equal(pd_json_opt_int(doc, "hi", "f.json", 0, 7, 3, &iv), PD_EFORMAT);
    assert_int_equal(pd_json_opt_int(doc, "hi", "f.json", 0, 8, 3, &iv), PD_OK);
    assert_int_equal(iv, 8);
    json_decref(doc);
}

static void test_double_ranges(void **state)
{
    json_t *doc = json_pack("{s:f, s:i, s:f, s:f, s:b}", "one", 1.0, "zero", 0, "tiny", 1e-300, "over", 1.5, "flag", 1);
    double x = -1.0;

    (void)state;
    assert_non_null(doc);
    assert_int_equal(pd_json_get_double(doc, "one", "p.json", PD_JSON_CLOSED(0.0, 1.0), &x), PD_OK);
    assert_true(x == 1.0);
    assert_int_equal(pd_json_get_double(doc, "over", "p.json", PD_JSON_CLOSED(0.0, 1.0), &x), PD_EFORMAT);
    assert_message_starts("p.json: over: expected a number in [0, 1], got 1.5");
    assert_int_equal(pd_json_get_double(doc, "zero", "p.json", PD_JSON_POSITIVE, &x), PD_EFORMAT);
    assert_message_starts("p.json: zero: expected a number > 0, got 0");
    assert_int_equal(pd_json_get_double(doc, "tiny", "p.json", PD_JSON_POSITIVE, &x), PD_OK);
    assert_true(x == 1e-300);
    assert_int_equal(pd_json_get_double(doc, "zero", "p.json", PD_JSON_NONNEGATIVE, &x), PD_OK);
    assert_true(x == 0.0);
    assert_int_equal(pd_json_get_double(doc, "one", "p.json", ((pd_json_range){0.0, 1.0, false, true}), &x),
                     PD_EFORMAT);
    assert_message_starts("p.json: one: expected a number in [0, 1), got 1.0");
    assert_int_equal(pd_json_get_double(doc, "one", "p.json", ((pd_json_range){-HUGE_VAL, 0.5, false, false}), &x),
                     PD_EFORMAT);
    assert_message_starts("p.json: one: expected a number <= 0.5, got 1.0");
    assert_int_equal(pd_json_get_double(doc, "flag", "p.json", PD_JSON_ANY_NUMBER, &x), PD_EFORMAT);
    assert_message_starts("p.json: flag: expected a number, got true");
    assert_int_equal(pd_json_opt_double(doc, "none", "p.json", PD_JSON_ANY_NUMBER, -2.5, &x), PD_OK);
    assert_true(x == -2.5);
    json_decref(doc);
}

static void test_types_and_keys(void **state)
{
    static const char *const known[] = {"name", "fanout", "bandwidth_bytes_per_s", NULL};
    json_t *doc = json_pack("{s:[i,s], s:{s:s, s:i, s:f}, s:s}", "ranks", 0, "one", "level", "name", "gpu", "fanout", 4,
                            "bandwith", 1e9, "label", "x");
    json_t *v, *arr, *level;
    const char *str;
    char where[128];
    int64_t rank;
    size_t len;

    (void)state;
    assert_non_null(doc);
    /* typed member getters report the type they wanted */
    assert_int_equal(pd_json_get_object(doc, "ranks", "plan.json", &v), PD_EFORMAT);
    assert_message_starts("plan.json: ranks: expected an object, got [0,\"one\"]");
    assert_int_equal(pd_json_get_array(doc, "label", "plan.json", &v, &len), PD_EFORMAT);
    assert_message_starts("plan.json: label: expected an array, got \"x\"");
    assert_int_equal(pd_json_get_string(doc, "ranks", "plan.json", &str), PD_EFORMAT);
    assert_message_starts("plan.json: ranks: expected a string");
    assert_int_equal(pd_json_get(doc, "absent", "plan.json", &v), PD_EFORMAT);
    assert_message_starts("plan.json: absent: required field is missing");
    assert_int_equal(pd_json_opt_string(doc, "absent", "plan.json", "dflt", &str), PD_OK);
    assert_string_equal(str, "dflt");
    /* a getter on something that is not an object says so */
    assert_int_equal(pd_json_get_array(doc, "ranks", "plan.json", &arr, &len), PD_OK);
    assert_int_equal(pd_json_get(arr, "x", "plan.json: ranks", &v), PD_EFORMAT);
    assert_message_starts("plan.json: ranks: expected an object, got [0,\"one\"]");
    /* array elements are checked with their index in the message */
    assert_int_equal(pd_json_as_int64(json_array_get(arr, 0),
                                      pd_json_where(where, sizeof(where), "plan.json", "ranks", 0), 0, 63, &rank),
                     PD_OK);
    assert_int_equal(rank, 0);
    assert_int_equal(pd_json_as_int64(json_array_get(arr, 1),
                                      pd_json_where(where, sizeof(where), "plan.json", "ranks", 1), 0, 63, &rank),
                     PD_EFORMAT);
    assert_message_starts("plan.json: ranks[1]: expected an integer in [0, 63], got \"one\"");
    assert_int_equal(pd_json_expect_array(arr, "plan.json: ranks", &len), PD_OK);
    assert_int_equal(len, 2);
    assert_int_equal(pd_json_expect_array(doc, "plan.json", &len), PD_EFORMAT);
    /* a misspelt field is named with the list of known ones */
    assert_int_equal(pd_json_get_object(doc, "level", "c.json", &level), PD_OK);
    assert_int_equal(pd_json_check_keys(level, "c.json: levels[0]", known), PD_EFORMAT);
    assert_message_starts("c.json: levels[0].bandwith: unknown field (expected one of: name, fanout, "
                          "bandwidth_bytes_per_s)");
    json_object_del(level, "bandwith");
    assert_int_equal(pd_json_check_keys(level, "c.json: levels[0]", known), PD_OK);
    json_decref(doc);
}

static void test_where(void **state)
{
    char buf[64], tiny[8];

    (void)state;
    assert_string_equal(pd_json_where(buf, sizeof(buf), "a.json", "levels", 2), "a.json: levels[2]");
    assert_string_equal(pd_json_where(buf, sizeof(buf), "a.json: levels[2]", "name", -1), "a.json: levels[2].name");
    assert_string_equal(pd_json_where(buf, sizeof(buf), "a.json: stages", NULL, 3), "a.json: stages[3]");
    assert_string_equal(pd_json_where(buf, sizeof(buf), "a.json", NULL, 0), "a.json: [0]");
    assert_string_equal(pd_json_where(buf, sizeof(buf), "", "k", -1), "k");
    assert_string_equal(pd_json_where(buf, sizeof(buf), NULL, "k", 1), "k[1]");
    /* truncated, always terminated */
    assert_string_equal(pd_json_where(tiny, sizeof(tiny), "a.json", "levels", 12), "a.json:");
}

static void test_atomic_write(void **state)
{
    fixture *fx = *state;
    char path[PATH_MAX], text[256];
    json_t *doc, *back = NULL, *old;
    size_t n;
    FILE *f;

    doc = json_pack("{s:f, s:f, s:f, s:[i,i,i], s:s, s:{s:b}}", "third", 1.0 / 3.0, "tenth", 0.1, "tiny",
                    4.9406564584124654e-324, "ranks", 0, 1, 2, "name", "caf\xc3\xa9", "opts", "sync", 1);
    assert_non_null(doc);
    snprintf(path, sizeof(path), "%s/plan.json", fx->dir);
    assert_int_equal(pd_json_write_file(path, doc), PD_OK);
    /* reads back equal, reals exactly; the file ends in a newline */
    assert_int_equal(pd_json_load_file(path, &back), PD_OK);
    assert_true(json_equal(doc, back));
    assert_true(json_real_value(json_object_get(back, "third")) == 1.0 / 3.0);
    assert_true(json_real_value(json_object_get(back, "tiny")) == 4.9406564584124654e-324);
    json_decref(back);
    f = fopen(path, "r");
    assert_non_null(f);
    n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    assert_true(n > 2 && text[n - 1] == '\n' && text[0] == '{');
    assert_non_null(strstr(text, "\n  \"third\": ")); /* indented, in insertion order */
    assert_true(strstr(text, "third") < strstr(text, "tenth"));
    assert_int_equal(count_entries(fx->dir), 1); /* no temporary file left */

    /* replacing an existing file */
    old = json_pack("{s:i}", "version", 2);
    assert_int_equal(pd_json_write_file(path, old), PD_OK);
    assert_int_equal(pd_json_load_file(path, &back), PD_OK);
    assert_true(json_equal(old, back));
    json_decref(back);
    json_decref(old);
    assert_int_equal(count_entries(fx->dir), 1);

    /* failures leave nothing behind: the target is a directory (the rename
     * fails after the data was written), or its directory is missing */
    snprintf(path, sizeof(path), "%s/sub", fx->dir);
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(pd_json_write_file(path, doc), PD_EIO);
    assert_message_contains(path);
    assert_int_equal(count_entries(fx->dir), 2);
    assert_int_equal(count_entries(path), 0);
    snprintf(path, sizeof(path), "%s/missing/plan.json", fx->dir);
    assert_int_equal(pd_json_write_file(path, doc), PD_EIO);
    assert_message_contains("No such file or directory");
    assert_int_equal(count_entries(fx->dir), 2);

    /* a scalar is not a JSON file */
    snprintf(path, sizeof(path), "%s/scalar.json", fx->dir);
    old = json_integer(3);
    assert_int_equal(pd_json_write_file(path, old), PD_EINVAL);
    json_decref(old);
    assert_int_equal(count_entries(fx->dir), 2);
    json_decref(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_load_and_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_errors, setup, teardown),
        cmocka_unit_test(test_int_ranges),
        cmocka_unit_test(test_double_ranges),
        cmocka_unit_test(test_types_and_keys),
        cmocka_unit_test(test_where),
        cmocka_unit_test_setup_teardown(test_atomic_write, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
