/* Safetensors: round trips of every dtype (0-d and empty tensors, metadata),
 * byte-exact agreement with the reference writer on hand-written bytes,
 * rejection of corrupted files (never a crash), writer argument checks,
 * reads into tensors, and the chunked path for tensors on a device. */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "test_files.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pipedream/kernels.h>
#include <pipedream/safetensors.h>

typedef struct fixture {
    char dir[64];
    pd_device *cpu;
} fixture;

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof(*fx));

    if (!fx)
        return -1;
    snprintf(fx->dir, sizeof(fx->dir), "/tmp/pd_test_st.XXXXXX");
    if (!mkdtemp(fx->dir) || pd_device_open("cpu", &fx->cpu) != PD_OK) {
        free(fx);
        return -1;
    }
    pd_error_clear();
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;
    DIR *d = opendir(fx->dir);
    struct dirent *e;
    char path[PATH_MAX];

    while (d && (e = readdir(d))) {
        snprintf(path, sizeof(path), "%s/%s", fx->dir, e->d_name);
        if (e->d_name[0] != '.')
            unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(fx->dir);
    pd_device_close(fx->cpu);
    free(fx);
    return 0;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;

    assert_non_null(d);
    while ((e = readdir(d)))
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void assert_message_contains(const char *part)
{
    if (!strstr(pd_last_error(), part))
        fail_msg("message \"%s\" does not contain \"%s\"", pd_last_error(), part);
}

/* A file image: 8-byte little-endian length of `header`, header, data. */
static size_t image(unsigned char *buf, size_t cap, const char *header, const void *data, size_t data_len)
{
    size_t n = strlen(header);

    assert_true(8 + n + data_len <= cap);
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, header, n);
    if (data_len)
        memcpy(buf + 8 + n, data, data_len);
    return 8 + n + data_len;
}

/* ---- round trip ---- */

