#include "core/session/session.hpp"

#include <chrono>
#include <cmath>
#include <cstddef>
#include <link.h>
#include <thread>
#include <utility>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "ptrace/registers_x86_64.hpp"
#include "ptrace/seize.hpp"
#include "ptrace/stop_all.hpp"

namespace tdctl::core {

namespace {

// Messages drained from the agent's rings, handed out as the stops' are.
void hand_out(std::vector<events::event_message> messages, std::vector<session_event>& out)
{
    out.reserve(out.size() + messages.size());
    for (auto& msg : messages)
        out.emplace_back().message = std::move(msg);  // kind::message; one move, no temporary
}

}  // namespace

using ptrace::stop_kind;

session::session(std::unique_ptr<ptrace::traced_process> process, bool late_agent_serves)
    : target_(std::move(process), late_agent_serves),
      births_(target_, changes_),
      stacks_(target_),
      watch_(target_, changes_, births_, stacks_),
      stream_(
          target_, stacks_, [this](tid_t lwp, std::uint64_t at_ns) { return watch_.lifetime_of(lwp, at_ns); },
          [this] { return accounting_.stats_enabled(); }),
      late_reports_(target_, births_, changes_),
      routing_(target_),
      accounting_(target_)
{
}

namespace {

// The modules and the thread library's symbol tables, read while the target
// still runs: reading ELF files takes milliseconds, which an attached target
// would spend stopped. std::nullopt when they cannot be read now (the attach
// then reads them, and says why).
std::optional<symbols::module_set> modules_before_attach(pid_t pid)
{
    try {
        auto set = symbols::module_set::load(pid);
        // The first lookup in a module reads its tables: the thread library
        // probe looks in these two.
        if (const auto* libc = set.find("libc.so.6"))
            (void)libc->lookup("__nptl_version");
        if (const auto* ld = set.find("ld-linux"))
            (void)ld->lookup("_rtld_global");
        return set;
    } catch (const std::exception& e) {
        log::debug("modules before the attach: {}", e.what());
        return std::nullopt;
    }
}

// An attach that met an exec under way (ptrace::exec_under_way) is made
// again once the exec is done, at most this many times, this far apart.
constexpr int exec_retries = 50;
constexpr auto exec_retry_pause = std::chrono::milliseconds(20);

// traced_process::attach(), made again while an exec in the process refuses
// it; `early` (the modules read before) read again for the new image.
std::unique_ptr<ptrace::traced_process> attach_between_execs(pid_t pid, int cancel_fd,
                                                             std::optional<symbols::module_set>& early)
{
    for (int attempt = 1;; ++attempt) {
        try {
            return ptrace::traced_process::attach(pid, cancel_fd);
        } catch (const error& e) {
            if (e.domain() != error_domain::target || e.code() != ptrace::exec_under_way || attempt == exec_retries)
                throw;
            log::debug("attach {}: {}; again", attempt, e.what());
        }
        std::this_thread::sleep_for(exec_retry_pause);
        ptrace::throw_if_cancelled(cancel_fd, pid);
        early = modules_before_attach(pid);
    }
}

}  // namespace

std::unique_ptr<session> session::attach(pid_t pid, int cancel_fd, bool with_agent)
{
    auto early = modules_before_attach(pid);
    std::unique_ptr<session> s(new session(attach_between_execs(pid, cancel_fd, early), with_agent));
    s->load_symbols(std::move(early));
    // Attached just after an exec, before the loader mapped the thread library.
    if (s->target_.agent() == nullptr)
        s->follow_loader();
    // Every thread stays stopped until a command needs the target running
    // (release_lingering): `-p PID -e threads -e detach` stops it once.
    s->held_ = false;
    s->lingering_ = true;
    return s;
}

std::unique_ptr<session> session::launch(const ptrace::launch_options& opts)
{
    std::unique_ptr<session> s(new session(ptrace::traced_process::launch(opts), true));
    s->load_symbols();
    if (s->target_.agent() == nullptr)
        s->follow_loader();
    // Launched targets stay held at the entry point until the first command
    // (watch, continue) runs them; no user code has run yet.
    s->target_.process().sites().withdraw_all();
    s->held_ = true;
    return s;
}

session::~session()
{
    if (!is_alive())
        return;
    try {
        detach();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "tdctl: detach failed: %s\n", e.what());
    }
}

