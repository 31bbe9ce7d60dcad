#include "core/session/event_stream.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <ctime>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/change_journal.hpp"
#include "base/clock.hpp"
#include "base/log.hpp"
#include "core/session/held_target.hpp"
#include "ptrace/waiter.hpp"
#include "symbols/demangle.hpp"

namespace tdctl::core {

namespace {

constexpr std::string_view agent_module = "libtdagent.so";
// What /proc/PID/fd/N links to for the agent's region (memfd_create's name).
constexpr std::string_view region_link = "/memfd:tdagent-rings (deleted)";

std::uint64_t monotonic_now_ns()
{
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000u + static_cast<std::uint64_t>(ts.tv_nsec);
}

std::string link_of(const std::string& path)
{
    std::array<char, 256> buf{};
    ssize_t n = ::readlink(path.c_str(), buf.data(), buf.size() - 1);
    return n > 0 ? std::string(buf.data(), static_cast<std::size_t>(n)) : std::string();
}

}  // namespace

event_stream::~event_stream()
{
    waker_.reset();
    if (!mapping_.empty())
        ::munmap(mapping_.data(), mapping_.size());
}

std::string event_stream::unavailable_reason()
{
    if (!target_.has_module(agent_module))
        return "the target has no agent (run it with --agent, or attach with -p PID --agent)";
    if (!target_.lookup_symbol(agent_module, "__tdagent_stream_events") ||
        !target_.lookup_symbol(agent_module, "__tdagent_streaming") || !read_ring_layout(target_))
        return "the agent in the target has no event rings (an older libtdagent.so)";
    return {};
}

bool event_stream::write_journaled(target_addr address, std::span<const std::byte> natural,
                                   std::span<const std::byte> value)
{
    target_.process().journal().note(address, natural, value, change_kind::global_mask);
    return target_.memory().write(address, value);
}

void event_stream::clear_left_over()
{
    if (active_ || !target_.has_module(agent_module))
        return;
    auto flag = target_.lookup_symbol(agent_module, "__tdagent_streaming");
    auto mask = target_.lookup_symbol(agent_module, "__tdagent_stream_events");
    std::uint8_t on = 0;
    if (!flag || !mask || !target_.memory().read_value(flag->address, on) || on == 0)
        return;
    const std::uint8_t off = 0;
    const td_thr_events_t none{};
    (void)write_journaled(flag->address, std::as_bytes(std::span(&off, 1)), std::as_bytes(std::span(&off, 1)));
    (void)write_journaled(mask->address, std::as_bytes(std::span(&none, 1)), std::as_bytes(std::span(&none, 1)));
}

bool event_stream::start(const std::vector<td_event_e>& events, full_ring when_full)
{
    td_thr_events_t mask;
    td_event_emptyset(&mask);
    for (td_event_e e : events)
        td_event_addset(&mask, e);
    lost_.clear();
    after_exec_.reset();
    return begin(mask, when_full);
}

bool event_stream::restart_after_exec()
{
    auto pending = std::exchange(after_exec_, std::nullopt);
    return pending && begin(pending->first, pending->second);
}

bool event_stream::begin(const td_thr_events_t& mask, full_ring when_full)
{
    if (!unavailable_reason().empty())
        return false;
    interval_ms_ = min_drain_interval_ms;
    layout_ = read_ring_layout(target_);
    // A region a session before this one streamed to: its rings may hold
    // that session's events and drops, written before this watch.
    if (map_region() == mapped::yes)
        region_->discard();
    mask_address_ = target_.lookup_symbol(agent_module, "__tdagent_stream_events")->address;
    flag_address_ = target_.lookup_symbol(agent_module, "__tdagent_streaming")->address;
    streamed_ = mask;
    when_full_ = when_full;
    // Births are left untraced with every thread held, before the flag
    // tells the agent to wait: a thread born untraced never meets a flag
    // that would have it stop.
    std::optional<held_target> hold;
    if (may_leave_births_untraced(mask)) {
        hold.emplace(target_.process(), "after leaving births untraced");
        births_untraced_ = target_.process().new_threads().leave_untraced();
    }
    // The mask first: the flag is what makes the threads look at it. Their
    // natural values are 0 whatever is found: a session killed with its
    // guardian (nothing restored) leaves them set.
    const td_thr_events_t none{};
    // __tdagent_streaming's values (tdagent.h): 1 lossless, 2 drops counted;
    // plus 4: a report a ring cannot take waits for room.
    const std::uint8_t on = static_cast<std::uint8_t>((when_full == full_ring::drop ? 2 : 1) | (births_untraced_ ? 4 : 0));
    const std::uint8_t off = 0;
    // Births untraced have no exit stop: a streamed TD_DEATH needs every
    // TD_CREATE streamed too, to know who died without a report (an exit,
    // an exec): drain_rings() keeps the ones the watch did not ask for.
    td_thr_events_t written_mask = mask;
    if (births_untraced_ && td_eventismember(&mask, TD_DEATH))
        td_event_addset(&written_mask, TD_CREATE);
    bool written =
        write_journaled(mask_address_, std::as_bytes(std::span(&none, 1)), std::as_bytes(std::span(&written_mask, 1)));
    if (written &&
        !write_journaled(flag_address_, std::as_bytes(std::span(&off, 1)), std::as_bytes(std::span(&on, 1)))) {
        target_.process().journal().restore(mask_address_);
        written = false;
    }
    if (!written) {
        if (births_untraced_)
            target_.process().new_threads().trace_again();
        births_untraced_ = false;
        return false;
    }
    born_.clear();
    active_ = true;
    start_waker();  // a region mapped before (a watch before this one)
    return true;
}

bool event_stream::may_leave_births_untraced(const td_thr_events_t& mask)
{
    std::uint32_t bits = 0;
    auto known = target_.lookup_symbol(agent_module, "_tdagent_db_stream_bits");
    if (!known || !target_.memory().read_value(known->address, bits) || (bits & 4) == 0)
        return false;  // an agent that cannot wait for room
    if (births_counted_ && births_counted_())
        return false;
    thread_agent* agent = target_.agent();
    if (agent == nullptr)
        return false;
    for (const ptrace::breakpoint_site* site : target_.process().sites().all()) {
        if (site->kind() != ptrace::step_over_kind::signal_stop)
            return false;  // a trap byte: an untraced thread would die of it
        bool streamed = false;
        for (int e = TD_MIN_EVENT_NUM; e <= TD_MAX_EVENT_NUM && !streamed; ++e) {
            auto where = agent->reporting_address_of(static_cast<td_event_e>(e));
            streamed = where && where->address == site->address() && td_eventismember(&mask, e);
        }
        if (!streamed)
            return false;  // it would stop: an untraced thread cannot
    }
    return true;
}

event_stream::mapped event_stream::map_region()
{
    if (region_)
        return mapped::yes;
    auto anchor = read_ring_anchor(target_);
    if (!anchor || !anchor->is_ready())
        return mapped::not_yet;  // no thread has streamed yet
    // The descriptor must still be the agent's memfd: a program may have
    // closed it and reused the number for a file of its own.
    const std::string path = fmt::format("/proc/{}/fd/{}", target_.pid(), anchor->fd);
    if (link_of(path) != region_link)
        return mapped::never;
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        log::debug("event rings: cannot open {}: {}", path, std::strerror(errno));
        return mapped::never;
    }
    void* p = ::mmap(nullptr, anchor->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED)
        return mapped::never;
    mapping_ = std::span(static_cast<std::byte*>(p), static_cast<std::size_t>(anchor->size));
    region_ = ring_region::open(mapping_, *layout_);
    if (!region_) {
        ::munmap(mapping_.data(), mapping_.size());
        mapping_ = {};
        return mapped::never;
    }
    start_waker();
    return mapped::yes;
}