static void test_round_trip_all_dtypes(void **state)
{
    fixture *fx = *state;
    float w[6] = {1.5f, -2.25f, 3.0f, 0.0f, -0.0f, 1e-30f};
    uint16_t bf[4] = {0x3f80, 0xc000, 0x7f80, 0x0001}; /* 1, -2, inf, smallest subnormal */
    uint16_t hf[4] = {0x3c00, 0xbc00, 0x7bff, 0x0400}; /* 1, -1, 65504, smallest normal */
    int32_t scalar = -123456789;
    uint8_t bytes[5] = {0, 1, 127, 128, 255};
    const char *meta[] = {"format", "pt", "stage", "1", "note", "caf\xc3\xa9 \"quoted\"\n"};
    const pd_st_entry entries[] = {
        {.name = "layer1.weight", .dtype = PD_F32, .shape = pd_shape_make(2, (int64_t)2, (int64_t)3), .data = w},
        {.name = "bf", .dtype = PD_BF16, .shape = pd_shape_make(1, (int64_t)4), .data = bf},
        {.name = "hf", .dtype = PD_F16, .shape = pd_shape_make(2, (int64_t)2, (int64_t)2), .data = hf},
        {.name = "step", .dtype = PD_I32, .shape = pd_shape_make(0), .data = &scalar},
        {.name = "mask", .dtype = PD_U8, .shape = pd_shape_make(1, (int64_t)5), .data = bytes},
        {.name = "empty", .dtype = PD_F32, .shape = pd_shape_make(2, (int64_t)0, (int64_t)3), .data = NULL},
        {.name = "empty.u8", .dtype = PD_U8, .shape = pd_shape_make(1, (int64_t)0), .data = NULL},
    };
    /* the reference's order: widest dtype first, then by name */
    const char *file_order[] = {"empty", "layer1.weight", "step", "bf", "hf", "empty.u8", "mask"};
    const int n = (int)(sizeof(entries) / sizeof(entries[0]));
    char path[PATH_MAX];
    pd_safetensors *st;
    pd_st_info info;
    const char *key, *value;
    unsigned char *raw;
    size_t raw_size;
    uint64_t header_len = 0;

    snprintf(path, sizeof(path), "%s/stage1.safetensors", fx->dir);
    assert_int_equal(pd_safetensors_write(path, entries, n, meta, 3), PD_OK);
    assert_int_equal(count_entries(fx->dir), 1);

    /* the header is padded with spaces to a multiple of 8 */
    raw = test_read_file(path, &raw_size);
    for (int i = 7; i >= 0; i--)
        header_len = header_len << 8 | raw[i];
    assert_int_equal(header_len % 8, 0);
    assert_true(8 + header_len <= raw_size);
    assert_int_equal(raw[8], '{');
    assert_int_equal(raw_size - 8 - header_len, 24 + 8 + 8 + 4 + 5);
    free(raw);

    assert_int_equal(pd_safetensors_open(path, &st), PD_OK);
    assert_int_equal(pd_safetensors_count(st), n);
    for (int i = 0; i < n; i++) {
        const pd_st_entry *e = &entries[i];
        size_t nbytes = (size_t)pd_shape_numel(&e->shape) * pd_dtype_size(e->dtype);
        assert_int_equal(pd_safetensors_find(st, e->name, &info), PD_OK);
        assert_string_equal(info.name, e->name);
        assert_true(info.supported);
        assert_int_equal(info.dtype, e->dtype);
        assert_int_equal(info.element_size, pd_dtype_size(e->dtype));
        assert_true(pd_shape_equal(&info.shape, &e->shape));
        assert_int_equal(info.nbytes, nbytes);
        if (nbytes)
            assert_memory_equal(info.data, e->data, nbytes);
        assert_int_equal((uintptr_t)info.data % info.element_size, 0); /* aligned for direct use */
        assert_int_equal(pd_safetensors_entry(st, i, &info), PD_OK);
        assert_string_equal(info.name, file_order[i]);
    }
    assert_int_equal(pd_safetensors_find(st, "step", &info), PD_OK);
    assert_int_equal(info.shape.ndim, 0);
    assert_string_equal(info.dtype_name, "I32");
    assert_int_equal(pd_safetensors_find(st, "layer1", &info), PD_ENOTFOUND);
    assert_message_contains("layer1");
    assert_int_equal(pd_safetensors_entry(st, n, &info), PD_EINVAL);

    assert_int_equal(pd_safetensors_metadata_count(st), 3);
    assert_string_equal(pd_safetensors_metadata(st, "format"), "pt");
    assert_string_equal(pd_safetensors_metadata(st, "stage"), "1");
    assert_string_equal(pd_safetensors_metadata(st, "note"), "caf\xc3\xa9 \"quoted\"\n");
    assert_null(pd_safetensors_metadata(st, "absent"));
    assert_int_equal(pd_safetensors_metadata_entry(st, 1, &key, &value), PD_OK);
    assert_string_equal(key, "stage");
    assert_string_equal(value, "1");
    assert_int_equal(pd_safetensors_metadata_entry(st, 3, &key, &value), PD_EINVAL);
    pd_safetensors_close(st);

    /* no tensors and no metadata is a valid file too */
    assert_int_equal(pd_safetensors_write(path, NULL, 0, NULL, 0), PD_OK);
    assert_int_equal(pd_safetensors_open(path, &st), PD_OK);
    assert_int_equal(pd_safetensors_count(st), 0);
    assert_int_equal(pd_safetensors_metadata_count(st), 0);
    pd_safetensors_close(st);
    assert_int_equal(count_entries(fx->dir), 1);
}

/* ---- agreement with the reference bytes ---- */

static void assert_writes_bytes(const char *path, const pd_st_entry *entries, int n, const char *const *meta,
                                int n_meta, const unsigned char *expected, size_t expected_size)
{
    unsigned char *raw;
    size_t size;
    pd_safetensors *st;

    assert_int_equal(pd_safetensors_write(path, entries, n, meta, n_meta), PD_OK);
    raw = test_read_file(path, &size);
    assert_int_equal(size, expected_size);
    assert_memory_equal(raw, expected, size);
    free(raw);
    /* and the reader takes the expected bytes */
    assert_int_equal(pd_safetensors_open_buffer(expected, expected_size, "expected", &st), PD_OK);
    assert_int_equal(pd_safetensors_count(st), n);
    pd_safetensors_close(st);
}

