/* Copying a result to a caller's buffer without faulting on a bad address:
 * the kernel copies it and says EFAULT instead of raising SIGSEGV. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include "safe_copy.h"

/* Through a pipe: write(2) reads our buffer, read(2) writes the caller's and
 * fails with EFAULT when it cannot. For kernels or seccomp profiles without
 * process_vm_writev. */
static int copy_through_pipe(void *dst, const void *src, size_t n)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return errno;
    int err = 0;
    ssize_t w = write(fds[1], src, n);
    if (w != (ssize_t)n) {
        err = w < 0 ? errno : EIO;
    } else {
        ssize_t r = read(fds[0], dst, n);
        if (r != (ssize_t)n)
            err = r < 0 ? errno : EFAULT; /* a short read: the buffer ends in unmapped memory */
    }
    close(fds[0]);
    close(fds[1]);
    return err;
}

int tdagent_copy_out(void *dst, const void *src, size_t n)
{
    struct iovec local = {(void *)src, n};
    struct iovec remote = {dst, n};
    ssize_t w = process_vm_writev(getpid(), &local, 1, &remote, 1, 0);
    if (w == (ssize_t)n)
        return 0;
    if (w >= 0 || errno == EFAULT)
        return EFAULT; /* partly or not at all writable */
    if (errno == ENOSYS || errno == EPERM || errno == EACCES)
        return copy_through_pipe(dst, src, n);
    return errno;
}
