/* The one check every data-file reader starts with. */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "data/pd_data_int.h"

pd_status pd_data_regular_file(const char *path, uint64_t *size)
{
    struct stat st;

    if (stat(path, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return PD_ERROR(PD_ENOTFOUND, "%s: no such file", path);
        return PD_ERROR(PD_EIO, "%s: %s", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode))
        return PD_ERROR(PD_EIO, "%s: not a regular file", path);
    *size = (uint64_t)st.st_size;
    return PD_OK;
}
