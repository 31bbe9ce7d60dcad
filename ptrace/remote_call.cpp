#include "ptrace/remote_call.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "ptrace/return_frame_x86_64.hpp"

namespace tdctl::ptrace {

namespace {

// Below the stack pointer, the System V ABI lets leaf code keep data without
// moving rsp: the call's frame goes under it.
constexpr std::uint64_t red_zone_bytes = 128;

/// A remote call as it is about to start.
struct call_setup {
    user_regs_struct regs;          ///< the thread's registers for the call
    std::vector<std::byte> frame;   ///< the return frame from the slot up, or empty without one
    target_addr slot;               ///< the return address's place on the stack
};

/// The registers and stack of a call of `function` on a thread saved as
/// `saved`: below its red zone, with a return frame when a way back
/// (`sigreturn`) is known.
call_setup set_up_call(const thread_state& saved, target_addr sigreturn, target_addr function,
                       std::span<const std::uint64_t> args)
{
    call_setup c;
    c.regs = saved.general().raw();
    user_regs_struct& r = c.regs;
    // 16-byte aligned at the call, then the return address pushed: the
    // callee sees rsp ≡ 8 (mod 16), as after a `call`.
    std::uint64_t sp = ((r.rsp - red_zone_bytes) & ~std::uint64_t{15}) - 8;
    if (!sigreturn.is_null()) {
        auto layout = layout_return_frame(r.rsp, return_frame_fp_bytes(saved));
        c.frame = build_return_frame(saved, layout, call_marker.value);
        sp = layout.slot;
    }
    unsigned long long* arg_regs[] = {&r.rdi, &r.rsi, &r.rdx, &r.rcx, &r.r8, &r.r9};
    for (std::size_t i = 0; i < args.size(); ++i)
        *arg_regs[i] = args[i];
    r.rip = function.value;
    r.rsp = sp;
    r.rax = 0;           // no vector registers used by a variadic callee
    r.orig_rax = ~0ull;  // -1: the kernel must not restart a system call at this pc
    c.slot = target_addr{sp};
    return c;
}

/// Writes the call's return address (and its frame) on `tid`'s stack,
/// through the journal. Throws tdctl::error (target) when it cannot.
void write_return_slot(traced_process& process, tid_t tid, target_addr sigreturn, const call_setup& c)
{
    if (c.frame.empty()) {
        if (!process.journal().write_value(c.slot, call_marker.value, change_kind::injected))
            throw error::target(fmt::format("cannot write the return address on thread {}'s stack", tid.value));
        return;
    }
    // Journaled first, with the way back as the slot's original: any
    // restore of it (a time limit, the journal's keeper after a tracer's
    // death) sends the call's return to rt_sigreturn and the frame.
    process.journal().note(c.slot, std::as_bytes(std::span(&sigreturn.value, 1)),
                           std::as_bytes(std::span(&call_marker.value, 1)), change_kind::injected);
    if (!process.memory().write(c.slot, c.frame)) {
        process.journal().forget(c.slot);
        throw error::target(fmt::format("cannot write the call's frame on thread {}'s stack", tid.value));
    }
}

}  // namespace

hijacked_thread::hijacked_thread(traced_process& process, tid_t tid, target_addr sigreturn)
    : process_(process), tid_(tid), sigreturn_(sigreturn)
{
    if (process.tasks().is_unfit_for_call(tid))
        throw error::target(fmt::format("thread {} cannot run code now (running, exiting, in group-stop or vfork)",
                                        tid.value));
    auto state = thread_state::read(tid);
    if (!state)
        throw error::target(fmt::format("thread {} vanished", tid.value));
    saved_ = std::move(*state);
    kept_signal_ = process.tasks().take_pending_signal(tid);
    process.tasks().keep_stopped(tid);
    if (!write_signal_mask(tid, saved_.signal_mask() | mask_all_but_synchronous())) {
        process.tasks().restore_pending_signal(tid, kept_signal_);
        throw error::target(fmt::format("thread {} vanished", tid.value));
    }
}

hijacked_thread::~hijacked_thread()
{
    try {
        restore();
    } catch (const std::exception& e) {
        log::warning("restoring thread {} after a remote call failed: {}", tid_.value, e.what());
    }
}

std::optional<std::uint64_t> hijacked_thread::call(target_addr function, std::span<const std::uint64_t> args,
                                                   int timeout_ms, const other_stop_handler& others)
{
    if (args.size() > 6)
        throw std::logic_error("a remote call takes at most six arguments");
    const call_setup setup = set_up_call(saved_, sigreturn_, function, args);
    const target_addr slot = setup.slot;
    const bool with_frame = !setup.frame.empty();
    write_return_slot(process_, tid_, sigreturn_, setup);
    registers regs = registers::from_raw(setup.regs);
    process_.set_call_marker(call_marker);
    if (!regs.write(tid_))
        return std::nullopt;
    process_.resume(tid_);
    bool returned = wait_for_call_return(process_, tid_, seconds_since_start() + timeout_ms / 1000.0, others);
    const bool there = process_.is_alive() && process_.find(tid_) != nullptr;
    if (!returned && there && with_frame)
        returned = take_back(slot, others);
    if (!returned) {
        // Still inside the call (or gone): without a frame, its return slot
        // is live stack now, not a change to put back.
        process_.journal().forget(slot);
        stuck_ = there;
        return std::nullopt;
    }
    process_.journal().restore(slot);
    auto after = registers::read(tid_);
    if (!after)
        return std::nullopt;
    const std::uint64_t rax = after->raw().rax;
    if (with_frame)
        park_on_frame(slot);
    return rax;
}

void hijacked_thread::park_on_frame(target_addr slot)
{
    auto regs = registers::read(tid_);
    if (!regs)
        return;
    user_regs_struct r = regs->raw();
    r.rip = sigreturn_.value;
    r.rsp = slot.value + 8;   // as the call's `ret` left it: the frame at rsp - 8
    r.orig_rax = ~0ull;
    if (registers::from_raw(r).write(tid_) && process_.park_signal_stop(tid_))
        parked_ = true;
}

bool hijacked_thread::take_back(target_addr slot, const other_stop_handler& others)
{
    // One safe point: with every task stopped, the thread is not between
    // reading its return slot and jumping there.
    process_.stop_all();
    bool returned = false;
    while (auto ev = process_.next_event(0)) {
        if (ev->kind == stop_kind::call_returned && ev->tid == tid_)
            returned = true;   // it came back just now: an ordinary return
        else
            others(*ev);
    }
    if (!returned) {
        auto tally = process_.journal().restore(slot);
        if (tally.failed != 0 || tally.left != 0)
            log::warning("thread {} is still inside a remote call and its return slot could not be changed: it "
                         "faults when the call returns", tid_.value);
        else
            taken_back_ = true;
        // Blocked for the call, pending until rt_sigreturn puts the mask back.
        if (kept_signal_ != 0 && ::syscall(SYS_tgkill, process_.pid(), tid_.value, kept_signal_) == 0)
            kept_signal_ = 0;
        log::debug("thread {} still runs a remote call: taken back, its frame puts it back when the call returns",
                   tid_.value);
    }
    process_.release_all();
    return returned;
}

void hijacked_thread::restore()
{
    if (restored_ || stuck_ || !process_.is_alive())
        return;
    restored_ = true;
    if (process_.find(tid_) == nullptr)
        return;
    saved_.write(tid_);
    // From an event stop the kernel drops a signal given at restart: send
    // it instead (pending, delivered once the thread runs with its mask).
    if (parked_ && kept_signal_ != 0)
        (void)::syscall(SYS_tgkill, process_.pid(), tid_.value, kept_signal_);
    else
        process_.tasks().restore_pending_signal(tid_, kept_signal_);
    process_.resume(tid_);
}

bool wait_for_call_return(traced_process& process, tid_t tid, double deadline, const other_stop_handler& others)
{
    for (;;) {
        double left = deadline - seconds_since_start();
        if (left <= 0 || !process.is_alive())
            return false;
        auto ev = process.next_event(static_cast<int>(std::ceil(std::min(left, 0.05) * 1000)));
        if (!ev)
            continue;
        if (ev->kind == stop_kind::call_returned && ev->tid == tid)
            return true;
        bool gone = (ev->kind == stop_kind::thread_exited || ev->kind == stop_kind::thread_exiting) && ev->tid == tid;
        others(*ev);
        if (gone || ev->kind == stop_kind::process_exited)
            return false;
    }
}

}  // namespace tdctl::ptrace