static void test_byte_exact(void **state)
{
    fixture *fx = *state;
    const float ramp[6] = {0, 1, 2, 3, 4, 5};
    const unsigned char ramp_le[24] = {0, 0, 0,    0,    0, 0, 0x80, 0x3f, 0, 0, 0,    0x40,
                                       0, 0, 0x40, 0x40, 0, 0, 0x80, 0x40, 0, 0, 0xa0, 0x40};
    unsigned char expected[512];
    char path[PATH_MAX];
    size_t n;
    pd_safetensors *st;
    pd_st_info info;

    snprintf(path, sizeof(path), "%s/x.safetensors", fx->dir);
    /* a 64-byte header needs no padding */
    {
        const pd_st_entry e = {.name = "attn.0",
                               .dtype = PD_F32,
                               .shape = pd_shape_make(3, (int64_t)1, (int64_t)2, (int64_t)3),
                               .data = ramp};
        n = image(expected, sizeof(expected),
                  "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}", ramp_le,
                  sizeof(ramp_le));
        assert_int_equal(n, 8 + 64 + 24);
        assert_writes_bytes(path, &e, 1, NULL, 0, expected, n);
    }
    /* a 65-byte header gets 7 spaces */
    {
        const pd_st_entry e = {.name = "attn0",
                               .dtype = PD_F32,
                               .shape = pd_shape_make(4, (int64_t)1, (int64_t)1, (int64_t)2, (int64_t)3),
                               .data = ramp};
        n = image(expected, sizeof(expected),
                  "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}       ", ramp_le,
                  sizeof(ramp_le));
        assert_writes_bytes(path, &e, 1, NULL, 0, expected, n);
        assert_int_equal(pd_safetensors_open(path, &st), PD_OK);
        assert_int_equal(pd_safetensors_find(st, "attn0", &info), PD_OK);
        for (int i = 0; i < 6; i++) {
            float v;
            memcpy(&v, (const char *)info.data + 4 * i, 4);
            assert_true(v == (float)i);
        }
        pd_safetensors_close(st);
    }
    /* metadata only */
    {
        const char *meta[] = {"framework", "pt"};
        n = image(expected, sizeof(expected), "{\"__metadata__\":{\"framework\":\"pt\"}}     ", NULL, 0);
        assert_writes_bytes(path, NULL, 0, meta, 1, expected, n);
    }
    /* several dtypes, a 0-d and an empty tensor, as Python's
     * safetensors.numpy.save writes them */
    {
        const float c[2] = {0, 0};
        const int32_t s = 5, *z = NULL;
        const uint16_t a[2] = {0x3c00, 0x3c00};
        const uint8_t b[3] = {0, 1, 2};
        const char *meta[] = {"k", "v"};
        const pd_st_entry e[] = {
            {.name = "b", .dtype = PD_U8, .shape = pd_shape_make(1, (int64_t)3), .data = b},
            {.name = "a", .dtype = PD_F16, .shape = pd_shape_make(1, (int64_t)2), .data = a},
            {.name = "c", .dtype = PD_F32, .shape = pd_shape_make(2, (int64_t)1, (int64_t)2), .data = c},
            {.name = "z", .dtype = PD_I32, .shape = pd_shape_make(2, (int64_t)0, (int64_t)3), .data = z},
            {.name = "s", .dtype = PD_I32, .shape = pd_shape_make(0), .data = &s},
        };
        const unsigned char data[19] = {0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0x00, 0x3c, 0x00, 0x3c, 0, 1, 2};
        n = image(expected, sizeof(expected),
                  "{\"__metadata__\":{\"k\":\"v\"},"
                  "\"c\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8]},"
                  "\"s\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[8,12]},"
                  "\"z\":{\"dtype\":\"I32\",\"shape\":[0,3],\"data_offsets\":[12,12]},"
                  "\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[12,16]},"
                  "\"b\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[16,19]}}    ",
                  data, sizeof(data));
        assert_int_equal(n, 8 + 304 + 19);
        assert_writes_bytes(path, e, 5, meta, 1, expected, n);
    }
}

/* A hand-written file from another writer: tensors in the header in any
 * order, no padding, a dtype pipedream has no type for, leading blanks. */