void event_stream::start_waker()
{
    if (active_ && !waker_ && region_)
        if (std::uint32_t* word = region_->wake_word())
            waker_ = std::make_unique<ring_waker>(word, [] { ptrace::waiter::wake(); });
}

tid_t event_stream::lwp_of(pid_t tid)
{
    if (tid <= 0)
        return tid_t{};
    if (!target_.ns_pid())
        return tid_t{tid};  // one PID namespace: the TID is the LWP's, alive or ended
    if (auto lwp = target_.lwp_of_ns_tid(tid))
        return *lwp;
    return target_.ns_pid() ? tid_t{} : tid_t{tid};  // ended: its TID is the LWP's
}

events::event_message event_stream::message_of(const ring_event& e, names_in_drain& names)
{
    events::event_message m;
    m.event = e.event;
    m.tid = lwp_of(e.subject_tid);
    m.reporter = lwp_of(e.reporter_tid);
    m.ns_tid = target_.ns_pid() && e.subject_tid > 0 ? std::optional<pid_t>(e.subject_tid) : std::nullopt;
    m.handle = e.subject;
    m.data = e.data;
    m.time = seconds_at_monotonic_ns(e.time_ns);
    if (e.name[0] != 0) {
        m.name = e.name_text();  // the agent's, at a birth or an end
    } else if (m.tid.value != 0) {
        // One read of /proc/PID/task/TID/comm per thread and drain.
        auto [it, added] = names.try_emplace(m.tid.value);
        if (added) {
            it->second = target_.thread_name(m.tid);
            // Ended before this drain: the name its birth's entry carried.
            if (auto born = born_.find(m.tid.value); it->second.empty() && born != born_.end())
                it->second = born->second.name;
        }
        m.name = it->second;
    }
    m.origin = "ring";
    if (e.event == TD_CREATE) {
        m.call_site = e.call_site;
        m.start_routine = e.start_routine;
        if (!e.start_routine.is_null())
            if (const auto* set = target_.modules_holding(e.start_routine))
                m.start_symbol = symbols::demangled(set->describe(e.start_routine));
    } else if (e.lock_kind >= 1 && e.lock_kind <= 4) {
        // agent/event_rings.c's lock kinds, in lock_kind's order.
        m.lock = static_cast<events::lock_kind>(e.lock_kind);
        if (e.lock_owner > 0)
            m.lock_owner = e.lock_owner;
        m.call_site = e.call_site;
        stacks_.decorate_streamed(m);
    }
    return m;
}

