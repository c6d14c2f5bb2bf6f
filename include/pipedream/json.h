/* JSON files through jansson: loading with line:column errors, atomic
 * writing, and typed getters that validate a value and name it by its place
 * in the file when it is wrong, e.g.
 *   "cluster.json: levels[1].bandwidth_bytes_per_s: expected a number > 0, got -3".
 *
 * This header includes <jansson.h>: callers walk documents with jansson's own
 * json_t API (json_array_get, json_object_foreach, ...) and use these helpers
 * where a value is checked.
 *
 * Locations. Every getter takes `where`, the printed location of the object
 * or value it looks at: a file name for a document's root ("cluster.json"),
 * or the file name, ": " and the path inside the file for anything nested
 * ("cluster.json: levels[1]"). pd_json_where() builds these. A getter's `key`
 * is always one literal member name (dots in it are not paths). */
#ifndef PIPEDREAM_JSON_H
#define PIPEDREAM_JSON_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include <pipedream/status.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Reads and parses the JSON file at `path` (an object or array at the top;
 * duplicate keys in an object are rejected). On success *out is a new
 * reference the caller frees with json_decref. PD_EIO names the path and the
 * system's reason when the file cannot be read; PD_EFORMAT reads
 * "path:line:column: <jansson's message>" when it is not valid JSON. */
pd_status pd_json_load_file(const char *path, json_t **out);

/* Like pd_json_load_file for `size` bytes in memory; `name` stands for the
 * path in messages. */
pd_status pd_json_load_buffer(const void *data, size_t size, const char *name, json_t **out);

/* Writes `root` as indented JSON (2 spaces, members in insertion order, reals
 * with 17 significant digits, so they read back exactly) ending in a newline.
 * The file is replaced atomically: written to a temporary file in the same
 * directory, flushed to disk and renamed over `path`, so a crash leaves
 * either the old or the new file, never part of one (a crash mid-write may
 * leave a stray "<path>.tmp.*" beside it). PD_EIO on failure, with nothing
 * left behind. */
pd_status pd_json_write_file(const char *path, const json_t *root);

/* Writes the location of a member or element of the thing at `where` into
 * buf (always terminated, truncated if too small) and returns buf: `key`
 * (may be NULL) is appended as ".key" (or ": key" after a bare file name),
 * then "[index]" when index >= 0. E.g. ("cluster.json", "levels", 1) gives
 * "cluster.json: levels[1]"; ("cluster.json: levels[1]", "name", -1) gives
 * "cluster.json: levels[1].name". */
char *pd_json_where(char *buf, size_t size, const char *where, const char *key, long index);

/* PD_EFORMAT unless `value` is an object. */
pd_status pd_json_expect_object(const json_t *value, const char *where);

/* PD_EFORMAT unless `value` is an array; *len (nullable) gets its length. */
pd_status pd_json_expect_array(const json_t *value, const char *where, size_t *len);

/* PD_EFORMAT naming the first member of the object `obj` whose key is not in
 * the NULL-terminated list `known` (catches misspelt fields in hand-written
 * files). */
pd_status pd_json_check_keys(const json_t *obj, const char *where, const char *const *known);

/* Bounds of a number: [min, max], where either end is excluded when its
 * *_open flag is set. */
typedef struct pd_json_range {
    double min;
    double max;
    bool min_open;
    bool max_open;
} pd_json_range;

#define PD_JSON_ANY_NUMBER ((pd_json_range){-HUGE_VAL, HUGE_VAL, false, false})
#define PD_JSON_POSITIVE ((pd_json_range){0.0, HUGE_VAL, true, false})
#define PD_JSON_NONNEGATIVE ((pd_json_range){0.0, HUGE_VAL, false, false})
#define PD_JSON_CLOSED(lo, hi) ((pd_json_range){(lo), (hi), false, false})

/* Value checks, for array elements and other values already in hand. Each
 * returns PD_EFORMAT naming `where`, what was expected and what was found.
 * Integers: JSON integers, or reals with an integral value ("1e9"), in
 * [min, max]. Numbers: integers or reals within `range`. Strings are borrowed
 * from the document and live as long as it does. */
pd_status pd_json_as_int64(const json_t *value, const char *where, int64_t min, int64_t max, int64_t *out);
pd_status pd_json_as_double(const json_t *value, const char *where, pd_json_range range, double *out);
pd_status pd_json_as_string(const json_t *value, const char *where, const char **out);
pd_status pd_json_as_bool(const json_t *value, const char *where, bool *out);

/* Member `key` of the object `obj` (at `where`), any type. PD_EFORMAT if obj
 * is not an object or has no such member. *out is borrowed from obj. */
pd_status pd_json_get(const json_t *obj, const char *key, const char *where, json_t **out);

/* Member `key`, which must be an object / an array (length in *len, nullable).
 * *out is borrowed from obj. */
pd_status pd_json_get_object(const json_t *obj, const char *key, const char *where, json_t **out);
pd_status pd_json_get_array(const json_t *obj, const char *key, const char *where, json_t **out, size_t *len);

/* Required members of a given type, checked as the pd_json_as_* functions do
 * and named "where.key" in messages. *out is set only on success. */
pd_status pd_json_get_int64(const json_t *obj, const char *key, const char *where, int64_t min, int64_t max,
                            int64_t *out);
pd_status pd_json_get_int(const json_t *obj, const char *key, const char *where, int min, int max, int *out);
pd_status pd_json_get_double(const json_t *obj, const char *key, const char *where, pd_json_range range, double *out);
pd_status pd_json_get_string(const json_t *obj, const char *key, const char *where, const char **out);
pd_status pd_json_get_bool(const json_t *obj, const char *key, const char *where, bool *out);

/* Optional members: *out = `fallback` when obj has no member `key`; a member
 * that is present is checked like the required getters do (null is not
 * "absent": it is a type error). */
pd_status pd_json_opt_int64(const json_t *obj, const char *key, const char *where, int64_t min, int64_t max,
                            int64_t fallback, int64_t *out);
pd_status pd_json_opt_int(const json_t *obj, const char *key, const char *where, int min, int max, int fallback,
                          int *out);
pd_status pd_json_opt_double(const json_t *obj, const char *key, const char *where, pd_json_range range,
                             double fallback, double *out);
pd_status pd_json_opt_string(const json_t *obj, const char *key, const char *where, const char *fallback,
                             const char **out);
pd_status pd_json_opt_bool(const json_t *obj, const char *key, const char *where, bool fallback, bool *out);

#ifdef __cplusplus
}
#endif
#endif
