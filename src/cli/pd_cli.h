/* The `pipedream` command's shared pieces: exit codes, the one-line error
 * report, strict number parsing, and one entry point per verb. */
#ifndef PD_CLI_H
#define PD_CLI_H

#include <stdint.h>
#include <stdio.h>

#include <pipedream/status.h>

/* Exit codes: success, a runtime failure, bad usage or a bad input file. */
enum { PD_CLI_OK = 0, PD_CLI_FAILURE = 1, PD_CLI_USAGE = 2 };

/* Prints "pipedream: <message>" as one line on stderr. */
void pd_cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The exit code for a failed library call: PD_CLI_USAGE when the status
 * blames what the user gave (a bad argument, a missing, unreadable or
 * malformed file, a shape that does not fit), PD_CLI_FAILURE otherwise. */
int pd_cli_exit_code(pd_status status);

/* Parse the whole of `text` as a decimal integer in [min, max] / a finite
 * number in [min, max]. On failure print one line naming `option` and the
 * text, and return -1; 0 on success. */
int pd_cli_parse_int64(const char *option, const char *text, int64_t min, int64_t max, int64_t *out);
int pd_cli_parse_double(const char *option, const char *text, double min, double max, double *out);

/* Reports a getopt_long failure (`ret` '?' or ':', with opterr = 0 and an
 * optstring starting with ':') as one line naming argv[optind - 1]: the
 * unknown or malformed option, or the option that lacks its argument.
 * `verb` NULL means the global options. */
void pd_cli_option_error(const char *verb, int ret, char *const *argv, int optind_value);

/* Verbs: argv[0] is the verb's name; each returns an exit code. */
int pd_cli_train(int argc, char **argv);      /* train.c */
int pd_cli_models(int argc, char **argv);     /* models.c */
int pd_cli_model_info(int argc, char **argv); /* models.c */
int pd_cli_profile(int argc, char **argv);    /* profile.c */

/* Writes a verb's usage text. */
void pd_cli_train_usage(FILE *out);

#endif
