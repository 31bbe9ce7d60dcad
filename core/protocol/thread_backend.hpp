// What differs between the thread libraries that publish the event protocol
// (glibc's nptl, tdagent): where a thread's event message lives, what a
// thread handle is, when a new thread's reporting is switched on, whether
// TD_CREATE must be followed, and which symbols hold the counters. The
// session and the event corridor ask this seam; only the two backends
// (core/protocol/nptl_backend.cpp, core/protocol/tdagent_backend.cpp) know which library it is.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include <thread_db.h>

#include "base/types.hpp"

namespace tdctl::core {

class thread_agent;

/// The thread whose record holds a message announced at a reporting address.
struct message_subject {
    tid_t lwp;            ///< the thread the message is about (0 when unknown)
    target_addr handle;   ///< its record; null when it cannot be found (read the list instead)
};

/// When a new thread's reporting is switched on while watching.
enum class birth_enable {
    at_clone_stop,      ///< nptl: at the creator's clone stop (the record exists, the child has not run)
    at_create_report,   ///< tdagent: at its TD_CREATE report, which holds the thread until consumed
};

/// What a thread library does its own way, as plain values.
struct backend_traits {
    /// When a new thread's reporting is switched on while watching.
    birth_enable enable_on_birth = birth_enable::at_clone_stop;
    /// True when the library tells a new thread only through TD_CREATE, so
    /// watching other events must follow TD_CREATE too (not shown).
    bool must_follow_create = false;
    /// True when a new thread starts with a copy of its creator's event mask
    /// (glibc copies the creator's whole event buffer into the child).
    bool child_copies_creator_mask = false;
    /// True when the library adopts a thread it does not know (one that
    /// existed before it loaded) at its first call once the initial-report
    /// flag is on, reporting TD_CREATE about it with itself as the reporter;
    /// arm turns the flag on (protocol_layout::initial_report_events).
    bool adopts_unknown_threads = false;
    /// True when a thread's enable flag is not read again once it has
    /// reported TD_DEATH (glibc: the report is the last thing start_thread
    /// does with it), so the flag goes back in that report's own write.
    bool death_report_is_last = false;
    /// The symbol of the library's live-thread counter ("__nptl_nthreads").
    std::string_view nthreads_symbol;
    /// The symbol of the concurrency level ("__concurrency_level").
    std::string_view concurrency_symbol;
};

class thread_backend {
public:
    virtual ~thread_backend() = default;

    /// The thread handle of an LWP — nptl: its thread pointer (fs_base);
    /// tdagent: its record, checked against the record's tid field.
    /// std::nullopt when the LWP has none or it cannot be read now.
    virtual std::optional<target_addr> handle_of(tid_t lwp) = 0;

    /// Where a thread pointer is a handle, the LWP's thread pointer, for the
    /// caller to check against the record's tid field — nptl: fs_base (the
    /// struct pthread, TLS_TCB_AT_TP on x86_64); tdagent: always std::nullopt
    /// (a handle is the agent's record, found through its thread list).
    /// std::nullopt too when it cannot be read now.
    virtual std::optional<target_addr> thread_pointer_handle(tid_t lwp) = 0;

    /// Which record holds the message `event` that `reporter` announced at
    /// the reporting address; `arg0` is the reporting function's first
    /// argument (rdi). nptl: TD_CREATE in the reporter's newest clone child,
    /// other events in the reporter's own; tdagent: the record in `arg0`.
    virtual message_subject subject_of(td_event_e event, tid_t reporter, std::uint64_t arg0) = 0;

    /// The handle of a thread that exec'd, whose LWP is gone; `thread_pointer`
    /// is what the exec stop reported for it.
    virtual target_addr handle_at_exec(tid_t former, target_addr thread_pointer) = 0;

    /// A clone stop: `creator` made `child` (nptl remembers it for TD_CREATE).
    virtual void on_clone(tid_t creator, tid_t child) { (void)creator; (void)child; }
    /// A message from the agent's event rings named `handle` as the record
    /// of LWP `lwp` (event_stream): what subject_of() learns at a stopped
    /// report, for the reports that do stop later (a detached thread's
    /// TD_REAP at its exit, an exec).
    virtual void on_streamed_subject(tid_t lwp, target_addr handle) { (void)lwp; (void)handle; }
    /// The LWP is exiting or gone: whatever is remembered about it goes.
    virtual void on_lwp_gone(tid_t lwp) { (void)lwp; }
    /// The image was replaced: every LWP and record known so far is stale.
    virtual void on_exec() {}

    /// What the library does its own way, as plain values.
    const backend_traits& traits() const { return traits_; }

protected:
    explicit thread_backend(const backend_traits& traits) : traits_(traits) {}

private:
    backend_traits traits_;
};

/// The backend for the library `agent` was created for (thread_agent makes
/// its own with this; thread_agent::seam()). `agent` must outlive it.
std::unique_ptr<thread_backend> make_thread_backend(thread_agent& agent);

/// The nptl backend: handles are thread pointers, messages in the reporter's
/// buffer (TD_CREATE: the newest clone child's).
std::unique_ptr<thread_backend> make_nptl_backend(thread_agent& agent);
/// The tdagent backend: handles are agent records, passed to each reporting
/// function as its first argument.
std::unique_ptr<thread_backend> make_tdagent_backend(thread_agent& agent);

}  // namespace tdctl::core
