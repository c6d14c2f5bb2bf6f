/* Whole-file helpers for the unit tests (include after <cmocka.h>): every
 * failure is a test failure. */
#ifndef TEST_FILES_H
#define TEST_FILES_H

#include <stdio.h>
#include <stdlib.h>

/* Writes `size` bytes to `path`, replacing it. */
static inline void test_write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");

    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, size, f), size);
    assert_int_equal(fclose(f), 0);
}

/* The whole file in a malloc'd buffer (one extra NUL byte after it, so text
 * can be read as a string); *size receives its length. The caller frees. */
static inline unsigned char *test_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    unsigned char *buf;
    long n;

    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    assert_int_equal(fclose(f), 0);
    buf[n] = '\0';
    *size = (size_t)n;
    return buf;
}

#endif