static void test_foreign_file(void **state)
{
    fixture *fx = *state;
    unsigned char buf[256], data[8 + 2 + 4];
    char path[PATH_MAX];
    const int64_t big = -5;
    const uint16_t h = 0xc000; /* f16 -2 */
    const int32_t i = 77;
    pd_safetensors *st;
    pd_st_info info;
    pd_tensor *t;
    size_t n;

    memcpy(data, &big, 8);
    memcpy(data + 8, &h, 2);
    memcpy(data + 10, &i, 4);
    n = image(buf, sizeof(buf),
              " {\"i\":{\"data_offsets\":[10,14],\"shape\":[1],\"dtype\":\"I32\"},"
              "\"h\":{\"shape\":[],\"dtype\":\"F16\",\"data_offsets\":[8,10]},"
              "\"big\":{\"dtype\":\"I64\",\"shape\":[1,1],\"data_offsets\":[0,8]}}",
              data, sizeof(data));
    snprintf(path, sizeof(path), "%s/foreign.safetensors", fx->dir);
    test_write_file(path, buf, n);
    assert_int_equal(pd_safetensors_open(path, &st), PD_OK);
    assert_int_equal(pd_safetensors_count(st), 3);
    assert_int_equal(pd_safetensors_entry(st, 0, &info), PD_OK);
    assert_string_equal(info.name, "big");
    assert_false(info.supported);
    assert_string_equal(info.dtype_name, "I64");
    assert_int_equal(info.element_size, 8);
    assert_int_equal(info.shape.ndim, 2);
    assert_memory_equal(info.data, &big, 8);
    assert_int_equal(pd_safetensors_find(st, "i", &info), PD_OK);
    assert_int_equal(info.dtype, PD_I32);
    assert_memory_equal(info.data, &i, 4);
    assert_int_equal(pd_safetensors_entry(st, 1, &info), PD_OK);
    assert_string_equal(info.name, "h");

    /* read_into: the right tensor gets the values, others are refused */
    pd_shape one = pd_shape_make(1, (int64_t)1);
    assert_int_equal(pd_tensor_create(fx->cpu, PD_I32, &one, &t), PD_OK);
    assert_int_equal(pd_safetensors_read_into(st, "i", t), PD_OK);
    assert_int_equal(((int32_t *)t->data)[0], 77);
    assert_int_equal(pd_safetensors_read_into(st, "big", t), PD_ENOTSUP);
    assert_message_contains("I64");
    assert_int_equal(pd_safetensors_read_into(st, "h", t), PD_ESHAPE);
    assert_message_contains("'h'");
    assert_int_equal(pd_safetensors_read_into(st, "nope", t), PD_ENOTFOUND);
    pd_tensor_destroy(t);
    pd_shape two = pd_shape_make(1, (int64_t)2);
    assert_int_equal(pd_tensor_create(fx->cpu, PD_I32, &two, &t), PD_OK);
    assert_int_equal(pd_safetensors_read_into(st, "i", t), PD_ESHAPE);
    assert_message_contains("[1]");
    assert_message_contains("[2]");
    pd_tensor_destroy(t);
    pd_safetensors_close(st);
}

/* ---- corrupted files ---- */

typedef struct bad_case {
    const char *header;
    size_t data_len;
    pd_status status;
    const char *message_part; /* the message names this */
} bad_case;

