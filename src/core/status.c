/* Status strings and the per-thread last-error message. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <pipedream/status.h>

#define PD_ERROR_MESSAGE_BYTES 1024

static _Thread_local char last_error[PD_ERROR_MESSAGE_BYTES];

const char *pd_strerror(pd_status status)
{
    switch (status) {
    case PD_OK: return "success";
    case PD_EINVAL: return "invalid argument";
    case PD_ENOMEM: return "out of memory";
    case PD_EIO: return "input/output error";
    case PD_EFORMAT: return "malformed file";
    case PD_ESHAPE: return "shape mismatch";
    case PD_ENOTSUP: return "unsupported";
    case PD_EDEVICE: return "device error";
    case PD_ENOTFOUND: return "not found";
    case PD_ESTATE: return "invalid state";
    case PD_ETIMEOUT: return "timed out";
    case PD_ECOMM: return "communication failure";
    default: return "unknown error";
    }
}

pd_status pd_error_at(const char *file, int line, pd_status status, const char *fmt, ...)
{
    /* Format into a separate buffer: callers often pass pd_last_error() as
     * an argument to wrap the message of the failure they propagate. */
    char message[PD_ERROR_MESSAGE_BYTES];
    va_list ap;
    const char *base = strrchr(file, '/');
    int n;

    va_start(ap, fmt);
    n = vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof(message))
        snprintf(message + n, sizeof(message) - (size_t)n, " (%s:%d)", base ? base + 1 : file, line);
    memcpy(last_error, message, sizeof(message));
    return status;
}

const char *pd_last_error(void) { return last_error; }

void pd_error_clear(void) { last_error[0] = '\0'; }
