/* Leveled logging to stderr with a rank prefix. The logger is the only global
 * state of the library; it is safe to call from several threads. */
#ifndef PIPEDREAM_LOG_H
#define PIPEDREAM_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PD_LOG_ERROR = 0,
    PD_LOG_WARN = 1,
    PD_LOG_INFO = 2,
    PD_LOG_DEBUG = 3,
    PD_LOG_TRACE = 4,
} pd_log_level;

/* Sets the most verbose level printed (default INFO, or $PD_LOG_LEVEL). */
void pd_log_set_level(pd_log_level level);

/* The current level. */
pd_log_level pd_log_get_level(void);

/* Parses "error", "warn", "info", "debug", "trace" (or 0..4); -1 if unknown. */
int pd_log_level_parse(const char *name);

/* Sets the rank shown in every line ("[pd r3]"); negative hides it. */
void pd_log_set_rank(int rank);

/* Prints one line if `level` is enabled. Use through the PD_LOG_* macros. */
void pd_log_at(pd_log_level level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define PD_LOG_ERRORF(...) pd_log_at(PD_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define PD_LOG_WARNF(...) pd_log_at(PD_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define PD_LOG_INFOF(...) pd_log_at(PD_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define PD_LOG_DEBUGF(...) pd_log_at(PD_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)
#define PD_LOG_TRACEF(...) pd_log_at(PD_LOG_TRACE, __FILE__, __LINE__, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
