// The narrow interface through which core/ talks to a target, in the manner
// of glibc's proc_service.h (ps_pdread, ps_pglobal_lookup, ps_lgetregs): it
// keeps the td_* logic independent of how the target is reached, and the same
// interface can host glibc's own libthread_db.so.1 for conformance tests.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include <sys/types.h>

#include "base/target_memory.hpp"
#include "base/types.hpp"
#include "symbols/elf_module.hpp"

namespace tdctl::core {

class target_access {
public:
    virtual ~target_access() = default;

    virtual pid_t pid() const = 0;
    virtual target_memory& memory() = 0;

    /// Looks a symbol up in the module whose soname/file name starts with
    /// `module` ("libc.so.6", "ld-linux"), or in every module when `module` is
    /// empty. Names may carry a version ("sym@@GLIBC_PRIVATE").
    virtual std::optional<symbols::symbol> lookup_symbol(std::string_view module, std::string_view name) = 0;

    /// True when a module whose soname/file name starts with `module` is loaded.
    virtual bool has_module(std::string_view module) = 0;

    /// Why a mapped module whose path contains `module` could not be opened
    /// (deleted or replaced on disk and /proc/PID/map_files not readable,
    /// ...), or empty when none failed.
    virtual std::string module_problem(std::string_view module) { (void)module; return {}; }

    /// The LWPs of the target now (from the tracer's task table or /proc/PID/task).
    virtual std::vector<tid_t> lwps() = 0;

    /// The thread pointer (fs_base) of an LWP, if known; std::nullopt when
    /// it cannot be read now (the LWP runs and was never seen stopped).
    virtual std::optional<target_addr> thread_pointer(tid_t lwp) = 0;

    // TIDs in thread records (glibc's struct pthread tid, tdagent's record) are
    // what gettid() returns inside the target: IDs of the target's own PID
    // namespace. LWPs (tid_t) are TIDs in ours, which ptrace and /proc use.
    // The two differ for a target in a container (NSpid in
    // /proc/PID/task/TID/status); by default they are the same namespace.

    /// The TID the target's thread library records for an LWP (the last NSpid
    /// entry); std::nullopt when the LWP is gone.
    virtual std::optional<pid_t> ns_tid_of(tid_t lwp) { return lwp.value; }

    /// The LWP of the target whose TID in the target's namespace is `ns_tid`;
    /// std::nullopt when no LWP of the target has it now (the thread ended).
    virtual std::optional<tid_t> lwp_of_ns_tid(pid_t ns_tid)
    {
        for (tid_t t : lwps())
            if (t.value == ns_tid)
                return t;
        return std::nullopt;
    }
};

}  // namespace tdctl::core
