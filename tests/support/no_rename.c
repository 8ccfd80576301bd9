/* A filesystem whose rename fails, for tests: LD_PRELOAD this library and every rename(2),
 * renameat(2) and renameat2(2) of a path under $CKPT_TEST_NO_RENAME_UNDER fails with errno
 * $CKPT_TEST_NO_RENAME_ERRNO (default EXDEV), as on an object store's FUSE mount
 * (mountpoint-s3, gcsfuse). Everything else goes to libc. Built by tests/support/no_rename.py. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int under(int dirfd, const char *path) {
    const char *prefix = getenv("CKPT_TEST_NO_RENAME_UNDER");
    char base[PATH_MAX], full[2 * PATH_MAX + 2];
    if (prefix == NULL || *prefix == '\0' || path == NULL) return 0;
    if (path[0] == '/') {
        snprintf(full, sizeof full, "%s", path);
    } else {
        if (dirfd == AT_FDCWD) {
            if (getcwd(base, sizeof base) == NULL) return 0;
        } else {
            char link[64];
            ssize_t n;
            snprintf(link, sizeof link, "/proc/self/fd/%d", dirfd);
            n = readlink(link, base, sizeof base - 1);
            if (n < 0) return 0;
            base[n] = '\0';
        }
        snprintf(full, sizeof full, "%s/%s", base, path);
    }
    size_t len = strlen(prefix);
    return strncmp(full, prefix, len) == 0 && (full[len] == '/' || full[len] == '\0');
}

static int refuse(void) {
    const char *code = getenv("CKPT_TEST_NO_RENAME_ERRNO");
    errno = code != NULL ? atoi(code) : EXDEV;
    return -1;
}

int rename(const char *old, const char *new) {
    static int (*real)(const char *, const char *);
    if (under(AT_FDCWD, old) || under(AT_FDCWD, new)) return refuse();
    if (real == NULL) real = dlsym(RTLD_NEXT, "rename");
    return real(old, new);
}

int renameat(int olddir, const char *old, int newdir, const char *new) {
    static int (*real)(int, const char *, int, const char *);
    if (under(olddir, old) || under(newdir, new)) return refuse();
    if (real == NULL) real = dlsym(RTLD_NEXT, "renameat");
    return real(olddir, old, newdir, new);
}

int renameat2(int olddir, const char *old, int newdir, const char *new, unsigned int flags) {
    static int (*real)(int, const char *, int, const char *, unsigned int);
    if (under(olddir, old) || under(newdir, new)) return refuse();
    if (real == NULL) real = dlsym(RTLD_NEXT, "renameat2");
    return real(olddir, old, newdir, new, flags);
}