std::vector<events::event_message> event_stream::drain()
{
    if (!active_)
        return {};
    switch (map_region()) {
    case mapped::yes: {
        // The cut is read before any ring: see ring_region::drain_all().
        auto out = drain_rings(monotonic_now_ns());
        adapt_interval(static_cast<double>(region_->fullest_in_last_drain()) / region_->ring_entries());
        return out;
    }
    case mapped::not_yet: adapt_interval(0.0); return {};
    case mapped::never: break;
    }
    // The program closed the agent's memfd: its events go through stops
    // from now on; what the rings took meanwhile cannot be read.
    log::warning("watch --stream: the agent's event rings cannot be read (descriptor {} of process {} is not its "
                 "memfd any more); events go through stops from now on",
                 read_ring_anchor(target_).value_or(ring_anchor{}).fd, target_.pid());
    (void)stop();
    return {};
}

void event_stream::seize_if_asked()
{
    if (births_untraced_ && region_ && region_->take_seize_requests() > 0 && target_.is_alive()) {
        log::debug("event rings: seizing the threads about to exec");
        held_target hold(target_.process(), "after seizing threads about to exec");
    }
}

void event_stream::adapt_interval(double fullest)
{
    interval_ms_ = next_drain_interval_ms(interval_ms_, fullest);
}

int event_stream::next_drain_interval_ms(int interval_ms, double fullest)
{
    if (fullest >= 0.5)
        return std::max(interval_ms / 2, min_drain_interval_ms);
    if (fullest < 0.25)
        return std::min(2 * interval_ms, max_drain_interval_ms);
    return interval_ms;
}

