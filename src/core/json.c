/* JSON files through jansson: loading, atomic writing (through the
 * atomic-file helper of atomic_file.c), typed getters that name
 * the bad field. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pipedream/json.h>

#include "core/pd_atomic_file.h"

/* Enough for a file path and a few levels of nesting; longer ones are cut. */
#define LOCATION_BYTES 512

/* ---- loading and writing documents ---- */

/* The whole file in a malloc'd buffer; PD_EIO with the system's reason. */
static pd_status read_whole_file(const char *path, char **out, size_t *out_size)
{
    struct stat st;
    size_t size = 0, capacity;
    char *buf;
    int fd, err = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return PD_ERROR(PD_EIO, "cannot open '%s': %s", path, strerror(errno));
    if (fstat(fd, &st) != 0)
        err = errno;
    else if (S_ISDIR(st.st_mode))
        err = EISDIR;
    if (err) {
        close(fd);
        return PD_ERROR(PD_EIO, "cannot read '%s': %s", path, strerror(err));
    }
    /* The size is a hint only: the file may be a pipe or change under us. */
    capacity = st.st_size > 0 ? (size_t)st.st_size + 1 : 4096;
    buf = malloc(capacity);
    while (buf) {
        ssize_t n;
        if (size == capacity) {
            char *grown = realloc(buf, capacity * 2);
            if (!grown)
                break;
            buf = grown;
            capacity *= 2;
        }
        n = read(fd, buf + size, capacity - size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            err = errno;
        if (n <= 0)
            break;
        size += (size_t)n;
    }
    close(fd);
    if (!buf || size == capacity) {
        free(buf);
        return PD_ERROR(PD_ENOMEM, "cannot read '%s': out of host memory", path);
    }
    if (err) {
        free(buf);
        return PD_ERROR(PD_EIO, "cannot read '%s': %s", path, strerror(err));
    }
    *out = buf;
    *out_size = size;
    return PD_OK;
}

pd_status pd_json_load_buffer(const void *data, size_t size, const char *name, json_t **out)
{
    json_error_t error;
    json_t *root = json_loadb(data, size, JSON_REJECT_DUPLICATES, &error);

    if (!root) {
        if (error.line > 0)
            return PD_ERROR(PD_EFORMAT, "%s:%d:%d: %s", name, error.line, error.column, error.text);
        return PD_ERROR(PD_EFORMAT, "%s: %s", name, error.text);
    }
    *out = root;
    return PD_OK;
}

pd_status pd_json_load_file(const char *path, json_t **out)
{
    char *text = NULL;
    size_t size = 0;
    pd_status s;

    PD_CHECK(read_whole_file(path, &text, &size));
    s = pd_json_load_buffer(text, size, path, out);
    free(text);
    return s;
}

pd_status pd_json_write_file(const char *path, const json_t *root)
{
    pd_atomic_file f;
    char *text;
    pd_status s;

    if (!json_is_object(root) && !json_is_array(root))
        return PD_ERROR(PD_EINVAL, "cannot write '%s': the top of a JSON file must be an object or array", path);
    text = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17));
    if (!text)
        return PD_ERROR(PD_ENOMEM, "cannot write '%s': JSON encoding failed", path);
    s = pd_atomic_file_begin(path, &f);
    if (s != PD_OK)
        goto out_text;
    PD_CHECK_GOTO(pd_atomic_file_write(&f, text, strlen(text)), s, out_abort);
    PD_CHECK_GOTO(pd_atomic_file_write(&f, "\n", 1), s, out_abort);
    s = pd_atomic_file_commit(&f);
    goto out_text;
out_abort:
    pd_atomic_file_abort(&f);
out_text:
    free(text);
    return s;
}

/* ---- locations and messages ---- */

char *pd_json_where(char *buf, size_t size, const char *where, const char *key, long index)
{
    size_t used = 0;
    int n = 0;

    if (size == 0)
        return buf;
    buf[0] = '\0';
    if (!where)
        where = "";
    if (key && !where[0])
        n = snprintf(buf, size, "%s", key);
    else if (key && strstr(where, ": "))
        n = snprintf(buf, size, "%s.%s", where, key);
    else if (key)
        n = snprintf(buf, size, "%s: %s", where, key);
    else if (index >= 0 && where[0] && !strstr(where, ": "))
        n = snprintf(buf, size, "%s: ", where); /* an element of a root array */
    else
        n = snprintf(buf, size, "%s", where);
    used = n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
    if (index >= 0)
        snprintf(buf + used, size - used, "[%ld]", index);
    return buf;
}

/* The value as compact JSON for "got ..." (cut to a readable length). */
static const char *describe(const json_t *value, char *buf, size_t size)
{
    char *text;

    if (!value)
        return "nothing";
    text = json_dumps(value, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!text)
        return "an unprintable value";
    if (strlen(text) > 40)
        snprintf(buf, size, "%.37s...", text);
    else
        snprintf(buf, size, "%s", text);
    free(text);
    return buf;
}

