// Running a function of the target on one of its own threads (a remote
// call): the thread's whole state is saved (ptrace/thread_state_x86_64.hpp),
// its asynchronous signals are blocked and any signal it held is kept back,
// the function runs on the thread's stack below the 128-byte red zone with
// the return address set to an address that can never be mapped (the call
// marker, below vm.mmap_min_addr), so its return shows as a SIGSEGV stop
// there; then everything is put back exactly. Every other thread runs
// meanwhile: a call that needs a lock one of them holds waits for it rather
// than deadlocking.
//
// Given the address of an rt_sigreturn in the target (find_sigreturn_code),
// each call also leaves a return frame above its slot (ptrace/
// return_frame_x86_64.hpp), and the slot is journaled with that address as
// its original: a call that outlasts its time limit is taken back at once
// (the slot is put back, so the call's own `ret` runs rt_sigreturn and the
// thread is itself again, registers, vector state and signal mask), and
// after a tracer's death the journal's keeper puts the slot back the same
// way.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "base/types.hpp"
#include "ptrace/thread_state_x86_64.hpp"
#include "ptrace/traced_process.hpp"

namespace tdctl::ptrace {

/// The return address of every remote call: page 0, which vm.mmap_min_addr
/// (4096 or more) keeps unmapped, so a return there always faults.
inline constexpr target_addr call_marker{0x10};

/// What to do with a stop of another task that comes while a call runs (the
/// session's own handler: clones, exits, signals).
using other_stop_handler = std::function<void(const stop_event&)>;

class hijacked_thread {
public:
    /// Takes over `tid`, which must be stopped and fit (traced_process::
    /// is_unfit_for_call false): saves its state, keeps back its pending
    /// signal, blocks every asynchronous signal (a signal sent meanwhile
    /// stays pending and is delivered after restore()), and keeps it stopped
    /// across release_all(). Throws tdctl::error (target) if it is unfit or
    /// its state cannot be read. `sigreturn`: the address of a `mov $15,
    /// %rax; syscall` in the target (find_sigreturn_code), or null for calls
    /// without a return frame (a call past its time limit then stays stuck).
    hijacked_thread(traced_process& process, tid_t tid, target_addr sigreturn = {});
    /// restore() if not done; never throws.
    ~hijacked_thread();
    hijacked_thread(const hijacked_thread&) = delete;
    hijacked_thread& operator=(const hijacked_thread&) = delete;

    /// Calls the function at `function` with up to six integer arguments
    /// (System V ABI) and returns its rax. The process must not be held: the
    /// other threads run, and their stops go to `others`. The 8-byte return
    /// slot written on the stack goes through the change journal and is put
    /// back before this returns. std::nullopt when the thread vanished or the
    /// call did not return within timeout_ms (it is then still running it:
    /// is_stuck(); with a return frame it is also taken back, taken_back()).
    std::optional<std::uint64_t> call(target_addr function, std::span<const std::uint64_t> args, int timeout_ms,
                                      const other_stop_handler& others);

    /// Writes back the saved state (signal mask, FP/XSAVE area, general
    /// registers: an interrupted system call restarts) and the kept-back
    /// signal, then lets the thread run on. Idempotent; nothing once stuck.
    void restore();

    tid_t tid() const { return tid_; }
    /// A call did not return in time: the thread is still running it, and
    /// nothing more may be done with it (no call, no restore).
    bool is_stuck() const { return stuck_; }
    /// The stuck call returns through its frame: when it ends, the thread
    /// puts itself back as restore() would (its kept-back signal was sent
    /// to it again, pending until then), traced or not.
    bool taken_back() const { return taken_back_; }
    const thread_state& saved() const { return saved_; }

private:
    /// Stops every task, then either finds the call returned meanwhile
    /// (true) or sends its return through the frame at `slot` (false).
    bool take_back(target_addr slot, const other_stop_handler& others);
    /// After a return with a frame: the thread waits, out of its SIGSEGV
    /// stop, on the rt_sigreturn that would put it back (the frame is still
    /// on its stack), so a tracer's death before the next call or
    /// restore() lets it go as itself.
    void park_on_frame(target_addr slot);

    traced_process& process_;
    tid_t tid_;
    thread_state saved_;
    target_addr sigreturn_;
    int kept_signal_ = 0;
    bool restored_ = false;
    bool stuck_ = false;
    bool taken_back_ = false;
    bool parked_ = false;   // in an event stop: a signal given at resume would be dropped
};

/// Waits, at most until `deadline` (seconds on the seconds_since_start()
/// scale, base/clock.hpp), for `tid` to stop at the call marker, passing
/// every other stop to `others`. False when the deadline passed or `tid` is
/// gone.
bool wait_for_call_return(traced_process& process, tid_t tid, double deadline, const other_stop_handler& others);

}  // namespace tdctl::ptrace