std::vector<events::event_message> event_stream::drain_rings(std::uint64_t cut_ns)
{
    names_in_drain names;
    region_->beat(monotonic_now_ns());
    const std::vector<ring_event> drained = region_->drain_all(cut_ns);
    std::vector<events::event_message> out;
    out.reserve(drained.size());
    thread_agent* agent = target_.agent();
    std::pair<tid_t, target_addr> last_subject;  // told the seam already (runs of one thread's events)
    for (const ring_event& e : drained) {
        events::event_message m = message_of(e, names);
        if (agent != nullptr && m.tid.value != 0 && !m.handle.is_null() &&
            std::exchange(last_subject, {m.tid, m.handle}) != std::pair{m.tid, m.handle})
            agent->seam().on_streamed_subject(m.tid, m.handle);
        if (e.event == TD_CREATE && m.tid.value != 0)
            born_[m.tid.value] = birth{e.time_ns, m.handle, m.name};
        if (e.event == TD_DEATH && m.tid.value != 0) {
            deaths_.insert(m.tid.value);
            if (auto born = born_.find(m.tid.value); born != born_.end()) {
                m.lifetime_ns = e.time_ns > born->second.at_ns ? e.time_ns - born->second.at_ns : 0;
                born_.erase(born);
            } else {
                m.lifetime_ns = lifetime_of_(m.tid, e.time_ns);
            }
        }
        if (td_eventismember(&streamed_, e.event))
            out.push_back(std::move(m));
    }
    for (const ring_loss& l : region_->take_losses())
        lost_[lwp_of(l.tid).value] += l.count;
    return out;
}

std::vector<events::event_message> event_stream::stop()
{
    if (!active_)
        return {};
    active_ = false;
    waker_.reset();
    change_journal& journal = target_.process().journal();
    if (target_.is_alive()) {
        // Every thread born untraced is seized by the hold before the flag
        // goes back: none of them reports the usual way untraced.
        std::optional<held_target> hold;
        if (std::exchange(births_untraced_, false)) {
            hold.emplace(target_.process(), "after tracing births again");
            target_.process().new_threads().trace_again();
        }
        journal.restore(flag_address_);
        journal.restore(mask_address_);
    }
    births_untraced_ = false;
    // Threads still alive: traced now (the hold above), their ends are stops.
    auto births_done = [this] { born_.clear(); };
    // What was written before the writes went back: all of it.
    if (!region_ && (!target_.is_alive() || map_region() != mapped::yes)) {
        births_done();
        return {};
    }
    auto out = drain_rings(ring_region::no_cut);
    births_done();
    return out;
}

std::vector<events::event_message> event_stream::deaths_unseen(std::string_view origin, tid_t except)
{
    std::vector<events::event_message> out;
    if (td_eventismember(&streamed_, TD_DEATH)) {
        const std::uint64_t now = monotonic_now_ns();
        for (const auto& [lwp, b] : born_) {
            if (lwp == except.value)
                continue;
            events::event_message m;
            m.event = TD_DEATH;
            m.tid = m.reporter = tid_t{lwp};
            m.handle = b.handle;
            m.data = b.handle.value;
            m.name = b.name;
            m.time = seconds_at_monotonic_ns(now);
            m.origin = std::string(origin);
            m.lifetime_ns = now > b.at_ns ? now - b.at_ns : 0;
            out.push_back(std::move(m));
        }
        std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.tid.value < b.tid.value; });
    }
    born_.clear();
    return out;
}

std::vector<events::event_message> event_stream::leave_image(tid_t execer)
{
    // tdctl's own mapping of the old region outlives the image: what its
    // threads wrote before the exec is read from it.
    std::vector<events::event_message> held;
    if (active_) {
        after_exec_.emplace(streamed_, when_full_);
        if (region_)
            held = drain_rings(ring_region::no_cut);
        for (auto& death : deaths_unseen("exec", execer))
            held.push_back(std::move(death));
    }
    active_ = false;
    births_untraced_ = false;  // the exec'ing thread traces births again (traced_process)
    waker_.reset();
    deaths_.clear();
    born_.clear();
    region_.reset();
    if (!mapping_.empty())
        ::munmap(mapping_.data(), mapping_.size());
    mapping_ = {};
    return held;
}

std::vector<event_stream::loss> event_stream::losses() const
{
    std::vector<loss> out;
    for (const auto& [lwp, count] : lost_)
        out.push_back(loss{tid_t{lwp}, count});
    return out;
}


}  // namespace tdctl::core
