// The loader routine and its block: what `tdctl -p PID --agent` writes into
// the target's two pages (core/inject/agent_loader.hpp). The routine's machine code
// is assembled from core/inject/agent_loader_x86_64.S, which says what it does; the
// block is the page it reads and fills, laid out by loader_block below,
// whose offsets core/inject/agent_loader_block.h gives to the assembly (checked
// here, field by field).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include <time.h>

#include "core/inject/agent_loader_block.h"

namespace tdctl::core {

/// The loader block (the second page). Words are the target's (x86-64).
struct loader_block {
    // Addresses of libc functions in the target.
    std::uint64_t dlopen;
    std::uint64_t dlerror;
    std::uint64_t close;
    std::uint64_t munmap;
    std::uint64_t strdup;
    // The outcome, written by the routine.
    std::uint64_t handle;   ///< dlopen's result (the module's link map), 0 when both tries failed
    std::uint64_t error;    ///< dlerror()'s message (a target address) when handle is 0
    // Read by the routine.
    std::int64_t fd;        ///< the memfd, closed by the routine
    std::uint64_t traced;   ///< not 0 while tdctl waits to read the outcome (journaled)
    std::uint64_t done;     ///< set to 1 by the routine once the outcome is final and the memfd closed
    std::uint64_t size;     ///< the two pages, which the routine unmaps at its end
    std::uint64_t base;
    char fd_path[32];       ///< "/proc/self/fd/N": the memfd as the target opens it
    char memfd_name[32];    ///< memfd_create's name for the memfd
    std::uint64_t thread;   ///< pthread_create's pthread_t, read by tdctl
    std::uint64_t unused2;
    timespec timeout;       ///< one wait for tdctl
    std::uint32_t waits;    ///< waits at most (this many minus one)
    std::uint32_t unused3;
    char module_name[LOADER_BLOCK_PATH - LOADER_BLOCK_MODULE_NAME];   ///< the link-map name after a memfd load
    char path[LOADER_BLOCK_BYTES - LOADER_BLOCK_PATH];   ///< the agent's own file as the target sees it, or ""
};

static_assert(sizeof(loader_block) == LOADER_BLOCK_BYTES);
static_assert(offsetof(loader_block, dlopen) == LOADER_BLOCK_DLOPEN);
static_assert(offsetof(loader_block, dlerror) == LOADER_BLOCK_DLERROR);
static_assert(offsetof(loader_block, close) == LOADER_BLOCK_CLOSE);
static_assert(offsetof(loader_block, munmap) == LOADER_BLOCK_MUNMAP);
static_assert(offsetof(loader_block, strdup) == LOADER_BLOCK_STRDUP);
static_assert(offsetof(loader_block, handle) == LOADER_BLOCK_HANDLE);
static_assert(offsetof(loader_block, error) == LOADER_BLOCK_ERROR);
static_assert(offsetof(loader_block, fd) == LOADER_BLOCK_FD);
static_assert(offsetof(loader_block, traced) == LOADER_BLOCK_TRACED);
static_assert(offsetof(loader_block, done) == LOADER_BLOCK_DONE);
static_assert(offsetof(loader_block, size) == LOADER_BLOCK_SIZE);
static_assert(offsetof(loader_block, base) == LOADER_BLOCK_BASE);
static_assert(offsetof(loader_block, fd_path) == LOADER_BLOCK_FD_PATH);
static_assert(offsetof(loader_block, memfd_name) == LOADER_BLOCK_MEMFD_NAME);
static_assert(offsetof(loader_block, thread) == LOADER_BLOCK_THREAD);
static_assert(offsetof(loader_block, timeout) == LOADER_BLOCK_TIMEOUT);
static_assert(offsetof(loader_block, waits) == LOADER_BLOCK_WAITS);
static_assert(offsetof(loader_block, module_name) == LOADER_BLOCK_MODULE_NAME);
static_assert(offsetof(loader_block, path) == LOADER_BLOCK_PATH);

/// The libc functions the routine calls, by address in the target.
struct loader_calls {
    std::uint64_t dlopen, dlerror, close, munmap, strdup;
};

/// What the block says besides the functions.
struct loader_request {
    int memfd = -1;              ///< the target's descriptor of the memfd holding the agent
    std::string_view own_path;   ///< the agent's file as the target sees it (agent_path_in_target), or ""
    std::uint64_t base = 0;      ///< the mapping of both pages
    std::uint64_t size = 0;
};

/// The memfd's name (memfd_create), and so /proc/PID/maps's
/// "/memfd:libtdagent.so (deleted)".
inline constexpr std::string_view loader_memfd_name = "libtdagent.so";

/// The link-map name of an agent loaded from the memfd: what /proc/PID/maps
/// shows for its mappings, and no file's path.
inline constexpr std::string_view memfd_module_name = "/memfd:libtdagent.so (deleted)";

/// The block for `request`: functions, memfd and its path, the agent's own
/// path, the memfd module's name, pages; `traced` 0 (tdctl sets it apart,
/// through its journal); one wait for tdctl of 5 ms, at most 2,000 of them
/// (10 s). An own path that does not fit (loader_path_fits) is left out:
/// the routine then loads the memfd.
loader_block make_loader_block(const loader_calls& calls, const loader_request& request);

/// Whether `path` fits in the block's path field (its NUL included).
bool loader_path_fits(std::string_view path);

/// The routine's machine code (core/inject/agent_loader_x86_64.S), to be copied
/// into the routine's page.
std::span<const std::byte> loader_routine_code();

}  // namespace tdctl::core