void session::load_symbols(std::optional<symbols::module_set> early)
{
    stacks_.forget_image();   // its unwinder's modules are the image's
    target_.read_modules(std::move(early));
    changes_.bind(nullptr, target_.process().journal());
    target_.find_thread_library();
    changes_.bind(target_.agent(), target_.process().journal());
}

agent_load_report session::load_agent(const agent_file& agent, int cancel_fd, bool follow_loads)
{
    std::vector<session_event> unseen;
    auto others = [&](const ptrace::stop_event& ev) { handle(ev, unseen, true); };
    agent_load_report report = core::load_agent(target_.process(), target_.modules(), agent, others, cancel_fd);
    if (!report.reused)
        load_symbols();   // from here on the session is as at an attach that found the agent loaded
    // Calls between modules loaded before the agent reach it through their
    // GOT slots, rewritten (and journaled) here.
    routing_.route(follow_loads);
    return report;
}

void session::follow_loader()
{
    // A program started through its dynamic loader named on the command line
    // (`ld.so PROG`): at the loader's own entry point nothing else is mapped.
    // Or one attached to just after its exec, whose loader still runs (its
    // only thread is in the loader's code). The loader calls _dl_debug_state
    // (r_debug.r_brk) before and after each change to its list of modules;
    // it is followed until the list is consistent and holds a thread
    // library, before any code of the program runs.
    const auto* loader = target_.modules().find("ld-linux");
    if (loader == nullptr)
        return;
    if (loader != target_.modules().main_executable()) {
        // Only while the loader has not mapped libc yet: it notifies again
        // once it has. (Later its code runs too: lazy binding, dlopen.)
        if (target_.modules().find("libc.so") != nullptr)
            return;
        auto regs = ptrace::registers::read(tid_t{target_.pid()});
        if (!regs || target_.modules().containing(regs->pc()) != loader)
            return;  // the program's own code runs: its loader is done
    }
    auto notify = loader->lookup("_dl_debug_state");
    auto rdebug = loader->lookup("_r_debug");
    if (!notify || !rdebug)
        return;  // not the loader
    auto& process = target_.process();
    for (int change = 0; change < max_loader_notifications && target_.agent() == nullptr && process.is_alive();
         ++change) {
        if (!process.run_to(notify->address))
            return;  // it died on the way: its end is queued for the pump
        process.release_all();  // still held once, as launch() left it
        std::int32_t state = -1;
        if (!process.memory().read_value(rdebug->address + offsetof(struct r_debug, r_state), state) ||
            state != r_debug::RT_CONSISTENT)
            continue;
        load_symbols();
    }
}

// ---------------------------------------------------------------- watching and stopping

td_status session::arm(const std::vector<td_event_e>& events)
{
    if (target_.agent() == nullptr)
        return td_fail(TD_NOLIBTHREAD);
    if (watch_.is_armed())
        disarm();
    stream_.clear_left_over();
    return watch_.arm(events);
}

void session::disarm()
{
    if (!watch_.is_armed())
        return;
    auto& process = target_.process();
    if (!process.is_alive()) {
        watch_.end_arm();
        return;
    }
    process.stop_all();
    late_reports_.drain_queued(silent_handler());
    watch_.restore_before_arm();
    late_reports_.settle(silent_handler());
    if (!watch_.is_armed() || !process.is_alive()) {
        watch_.end_arm();  // the process ended meanwhile
        return;
    }
    watch_.end_arm();
    process.release_all();
}