static pd_status expected(const json_t *value, const char *where, const char *key, const char *what)
{
    char location[LOCATION_BYTES], got[64];

    return PD_ERROR(PD_EFORMAT, "%s: expected %s, got %s", pd_json_where(location, sizeof(location), where, key, -1),
                    what, describe(value, got, sizeof(got)));
}

static const char *int_range_text(int64_t min, int64_t max, char *buf, size_t size)
{
    if (min == INT64_MIN && max == INT64_MAX)
        snprintf(buf, size, "an integer");
    else if (max == INT64_MAX)
        snprintf(buf, size, "an integer >= %" PRId64, min);
    else if (min == INT64_MIN)
        snprintf(buf, size, "an integer <= %" PRId64, max);
    else
        snprintf(buf, size, "an integer in [%" PRId64 ", %" PRId64 "]", min, max);
    return buf;
}

static const char *number_range_text(pd_json_range r, char *buf, size_t size)
{
    bool has_min = isfinite(r.min), has_max = isfinite(r.max);

    if (!has_min && !has_max)
        snprintf(buf, size, "a number");
    else if (!has_max)
        snprintf(buf, size, "a number %s %g", r.min_open ? ">" : ">=", r.min);
    else if (!has_min)
        snprintf(buf, size, "a number %s %g", r.max_open ? "<" : "<=", r.max);
    else
        snprintf(buf, size, "a number in %c%g, %g%c", r.min_open ? '(' : '[', r.min, r.max, r.max_open ? ')' : ']');
    return buf;
}

/* ---- value checks (key NULL: `where` names the value itself) ---- */

static pd_status check_int64(const json_t *value, const char *where, const char *key, int64_t min, int64_t max,
                             int64_t *out)
{
    char what[96];
    int64_t v;

    if (json_is_integer(value)) {
        v = (int64_t)json_integer_value(value);
    } else if (json_is_real(value)) {
        double x = json_real_value(value);
        if (x != floor(x) || x < -0x1p63 || x >= 0x1p63)
            return expected(value, where, key, int_range_text(min, max, what, sizeof(what)));
        v = (int64_t)x;
    } else {
        return expected(value, where, key, int_range_text(min, max, what, sizeof(what)));
    }
    if (v < min || v > max)
        return expected(value, where, key, int_range_text(min, max, what, sizeof(what)));
    *out = v;
    return PD_OK;
}

static pd_status check_double(const json_t *value, const char *where, const char *key, pd_json_range r, double *out)
{
    char what[96];
    double x;

    if (!json_is_number(value))
        return expected(value, where, key, number_range_text(r, what, sizeof(what)));
    x = json_number_value(value);
    if (!(r.min_open ? x > r.min : x >= r.min) || !(r.max_open ? x < r.max : x <= r.max))
        return expected(value, where, key, number_range_text(r, what, sizeof(what)));
    *out = x;
    return PD_OK;
}

static pd_status check_string(const json_t *value, const char *where, const char *key, const char **out)
{
    if (!json_is_string(value))
        return expected(value, where, key, "a string");
    *out = json_string_value(value);
    return PD_OK;
}

static pd_status check_bool(const json_t *value, const char *where, const char *key, bool *out)
{
    if (!json_is_boolean(value))
        return expected(value, where, key, "true or false");
    *out = json_is_true(value);
    return PD_OK;
}

pd_status pd_json_expect_object(const json_t *value, const char *where)
{
    return json_is_object(value) ? PD_OK : expected(value, where, NULL, "an object");
}

pd_status pd_json_expect_array(const json_t *value, const char *where, size_t *len)
{
    if (!json_is_array(value))
        return expected(value, where, NULL, "an array");
    if (len)
        *len = json_array_size(value);
    return PD_OK;
}

pd_status pd_json_check_keys(const json_t *obj, const char *where, const char *const *known)
{
    char location[LOCATION_BYTES], list[512];
    const char *key;
    json_t *value;
    size_t used = 0;

    PD_CHECK(pd_json_expect_object(obj, where));
    json_object_foreach ((json_t *)obj, key, value) {
        bool found = false;
        for (const char *const *k = known; *k && !found; k++)
            found = strcmp(*k, key) == 0;
        if (found)
            continue;
        list[0] = '\0';
        for (const char *const *k = known; *k && used < sizeof(list); k++) {
            int n = snprintf(list + used, sizeof(list) - used, "%s%s", k == known ? "" : ", ", *k);
            used += n > 0 ? (size_t)n : 0;
        }
        return PD_ERROR(PD_EFORMAT, "%s: unknown field (expected one of: %s)",
                        pd_json_where(location, sizeof(location), where, key, -1), list);
    }
    return PD_OK;
}

