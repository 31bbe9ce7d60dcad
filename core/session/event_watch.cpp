#include "core/session/event_watch.hpp"

#include <algorithm>
#include <csignal>
#include <cstring>
#include <ctime>
#include <unistd.h>

#include "base/clock.hpp"
#include "base/log.hpp"
#include "core/session/held_target.hpp"
#include "events/event_names.hpp"
#include "events/event_set.hpp"
#include "ptrace/procfs.hpp"
#include "symbols/demangle.hpp"

namespace tdctl::core {

namespace {

std::uint64_t clock_ns(clockid_t clock)
{
    timespec ts{};
    ::clock_gettime(clock, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

bool contains(const std::vector<td_event_e>& events, td_event_e e)
{
    return std::find(events.begin(), events.end(), e) != events.end();
}

}  // namespace

// ---------------------------------------------------------------- arm

const std::vector<td_event_e>& event_watch::armed_events() const
{
    static const std::vector<td_event_e> none;
    return armed_ ? armed_->events : none;
}

bool event_watch::is_watched(td_event_e event) const
{
    return armed_ && contains(armed_->events, event);
}

watch_mode event_watch::mode() const
{
    watch_mode m;
    m.armed = armed_.has_value();
    m.stops = !stop_events_.empty();
    m.creates_reported = armed_ && (armed_->follow_create || contains(armed_->events, TD_CREATE));
    return m;
}

td_status event_watch::arm(const std::vector<td_event_e>& events)
{
    thread_agent* agent = target_.agent();
    if (agent == nullptr)
        return td_fail(TD_NOLIBTHREAD);
    if (armed_)
        end_arm();
    for (td_event_e e : events)
        if (!agent->reporting_address_of(e))
            return td_fail(TD_NOEVENT);

    // Edits below must not race threads being born: hold the target. The
    // guard runs while an error may be on its way out: it must not throw.
    held_target held(target_.process(), "after arming");

    changes_.will_write();
    if (auto global = agent->global_mask(); !global)
        return td_fail(global.error());
    armed_ = armed_state{};
    armed_->events = events;
    changes_.restore()->mark_before_arm();

    std::vector<td_event_e> planted = events;
    if (target_.backend()->traits().must_follow_create && !contains(events, TD_CREATE) &&
        agent->reporting_address_of(TD_CREATE)) {
        armed_->follow_create = true;
        planted.push_back(TD_CREATE);
    }
    if (auto r = plant(planted); !r) {
        armed_.reset();
        return r;
    }
    return enable_for_arm(planted);
}

td_status event_watch::enable_for_arm(const std::vector<td_event_e>& planted)
{
    thread_agent& agent = *target_.agent();
    if (auto r = agent.set_event(events::to_event_set(planted)); !r)
        return r;
    // Threads the library does not know yet are adopted, and enabled at
    // their TD_CREATE report, once this flag is on.
    if (target_.backend()->traits().adopts_unknown_threads && agent.layout().initial_report_events) {
        changes_.will_write();
        (void)agent.protocol().write_initial_report_events(true);
    }
    auto threads = agent.thr_iter();
    if (!threads)
        return td_fail(threads.error());
    for (const auto& th : *threads) {
        if (th.is_null()) {
            // Not initialised yet (static program at its entry point): the
            // flag every thread will start with.
            changes_.will_write();
            (void)th.event_enable(true);
            continue;
        }
        enable_thread(th.value());
    }
    // Threads born while we held the target are already in the list, but
    // their thread_created events are queued; enabling them twice is harmless.
    return {};
}

void event_watch::enable_thread(target_addr handle, std::optional<std::int32_t> record_tid)
{
    if (!mode().enables() || births_.is_settling() || target_.agent() == nullptr || handle.is_null())
        return;
    changes_.will_write();
    (void)target_.agent()->protocol().write_report_events(handle, true, record_tid);
}

void event_watch::restore_before_arm()
{
    if (auto* restore = changes_.restore())
        restore->restore_before_arm();
}

void event_watch::end_arm()
{
    if (!armed_)
        return;
    auto state = std::move(*armed_);
    armed_.reset();
    births_.drop_pending();  // a later arm enables every listed thread
    remove_sites(state.events);
    if (state.follow_create)
        remove_sites({TD_CREATE});
}

// ---------------------------------------------------------------- sites and stops

td_status event_watch::plant(const std::vector<td_event_e>& events)
{
    thread_agent* agent = target_.agent();
    if (agent == nullptr)
        return td_fail(TD_NOLIBTHREAD);
    for (td_event_e e : events)
        if (!agent->reporting_address_of(e))
            return td_fail(TD_NOEVENT);
    int signo = report_signal();
    auto& process = target_.process();
    for (td_event_e e : events) {
        auto addr = *agent->reporting_address_of(e);
        if (signo != 0 && !addr.stop_flag.is_null())
            process.sites().add_signal_site(addr.address, ptrace::stop_flag{addr.stop_flag, signo});
        else
            process.sites().add(addr.address, addr.function_size);
        site_events_[addr.address] = e;
    }
    return {};
}

int event_watch::report_signal()
{
    auto& process = target_.process();
    if (process.sites().report_signal() != 0)
        return process.sites().report_signal();
    const protocol_layout& layout = target_.agent()->layout();
    if (layout.report_stopped_pc.is_null())
        return 0;
    // A signal whose default action is "ignore", which the target does not
    // catch (SigCgt) and its main thread does not block (SigBlk: a program
    // that takes it with sigwait() or a signalfd blocks it). Raised by the
    // agent to stop for tdctl, it is a no-op for a thread no tracer holds any
    // more, and one of the same number sent meanwhile, taken with it, would
    // have been ignored anyway.
    auto status = procfs::read_status(process.pid());
    if (!status)
        return 0;
    for (int signo : {SIGURG, SIGWINCH, SIGCHLD}) {
        std::uint64_t bit = std::uint64_t{1} << (signo - 1);
        if ((status->signals_caught | status->signals_blocked) & bit)
            continue;
        process.sites().set_report_signal(signo, layout.report_stopped_pc, layout.stop_flags);
        log::debug("reports stop with signal {} ({})", signo, sigabbrev_np(signo));
        return signo;
    }
    log::debug("the target catches or blocks SIGURG, SIGWINCH and SIGCHLD: reports stop on trap bytes");
    return 0;
}

void event_watch::remove_sites(const std::vector<td_event_e>& events)
{
    thread_agent* agent = target_.agent();
    auto& process = target_.process();
    if (agent == nullptr || !process.is_alive())
        return;
    if (contains(events, TD_CREATE))
        births_.enable_pending(mode());
    for (td_event_e e : events) {
        if (auto addr = agent->reporting_address_of(e)) {
            process.sites().remove(addr->address);
            if (!process.sites().at(addr->address))
                site_events_.erase(addr->address);
        }
    }
}

td_status event_watch::plant_stops(const std::vector<td_event_e>& events)
{
    if (auto r = plant(events); !r)
        return r;
    for (td_event_e e : events)
        if (!contains(stop_events_, e))
            stop_events_.push_back(e);
    return {};
}

void event_watch::end_stops()
{
    if (stop_events_.empty())
        return;
    remove_sites(stop_events_);
    stop_events_.clear();
}

bool event_watch::is_stop_site(target_addr address, td_event_e& event) const
{
    auto it = site_events_.find(address);
    event = it == site_events_.end() ? TD_EVENT_NONE : it->second;
    return contains(stop_events_, event);
}

void event_watch::remove_all_sites()
{
    if (armed_) {
        remove_sites(armed_->events);
        if (armed_->follow_create)
            remove_sites({TD_CREATE});
        armed_.reset();
    }
    remove_sites(stop_events_);
    stop_events_.clear();
}

event_watch::image_events event_watch::forget_image()
{
    image_events was{armed_ ? armed_->events : std::vector<td_event_e>{}, std::move(stop_events_)};
    armed_.reset();
    stop_events_.clear();
    site_events_.clear();
    return was;
}

void event_watch::rearm(const image_events& events)
{
    thread_agent* agent = target_.agent();
    if (agent == nullptr)
        return;
    auto supported = [agent](const std::vector<td_event_e>& wanted) {
        std::vector<td_event_e> kept;
        for (td_event_e e : wanted)
            if (agent->reporting_address_of(e))
                kept.push_back(e);
        return kept;
    };
    if (auto armed = supported(events.armed); !armed.empty())
        (void)arm(armed);
    if (auto stops = supported(events.stops); !stops.empty())
        (void)plant_stops(stops);
}

// ---------------------------------------------------------------- reports

std::optional<events::event_message> event_watch::at_site(const ptrace::stop_event& ev, bool silent)
{
    auto it = site_events_.find(ev.address);
    const td_event_e event = it == site_events_.end() ? TD_EVENT_NONE : it->second;
    const bool asked = is_watched(event);
    // A followed TD_CREATE enables the new thread; not asked for, not shown.
    const bool followed = armed_ && armed_->follow_create && event == TD_CREATE;
    std::optional<events::event_message> shown;
    if ((asked || followed) && target_.agent() != nullptr)
        shown = take_report(event, ev, asked && !silent);
    // A new thread whose enabling this report did not carry is enabled now.
    if (event == TD_CREATE)
        births_.enable_pending(mode(), ev.tid);
    return shown;
}

std::optional<events::event_message> event_watch::take_report(td_event_e event, const ptrace::stop_event& ev,
                                                              bool show)
{
    // The report's one read also takes the creator's stack for its call
    // site, and its one write the new thread's flag (enabled before it
    // runs: glibc holds it until the report is consumed) or the dying
    // thread's flag back (glibc reads it no more).
    std::optional<ptrace::registers> regs;
    if (event == TD_CREATE && show)
        regs = target_.process().tasks().trap_registers(ev.tid);
    auto d = consume_report(event, ev.tid, ev.arg0, regs);
    if (!d)
        return std::nullopt;
    after_report(event, ev.tid, *d);
    // A thread the library adopted reports its own TD_CREATE: not a birth.
    const bool is_adoption = event == TD_CREATE && d->message.tid == ev.tid;
    if (!show || is_adoption)
        return std::nullopt;
    stacks_.decorate(d->message, ev.tid);
    if (event == TD_CREATE)
        d->message.call_site = regs && d->extras_read ? stacks_.call_site_from(ev.address, *regs, report_stack_)
                                                      : stacks_.call_site_of(ev.tid, ev.address);
    return std::move(d->message);
}

consume_extras event_watch::extras_for(td_event_e event, tid_t reporter, const message_subject& subject) const
{
    consume_extras x;
    auto tid = subject.lwp.value != 0 ? target_.ns_tid_of(subject.lwp) : std::nullopt;
    if (!tid)
        return x;
    x.record_tid = *tid;
    if (event == TD_CREATE && births_.enables_at_report(subject.lwp))
        x.flag = consume_extras::flag_change::enable;
    else if (event == TD_DEATH && target_.backend()->traits().death_report_is_last && subject.lwp == reporter)
        x.flag = consume_extras::flag_change::put_back;
    return x;
}

std::optional<event_watch::drained> event_watch::consume_report(td_event_e event, tid_t reporter,
                                                                std::uint64_t arg0,
                                                                const std::optional<ptrace::registers>& regs)
{
    message_subject subject = target_.backend()->subject_of(event, reporter, arg0);
    if (subject.handle.is_null())
        return from_list(reporter);
    if (event == TD_DEATH && subject.lwp == reporter)
        death_reported_.insert(subject.lwp);
    const std::array<std::pair<target_addr, std::span<std::byte>>, 1> window{
        {{regs ? regs->sp() : target_addr{}, std::span(report_stack_)}}};
    consume_extras extras = extras_for(event, reporter, subject);
    if (regs)
        extras.reads = window;
    auto buf = target_.agent()->protocol().consume(subject.handle, event == TD_CREATE, extras);
    drained d;
    if (buf) {
        d.extras_read = buf->extras_read;
        d.flag_changed = buf->flag_changed;
    }
    d.message = message_of(event, reporter, subject, "", target_.foreign_ns_tid(subject.lwp),
                           subject.lwp.value ? target_.thread_name(subject.lwp) : std::string());
    if (buf && buf->eventnum == event)
        d.message.data = buf->eventdata;
    if (event == TD_CREATE) {
        d.newborn = subject.handle;
        if (buf && !buf->start_routine.is_null()) {
            d.message.start_routine = buf->start_routine;
            if (const auto* set = target_.modules_holding(buf->start_routine))
                d.message.start_symbol = symbols::demangled(set->describe(buf->start_routine));
        }
    }
    if (event == TD_DEATH && subject.lwp.value != 0)
        d.message.lifetime_ns = lifetime_of(subject.lwp);
    return d;
}

void event_watch::after_report(td_event_e event, tid_t reporter, drained& d)
{
    const bool flag_back_at_death = target_.backend()->traits().death_report_is_last;
    if (event == TD_CREATE)
        births_.after_create_report(d.message.tid, d.flag_changed, mode());
    // Its name cannot change any more: the exit stop's accounting takes it from here.
    if (event == TD_DEATH && flag_back_at_death && d.message.tid == reporter)
        target_.files().keep_final_comm(reporter, d.message.name);
    // The library holds a thread created while watching until this report
    // is consumed, so it is enabled before it runs user code.
    if (!d.newborn.is_null() && armed_ &&
        target_.backend()->traits().enable_on_birth == birth_enable::at_create_report)
        enable_thread(d.newborn);
}

std::optional<event_watch::drained> event_watch::from_list(tid_t reporter)
{
    // The clone happened before we attached: the message is on the list;
    // the list says which event it is.
    auto m = target_.agent()->event_getmsg();
    if (!m)
        return std::nullopt;
    tid_t lwp = target_.lwp_of(m->handle);
    drained d;
    d.message = message_of(m->event, reporter, message_subject{lwp, m->handle}, "", target_.foreign_ns_tid(lwp),
                           target_.thread_name(lwp));
    d.message.data = m->data;
    return d;
}

std::optional<events::event_message> event_watch::at_exit_stop(tid_t lwp, bool silent, bool every_thread_reports)
{
    bool reported = death_reported_.erase(lwp) > 0;
    // The main thread's end is the process's.
    if (!is_watched(TD_DEATH) || reported || lwp.value == target_.pid() || target_.agent() == nullptr)
        return std::nullopt;
    auto handle = target_.own_record_of(lwp);
    if (!handle)
        return std::nullopt;  // not a thread of the library
    auto& p = target_.agent()->protocol();
    auto on = p.read_report_events(*handle);
    if (!every_thread_reports && (!on || !*on))
        return std::nullopt;  // it does not report
    (void)p.consume(*handle);
    if (silent)
        return std::nullopt;
    auto msg = message_of(TD_DEATH, lwp, message_subject{lwp, *handle}, "lwp-exit", target_.foreign_ns_tid(lwp),
                          target_.thread_name(lwp));
    msg.lifetime_ns = lifetime_of(lwp);
    stacks_.decorate(msg, lwp);
    return msg;
}

std::optional<events::event_message> event_watch::at_exec(tid_t former, target_addr thread_pointer)
{
    thread_backend* backend = target_.backend();
    if (backend == nullptr)
        return std::nullopt;
    target_addr handle = backend->handle_at_exec(former, thread_pointer);
    bool due = is_watched(TD_DEATH) && former.value != 0 && former.value != target_.pid() &&
               !death_reported_.contains(former) && !handle.is_null();
    auto lifetime = due ? lifetime_of(former) : std::nullopt;
    // Only a namespace TID seen before: the old TID is gone from /proc.
    auto ns_tid = target_.ns_pid() ? target_.known_ns_tid(former) : std::nullopt;
    death_reported_.clear();
    born_ns_.clear();
    backend->on_exec();
    if (!due)
        return std::nullopt;
    auto msg = message_of(TD_DEATH, former, message_subject{former, handle}, "exec", ns_tid, std::string());
    msg.lifetime_ns = lifetime;
    return msg;
}

void event_watch::born(tid_t lwp)
{
    born_ns_[lwp] = clock_ns(CLOCK_MONOTONIC);
}

std::optional<std::uint64_t> event_watch::lifetime_of(tid_t lwp, std::optional<std::uint64_t> at_ns)
{
    const std::uint64_t now = clock_ns(CLOCK_MONOTONIC);
    const std::uint64_t at = std::min(at_ns.value_or(now), now);
    if (auto it = born_ns_.find(lwp); it != born_ns_.end())
        return at > it->second ? at - it->second : 0;
    // Older than the session: the kernel's start time, in clock ticks since
    // boot (CLOCK_BOOTTIME).
    auto start = target_.lwp_start_ticks(lwp);
    static const long hz = ::sysconf(_SC_CLK_TCK);
    if (!start || hz <= 0)
        return std::nullopt;
    const std::uint64_t start_ns = *start * (1000000000u / static_cast<std::uint64_t>(hz));
    // `at` on the boot clock: as long before now as it is on the monotonic one.
    const std::uint64_t at_boot = clock_ns(CLOCK_BOOTTIME) - (now - at);
    return at_boot > start_ns ? std::optional<std::uint64_t>(at_boot - start_ns) : std::nullopt;
}

events::event_message event_watch::message_of(td_event_e event, tid_t reporter, const message_subject& subject,
                                              std::string_view origin, std::optional<pid_t> ns_tid,
                                              std::string name)
{
    events::event_message msg;
    msg.event = event;
    msg.reporter = reporter;
    msg.time = seconds_since_start();
    msg.tid = subject.lwp;
    msg.ns_tid = ns_tid;
    msg.handle = subject.handle;
    msg.data = subject.handle.value;
    msg.name = std::move(name);
    msg.origin = std::string(origin);
    return msg;
}

}  // namespace tdctl::core