void session::clear_stops()
{
    if (!watch_.has_stops())
        return;
    target_.process().stop_all();
    watch_.end_stops();
    target_.process().release_all();
}

// ---------------------------------------------------------------- the hold

void session::interrupt()
{
    if (held_ || !is_alive())
        return;
    if (lingering_)
        lingering_ = false;  // stopped already: the hold takes that stop over
    else
        target_.process().stop_all();
    target_.process().sites().withdraw_all();
    held_ = true;
    stacks_.target_ran();
}

void session::release_lingering()
{
    if (!lingering_)
        return;
    lingering_ = false;
    if (!is_alive())
        return;
    log::debug("the threads run again (no command works on them stopped)");
    target_.process().sites().reinsert_withdrawn();
    target_.process().release_all();
}

void session::end_command_hold()
{
    if (hold_may_linger_ && held_ && stopped_reporter_.value == 0 && is_alive()) {
        held_ = false;
        lingering_ = true;
        return;
    }
    resume();
}

void session::resume()
{
    if (lingering_) {
        release_lingering();
        return;
    }
    if (!held_ || !is_alive())
        return;
    held_ = false;
    auto& process = target_.process();
    process.sites().reinsert_withdrawn();
    if (stopped_reporter_.value != 0) {
        tid_t reporter = std::exchange(stopped_reporter_, tid_t{});
        // One-shot: the `stop` breakpoints go before the reporter steps on.
        watch_.end_stops();
        process.resume(reporter);
    }
    process.release_all();
}

// ---------------------------------------------------------------- the end

void session::detach()
{
    if (!is_alive())
        return;
    auto& process = target_.process();
    process.begin_detach();
    // A target that runs gets its masks and flags back, and settles, while
    // it runs: every thread is then stopped once, for the sites and the
    // detach, where a stop before the restore would make two.
    if (changes_.reports_may_be_pending() && !process.is_holding()) {
        changes_.restore_originals();
        late_reports_.settle(silent_handler());
    }
    process.stop_all();
    routing_.stop_following();
    late_reports_.drain_queued(silent_handler());
    changes_.restore_originals();
    if (changes_.reports_may_be_pending())
        late_reports_.settle(silent_handler());
    watch_.remove_all_sites();
    changes_.consume_our_messages();
    // Calls go back to where they went before the attach while every
    // thread is stopped (a thread inside a wrapper finishes there: the agent
    // stays loaded).
    process.journal().restore_kinds({change_kind::got_entry});
    process.detach();
    held_ = false;
    lingering_ = false;
}

void session::kill()
{
    watch_.forget_all();
    routing_.forget();
    target_.process().kill();
    held_ = false;
    lingering_ = false;
}

// ---------------------------------------------------------------- the pump

std::vector<session_event> session::pump(int timeout_ms)
{
    std::vector<session_event> out;
    if (!is_alive())
        return out;
    // A wait for the target's own doings wants it running; a look (0) does not.
    if (timeout_ms != 0)
        release_lingering();
    stacks_.target_ran();
    // Stops are taken one wait each until one is for the user; what a stop
    // queued is handed out with it, with no look for more (a look that finds
    // nothing is a system call the target waits for). A look (0) goes on for
    // at most pump_look_seconds of stops, however fast they come.
    // Streaming: the rings are drained at least every drain_interval_ms().
    if (stream_.is_active() && (timeout_ms < 0 || timeout_ms > stream_.drain_interval_ms()))
        timeout_ms = stream_.drain_interval_ms();
    auto& process = target_.process();
    const double end = seconds_since_start() + (timeout_ms == 0 ? pump_look_seconds : timeout_ms / 1000.0);
    auto held_for_user = [&] { return !out.empty() && out.back().what == session_event::kind::stopped_at_event; };
    while (out.empty() && process.is_alive()) {
        int left = timeout_ms;
        if (timeout_ms > 0)
            left = std::max(0, static_cast<int>(std::ceil((end - seconds_since_start()) * 1000)));
        auto ev = process.next_event(left);
        if (!ev)
            break;
        handle(*ev, out, false);
        while (process.has_queued_events() && process.is_alive() && !held_for_user())
            if (auto queued = process.next_event(0))
                handle(*queued, out, false);
        if (timeout_ms >= 0 && seconds_since_start() >= end)
            break;
    }
    hand_out(stream_.drain(), out);
    stream_.seize_if_asked();  // a thread born untraced about to exec
    return out;
}

