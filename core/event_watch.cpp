#include "core/event_watch.hpp"

#include <ctime>
#include <unistd.h>

#include "base/clock.hpp"
#include "core/session.hpp"
#include "core/thread_agent.hpp"
#include "symbols/demangle.hpp"

namespace tdctl::core {

namespace {

std::uint64_t clock_ns(clockid_t clock)
{
    timespec ts{};
    ::clock_gettime(clock, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace

void event_watch::born(tid_t lwp)
{
    born_ns_[lwp] = clock_ns(CLOCK_MONOTONIC);
}

std::optional<std::uint64_t> event_watch::lifetime_of(tid_t lwp)
{
    if (auto it = born_ns_.find(lwp); it != born_ns_.end())
        return clock_ns(CLOCK_MONOTONIC) - it->second;
    // Older than the session: the kernel's start time, in clock ticks since
    // boot (CLOCK_BOOTTIME).
    auto start = target_.lwp_start_ticks(lwp);
    static const long hz = ::sysconf(_SC_CLK_TCK);
    if (!start || hz <= 0)
        return std::nullopt;
    const std::uint64_t start_ns = *start * (1000000000u / static_cast<std::uint64_t>(hz));
    const std::uint64_t now = clock_ns(CLOCK_BOOTTIME);
    return now > start_ns ? std::optional<std::uint64_t>(now - start_ns) : std::nullopt;
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

std::optional<drained_message> event_watch::at_reporting_address(td_event_e event, tid_t reporter,
                                                                 std::uint64_t arg0, const extras_for_subject& extras)
{
    message_subject subject = backend_.subject_of(event, reporter, arg0);
    if (subject.handle.is_null())
        return from_list(event, reporter);
    if (event == TD_DEATH && subject.lwp == reporter)
        death_reported_.insert(subject.lwp);
    auto buf = extras ? agent_.protocol().consume(subject.handle, event == TD_CREATE, extras(subject))
                      : agent_.protocol().consume(subject.handle, event == TD_CREATE);
    drained_message d;
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

std::optional<drained_message> event_watch::from_list(td_event_e event, tid_t reporter)
{
    // The clone happened before we attached: the message is on the list.
    auto m = agent_.event_getmsg();
    if (!m)
        return std::nullopt;
    (void)event;  // the list says which event it is
    tid_t lwp = target_.lwp_of(m->handle);
    drained_message d;
    d.message = message_of(m->event, reporter, message_subject{lwp, m->handle}, "", target_.foreign_ns_tid(lwp),
                           target_.thread_name(lwp));
    d.message.data = m->data;
    return d;
}

std::optional<events::event_message> event_watch::at_exit_stop(tid_t lwp, bool death_armed, bool silent)
{
    bool reported = death_reported_.erase(lwp) > 0;
    // The main thread's end is the process's.
    if (!death_armed || reported || lwp.value == target_.pid())
        return std::nullopt;
    auto handle = backend_.handle_of(lwp);
    if (!handle)
        return std::nullopt;
    auto& p = agent_.protocol();
    auto tid = p.read_tid(*handle);
    auto on = p.read_report_events(*handle);
    if (!tid || *tid != target_.ns_tid_of(lwp) || !on || !*on)
        return std::nullopt;  // not this thread's record, or it does not report
    (void)p.consume(*handle);
    if (silent)
        return std::nullopt;
    auto msg = message_of(TD_DEATH, lwp, message_subject{lwp, *handle}, "lwp-exit", target_.foreign_ns_tid(lwp),
                          target_.thread_name(lwp));
    msg.lifetime_ns = lifetime_of(lwp);
    return msg;
}

std::optional<events::event_message> event_watch::at_exec(tid_t former, target_addr thread_pointer,
                                                          bool death_armed, std::optional<pid_t> ns_tid)
{
    target_addr handle = backend_.handle_at_exec(former, thread_pointer);
    bool due = death_armed && former.value != 0 && former.value != target_.pid() &&
               !death_reported_.contains(former) && !handle.is_null();
    auto lifetime = due ? lifetime_of(former) : std::nullopt;
    death_reported_.clear();
    born_ns_.clear();
    backend_.on_exec();
    if (!due)
        return std::nullopt;
    // Its old TID is gone from /proc: no name, and only a namespace TID seen before.
    auto msg = message_of(TD_DEATH, former, message_subject{former, handle}, "exec", ns_tid, std::string());
    msg.lifetime_ns = lifetime;
    return msg;
}

}  // namespace tdctl::core