static void test_corrupt_headers(void **state)
{
    static const bad_case cases[] = {
        /* bad JSON, not an object, invalid UTF-8 */
        {"{\"a\":", 0, PD_EFORMAT, "JSON header:1:"},
        {"[1,2]", 0, PD_EFORMAT, "expected an object"},
        {"{\"\xff\":1}", 0, PD_EFORMAT, "JSON header"},
        {"", 0, PD_EFORMAT, "JSON header"},
        /* duplicate names */
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
         2, PD_EFORMAT, "duplicate"},
        /* unknown dtype; sub-byte dtype; wrong types */
        {"{\"w\":{\"dtype\":\"F99\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, PD_EFORMAT, "'w': unknown dtype 'F99'"},
        {"{\"w\":{\"dtype\":\"F4\",\"shape\":[2],\"data_offsets\":[0,1]}}", 1, PD_ENOTSUP, "'w'"},
        {"{\"w\":{\"dtype\":32,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, PD_EFORMAT, "'w'.dtype: expected a string"},
        {"{\"w\":[1]}", 0, PD_EFORMAT, "'w': expected an object"},
        /* wrong byte count for the shape */
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, PD_EFORMAT,
         "'w': data_offsets [0, 8] hold 8 bytes but F32 [3] needs 12"},
        /* overlapping, leaving a hole, trailing bytes, past the end */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         12, PD_EFORMAT, "'b': data_offsets [4, 12] overlap 'a'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
         12, PD_EFORMAT, "[4, 8) belong to no tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, PD_EFORMAT,
         "[0, 4) belong to no tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, PD_EFORMAT, "[4, 8) at the end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8, PD_EFORMAT,
         "'a': data_offsets [0, 16] run past the 8 bytes"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4, PD_EFORMAT,
         "'a'.data_offsets[1]: expected an integer >= 4, got 0"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1, PD_EFORMAT,
         "'a'.data_offsets: expected [begin, end]"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", 1, PD_EFORMAT, "'a'.data_offsets[0]"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 1, PD_EFORMAT, "'a'.data_offsets: required field is missing"},
        /* shapes: negative, fractional, overflowing, too many dimensions */
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0, PD_EFORMAT,
         "'a'.shape[0]: expected an integer >= 0, got -1"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,0]}}", 0, PD_EFORMAT, "'a'.shape[0]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,0]}}", 0, PD_EFORMAT,
         "'a': the byte count"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[18446744073709551616],\"data_offsets\":[0,0]}}", 0, PD_EFORMAT,
         "JSON header:1:"},
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1, PD_ENOTSUP,
         "'a': rank 9"},
        /* unknown fields; bad metadata */
        {"{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"offsets\":[0,1]}}", 1, PD_EFORMAT,
         "'a'.offsets: unknown field"},
        {"{\"__metadata__\":{\"k\":1}}", 0, PD_EFORMAT, "__metadata__.k: expected a string, got 1"},
        {"{\"__metadata__\":[\"k\"]}", 0, PD_EFORMAT, "__metadata__: expected an object"},
    };
    unsigned char buf[512], data[16];
    pd_safetensors *st;

    (void)state;
    memset(data, 0xab, sizeof(data));
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        size_t n = image(buf, sizeof(buf), cases[c].header, data, cases[c].data_len);
        st = (pd_safetensors *)0x1;
        pd_error_clear();
        pd_status s = pd_safetensors_open_buffer(buf, n, "bad.safetensors", &st);
        if (s != cases[c].status)
            fail_msg("case %zu (%s): status %d, expected %d: %s", c, cases[c].header, s, cases[c].status,
                     pd_last_error());
        assert_ptr_equal(st, (pd_safetensors *)0x1); /* untouched on failure */
        if (!strstr(pd_last_error(), cases[c].message_part) || !strstr(pd_last_error(), "bad.safetensors"))
            fail_msg("case %zu: message \"%s\" lacks \"%s\"", c, pd_last_error(), cases[c].message_part);
    }
}

