/* Status codes and error messages shared by the whole stack. */
#ifndef PIPEDREAM_STATUS_H
#define PIPEDREAM_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 0 is success; every failure is a negative PD_E* code. */
typedef int pd_status;

enum {
    PD_OK = 0,
    PD_EINVAL = -1,    /* a bad argument or option */
    PD_ENOMEM = -2,    /* host or device memory exhausted */
    PD_EIO = -3,       /* a file or stream could not be read or written */
    PD_EFORMAT = -4,   /* a file's contents are malformed */
    PD_ESHAPE = -5,    /* tensor shapes or dtypes do not fit together */
    PD_ENOTSUP = -6,   /* the backend or build does not support the operation */
    PD_EDEVICE = -7,   /* the device runtime (CUDA, cuDNN, cuBLAS) failed */
    PD_ENOTFOUND = -8, /* a named thing (file, tensor, layer, device) does not exist */
    PD_ESTATE = -9,    /* the call does not fit the object's current state */
    PD_ETIMEOUT = -10, /* a peer or operation did not answer in time */
    PD_ECOMM = -11,    /* a peer or transport failed */
};

/* A short fixed description of a status code ("invalid argument", ...). */
const char *pd_strerror(pd_status status);

/* Records the message of the failure being reported by the calling thread and
 * returns `status`, so callers can write `return pd_error(PD_EINVAL, ...)`.
 * Use through PD_ERROR, which adds the source location. */
pd_status pd_error_at(const char *file, int line, pd_status status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The message recorded by the calling thread's last failure, or "" if none. */
const char *pd_last_error(void);

/* Forgets the calling thread's last message (tests use this between cases). */
void pd_error_clear(void);

#define PD_ERROR(status, ...) pd_error_at(__FILE__, __LINE__, (status), __VA_ARGS__)

/* Evaluates a pd_status expression and returns it from the enclosing function
 * when it failed; the message recorded where it was detected is kept. */
#define PD_CHECK(expr)                \
    do {                              \
        pd_status pd_check_s_ = (expr); \
        if (pd_check_s_ != PD_OK)     \
            return pd_check_s_;       \
    } while (0)

/* Like PD_CHECK, but jumps to a cleanup label with the status in `var`. */
#define PD_CHECK_GOTO(expr, var, label) \
    do {                                \
        (var) = (expr);                 \
        if ((var) != PD_OK)             \
            goto label;                 \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
