// Stacks at events: the call stack of a stopped LWP (`bt`, `deadlock`), the
// stack each drained message carries (`watch --bt`), the lock a `locks` wait
// is on with its owner, and where a thread was created (the TD_CREATE call
// site). One unwinder for the session (core/stacks/backtrace.hpp), made at the
// first stack and dropped with the image.
#pragma once

#include <array>
#include <cstddef>
#include <expected>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <thread_db.h>

#include "base/types.hpp"
#include "core/stacks/backtrace.hpp"
#include "core/locks/lock_semaphores.hpp"
#include "core/stacks/call_site.hpp"
#include "core/session/live_target.hpp"
#include "events/event_message.hpp"

namespace tdctl::core {

class event_stacks {
public:
    /// `target` must outlive this.
    explicit event_stacks(live_target& target) : target_(target) {}
    ~event_stacks();
    event_stacks(const event_stacks&) = delete;
    event_stacks& operator=(const event_stacks&) = delete;

    /// The call stack of `lwp`, innermost first, at most `max_frames`. The LWP
    /// must be stopped: held, or its stop being handled. An LWP at a planted
    /// site (trapped there, or held after tdctl performed the reporting
    /// function's `ret`) has that function as frame 0, then its caller.
    /// Reads registers (the trap's when known) and memory only. Error: a
    /// line for people (the LWP is gone or exiting, not stopped by tdctl).
    std::expected<std::vector<stack_frame>, std::string> stack_of(tid_t lwp, int max_frames = 64);

    /// `watch --bt`: each message decorated from now on carries the reporting
    /// thread's stack (event_message::frames), at most `depth` frames; 0: none.
    /// `only`: just the messages of these events carry one (empty: all).
    void set_event_stacks(int depth, std::vector<td_event_e> only = {})
    {
        depth_ = depth;
        only_ = std::move(only);
    }
    int event_stacks_depth() const { return depth_; }
    /// `locks`: each TD_SLEEP decorated from now on carries the kind and
    /// owner of the object slept on when it is a lock (event_message::lock,
    /// lock_owner), read while the reporter is still stopped
    /// (core/locks/lock_probe.hpp). The kind comes from the message's stack
    /// (set_event_stacks, TD_SLEEP among its events); while probes are on,
    /// only the TD_SLEEP that follows a TD_LOCK_TRY of the same LWP on the
    /// same object gets a stack (not a join's, a condition variable's...),
    /// and that stack starts at the program's call: the frames of the
    /// reporting module (libtdagent.so) are dropped from its top.
    void set_lock_probes(bool on)
    {
        lock_probes_ = on;
        lock_tries_.clear();
    }
    /// Adds to `msg`, drained while `reporter` is stopped, its stack and
    /// lock as set above.
    void decorate(events::event_message& msg, tid_t reporter);
    /// A message from the agent's rings (its thread never stopped): while
    /// lock probes are on, a lock wait's TD_SLEEP, whose kind, owner and
    /// call site the agent wrote, gets the call site as its one frame.
    void decorate_streamed(events::event_message& msg);

    /// Where a creator stopped at the TD_CREATE report `site` was called
    /// from (core/stacks/call_site.hpp), from its registers at the trap and its
    /// stack from sp (`stack`, read with the report); null when unknown.
    target_addr call_site_from(target_addr site, const ptrace::registers& regs, std::span<const std::byte> stack);
    /// The same reading the registers and the stack now.
    target_addr call_site_of(tid_t creator, target_addr site);

    /// The target ran: the unwinder looks at the maps again when it must.
    void target_ran()
    {
        if (unwinder_)
            unwinder_->target_ran();
    }
    /// The image or the modules changed: the unwinder and call-site rules go.
    void forget_image()
    {
        unwinder_.reset();
        call_sites_.reset();
        lock_semaphores_.reset();
    }

private:
    /// Lock probes on: whether `msg` is a lock wait's TD_SLEEP (noting each
    /// TD_LOCK_TRY on the way); true for every message when they are off.
    bool wants_lock_stack(const events::event_message& msg);
    /// The lock's kind and owner on a lock wait's message, then its stack
    /// cut to the program's frames.
    void attach_lock_owner(events::event_message& msg);
    call_site_reader& call_sites();

    live_target& target_;
    std::unique_ptr<unwinder> unwinder_;
    std::unique_ptr<call_site_reader> call_sites_;
    // The agent's lock semaphores, once found (looked for again until then).
    std::optional<lock_semaphore_table> lock_semaphores_;
    int depth_ = 0;
    std::vector<td_event_e> only_;  // empty: every event
    bool lock_probes_ = false;
    // Lock probes: each LWP's last TD_LOCK_TRY object, until its TD_SLEEP.
    std::unordered_map<pid_t, std::uint64_t> lock_tries_;
};

}  // namespace tdctl::core
