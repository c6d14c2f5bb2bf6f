/* Atomic file replacement: write a temporary file beside the target, fsync
 * it, rename it over the target and fsync the directory, so a crash leaves
 * either the old file or the new one, never a torn one. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/pd_atomic_file.h"

static atomic_uint temp_counter;

pd_status pd_atomic_file_begin(const char *path, pd_atomic_file *f)
{
    size_t size = strlen(path) + 64;
    int err = 0;

    f->fd = -1;
    f->temp_path = NULL;
    f->path = strdup(path);
    f->temp_path = malloc(size);
    if (!f->path || !f->temp_path) {
        free(f->path);
        free(f->temp_path);
        return PD_ERROR(PD_ENOMEM, "cannot write '%s': out of host memory", path);
    }
    /* O_EXCL with a name unique to this process and call; retry on the rare
     * clash with a stale file of an earlier process that had our pid. */
    for (int attempt = 0; attempt < 64; attempt++) {
        snprintf(f->temp_path, size, "%s.tmp.%ld.%u", path, (long)getpid(), atomic_fetch_add(&temp_counter, 1u));
        f->fd = open(f->temp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (f->fd >= 0)
            return PD_OK;
        err = errno;
        if (err != EEXIST)
            break;
    }
    free(f->path);
    free(f->temp_path);
    f->path = f->temp_path = NULL;
    return PD_ERROR(PD_EIO, "cannot create a file beside '%s': %s", path, strerror(err));
}

pd_status pd_atomic_file_write(pd_atomic_file *f, const void *data, size_t bytes)
{
    const char *p = data;

    while (bytes > 0) {
        ssize_t n = write(f->fd, p, bytes);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return PD_ERROR(PD_EIO, "cannot write '%s': %s", f->path, strerror(errno));
        p += n;
        bytes -= (size_t)n;
    }
    return PD_OK;
}

/* Makes the rename durable. Some file systems cannot fsync a directory
 * (EINVAL); the rename itself is still atomic there. */
static pd_status sync_parent_directory(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir;
    int fd, err = 0;

    if (!slash)
        dir = strdup(".");
    else if (slash == path)
        dir = strdup("/");
    else
        dir = strndup(path, (size_t)(slash - path));
    if (!dir)
        return PD_ERROR(PD_ENOMEM, "cannot write '%s': out of host memory", path);
    fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP))
        err = errno;
    if (fd >= 0)
        close(fd);
    free(dir);
    if (err)
        return PD_ERROR(PD_EIO, "cannot flush the directory of '%s': %s", path, strerror(err));
    return PD_OK;
}

pd_status pd_atomic_file_commit(pd_atomic_file *f)
{
    pd_status s = PD_OK;
    int fd = f->fd;

    f->fd = -1;
    if (fsync(fd) != 0) {
        s = PD_ERROR(PD_EIO, "cannot flush '%s' to disk: %s", f->path, strerror(errno));
        close(fd);
        goto out_abort;
    }
    if (close(fd) != 0) {
        s = PD_ERROR(PD_EIO, "cannot write '%s': %s", f->path, strerror(errno));
        goto out_abort;
    }
    if (rename(f->temp_path, f->path) != 0) {
        s = PD_ERROR(PD_EIO, "cannot replace '%s': %s", f->path, strerror(errno));
        goto out_abort;
    }
    free(f->temp_path);
    f->temp_path = NULL;
    s = sync_parent_directory(f->path);
out_abort:
    pd_atomic_file_abort(f);
    return s;
}

void pd_atomic_file_abort(pd_atomic_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    if (f->temp_path)
        unlink(f->temp_path);
    free(f->temp_path);
    free(f->path);
    f->temp_path = f->path = NULL;
}

