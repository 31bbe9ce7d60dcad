#include "core/inject/agent_loader_routine.hpp"

#include <algorithm>
#include <cstring>

#include <dlfcn.h>
#include <link.h>
#include <linux/futex.h>
#include <sys/syscall.h>

#include <fmt/format.h>

// Bounds of the routine's bytes (core/inject/agent_loader_x86_64.S).
extern "C" const std::byte tdctl_loader_routine_start[];
extern "C" const std::byte tdctl_loader_routine_end[];

namespace tdctl::core {

// The constants the assembly writes as numbers.
static_assert(offsetof(struct link_map, l_name) == LOADER_LINK_MAP_NAME);
static_assert(RTLD_NOW == LOADER_RTLD_NOW);
static_assert((FUTEX_WAIT | FUTEX_PRIVATE_FLAG) == LOADER_FUTEX_WAIT_PRIVATE);
static_assert(SYS_futex == LOADER_SYS_FUTEX);
static_assert(loader_memfd_name.size() < sizeof(loader_block::memfd_name));
static_assert(memfd_module_name.size() < sizeof(loader_block::module_name));

namespace {

template <std::size_t N>
void copy_string(char (&field)[N], std::string_view s)
{
    const std::size_t n = std::min(s.size(), N - 1);
    std::memcpy(field, s.data(), n);
    field[n] = '\0';
}

}  // namespace

bool loader_path_fits(std::string_view path) { return path.size() < sizeof(loader_block::path); }

loader_block make_loader_block(const loader_calls& calls, const loader_request& request)
{
    loader_block b{};
    b.dlopen = calls.dlopen;
    b.dlerror = calls.dlerror;
    b.close = calls.close;
    b.munmap = calls.munmap;
    b.strdup = calls.strdup;
    b.fd = request.memfd;
    b.base = request.base;
    b.size = request.size;
    // One wait of the routine for tdctl: 5 ms, at most 2,000 times (10 s).
    b.timeout = timespec{0, 5'000'000};
    b.waits = 2000;
    copy_string(b.memfd_name, loader_memfd_name);
    copy_string(b.fd_path, fmt::format("/proc/self/fd/{}", request.memfd));
    copy_string(b.module_name, memfd_module_name);
    if (loader_path_fits(request.own_path))
        copy_string(b.path, request.own_path);
    return b;
}

std::span<const std::byte> loader_routine_code()
{
    return {tdctl_loader_routine_start,
            static_cast<std::size_t>(tdctl_loader_routine_end - tdctl_loader_routine_start)};
}

}  // namespace tdctl::core
