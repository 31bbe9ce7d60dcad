#include "base/unique_fd.hpp"

#include <unistd.h>

namespace tdctl {

void unique_fd::reset(int fd)
{
    if (fd_ >= 0)
        ::close(fd_);
    fd_ = fd;
}

}  // namespace tdctl