pd_status pd_json_as_int64(const json_t *value, const char *where, int64_t min, int64_t max, int64_t *out)
{
    return check_int64(value, where, NULL, min, max, out);
}

pd_status pd_json_as_double(const json_t *value, const char *where, pd_json_range range, double *out)
{
    return check_double(value, where, NULL, range, out);
}

pd_status pd_json_as_string(const json_t *value, const char *where, const char **out)
{
    return check_string(value, where, NULL, out);
}

pd_status pd_json_as_bool(const json_t *value, const char *where, bool *out)
{
    return check_bool(value, where, NULL, out);
}

/* ---- members ---- */

/* The member into *out; an absent one is an error unless `optional` (then NULL). */
static pd_status member(const json_t *obj, const char *key, const char *where, bool optional, json_t **out)
{
    char location[LOCATION_BYTES];

    PD_CHECK(pd_json_expect_object(obj, where));
    *out = json_object_get(obj, key);
    if (!*out && !optional)
        return PD_ERROR(PD_EFORMAT, "%s: required field is missing",
                        pd_json_where(location, sizeof(location), where, key, -1));
    return PD_OK;
}

pd_status pd_json_get(const json_t *obj, const char *key, const char *where, json_t **out)
{
    return member(obj, key, where, false, out);
}

pd_status pd_json_get_object(const json_t *obj, const char *key, const char *where, json_t **out)
{
    json_t *v;

    PD_CHECK(member(obj, key, where, false, &v));
    if (!json_is_object(v))
        return expected(v, where, key, "an object");
    *out = v;
    return PD_OK;
}

pd_status pd_json_get_array(const json_t *obj, const char *key, const char *where, json_t **out, size_t *len)
{
    json_t *v;

    PD_CHECK(member(obj, key, where, false, &v));
    if (!json_is_array(v))
        return expected(v, where, key, "an array");
    if (len)
        *len = json_array_size(v);
    *out = v;
    return PD_OK;
}

pd_status pd_json_get_int64(const json_t *obj, const char *key, const char *where, int64_t min, int64_t max,
                            int64_t *out)
{
    json_t *v;

    PD_CHECK(member(obj, key, where, false, &v));
    return check_int64(v, where, key, min, max, out);
}

pd_status pd_json_get_int(const json_t *obj, const char *key, const char *where, int min, int max, int *out)
{
    int64_t v;

    PD_CHECK(pd_json_get_int64(obj, key, where, min, max, &v));
    *out = (int)v;
    return PD_OK;
}

pd_status pd_json_get_double(const json_t *obj, const char *key, const char *where, pd_json_range range, double *out)
{
    json_t *v;

    PD_CHECK(member(obj, key, where, false, &v));
    return check_double(v, where, key, range, out);
}

pd_status pd_json_get_string(const json_t *obj, const char *key, const char *where, const char **out)
{
    json_t *v;

    PD_CHECK(member(obj, key, where, false, &v));
    return check_string(v, where, key, out);
}

pd_status pd_json_get_bool(const json_t *obj, const char *key, const char *where, bool *out)
{
    json_t *v;

    PD_CHECK(member(obj, key, where, false, &v));
    return check_bool(v, where, key, out);
}

pd_status pd_json_opt_int64(const json_t *obj, const char *key, const char *where, int64_t min, int64_t max,
                            int64_t fallback, int64_t *out)
{
    json_t *v;

    PD_CHECK(member(obj, key, where, true, &v));
    if (!v) {
        *out = fallback;
        return PD_OK;
    }
    return check_int64(v, where, key, min, max, out);
}

pd_status pd_json_opt_int(const json_t *obj, const char *key, const char *where, int min, int max, int fallback,
                          int *out)
{
    int64_t v;

    PD_CHECK(pd_json_opt_int64(obj, key, where, min, max, fallback, &v));
    *out = (int)v;
    return PD_OK;
}

pd_status pd_json_opt_double(const json_t *obj, const char *key, const char *where, pd_json_range range,
                             double fallback, double *out)
{
    json_t *v;

    PD_CHECK(member(obj, key, where, true, &v));
    if (!v) {
        *out = fallback;
        return PD_OK;
    }
    return check_double(v, where, key, range, out);
}

pd_status pd_json_opt_string(const json_t *obj, const char *key, const char *where, const char *fallback,
                             const char **out)
{
    json_t *v;

    PD_CHECK(member(obj, key, where, true, &v));
    if (!v) {
        *out = fallback;
        return PD_OK;
    }
    return check_string(v, where, key, out);
}

pd_status pd_json_opt_bool(const json_t *obj, const char *key, const char *where, bool fallback, bool *out)
{
    json_t *v;

    PD_CHECK(member(obj, key, where, true, &v));
    if (!v) {
        *out = fallback;
        return PD_OK;
    }
    return check_bool(v, where, key, out);
}
