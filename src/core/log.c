/* The logger: level, rank prefix, one locked write per line. */
#include "config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <pipedream/log.h>

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static pd_log_level log_level = PD_LOG_INFO;
static int log_rank = -1;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

static void log_init_from_env(void)
{
    const char *env = getenv("PD_LOG_LEVEL");
    int level = env ? pd_log_level_parse(env) : -1;

    if (level >= 0)
        log_level = (pd_log_level)level;
}

int pd_log_level_parse(const char *name)
{
    for (int i = 0; i <= PD_LOG_TRACE; i++)
        if (strcasecmp(name, level_names[i]) == 0)
            return i;
    if (name[0] >= '0' && name[0] <= '4' && name[1] == '\0')
        return name[0] - '0';
    return -1;
}

void pd_log_set_level(pd_log_level level)
{
    pthread_once(&log_once, log_init_from_env);
    log_level = level;
}

pd_log_level pd_log_get_level(void)
{
    pthread_once(&log_once, log_init_from_env);
    return log_level;
}

void pd_log_set_rank(int rank) { log_rank = rank; }

void pd_log_at(pd_log_level level, const char *file, int line, const char *fmt, ...)
{
    char message[2048];
    char prefix[64];
    struct timespec now;
    va_list ap;

    if (level > pd_log_get_level())
        return;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    clock_gettime(CLOCK_REALTIME, &now);
    if (log_rank >= 0)
        snprintf(prefix, sizeof(prefix), "[pd r%d]", log_rank);
    else
        snprintf(prefix, sizeof(prefix), "[pd]");
    pthread_mutex_lock(&log_lock);
    if (level >= PD_LOG_DEBUG) {
        const char *base = strrchr(file, '/');
        fprintf(stderr, "%s %lld.%03ld %s %s:%d: %s\n", prefix, (long long)now.tv_sec, now.tv_nsec / 1000000L,
                level_names[level], base ? base + 1 : file, line, message);
    } else {
        fprintf(stderr, "%s %s: %s\n", prefix, level_names[level], message);
    }
    pthread_mutex_unlock(&log_lock);
}