// ---------------------------------------------------------------- the dispatch

silent_stop_handler session::silent_handler()
{
    return [this](const ptrace::stop_event& ev) {
        std::vector<session_event> ignored;
        handle(ev, ignored, true);
    };
}

void session::handle(const ptrace::stop_event& ev, std::vector<session_event>& out, bool silent)
{
    switch (ev.kind) {
    case stop_kind::breakpoint:
        on_breakpoint(ev, out, silent);
        return;
    case stop_kind::thread_created:
        on_thread_created(ev);
        return;
    case stop_kind::thread_exiting:
        on_thread_exiting(ev, out, silent);
        return;
    case stop_kind::thread_exited:
        on_thread_exited(ev.tid);
        return;
    case stop_kind::exec:
        on_exec(ev, out);
        return;
    case stop_kind::call_returned:
        return;  // a remote call's end; only its caller (agent_loader) waits for it
    case stop_kind::process_exited:
        on_process_exited(ev, out);
        return;
    }
}

void session::on_breakpoint(const ptrace::stop_event& ev, std::vector<session_event>& out, bool silent)
{
    late_reports_.on_site(ev.tid);
    auto& process = target_.process();
    if (routing_.owns_site(ev.address)) {
        for (auto& note : routing_.at_site(ev.address))
            if (!silent)
                out.push_back(session_event{session_event::kind::routing, {}, 0, std::move(note)});
        process.resume(ev.tid);
        return;
    }
    td_event_e event = TD_EVENT_NONE;
    if (watch_.is_stop_site(ev.address, event) && !silent && !held_) {
        hold_at_stop(event, ev, out);
        return;
    }
    // Streaming: a report that stops (a full ring, no free ring) comes after
    // what the rings hold, which was written before it.
    if (stream_.is_active() && !silent)
        hand_out(stream_.drain(), out);
    if (auto msg = watch_.at_site(ev, silent))
        out.push_back(session_event{session_event::kind::message, std::move(*msg), 0, {}});
    process.resume(ev.tid);
}

void session::hold_at_stop(td_event_e event, const ptrace::stop_event& ev, std::vector<session_event>& out)
{
    // The seed's flow by hand: hold everything, leave the buffer unread.
    auto& process = target_.process();
    process.stop_all();
    process.sites().withdraw_all();
    held_ = true;
    stopped_reporter_ = ev.tid;
    session_event se;
    se.what = session_event::kind::stopped_at_event;
    se.message.event = event;
    se.message.reporter = ev.tid;
    se.message.tid = ev.tid;
    se.message.ns_tid = target_.foreign_ns_tid(ev.tid);
    se.message.time = seconds_since_start();
    se.message.name = target_.thread_name(ev.tid);
    if (const auto* t = process.find(ev.tid))
        se.message.handle = t->thread_pointer();
    out.push_back(se);
}

void session::on_thread_created(const ptrace::stop_event& ev)
{
    accounting_.on_birth(ev.child);
    if (auto* backend = target_.backend())
        backend->on_clone(ev.tid, ev.child);
    watch_.born(ev.child);
    births_.on_clone(ev.tid, ev.child, watch_.mode());
    late_reports_.on_clone(ev.tid);
    target_.process().resume(ev.child);
    target_.process().resume(ev.tid);
}

