/* LD_PRELOAD shim for scripts/gpu-sandbox-probe: logs the file and socket calls that fail, with
 * errno, to stderr. The GPU machine has no strace; this shows what CUDA asks the sandbox for. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/ioctl.h>
#include <unistd.h>

static void report(const char *call, const char *what, int err) {
    char line[512];
    int n = snprintf(line, sizeof line, "failtrace: %s(%s) = -1 %s\n", call, what ? what : "", strerror(err));
    if (n > 0) write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

#define OPEN_LIKE(name, ...)                                                       \
    int name(__VA_ARGS__ const char *path, int flags, ...) {                      \
        static int (*real)() = 0;                                                  \
        if (!real) real = dlsym(RTLD_NEXT, #name);                                 \
        mode_t mode = 0;                                                           \
        if (flags & (O_CREAT | O_TMPFILE)) {                                       \
            va_list ap; va_start(ap, flags); mode = va_arg(ap, mode_t); va_end(ap); \
        }                                                                          \
        int rc = real(ARGS_##name path, flags, mode);                              \
        if (rc < 0) { int e = errno; report(#name, path, e); errno = e; }          \
        return rc;                                                                 \
    }
#define ARGS_open
#define ARGS_open64
#define ARGS_openat dirfd,
#define ARGS_openat64 dirfd,
OPEN_LIKE(open)
OPEN_LIKE(open64)
OPEN_LIKE(openat, int dirfd,)
OPEN_LIKE(openat64, int dirfd,)

int socket(int domain, int type, int protocol) {
    static int (*real)(int, int, int) = 0;
    if (!real) real = dlsym(RTLD_NEXT, "socket");
    int rc = real(domain, type, protocol);
    if (rc < 0) { int e = errno; char d[32]; snprintf(d, sizeof d, "domain=%d", domain); report("socket", d, e); errno = e; }
    return rc;
}

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    static int (*real)(int, const struct sockaddr *, socklen_t) = 0;
    if (!real) real = dlsym(RTLD_NEXT, "connect");
    int rc = real(fd, addr, len);
    if (rc < 0) {
        int e = errno;
        const char *what = "";
        if (addr && addr->sa_family == AF_UNIX) what = ((const struct sockaddr_un *)addr)->sun_path[0] ? ((const struct sockaddr_un *)addr)->sun_path : "@abstract";
        report("connect", what, e); errno = e;
    }
    return rc;
}

int mkdir(const char *path, mode_t mode) {
    static int (*real)(const char *, mode_t) = 0;
    if (!real) real = dlsym(RTLD_NEXT, "mkdir");
    int rc = real(path, mode);
    if (rc < 0) { int e = errno; if (e != EEXIST) report("mkdir", path, e); errno = e; }
    return rc;
}

int ioctl(int fd, unsigned long request, ...) {
    static int (*real)(int, unsigned long, void *) = 0;
    if (!real) real = dlsym(RTLD_NEXT, "ioctl");
    va_list ap; va_start(ap, request); void *arg = va_arg(ap, void *); va_end(ap);
    int rc = real(fd, request, arg);
    if (rc < 0 && errno != ENOTTY) {
        int e = errno;
        char link[64], target[256] = "";
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n > 0) target[n] = 0;
        report("ioctl", target, e); errno = e;
    }
    return rc;
}

#define FOPEN_LIKE(name)                                                           \
    FILE *name(const char *path, const char *mode) {                              \
        static FILE *(*real)(const char *, const char *) = 0;                     \
        if (!real) real = dlsym(RTLD_NEXT, #name);                                 \
        FILE *f = real(path, mode);                                                \
        if (!f) { int e = errno; char what[300]; snprintf(what, sizeof what, "%s, \"%s\"", path, mode); report(#name, what, e); errno = e; } \
        return f;                                                                  \
    }
FOPEN_LIKE(fopen)
FOPEN_LIKE(fopen64)
