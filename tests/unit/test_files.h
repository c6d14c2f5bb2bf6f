/* File helpers for the unit tests (include after <cmocka.h>): whole files
 * written and read, a scratch directory per test program, and paths into
 * the source tree. Every failure is a test failure. */
#ifndef TEST_FILES_H
#define TEST_FILES_H

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes `size` bytes to `path`, replacing it. */
static inline void test_write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");

    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, size, f), size);
    assert_int_equal(fclose(f), 0);
}

/* Writes the string `text` (without its NUL) to `path`, replacing it. */
static inline void test_write_text(const char *path, const char *text) { test_write_file(path, text, strlen(text)); }

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

/* `relative` in the source tree: under $top_srcdir (`make check` sets it),
 * else under the current directory. A static buffer, valid until the next
 * call. */
static inline const char *test_src_path(const char *relative)
{
    static char path[PATH_MAX];
    const char *top = getenv("top_srcdir");

    snprintf(path, sizeof(path), "%s/%s", top ? top : ".", relative);
    return path;
}

/* The test program's scratch directory, /tmp/pd_<program>.XXXXXX, once
 * test_tmpdir_setup made it. */
static inline char *test_tmpdir(void)
{
    static char dir[64];
    return dir;
}

/* A cmocka group setup and teardown: make the scratch directory; remove it
 * with the files in it (not subdirectories). */
static inline int test_tmpdir_setup(void **state)
{
    (void)state;
    snprintf(test_tmpdir(), 64, "/tmp/pd_%.32s.XXXXXX", program_invocation_short_name);
    return mkdtemp(test_tmpdir()) ? 0 : -1;
}

static inline int test_tmpdir_teardown(void **state)
{
    DIR *d = opendir(test_tmpdir());
    struct dirent *e;
    char path[PATH_MAX];

    (void)state;
    while (d && (e = readdir(d))) {
        snprintf(path, sizeof(path), "%s/%s", test_tmpdir(), e->d_name);
        if (e->d_name[0] != '.')
            unlink(path);
    }
    if (d)
        closedir(d);
    rmdir(test_tmpdir());
    return 0;
}

/* `name` in the scratch directory. A static buffer, valid until the next
 * call. */
static inline const char *test_tmp_path(const char *name)
{
    static char path[PATH_MAX];

    snprintf(path, sizeof(path), "%s/%s", test_tmpdir(), name);
    return path;
}

#endif