static void test_corrupt_lengths(void **state)
{
    fixture *fx = *state;
    const uint8_t v[4] = {1, 2, 3, 4};
    const pd_st_entry e[] = {
        {.name = "a", .dtype = PD_U8, .shape = pd_shape_make(1, (int64_t)4), .data = v},
        {.name = "b", .dtype = PD_U8, .shape = pd_shape_make(2, (int64_t)2, (int64_t)1), .data = v},
    };
    char path[PATH_MAX];
    unsigned char *good, *bad;
    size_t size;
    pd_safetensors *st;

    snprintf(path, sizeof(path), "%s/good.safetensors", fx->dir);
    assert_int_equal(pd_safetensors_write(path, e, 2, NULL, 0), PD_OK);
    good = test_read_file(path, &size);
    bad = malloc(size + 8);
    assert_non_null(bad);

    /* every truncation is rejected, from memory and from a file */
    for (size_t cut = 0; cut < size; cut++) {
        assert_int_equal(pd_safetensors_open_buffer(good, cut, "cut", &st), PD_EFORMAT);
        if (cut % 16 == 0 || cut < 9 || cut == size - 1) {
            snprintf(path, sizeof(path), "%s/cut.safetensors", fx->dir);
            test_write_file(path, good, cut);
            assert_int_equal(pd_safetensors_open(path, &st), PD_EFORMAT);
            assert_message_contains(path);
        }
    }
    /* so are extra bytes after the last tensor */
    memcpy(bad, good, size);
    bad[size] = 0;
    assert_int_equal(pd_safetensors_open_buffer(bad, size + 1, "long", &st), PD_EFORMAT);

    /* header lengths past the end, over the 100 MB limit, absurd */
    const uint64_t lengths[] = {size - 8 + 1, 100000001u, UINT64_MAX, (uint64_t)1 << 63};
    for (size_t k = 0; k < sizeof(lengths) / sizeof(lengths[0]); k++) {
        memcpy(bad, good, size);
        for (int i = 0; i < 8; i++)
            bad[i] = (unsigned char)(lengths[k] >> (8 * i));
        assert_int_equal(pd_safetensors_open_buffer(bad, size, "len", &st), PD_EFORMAT);
        assert_message_contains("header length");
    }
    /* a header length that cuts the JSON short */
    memcpy(bad, good, size);
    bad[0] = (unsigned char)(bad[0] - 8);
    assert_int_equal(pd_safetensors_open_buffer(bad, size, "short", &st), PD_EFORMAT);

    /* single-byte corruption anywhere: rejected, or still a consistent file */
    for (size_t pos = 0; pos < size; pos++) {
        static const unsigned char masks[] = {0x01, 0x20, 0x80, 0xff};
        for (size_t m = 0; m < sizeof(masks); m++) {
            memcpy(bad, good, size);
            bad[pos] ^= masks[m];
            pd_status s = pd_safetensors_open_buffer(bad, size, "flip", &st);
            assert_true(s == PD_OK || s == PD_EFORMAT || s == PD_ENOTSUP);
            if (s != PD_OK)
                continue;
            for (int i = 0; i < pd_safetensors_count(st); i++) {
                pd_st_info info;
                assert_int_equal(pd_safetensors_entry(st, i, &info), PD_OK);
                assert_true((const unsigned char *)info.data >= bad &&
                            (const unsigned char *)info.data + info.nbytes <= bad + size);
                assert_int_equal(info.nbytes, (size_t)pd_shape_numel(&info.shape) * info.element_size);
            }
            pd_safetensors_close(st);
        }
    }
    /* not a file */
    assert_int_equal(pd_safetensors_open(fx->dir, &st), PD_EIO);
    snprintf(path, sizeof(path), "%s/absent.safetensors", fx->dir);
    assert_int_equal(pd_safetensors_open(path, &st), PD_EIO);
    assert_message_contains("No such file");
    free(bad);
    free(good);
}

/* ---- writer checks ---- */

static void test_write_rejects(void **state)
{
    fixture *fx = *state;
    const float v[2] = {1, 2};
    char path[PATH_MAX];
    pd_st_entry e[2] = {
        {.name = "w", .dtype = PD_F32, .shape = pd_shape_make(1, (int64_t)2), .data = v},
        {.name = "w", .dtype = PD_F32, .shape = pd_shape_make(1, (int64_t)2), .data = v},
    };
    const char *meta[] = {"k", "1", "k", "2"};

    snprintf(path, sizeof(path), "%s/w.safetensors", fx->dir);
    assert_int_equal(pd_safetensors_write(path, e, 2, NULL, 0), PD_EINVAL);
    assert_message_contains("'w' is repeated");
    e[1].dtype = PD_U8; /* still the same name, now sorted apart */
    assert_int_equal(pd_safetensors_write(path, e, 2, NULL, 0), PD_EINVAL);
    e[1].name = "__metadata__";
    assert_int_equal(pd_safetensors_write(path, e, 2, NULL, 0), PD_EINVAL);
    e[1].name = "bad\xff";
    assert_int_equal(pd_safetensors_write(path, e, 2, NULL, 0), PD_EINVAL);
    assert_message_contains("UTF-8");
    e[1].name = NULL;
    assert_int_equal(pd_safetensors_write(path, e, 2, NULL, 0), PD_EINVAL);
    e[1].name = "x";
    e[1].shape.dim[0] = -2;
    assert_int_equal(pd_safetensors_write(path, e, 2, NULL, 0), PD_EINVAL);
    e[1].shape.dim[0] = 2;
    e[1].data = NULL;
    assert_int_equal(pd_safetensors_write(path, e, 2, NULL, 0), PD_EINVAL);
    assert_message_contains("no data");
    e[1].data = v;
    assert_int_equal(pd_safetensors_write(path, e, 2, meta, 2), PD_EINVAL);
    assert_message_contains("metadata");
    assert_int_equal(count_entries(fx->dir), 0); /* nothing written, no temporaries */
    assert_int_equal(pd_safetensors_write(path, e, 2, meta, 1), PD_OK);
    assert_int_equal(count_entries(fx->dir), 1);
    snprintf(path, sizeof(path), "%s/missing/w.safetensors", fx->dir);
    assert_int_equal(pd_safetensors_write(path, e, 2, NULL, 0), PD_EIO);
    assert_int_equal(count_entries(fx->dir), 1);
}

