// Builds a trace_model as a session runs: told of the LWPs alive when the
// trace begins, of every event message printed, of the LWPs alive at later
// listings, and of the end. Cheap per event (a few map look-ups and a copy
// of the message's fields); nothing is written until the end.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <sys/types.h>

#include "events/event_message.hpp"
#include "events/trace_model.hpp"

namespace tdctl::events {

/// An LWP of the target at a listing, with its comm.
struct lwp_seen {
    pid_t tid = 0;
    std::string name;
};

/// The fields of an event message as trace annotations: event, tid, name,
/// handle, data, reporter, time, and ns_tid / origin when set. New fields
/// of event records (stacks, start routines) are added here.
std::vector<trace_arg> event_args(const event_message& msg);

/// Every annotation of mark `index` of `l` as written: its own args, then,
/// for the first mark, how the lifetime began (tid, begins, alive_at_start),
/// for the last, how it ended (ends, final_name, alive_at_end), and for an
/// event message its fields (event_args).
std::vector<trace_arg> trace_annotations(const thread_lifetime& l, std::size_t index);
/// The same for a mark on the process track.
std::vector<trace_arg> trace_annotations(const trace_mark& m);

class trace_recorder {
public:
    /// The trace begins at `time` (seconds_since_start scale) with `lwps`
    /// alive: each gets a lifetime marked as alive at the start.
    trace_recorder(pid_t pid, std::string process_name, double time, const std::vector<lwp_seen>& lwps);

    /// One event message, as printed. TD_CREATE begins the new thread's
    /// lifetime, TD_DEATH ends it; every message is an instant on the
    /// reporting thread's track (else the subject's, else the process's);
    /// the agent's TD_LOCK_TRY / TD_SLEEP / TD_TIMEOUT / TD_READY become wait
    /// slices on the waiting thread. A "lock wait" slice begins at a
    /// TD_LOCK_TRY once the thread's TD_SLEEP on that lock follows; a
    /// TD_LOCK_TRY nothing follows so (a trylock failure) stays an instant.
    void on_event(const event_message& msg);

    /// The target's LWPs at `time`: lifetimes whose LWP is gone end there
    /// (marked "gone": the exit was not seen), LWPs without one begin there
    /// (marked "first seen"); names that changed are renamed.
    void observe(double time, const std::vector<lwp_seen>& lwps);

    /// The process's name changed (an exec): the process track takes `name`.
    void rename_process(std::string name) { model_.process_name = std::move(name); }

    /// An instant on the process track (exec, exit) at `time`.
    void process_instant(double time, std::string name, std::vector<trace_arg> args);

    /// Ends every open lifetime at `time` (marked as alive at the end) and
    /// hands the model over; the recorder is empty afterwards.
    trace_model finish(double time);

    /// Lifetimes begun so far (open and ended).
    std::size_t lifetime_count() const { return model_.lifetimes.size(); }

private:
    // A wait the agent reported, open on a lifetime.
    struct open_wait {
        std::uint64_t object = 0;
        bool timed_out = false;
    };
    // A TD_LOCK_TRY whose TD_SLEEP has not come (yet): no slice so far.
    struct tried_lock {
        std::uint64_t object = 0;
        std::uint64_t ts = 0;
    };
    struct open_state {
        std::size_t index = 0;             // into model_.lifetimes
        std::optional<tried_lock> tried;   // TD_LOCK_TRY, until the thread's next lock event
        std::optional<open_wait> lock;     // TD_LOCK_TRY .. TD_READY
        std::optional<open_wait> sleep;    // TD_SLEEP .. TD_READY (nested in lock when both)
    };

    std::size_t begin_lifetime(pid_t tid, std::string name, std::uint64_t ts, lifetime_start how,
                               std::vector<trace_arg> args);
    void end_lifetime(pid_t tid, std::uint64_t ts, lifetime_end how, std::vector<trace_arg> args);
    void close_waits(open_state& st, std::uint64_t ts);
    void on_wait_event(const event_message& msg, std::uint64_t ts);
    /// At a TD_SLEEP, before its instant: the "lock wait" of the thread's
    /// TD_LOCK_TRY on the same object begins, at the try's time.
    void begin_tried_lock_wait(const event_message& msg);
    void on_ready(open_state& st, std::uint64_t object, std::uint64_t ts);
    /// The message as an instant: on the reporter's track, else the
    /// subject's, else the process's.
    void place_instant(const event_message& msg, std::uint64_t ts);
    void on_create(const event_message& msg, std::uint64_t ts);
    void rename_if_changed(pid_t tid, const std::string& name, std::uint64_t ts);
    thread_lifetime* lifetime_of(pid_t tid);
    /// `mark` appended to `l`, its time moved up to the lifetime's last one.
    void add_mark(thread_lifetime& l, trace_mark mark);

    trace_model model_;
    std::unordered_map<pid_t, open_state> open_;
    std::unordered_map<pid_t, int> lifetimes_per_tid_;
    std::uint64_t next_flow_ = 1;
};

}  // namespace tdctl::events
