/* Plain TAP for the test programs that must build without cmocka (the GPU
 * machines may lack it): one "ok N - ..." / "not ok N - ..." line per check,
 * the last error printed under a failure, and "ok N # SKIP ..." lines.
 * Include once per program; `tap_cases` and `tap_failures` count. */
#ifndef PD_TEST_TAP_H
#define PD_TEST_TAP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

#include <pipedream/status.h>

static int tap_cases, tap_failures;

/* One check: passes when `pass`. */
static void ok(bool pass, const char *fmt, ...) __attribute__((format(printf, 2, 3), unused));
static void ok(bool pass, const char *fmt, ...)
{
    va_list ap;

    printf("%s %d - ", pass ? "ok" : "not ok", ++tap_cases);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    if (!pass) {
        tap_failures++;
        printf("# last error: %s\n", pd_last_error());
    }
    fflush(stdout);
}

/* One check that cannot run here, and why. */
static void skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static void skip(const char *fmt, ...)
{
    va_list ap;

    printf("ok %d # SKIP ", ++tap_cases);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

#endif