void session::on_thread_exiting(const ptrace::stop_event& ev, std::vector<session_event>& out, bool silent)
{
    accounting_.on_death(ev.tid);
    if (auto* backend = target_.backend())
        backend->on_lwp_gone(ev.tid);
    births_.on_exit(ev.tid, watch_.mode());
    // A thread killed by exit_group (or by the exec of another thread) never
    // reaches the TD_DEATH reporting address, yet it did terminate. A
    // streamed TD_DEATH was written before this stop: the rings say.
    if (stream_.is_active() && !silent)
        hand_out(stream_.drain(), out);
    if (!stream_.took_death_of(ev.tid))
        if (auto death = watch_.at_exit_stop(ev.tid, silent, stream_.streams(TD_DEATH)))
            out.push_back(session_event{session_event::kind::message, std::move(*death), 0, {}});
    // Put the record back as we found it before the thread library caches it
    // for the next thread; only the thread's own record (a raw clone thread
    // that shares the creator's TLS must not reset the creator's flag).
    if (auto tp = target_.handle_of(ev.tid);
        tp && changes_.restore()->has_active_change(*tp) && target_.own_record_of(ev.tid))
        changes_.restore()->restore_exiting(*tp);
    target_.process().resume(ev.tid);
}

void session::on_thread_exited(tid_t lwp)
{
    births_.forget(lwp);
    target_.forget_lwp(lwp);
    accounting_.on_vanished(lwp);
    if (auto* backend = target_.backend())
        backend->on_lwp_gone(lwp);
    watch_.forget(lwp);
}

void session::on_exec(const ptrace::stop_event& ev, std::vector<session_event>& out)
{
    // What the old image's threads streamed came before the exec.
    hand_out(stream_.leave_image(ev.child), out);
    // A thread other than the main one that execs ends as a thread: the new
    // image's main thread is a new one. It never reaches the TD_DEATH
    // reporting address, so while TD_DEATH is armed its death comes from here.
    if (auto death = watch_.at_exec(ev.child, ev.address))
        out.push_back(session_event{session_event::kind::message, std::move(*death), 0, {}});
    accounting_.on_exec(ev.child.value != 0 ? ev.child : ev.tid, ev.tid);
    // The new image has none of our breakpoints and a new libc: re-resolve.
    target_.forget_lwps();
    auto armed_events = watch_.forget_image();
    routing_.forget();   // its sites went with the image
    births_.forget_all();
    changes_.new_epoch();
    // A fatal signal just after the exec kills the new image before its
    // entry point: nothing to resolve, its end is queued for the pump.
    if (!ptrace::run_to_entry(target_.process()))
        return;
    load_symbols();
    changes_.apply_to_new_image();  // `event set` and `event enable on all` hold for it too
    // `env ... ld.so PROG`: the new image is the loader, and libc comes later.
    if (target_.agent() == nullptr)
        follow_loader();
    session_event se;
    se.what = session_event::kind::exec;
    se.message.tid = tid_t{target_.pid()};
    se.message.time = seconds_since_start();
    se.message.name = target_.thread_name(tid_t{target_.pid()});
    out.push_back(se);
    watch_.rearm(armed_events);
    (void)stream_.restart_after_exec();  // an LD_PRELOADed agent came along
    target_.process().release_all();
}

void session::on_process_exited(const ptrace::stop_event& ev, std::vector<session_event>& out)
{
    // Threads born untraced that the exit killed: no report, no exit stop.
    if (stream_.is_active()) {
        hand_out(stream_.drain(), out);
        hand_out(stream_.deaths_unseen("lwp-exit"), out);
    }
    session_event se;
    se.what = session_event::kind::process_exited;
    se.status = ev.status;
    out.push_back(se);
    watch_.forget_all();
    births_.drop_pending();
    routing_.forget();
    held_ = false;
    lingering_ = false;
}

}  // namespace tdctl::core
