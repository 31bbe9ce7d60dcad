// The live target: what every part of a session asks of the traced process.
// It owns the traced process, its modules (with those mapped later), its
// per-thread /proc files, the map between our TIDs and those of the target's
// PID namespace, and the thread library found in it (the thread agent).
// Parts (the watch, the stacks, the accounting...) take this, never the
// session, so none of them can call back into the session that owns them.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/types.hpp"
#include "core/target_access.hpp"
#include "core/thread_agent.hpp"
#include "core/protocol/thread_backend.hpp"
#include "ptrace/task_files.hpp"
#include "ptrace/traced_process.hpp"
#include "symbols/elf_module.hpp"

namespace tdctl::core {

class live_target final : public library_access {
public:
    /// Takes the process over; reads its PID namespace (NSpid of
    /// /proc/PID/status). `late_agent_serves`: a libtdagent.so the target
    /// dlopen()ed after libc is taken as the thread library (an attach with
    /// --agent, a launch); false: it is passed by and nptl serves.
    live_target(std::unique_ptr<ptrace::traced_process> process, bool late_agent_serves);
    ~live_target() override;
    live_target(const live_target&) = delete;
    live_target& operator=(const live_target&) = delete;

    // target_access
    pid_t pid() const override { return process_->pid(); }
    target_memory& memory() override { return process_->memory(); }
    std::optional<symbols::symbol> lookup_symbol(std::string_view module, std::string_view name) override;
    bool has_module(std::string_view module) override;
    std::string module_problem(std::string_view module) override;
    /// The traced tasks while attached, /proc/PID/task after.
    std::vector<tid_t> lwps() override;
    /// fs_base as last seen at a stop of the LWP; std::nullopt when never seen.
    std::optional<target_addr> thread_pointer(tid_t lwp) override;
    /// Through NSpid (/proc/PID/task/TID/status), cached per LWP, when the
    /// target is in another PID namespace; the identity otherwise.
    std::optional<pid_t> ns_tid_of(tid_t lwp) override;
    std::optional<tid_t> lwp_of_ns_tid(pid_t ns_tid) override;

    ptrace::traced_process& process() { return *process_; }
    const ptrace::traced_process& process() const { return *process_; }
    /// Traced now: neither exited, killed nor detached.
    bool is_alive() const { return process_->is_alive() && !process_->is_detached(); }

    // ---- modules

    const symbols::module_set& modules() const { return modules_; }
    /// Reads the modules from /proc/PID/maps; `early`, a set read before the
    /// attach, is taken instead when the file mappings are still the same.
    /// Forgets the modules read for late addresses.
    void read_modules(std::optional<symbols::module_set> early = std::nullopt);
    /// The module set that holds code address `a`: the target's, or, for a
    /// module mapped after it was read (a dlopen), a set read again from
    /// /proc/PID/maps (at most once a second, only when an address falls
    /// outside every known module). nullptr when no module holds it.
    const symbols::module_set* modules_holding(target_addr a);

    // ---- the thread library

    /// Finds the thread library in the modules read (thread_agent::create);
    /// without one, no_agent_reason() says what was missing. Any agent
    /// found before is dropped first: callers drop what refers to it.
    void find_thread_library();
    thread_agent* agent() override { return agent_.get(); }
    const std::string& no_agent_reason() const { return no_agent_reason_; }
    /// The thread handle of an LWP (thread_backend::handle_of); std::nullopt without one.
    std::optional<target_addr> handle_of(tid_t lwp);
    /// handle_of(lwp) when the thread library's record there is lwp's own:
    /// its tid field (thread_agent's protocol) names lwp. std::nullopt for
    /// an LWP the library did not make, e.g. a raw clone(2) thread that
    /// shares another thread's TLS, and so its thread pointer and handle.
    std::optional<target_addr> own_record_of(tid_t lwp);
    /// The LWP that runs a handle's thread (thread_handle::lwp), 0 when none
    /// does or it is unknown.
    tid_t lwp_of(target_addr handle);

    // ---- threads' names and files, namespaces

    /// The thread's name (comm) from /proc/PID/task/TID/comm; "" when gone.
    std::string thread_name(tid_t lwp) const { return files_.comm(lwp); }
    /// thread_name() of many LWPs at once (result[i] is lwps[i]'s), the
    /// /proc reads spread over a few threads on a large process.
    std::vector<std::string> thread_names(const std::vector<tid_t>& lwps) const { return files_.comms(lwps); }
    /// When the LWP started, clock ticks since boot (/proc/PID/task/TID/stat
    /// field 22); std::nullopt when gone.
    std::optional<std::uint64_t> lwp_start_ticks(tid_t lwp) const;
    /// The /proc/PID/task/TID files kept open (ptrace/task_files.hpp).
    procfs::task_files& files() const { return files_; }
    /// The target's PID in its own PID namespace when that is not tdctl's
    /// (a container; from NSpid in /proc/PID/status), else std::nullopt.
    std::optional<pid_t> ns_pid() const { return ns_pid_; }
    /// An LWP's TID in the target's PID namespace when that is not tdctl's
    /// (shown beside the LWP), else std::nullopt; also when the LWP is gone.
    std::optional<pid_t> foreign_ns_tid(tid_t lwp)
    {
        return ns_pid_ && lwp.value != 0 ? ns_tid_of(lwp) : std::nullopt;
    }
    /// The namespace TID seen for `lwp` before, without reading anything.
    std::optional<pid_t> known_ns_tid(tid_t lwp) const;
    /// `lwp` is gone: its files and namespace TID are forgotten.
    void forget_lwp(tid_t lwp);
    /// An exec replaced the image: every LWP's files and namespace TID go.
    void forget_lwps();

private:
    std::unique_ptr<ptrace::traced_process> process_;
    bool late_agent_serves_;
    symbols::module_set modules_;
    // Modules read again for an address outside modules_ (modules_holding),
    // and when, s on seconds_since_start(); reset with modules_.
    std::optional<symbols::module_set> late_modules_;
    double late_modules_at_ = -1;
    // The target's PID namespace, when not ours: record TIDs are its own
    // (gettid() inside it), mapped to and from our LWPs through NSpid.
    std::optional<pid_t> ns_pid_;
    std::unordered_map<tid_t, pid_t> ns_tid_by_lwp_;
    std::unordered_map<pid_t, tid_t> lwp_by_ns_tid_;
    /// The LWP mapped to ns_tid, when the map holds it both ways and it is alive.
    std::optional<tid_t> mapped_lwp(pid_t ns_tid) const;
    // /proc/PID/task/TID files kept open: names per event, schedstat per
    // sample, rusage rows.
    mutable procfs::task_files files_;
    std::unique_ptr<thread_agent> agent_;
    std::string no_agent_reason_;
};

}  // namespace tdctl::core