/* ---- tensors on a device: a stand-in device whose copies are counted ---- */

static int device_copies;

static pd_status fake_copy(pd_device *dev, void *dst, const void *src, size_t bytes, pd_copy_kind kind)
{
    (void)dev;
    (void)kind;
    device_copies++;
    memcpy(dst, src, bytes);
    return PD_OK;
}

static void test_device_tensors(void **state)
{
    fixture *fx = *state;
    static const pd_mem_ops fake_mem = {.copy = fake_copy};
    pd_device fake = {.kind = PD_DEVICE_CUDA, .name = "fake", .mem = &fake_mem};
    const int64_t n = ((int64_t)16 << 20) / 4 + 1000; /* just over one 16 MiB staging chunk */
    float *host = malloc((size_t)n * sizeof(float));
    pd_tensor dev_tensor, *cpu_tensor, *small;
    char path[PATH_MAX];
    pd_safetensors *st;
    pd_st_info info;
    pd_shape shape = pd_shape_make(2, n / 8, (int64_t)8), sshape = pd_shape_make(1, (int64_t)3);

    assert_non_null(host);
    for (int64_t i = 0; i < n; i++)
        host[i] = (float)i * 0.5f - 7.0f;
    pd_tensor_view(&dev_tensor, &fake, PD_F32, &shape, host);
    assert_int_equal(pd_tensor_create(fx->cpu, PD_I32, &sshape, &small), PD_OK);
    for (int i = 0; i < 3; i++)
        ((int32_t *)small->data)[i] = 10 * i;
    const pd_st_entry e[] = {{.name = "big", .tensor = &dev_tensor}, {.name = "small", .tensor = small}};

    snprintf(path, sizeof(path), "%s/dev.safetensors", fx->dir);
    device_copies = 0;
    assert_int_equal(pd_safetensors_write(path, e, 2, NULL, 0), PD_OK);
    assert_int_equal(device_copies, 2); /* two staging chunks; the CPU tensor is written directly */
    assert_int_equal(pd_safetensors_open(path, &st), PD_OK);
    assert_int_equal(pd_safetensors_find(st, "big", &info), PD_OK);
    assert_true(pd_shape_equal(&info.shape, &shape));
    assert_memory_equal(info.data, host, (size_t)n * sizeof(float));

    /* reading back into a CPU tensor and into the device */
    assert_int_equal(pd_tensor_create(fx->cpu, PD_F32, &shape, &cpu_tensor), PD_OK);
    assert_int_equal(pd_safetensors_read_into(st, "big", cpu_tensor), PD_OK);
    assert_memory_equal(cpu_tensor->data, host, (size_t)n * sizeof(float));
    memset(host, 0, (size_t)n * sizeof(float));
    device_copies = 0;
    assert_int_equal(pd_safetensors_read_into(st, "big", &dev_tensor), PD_OK);
    assert_int_equal(device_copies, 1);
    assert_memory_equal(cpu_tensor->data, host, (size_t)n * sizeof(float));
    assert_int_equal(pd_safetensors_find(st, "small", &info), PD_OK);
    assert_memory_equal(info.data, small->data, 12);
    pd_safetensors_close(st);

    /* a non-contiguous tensor is refused */
    dev_tensor.stride[1] = 2;
    assert_int_equal(pd_safetensors_write(path, e, 1, NULL, 0), PD_EINVAL);
    assert_message_contains("contiguous");
    pd_tensor_destroy(cpu_tensor);
    pd_tensor_destroy(small);
    free(host);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip_all_dtypes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_byte_exact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_file, setup, teardown),
        cmocka_unit_test(test_corrupt_headers),
        cmocka_unit_test_setup_teardown(test_corrupt_lengths, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_device_tensors, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
