/* Private to the library: replacing a file atomically. The new contents go
 * to a temporary file beside the target (same directory, hence same file
 * system); commit flushes it, renames it over the target and flushes the
 * directory, so readers and crashes see the old file or the new one, never a
 * mixture. Implemented in json.c. */
#ifndef PD_ATOMIC_FILE_H
#define PD_ATOMIC_FILE_H

#include <stddef.h>

#include <pipedream/status.h>

typedef struct pd_atomic_file {
    int fd;          /* the temporary file, -1 when closed */
    char *path;      /* the target */
    char *temp_path; /* the temporary file, NULL once renamed or removed */
} pd_atomic_file;

/* Creates the temporary file for `path` (mode 0666 less the umask). PD_EIO
 * naming the directory if it cannot. On failure *f holds nothing to abort. */
pd_status pd_atomic_file_begin(const char *path, pd_atomic_file *f);

/* Appends `bytes` bytes to the temporary file; PD_EIO on failure. */
pd_status pd_atomic_file_write(pd_atomic_file *f, const void *data, size_t bytes);

/* Flushes the temporary file to disk and renames it over the target. On
 * failure the temporary file is removed and PD_EIO returned; either way *f
 * is released. */
pd_status pd_atomic_file_commit(pd_atomic_file *f);

/* Removes the temporary file and releases *f; a no-op on a released one. */
void pd_atomic_file_abort(pd_atomic_file *f);

#endif
