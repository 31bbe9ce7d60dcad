#include "core/session.hpp"

#include <algorithm>
#include <cstddef>
#include <utility>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "core/held_target.hpp"
#include "core/lock_probe.hpp"
#include "events/event_names.hpp"
#include "events/event_set.hpp"
#include "ptrace/procfs.hpp"

namespace tdctl::core {

using ptrace::stop_kind;

session::session(std::unique_ptr<ptrace::traced_process> process)
    : process_(std::move(process)),
      files_(process_->pid(), procfs::task_files::descriptor_budget() / 2),
      stats_(files_)
{
    // NSpid lists the process's PID in every namespace from ours inward: more
    // than one entry means the thread library records other TIDs than ours.
    if (auto st = procfs::read_status(process_->pid()); st && st->ns_pids.size() > 1)
        ns_pid_ = st->ns_pids.back();
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

}  // namespace

std::unique_ptr<session> session::attach(pid_t pid, int cancel_fd, bool with_agent)
{
    auto early = modules_before_attach(pid);
    std::unique_ptr<session> s(new session(ptrace::traced_process::attach(pid, cancel_fd)));
    s->passes_by_late_agent_ = !with_agent;
    s->load_symbols(std::move(early));
    // Every thread stays stopped until a command needs the target running
    // (release_lingering): `-p PID -e threads -e detach` stops it once.
    s->held_ = false;
    s->lingering_ = true;
    return s;
}

std::unique_ptr<session> session::launch(const ptrace::launch_options& opts)
{
    std::unique_ptr<session> s(new session(ptrace::traced_process::launch(opts)));
    s->load_symbols();
    if (!s->agent_)
        s->follow_loader();
    // Launched targets stay held at the entry point until the first command
    // (watch, continue) runs them; no user code has run yet.
    s->process_->withdraw_sites();
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

const symbols::module_set* session::modules_holding(target_addr a)
{
    if (modules_.containing(a) != nullptr)
        return &modules_;
    if (late_modules_ && late_modules_->containing(a) != nullptr)
        return &*late_modules_;
    const double now = seconds_since_start();
    if (a.is_null() || (late_modules_at_ >= 0 && now - late_modules_at_ < 1.0))
        return nullptr;
    late_modules_at_ = now;
    try {
        late_modules_ = symbols::module_set::load(pid());
    } catch (const std::exception& e) {
        log::debug("reading the modules again: {}", e.what());
        late_modules_.reset();
    }
    return late_modules_ && late_modules_->containing(a) != nullptr ? &*late_modules_ : nullptr;
}

void session::load_symbols(std::optional<symbols::module_set> early)
{
    unwinder_.reset();   // its modules are the image's
    if (early && early->maps_unchanged(pid()))
        modules_ = std::move(*early);
    else
        modules_ = symbols::module_set::load(pid());
    late_modules_.reset();
    late_modules_at_ = -1;
    watch_.reset();
    settings_.reset();
    backend_ = nullptr;
    agent_.reset();
    no_agent_reason_.clear();
    // A late agent (dlopen()ed after libc) sees no call until they are
    // routed to it; without --agent, nptl serves.
    bool consider_tdagent = !passes_by_late_agent_ || !has_module("libtdagent.so") ||
                            agent_precedes_libc(*this).value_or(true);
    auto agent = thread_agent::create(*this, &no_agent_reason_, consider_tdagent);
    if (agent)
        agent_ = std::move(*agent);
    if (agent_) {
        if (process_->is_alive())
            agent_->protocol().set_journal(&process_->journal());
        backend_ = &agent_->seam();
        settings_.emplace(agent_->protocol(), process_->journal());
        watch_ = std::make_unique<event_watch>(*this, *agent_, *backend_);
    }
    listed_at_attach_.clear();
    if (agent_)
        if (auto listed = agent_->protocol().message_list())
            listed_at_attach_.insert(listed->begin(), listed->end());
    log::debug("thread library: {}", agent_ ? agent_->backend() : no_agent_reason_);
}

void session::route_calls_to_agent(bool follow_loads)
{
    if (!agent_ || agent_->backend() != "tdagent")
        throw error::target(fmt::format(
            "--agent: libtdagent.so is not in the target after loading it ({})",
            has_module("libtdagent.so") ? no_agent_reason_ : "no module exports __tdagent_version"));
    // Each module's slots are guarded by its link_map entry, which the
    // loader frees when it unloads the module.
    auto rendezvous = find_loader_rendezvous(*this);
    auto present = rendezvous ? read_link_map(process_->memory(), *rendezvous) : std::nullopt;
    auto guard = [&](const symbols::elf_module& m) -> std::optional<change_guard> {
        if (present)
            for (const auto& entry : *present)
                if (entry.l_addr == m.load_bias())
                    return module_guard(entry);
        return std::nullopt;
    };
    routing_ = route_to_agent(modules_, process_->journal(), process_->memory(), guard);
    for (const auto& p : routing_->problems)
        log::warning("routing to the agent: {}", p);
    log::debug("routed {} GOT slots in {} modules to the agent ({} already bound to it)", routing_->slots,
               routing_->modules, routing_->already);
    // Following the loader takes a trap byte at r_brk: only when asked.
    if (!follow_loads)
        return;
    if (!present) {
        log::warning("the loader's list of modules cannot be read: modules loaded from now on are not routed");
        return;
    }
    late_ = std::make_unique<late_routing>(*process_, modules_, *rendezvous, *present, *routing_);
}

void session::stop_late_routing()
{
    if (!late_)
        return;
    if (process_->is_alive())
        late_->stop();
    late_.reset();
}

agent_load_report session::load_agent(const agent_file& agent, int cancel_fd, bool follow_loads)
{
    std::vector<session_event> unseen;
    auto others = [&](const ptrace::stop_event& ev) { handle(ev, unseen, true); };
    agent_load_report report = core::load_agent(*process_, modules_, agent, others, cancel_fd);
    if (!report.reused)
        load_symbols();   // from here on the session is as at an attach that found the agent loaded
    // Calls between modules loaded before the agent reach it through their
    // GOT slots, rewritten (and journaled) here.
    route_calls_to_agent(follow_loads);
    return report;
}

void session::follow_loader()
{
    // A program started through its dynamic loader named on the command line
    // (`ld.so PROG`): at the loader's own entry point nothing else is mapped.
    // The loader calls _dl_debug_state (r_debug.r_brk) before and after each
    // change to its list of modules; it is followed until the list is
    // consistent and holds a thread library, before any code of the program
    // runs.
    const auto* exe = modules_.main_executable();
    if (exe == nullptr)
        return;
    auto notify = exe->lookup("_dl_debug_state");
    auto rdebug = exe->lookup("_r_debug");
    if (!notify || !rdebug)
        return;  // not the loader
    for (int change = 0; change < max_loader_notifications && !agent_ && process_->is_alive(); ++change) {
        process_->run_to(notify->address, "a thread library");
        process_->release_all();  // still held once, as launch() left it
        std::int32_t state = -1;
        if (!process_->memory().read_value(rdebug->address + offsetof(struct r_debug, r_state), state) ||
            state != r_debug::RT_CONSISTENT)
            continue;
        load_symbols();
    }
}

// ---------------------------------------------------------------- target_access

std::optional<symbols::symbol> session::lookup_symbol(std::string_view module, std::string_view name)
{
    if (module.empty())
        return modules_.lookup(name);
    if (const auto* m = modules_.find(module))
        return m->lookup(name);
    return std::nullopt;
}

bool session::has_module(std::string_view module)
{
    return modules_.find(module) != nullptr;
}

std::string session::module_problem(std::string_view module)
{
    for (const auto& why : modules_.skipped())
        if (why.find(module) != std::string::npos)
            return why;
    return {};
}

std::vector<tid_t> session::lwps()
{
    if (is_alive())
        return process_->tids();
    return procfs::list_tasks(pid());
}

std::optional<target_addr> session::thread_pointer(tid_t lwp)
{
    const auto* t = process_->find(lwp);
    if (t == nullptr || t->thread_pointer.is_null())
        return std::nullopt;
    return t->thread_pointer;
}

std::optional<pid_t> session::ns_tid_of(tid_t lwp)
{
    if (!ns_pid_)
        return lwp.value;
    if (auto it = ns_tid_by_lwp_.find(lwp); it != ns_tid_by_lwp_.end())
        return it->second;
    auto st = files_.status(lwp);
    if (!st || st->ns_pids.empty())
        return std::nullopt;
    pid_t ns_tid = st->ns_pids.back();
    ns_tid_by_lwp_[lwp] = ns_tid;
    lwp_by_ns_tid_[ns_tid] = lwp;
    return ns_tid;
}

std::optional<tid_t> session::lwp_of_ns_tid(pid_t ns_tid)
{
    if (ns_tid <= 0)
        return std::nullopt;
    if (!ns_pid_) {
        if (is_alive())
            return process_->find(tid_t{ns_tid}) ? std::optional<tid_t>(tid_t{ns_tid}) : std::nullopt;
        return target_access::lwp_of_ns_tid(ns_tid);
    }
    auto known = [&]() -> std::optional<tid_t> {
        auto it = lwp_by_ns_tid_.find(ns_tid);
        if (it == lwp_by_ns_tid_.end())
            return std::nullopt;
        auto fwd = ns_tid_by_lwp_.find(it->second);
        if (fwd == ns_tid_by_lwp_.end() || fwd->second != ns_tid)
            return std::nullopt;
        return it->second;
    };
    if (auto lwp = known(); lwp && (!is_alive() || process_->find(*lwp) != nullptr))
        return lwp;
    // Not seen yet: read NSpid of every LWP not mapped so far.
    for (tid_t t : lwps())
        if (!ns_tid_by_lwp_.contains(t))
            (void)ns_tid_of(t);
    if (auto lwp = known(); lwp && (!is_alive() || process_->find(*lwp) != nullptr))
        return lwp;
    return std::nullopt;
}

void session::forget_ns_tid(tid_t lwp)
{
    auto it = ns_tid_by_lwp_.find(lwp);
    if (it == ns_tid_by_lwp_.end())
        return;
    if (auto back = lwp_by_ns_tid_.find(it->second); back != lwp_by_ns_tid_.end() && back->second == lwp)
        lwp_by_ns_tid_.erase(back);
    ns_tid_by_lwp_.erase(it);
}

std::optional<target_addr> session::handle_of(tid_t lwp)
{
    return backend_ ? backend_->handle_of(lwp) : std::nullopt;
}

std::string session::thread_name(tid_t lwp) const
{
    return files_.comm(lwp);
}

std::vector<std::string> session::thread_names(const std::vector<tid_t>& lwps) const
{
    return files_.comms(lwps);
}

std::optional<std::uint64_t> session::lwp_start_ticks(tid_t lwp) const
{
    auto st = files_.stat(lwp);
    return st ? std::optional<std::uint64_t>(st->starttime) : std::nullopt;
}

tid_t session::lwp_of(target_addr handle)
{
    if (!agent_ || handle.is_null())
        return tid_t{};
    auto lwp = thread_handle(*agent_, handle).lwp();
    return lwp && *lwp ? **lwp : tid_t{};
}

// ---------------------------------------------------------------- call stacks

std::expected<std::vector<stack_frame>, std::string> session::stack_of(tid_t lwp, int max_frames)
{
    const auto* t = process_->find(lwp);
    if (t == nullptr || !t->stopped)
        return std::unexpected(fmt::format("LWP {} is not stopped by tdctl", lwp.value));
    auto regs = process_->trap_registers(lwp);
    if (!regs)
        regs = ptrace::registers::read(lwp);
    if (!regs)
        return std::unexpected(std::string("no frame could be read: the LWP is exiting"));
    unwind_start start;
    start.regs = regs->raw();
    // The trap byte is a site's first: one past it, the LWP has not run the
    // reporting function's `ret` yet.
    if (target_addr site = regs->pc() - ptrace::breakpoint_pc_adjust; site_events_.contains(site)) {
        start.report_site = site;
    } else if (site_events_.contains(t->returned_from_site)) {
        start.report_site = t->returned_from_site;
        start.returned = true;
    }
    if (!unwinder_)
        unwinder_ = std::make_unique<unwinder>(pid(), process_->memory(), &modules_);
    return unwinder_->unwind(lwp, start, max_frames);
}

void session::attach_stack(events::event_message& msg, tid_t reporter)
{
    if (event_stack_depth_ <= 0)
        return;
    // Noted first: a TD_LOCK_TRY opens the wait whose TD_SLEEP gets the stack.
    if (!wants_lock_stack(msg))
        return;
    if (!stack_events_.empty() && std::find(stack_events_.begin(), stack_events_.end(), msg.event) == stack_events_.end())
        return;
    if (auto frames = stack_of(reporter, event_stack_depth_))
        msg.frames = std::move(*frames);
    else
        log::debug("stack of {}: {}", reporter.value, frames.error());
}

bool session::wants_lock_stack(const events::event_message& msg)
{
    if (!lock_probes_)
        return true;
    const pid_t lwp = msg.reporter.value;
    if (msg.event == TD_LOCK_TRY) {
        lock_tries_[lwp] = msg.data;
        return false;
    }
    auto it = lock_tries_.find(lwp);
    const bool follows_try = it != lock_tries_.end() && it->second == msg.data && msg.event == TD_SLEEP;
    if (it != lock_tries_.end() && msg.event != TD_PRI_INHERIT)
        lock_tries_.erase(it);
    return follows_try;
}

void session::attach_lock_owner(events::event_message& msg)
{
    if (!lock_probes_ || msg.event != TD_SLEEP || msg.frames.empty())
        return;
    msg.lock = lock_kind_of(msg.frames);
    msg.lock_owner = lock_owner_of(memory(), target_addr{msg.data}, msg.lock);
    // The kind is named by the agent's frames; the call site starts below them.
    drop_reporter_frames(msg.frames, modules_);
}

// ---------------------------------------------------------------- journal

void session::will_write_settings()
{
    reports_may_be_pending_ = true;
    ++report_epoch_;
}

void session::restore_settings()
{
    // A second restore (the detach of a running target restores before and
    // after its settling) finds nothing left to put back: what the first
    // found still makes the listed messages ours.
    if (settings_ && settings_->restore_originals())
        messages_are_ours_ = true;
}

void session::consume_our_messages()
{
    if (!agent_ || !messages_are_ours_)
        return;
    // Messages buffered because of our masks and flags go with them.
    auto& p = agent_->protocol();
    if (auto listed = p.message_list())
        for (target_addr rec : *listed)
            if (!listed_at_attach_.contains(rec))
                (void)p.consume(rec);
    messages_are_ours_ = false;
}

td_status session::ta_set_event(const td_thr_events_t& events)
{
    if (!agent_)
        return td_fail(TD_NOLIBTHREAD);
    will_write_settings();
    return agent_->set_event(events);
}

td_status session::ta_clear_event(const td_thr_events_t& events)
{
    if (!agent_)
        return td_fail(TD_NOLIBTHREAD);
    will_write_settings();
    return agent_->clear_event(events);
}

td_status session::thr_set_event(const thread_handle& th, const td_thr_events_t& events)
{
    will_write_settings();
    return th.set_event(events);
}

td_status session::thr_clear_event(const thread_handle& th, const td_thr_events_t& events)
{
    will_write_settings();
    return th.clear_event(events);
}

td_status session::thr_event_enable(const thread_handle& th, bool on)
{
    will_write_settings();
    return th.event_enable(on);
}

// ---------------------------------------------------------------- arm / stops

const std::vector<td_event_e>& session::armed_events() const
{
    static const std::vector<td_event_e> none;
    return armed_ ? armed_->events : none;
}

td_status session::plant(const std::vector<td_event_e>& events)
{
    if (!agent_)
        return td_fail(TD_NOLIBTHREAD);
    for (td_event_e e : events)
        if (!agent_->reporting_address_of(e))
            return td_fail(TD_NOEVENT);
    int signo = report_signal();
    for (td_event_e e : events) {
        auto addr = *agent_->reporting_address_of(e);
        if (signo != 0 && !addr.stop_flag.is_null())
            process_->add_signal_site(addr.address, ptrace::stop_flag{addr.stop_flag, signo});
        else
            process_->add_breakpoint(addr.address, addr.function_size);
        site_events_[addr.address] = e;
    }
    return {};
}

int session::report_signal()
{
    if (process_->report_signal() != 0)
        return process_->report_signal();
    target_addr stopped = agent_->layout().report_stopped_pc;
    if (stopped.is_null())
        return 0;
    // A signal whose default action is "ignore", which the target does not
    // catch (SigCgt) and its main thread does not block (SigBlk: a program
    // that takes it with sigwait() or a signalfd blocks it). Raised by the
    // agent to stop for tdctl, it is a no-op for a thread no tracer holds any
    // more, and one of the same number sent meanwhile, taken with it, would
    // have been ignored anyway.
    auto status = procfs::read_status(process_->pid());
    if (!status)
        return 0;
    for (int signo : {SIGURG, SIGWINCH, SIGCHLD}) {
        std::uint64_t bit = std::uint64_t{1} << (signo - 1);
        if ((status->signals_caught | status->signals_blocked) & bit)
            continue;
        process_->set_report_signal(signo, stopped, agent_->layout().stop_flags);
        log::debug("reports stop with signal {} ({})", signo, sigabbrev_np(signo));
        return signo;
    }
    log::debug("the target catches or blocks SIGURG, SIGWINCH and SIGCHLD: reports stop on trap bytes");
    return 0;
}

void session::remove_sites(const std::vector<td_event_e>& events)
{
    if (!agent_ || !process_->is_alive())
        return;
    if (std::find(events.begin(), events.end(), TD_CREATE) != events.end())
        enable_pending_births();
    for (td_event_e e : events) {
        if (auto addr = agent_->reporting_address_of(e)) {
            process_->remove_breakpoint(addr->address);
            if (!process_->site_at(addr->address))
                site_events_.erase(addr->address);
        }
    }
}

void session::enable_newborn(target_addr handle, std::int32_t record_tid)
{
    if ((!armed_ && stop_events_.empty()) || settling_ || !agent_ || handle.is_null())
        return;
    reports_may_be_pending_ = true;
    (void)agent_->protocol().write_report_events(handle, true, record_tid);
}

void session::enable_thread_for_watch(target_addr handle, std::optional<std::int32_t> record_tid)
{
    if ((!armed_ && stop_events_.empty()) || settling_ || !agent_ || handle.is_null())
        return;
    will_write_settings();
    (void)agent_->protocol().write_report_events(handle, true, record_tid);
}

td_status session::arm(const std::vector<td_event_e>& events)
{
    if (!agent_)
        return td_fail(TD_NOLIBTHREAD);
    if (armed_)
        disarm();
    for (td_event_e e : events)
        if (!agent_->reporting_address_of(e))
            return td_fail(TD_NOEVENT);

    // Edits below must not race threads being born: hold the target. The
    // guard runs while an error may be on its way out: it must not throw.
    held_target held(*process_, "after arming");

    will_write_settings();
    if (auto global = agent_->global_mask(); !global)
        return td_fail(global.error());
    armed_ = armed_state{};
    armed_->events = events;
    settings_->mark_before_arm();

    std::vector<td_event_e> planted = events;
    if (backend_->traits().must_follow_create && std::find(events.begin(), events.end(), TD_CREATE) == events.end() &&
        agent_->reporting_address_of(TD_CREATE)) {
        armed_->follow_create = true;
        planted.push_back(TD_CREATE);
    }
    if (auto r = plant(planted); !r) {
        armed_.reset();
        return r;
    }
    return enable_for_arm(planted);
}

td_status session::enable_for_arm(const std::vector<td_event_e>& planted)
{
    if (auto r = agent_->set_event(events::to_event_set(planted)); !r)
        return r;
    // Threads the library does not know yet are adopted, and enabled at
    // their TD_CREATE report, once this flag is on.
    if (backend_->traits().adopts_unknown_threads && agent_->layout().initial_report_events) {
        will_write_settings();
        (void)agent_->protocol().write_initial_report_events(true);
    }
    auto threads = agent_->thr_iter();
    if (!threads)
        return td_fail(threads.error());
    for (const auto& th : *threads) {
        if (th.is_null()) {
            // Not initialised yet (static program at its entry point): the
            // flag every thread will start with.
            will_write_settings();
            (void)th.event_enable(true);
            continue;
        }
        enable_thread_for_watch(th.value());
    }
    // Threads born while we held the target are already in the list, but
    // their thread_created events are queued; enabling them twice is harmless.
    return {};
}

void session::disarm()
{
    if (!armed_)
        return;
    if (!process_->is_alive()) {
        armed_.reset();
        return;
    }
    process_->stop_all();
    drain_queued_silently();
    if (settings_)
        settings_->restore_before_arm();
    settle_reports();
    if (!armed_ || !process_->is_alive()) {
        armed_.reset();  // the process ended meanwhile
        return;
    }
    auto state = std::move(*armed_);
    armed_.reset();
    births_at_report_.clear();  // a later arm enables every listed thread
    remove_sites(state.events);
    if (state.follow_create)
        remove_sites({TD_CREATE});
    process_->release_all();
}

void session::settle_reports()
{
    // glibc decides to report before it reports: a creator decides before
    // its clone() and pushes the message after it, a dying thread a few
    // instructions before its push. A thread inside that window when the
    // masks and flags go back still pushes its message. So the threads run
    // a while longer with the sites in place (and nothing newly enabled),
    // and each late message is taken at its site, not left on glibc's list.
    // A thread in the window is runnable and needs only a little CPU to
    // leave it; the settling goes on until every runnable thread has had
    // that much since the settings went back (bounded: a starved host).
    if (!agent_ || !process_->is_alive())
        return;
    settling_ = true;
    births_at_report_.clear();  // nothing is newly enabled from here on
    std::unordered_map<pid_t, std::uint64_t> cpu_before;
    for (tid_t lwp : process_->tids())
        if (auto ss = files_.schedstat(lwp))
            cpu_before[lwp.value] = ss->cpu_ns;
    // A thread in the window may be preempted (R), or in a page fault or
    // inside clone() (D); a thread asleep (S) is not between a decision and
    // its push. A creator stopped at its clone stop is in it too: those are
    // let run alone to their push at the end (let_creators_push).
    auto may_be_in_window = [](char state) { return state == 'R' || state == 'D'; };
    auto all_ran = [&] {
        for (tid_t lwp : process_->tids()) {
            auto st = files_.stat(lwp);
            auto ss = files_.schedstat(lwp);
            if (!st || !ss || !may_be_in_window(st->state))
                continue;
            auto it = cpu_before.find(lwp.value);
            if (it != cpu_before.end() && ss->cpu_ns - it->second < settle_cpu_ns)
                return false;
        }
        return true;
    };
    std::vector<session_event> ignored;
    if (process_->is_holding())
        process_->release_all();
    // Still held (a hold of the user's, or one that lingers): no thread runs
    // now, and one that did before the hold is left as it stands.
    const bool runs = !process_->is_holding();
    const double start = seconds_since_start();
    double next_check = start + settle_seconds;
    for (double now = start; runs && process_->is_alive(); now = seconds_since_start()) {
        if (now >= next_check) {
            if (now >= start + settle_max_seconds || all_ran())
                break;
            next_check = now + settle_seconds / 2;
        }
        auto ev = process_->next_event(std::max(1, static_cast<int>((next_check - now) * 1000)));
        if (ev)
            handle(*ev, ignored, true);
    }
    log::debug("late reports settled in {:.1f} ms", (seconds_since_start() - start) * 1000);
    // An exit taken meanwhile is reported by the caller from exit_status().
    process_->stop_all();
    drain_queued_silently();
    let_creators_push();
    settling_ = false;
    reports_may_be_pending_ = false;
}

td_status session::plant_stops(const std::vector<td_event_e>& events)
{
    if (auto r = plant(events); !r)
        return r;
    for (td_event_e e : events)
        if (std::find(stop_events_.begin(), stop_events_.end(), e) == stop_events_.end())
            stop_events_.push_back(e);
    return {};
}

void session::clear_stops()
{
    if (stop_events_.empty())
        return;
    process_->stop_all();
    remove_sites(stop_events_);
    stop_events_.clear();
    process_->release_all();
}

// ---------------------------------------------------------------- run control

void session::interrupt()
{
    if (held_ || !is_alive())
        return;
    if (lingering_)
        lingering_ = false;  // stopped already: the hold takes that stop over
    else
        process_->stop_all();
    process_->withdraw_sites();
    held_ = true;
    if (unwinder_)
        unwinder_->target_ran();
}

void session::release_lingering()
{
    if (!lingering_)
        return;
    lingering_ = false;
    if (!is_alive())
        return;
    log::debug("the threads run again (no command works on them stopped)");
    process_->reinsert_withdrawn_sites();
    process_->release_all();
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
    process_->reinsert_withdrawn_sites();
    if (stopped_reporter_.value != 0) {
        tid_t reporter = stopped_reporter_;
        stopped_reporter_ = {};
        // One-shot: the `stop` breakpoints go before the reporter steps on.
        if (!stop_events_.empty()) {
            auto events = stop_events_;
            stop_events_.clear();
            remove_sites(events);
        }
        process_->resume(reporter);
    }
    process_->release_all();
}

void session::let_creators_push()
{
    // A creator that decided to report pushes its TD_CREATE right after its
    // clone stop: one stopped between the two would push after the detach,
    // onto glibc's list. Each runs alone (the others held) until it stops
    // again, at the site when it reports (the message is taken there).
    std::vector<session_event> ignored;
    for (int round = 0; round < max_creator_rounds && !mid_create_.empty() && process_->is_alive(); ++round) {
        auto creators = std::exchange(mid_create_, {});
        for (pid_t creator : creators)
            if (auto ev = process_->run_alone(tid_t{creator}, creator_run_ms))
                handle(*ev, ignored, true);
        drain_queued_silently();
    }
    mid_create_.clear();
}

void session::drain_queued_silently()
{
    std::vector<session_event> ignored;
    while (process_->has_queued_events()) {
        auto ev = process_->next_event(0);
        if (!ev)
            break;
        handle(*ev, ignored, true);
    }
}

void session::detach()
{
    if (!is_alive())
        return;
    process_->begin_detach();
    // A target that runs gets its masks and flags back, and settles, while
    // it runs: every thread is then stopped once, for the sites and the
    // detach, where a stop before the restore would make two.
    if (reports_may_be_pending_ && !process_->is_holding()) {
        restore_settings();
        settle_reports();
    }
    process_->stop_all();
    stop_late_routing();
    drain_queued_silently();
    restore_settings();
    if (reports_may_be_pending_)
        settle_reports();
    if (armed_) {
        remove_sites(armed_->events);
        if (armed_->follow_create)
            remove_sites({TD_CREATE});
        armed_.reset();
    }
    remove_sites(stop_events_);
    stop_events_.clear();
    consume_our_messages();
    // Calls go back to where they went before the attach while every
    // thread is stopped (a thread inside a wrapper finishes there: the agent
    // stays loaded).
    process_->journal().restore_kinds({change_kind::got_entry});
    process_->detach();
    held_ = false;
    lingering_ = false;
}

void session::kill()
{
    armed_.reset();
    late_.reset();
    stop_events_.clear();
    process_->kill();
    held_ = false;
    lingering_ = false;
}

std::vector<session_event> session::pump(int timeout_ms)
{
    std::vector<session_event> out;
    if (!process_->is_alive() || process_->is_detached())
        return out;
    // A wait for the target's own doings wants it running; a poll (0) does not.
    if (timeout_ms != 0)
        release_lingering();
    if (unwinder_)
        unwinder_->target_ran();
    // Hand back promptly: at most a batch of stops, and at most a few ms of
    // them, per call, so the caller's deadlines and signals are looked at
    // however slowly stops arrive.
    const double budget_end = seconds_since_start() + pump_budget_seconds;
    for (int n = 0; n < 512 && (n == 0 || seconds_since_start() < budget_end); ++n) {
        auto ev = process_->next_event(n == 0 ? timeout_ms : 0);
        if (!ev)
            break;
        handle(*ev, out, false);
        if (!out.empty() && out.back().what == session_event::kind::stopped_at_event)
            break;
        if (!process_->is_alive())
            break;
    }
    return out;
}

std::vector<session_event> session::pump_blocking(const std::atomic<bool>& attention, bool& no_child)
{
    std::vector<session_event> out;
    no_child = false;
    if (!process_->is_alive() || process_->is_detached())
        return out;
    release_lingering();
    if (unwinder_)
        unwinder_->target_ran();
    // Stops are taken one blocking wait each until one is for the user; what
    // a stop queued is handed out with it, with no look for more (a look
    // that finds nothing is a system call the target waits for).
    while (out.empty() && process_->is_alive()) {
        auto ev = process_->next_event_blocking(attention, no_child);
        if (!ev)
            break;
        handle(*ev, out, false);
        while (process_->has_queued_events() && process_->is_alive() &&
               (out.empty() || out.back().what != session_event::kind::stopped_at_event))
            if (auto queued = process_->next_event(0))
                handle(*queued, out, false);
        if (!out.empty() && out.back().what == session_event::kind::stopped_at_event)
            break;
    }
    return out;
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
        reporting_since_.erase(ev.tid);
        births_at_report_.erase(ev.tid);
        forget_ns_tid(ev.tid);
        files_.forget(ev.tid);
        for (auto* a : accounting())
            if (a != nullptr)
                a->on_vanished(ev.tid);
        if (backend_)
            backend_->on_lwp_gone(ev.tid);
        if (watch_)
            watch_->forget(ev.tid);
        return;
    case stop_kind::exec:
        on_exec(ev, out);
        return;
    case stop_kind::call_returned:
        return;  // a remote call's end; only its caller (agent_loader) waits for it
    case stop_kind::process_exited: {
        session_event se;
        se.what = session_event::kind::process_exited;
        se.status = ev.status;
        out.push_back(se);
        armed_.reset();
        births_at_report_.clear();
        stop_events_.clear();
        late_.reset();
        held_ = false;
        lingering_ = false;
        return;
    }
    }
}

void session::on_breakpoint(const ptrace::stop_event& ev, std::vector<session_event>& out, bool silent)
{
    mid_create_.erase(ev.tid.value);
    if (late_ && late_->owns_site(ev.address)) {
        for (auto& note : late_->at_site(ev.address))
            if (!silent)
                out.push_back(session_event{session_event::kind::routing, {}, 0, std::move(note)});
        process_->resume(ev.tid);
        return;
    }
    auto it = site_events_.find(ev.address);
    td_event_e event = it == site_events_.end() ? TD_EVENT_NONE : it->second;
    bool is_stop = std::find(stop_events_.begin(), stop_events_.end(), event) != stop_events_.end();
    if (is_stop && !silent && !held_)
        hold_at_stop(event, ev, out);
    else
        on_watched_report(event, ev, out, silent);
}

void session::hold_at_stop(td_event_e event, const ptrace::stop_event& ev, std::vector<session_event>& out)
{
    // The seed's flow by hand: hold everything, leave the buffer unread.
    process_->stop_all();
    process_->withdraw_sites();
    held_ = true;
    stopped_reporter_ = ev.tid;
    session_event se;
    se.what = session_event::kind::stopped_at_event;
    se.message.event = event;
    se.message.reporter = ev.tid;
    se.message.tid = ev.tid;
    se.message.ns_tid = foreign_ns_tid(ev.tid);
    se.message.time = seconds_since_start();
    se.message.name = thread_name(ev.tid);
    if (const auto* t = process_->find(ev.tid))
        se.message.handle = t->thread_pointer;
    out.push_back(se);
}

void session::on_watched_report(td_event_e event, const ptrace::stop_event& ev, std::vector<session_event>& out,
                                bool silent)
{
    bool is_armed = armed_ && std::find(armed_->events.begin(), armed_->events.end(), event) != armed_->events.end();
    // A followed TD_CREATE enables the new thread; not asked for, not shown.
    bool is_followed = armed_ && armed_->follow_create && event == TD_CREATE;
    if ((is_armed || is_followed) && watch_) {
        // The report's one read also takes the creator's stack for its call
        // site, and its one write the new thread's flag (enabled before it
        // runs: glibc holds it until the report is consumed) or the dying
        // thread's flag back (glibc reads it no more).
        std::optional<ptrace::registers> regs;
        if (event == TD_CREATE && is_armed && !silent)
            regs = process_->trap_registers(ev.tid);
        const std::array<std::pair<target_addr, std::span<std::byte>>, 1> window{
            {{regs ? regs->sp() : target_addr{}, std::span(report_stack_)}}};
        const bool flag_back_at_death = backend_->traits().death_report_is_last;
        auto extras = [&](const message_subject& subject) {
            consume_extras x;
            if (regs)
                x.reads = window;
            auto tid = subject.lwp.value != 0 ? ns_tid_of(subject.lwp) : std::nullopt;
            if (!tid)
                return x;
            x.record_tid = *tid;
            if (event == TD_CREATE && !settling_ && births_at_report_.contains(subject.lwp))
                x.flag = consume_extras::flag_change::enable;
            else if (event == TD_DEATH && flag_back_at_death && subject.lwp == ev.tid)
                x.flag = consume_extras::flag_change::put_back;
            return x;
        };
        auto drained = watch_->at_reporting_address(event, ev.tid, ev.arg0, extras);
        if (drained && event == TD_CREATE)
            if (auto it = births_at_report_.find(drained->message.tid); it != births_at_report_.end()) {
                births_at_report_.erase(it);
                if (drained->flag_changed)
                    reporting_since_[drained->message.tid] = report_epoch_;
                else
                    (void)enable_born_at_clone(drained->message.tid);
            }
        // Its name cannot change any more: the exit stop's accounting takes it from here.
        if (drained && event == TD_DEATH && flag_back_at_death && drained->message.tid == ev.tid)
            files_.keep_final_comm(ev.tid, drained->message.name);
        // The library holds a thread created while watching until this report
        // is consumed, so it is enabled before it runs user code.
        if (drained && !drained->newborn.is_null() && armed_ &&
            backend_->traits().enable_on_birth == birth_enable::at_create_report)
            enable_thread_for_watch(drained->newborn);
        // A thread the library adopted reports its own TD_CREATE: not a birth.
        bool is_adoption = drained && event == TD_CREATE && drained->message.tid == ev.tid;
        if (drained && is_armed && !silent && !is_adoption) {
            attach_stack(drained->message, ev.tid);
            attach_lock_owner(drained->message);
            if (event == TD_CREATE)
                drained->message.call_site =
                    regs && drained->extras_read ? call_site_from(ev, *regs, report_stack_) : call_site_of(ev);
            out.push_back(session_event{session_event::kind::message, std::move(drained->message), 0, {}});
        }
    }
    // A new thread whose enabling this report did not carry is enabled now.
    if (event == TD_CREATE)
        enable_pending_births(ev.tid);
    process_->resume(ev.tid);
}

target_addr session::call_site_from(const ptrace::stop_event& ev, const ptrace::registers& regs,
                                    std::span<const std::byte> stack)
{
    if (!call_sites_)
        call_sites_ = std::make_unique<call_site_reader>(pid());
    return call_sites_->read_from(regs, ev.address, stack).value_or(target_addr{});
}

target_addr session::call_site_of(const ptrace::stop_event& ev)
{
    if (!call_sites_)
        call_sites_ = std::make_unique<call_site_reader>(pid());
    // The registers the trap was recognised by; read again only if gone.
    auto regs = process_->trap_registers(ev.tid);
    if (!regs)
        regs = ptrace::registers::read(ev.tid);
    if (!regs)
        return {};
    return call_sites_->read(*regs, ev.address, memory()).value_or(target_addr{});
}

void session::on_thread_created(const ptrace::stop_event& ev)
{
    for (auto* a : accounting())
        if (a != nullptr)
            a->on_birth(ev.child);
    if (backend_)
        backend_->on_clone(ev.tid, ev.child);
    if (watch_)
        watch_->born(ev.child);
    inherit_journal(ev.tid, ev.child);
    if (settling_)
        mid_create_.insert(ev.tid.value);
    reporting_since_.erase(ev.child);  // a TID used again starts unknown
    // While watching every new thread is enabled; while a `stop` waits, one
    // whose creator reports (glibc does not pass the flag on). A creator
    // known to report its creates has the new thread enabled at that report.
    if (backend_ && backend_->traits().enable_on_birth == birth_enable::at_clone_stop && !settling_ &&
        (armed_ || (!stop_events_.empty() && creator_reports(ev.tid)))) {
        if (births_enable_at_report() && creates_are_reported_by(ev.tid)) {
            births_at_report_[ev.child] = ev.tid;
        } else {
            bool enabled = enable_born_at_clone(ev.child);
            if (births_enable_at_report()) {
                if (enabled)
                    reporting_since_[ev.child] = report_epoch_;
                // Its next pthread_create starts after this clone: sure to report.
                if (creator_reports(ev.tid))
                    reporting_since_[ev.tid] = report_epoch_;
            }
        }
    }
    process_->resume(ev.child);
    process_->resume(ev.tid);
}

bool session::creator_reports(tid_t creator)
{
    auto handle = thread_pointer(creator);
    if (!handle || handle->is_null() || agent_ == nullptr)
        return false;
    auto on = agent_->protocol().read_report_events(*handle);
    return on && *on;
}

bool session::enable_born_at_clone(tid_t child)
{
    const auto* t = process_->find(child);
    if (t == nullptr || t->thread_pointer.is_null())
        return false;
    // Only a thread of the library: its record's tid is already set
    // (CLONE_PARENT_SETTID) when the parent reports the clone.
    auto tid = agent_->protocol().read_tid(t->thread_pointer);
    if (!tid || *tid != ns_tid_of(child))
        return false;
    // Born now, so its flag "before" is the record's own original,
    // not what a dead thread left in it.
    settings_->note_born(t->thread_pointer);
    enable_newborn(t->thread_pointer, *tid);
    return true;
}

bool session::births_enable_at_report() const
{
    return armed_ && watch_ && stop_events_.empty() && !settling_ && backend_ &&
           backend_->traits().enable_on_birth == birth_enable::at_clone_stop &&
           (armed_->follow_create ||
            std::find(armed_->events.begin(), armed_->events.end(), TD_CREATE) != armed_->events.end());
}

bool session::creates_are_reported_by(tid_t creator) const
{
    auto it = reporting_since_.find(creator);
    return it != reporting_since_.end() && it->second == report_epoch_;
}

void session::enable_pending_births(tid_t creator)
{
    for (auto it = births_at_report_.begin(); it != births_at_report_.end();) {
        if (creator.value != 0 && it->second != creator) {
            ++it;
            continue;
        }
        tid_t child = it->first;
        it = births_at_report_.erase(it);
        (void)enable_born_at_clone(child);
    }
}

void session::inherit_journal(tid_t parent, tid_t child)
{
    // glibc copies the creator's whole event buffer into the new thread: a
    // mask we changed on the creator reaches the child, whose natural mask is
    // then the creator's original.
    if (!backend_ || !backend_->traits().child_copies_creator_mask)
        return;
    auto creator = thread_pointer(parent);
    auto born = thread_pointer(child);
    if (!creator || !born || !settings_->is_mask_changed(*creator))
        return;
    auto tid = agent_->protocol().read_tid(*born);
    if (!tid || *tid != ns_tid_of(child))
        return;
    reports_may_be_pending_ = true;
    settings_->inherit_mask(*creator, *born);
}

bool session::is_death_armed() const
{
    return armed_ && std::find(armed_->events.begin(), armed_->events.end(), TD_DEATH) != armed_->events.end();
}

void session::on_thread_exiting(const ptrace::stop_event& ev, std::vector<session_event>& out, bool silent)
{
    for (auto* a : accounting())
        if (a != nullptr)
            a->on_death(ev.tid);
    if (backend_)
        backend_->on_lwp_gone(ev.tid);
    // A creator that ends between its clone and its report reports no more.
    reporting_since_.erase(ev.tid);
    births_at_report_.erase(ev.tid);
    enable_pending_births(ev.tid);
    // A thread killed by exit_group (or by the exec of another thread) never
    // reaches the TD_DEATH reporting address, yet it did terminate.
    if (watch_)
        if (auto death = watch_->at_exit_stop(ev.tid, is_death_armed(), silent)) {
            attach_stack(*death, ev.tid);
            out.push_back(session_event{session_event::kind::message, std::move(*death), 0, {}});
        }
    // Put the record back as we found it before the thread library caches it
    // for the next thread.
    if (auto tp = handle_of(ev.tid))
        settings_->restore_exiting(*tp);
    process_->resume(ev.tid);
}

void session::on_exec(const ptrace::stop_event& ev, std::vector<session_event>& out)
{
    // A thread other than the main one that execs ends as a thread: the new
    // image's main thread is a new one. It never reaches the TD_DEATH
    // reporting address, so while TD_DEATH is armed its death comes from here.
    if (watch_) {
        std::optional<pid_t> ns_tid;
        if (auto known = ns_tid_by_lwp_.find(ev.child); ns_pid_ && known != ns_tid_by_lwp_.end())
            ns_tid = known->second;
        if (auto death = watch_->at_exec(ev.child, ev.address, is_death_armed(), ns_tid))
            out.push_back(session_event{session_event::kind::message, std::move(*death), 0, {}});
    }
    for (auto* a : accounting())
        if (a != nullptr)
            a->on_exec(ev.child.value != 0 ? ev.child : ev.tid, ev.tid);
    // The new image has none of our breakpoints and a new libc: re-resolve.
    auto armed_events = forget_image();
    process_->run_to_entry();
    load_symbols();
    session_event se;
    se.what = session_event::kind::exec;
    se.message.tid = tid_t{pid()};
    se.message.time = seconds_since_start();
    se.message.name = thread_name(tid_t{pid()});
    out.push_back(se);
    rearm_after_exec(armed_events);
    process_->release_all();
}

std::vector<td_event_e> session::forget_image()
{
    ns_tid_by_lwp_.clear();
    lwp_by_ns_tid_.clear();
    auto armed_events = armed_ ? armed_->events : std::vector<td_event_e>{};
    armed_.reset();
    late_.reset();   // its sites went with the image
    births_at_report_.clear();
    reporting_since_.clear();
    ++report_epoch_;
    stop_events_.clear();
    site_events_.clear();
    files_.clear();
    call_sites_.reset();
    // The settings restore, the backend and the corridor go with the agent.
    watch_.reset();
    settings_.reset();
    backend_ = nullptr;
    return armed_events;
}

void session::rearm_after_exec(const std::vector<td_event_e>& events)
{
    if (events.empty() || !agent_)
        return;
    std::vector<td_event_e> supported;
    for (td_event_e e : events)
        if (agent_->reporting_address_of(e))
            supported.push_back(e);
    if (!supported.empty())
        (void)arm(supported);
}

// ---------------------------------------------------------------- rusage, lwpinfo

std::expected<lwp_rusage_row, int> session::rusage_collect_row(tid_t lwp, std::optional<long> maxrss_kb)
{
    if (!rusage_enabled_)
        return std::unexpected(ENOSYS);
    std::uint64_t signals = 0;
    if (const auto* t = process_->find(lwp))
        signals = t->signals_received;
    return read_lwp_rusage_row(files_, pid(), lwp, signals, maxrss_kb);
}

std::vector<std::expected<lwp_rusage_row, int>> session::rusage_collect_rows(const std::vector<tid_t>& lwps,
                                                                             long maxrss_kb)
{
    if (!rusage_enabled_)
        return std::vector<std::expected<lwp_rusage_row, int>>(lwps.size(), std::unexpected(ENOSYS));
    std::vector<std::uint64_t> signals(lwps.size(), 0);
    for (std::size_t i = 0; i < lwps.size(); ++i)
        if (const auto* t = process_->find(lwps[i]))
            signals[i] = t->signals_received;
    return read_lwp_rusage_rows(files_, lwps, signals, maxrss_kb);
}

std::expected<struct rusage, int> session::rusage_collect(tid_t lwp)
{
    return member_of(rusage_collect_row(lwp, std::nullopt), &lwp_rusage_row::usage);
}

std::expected<lwp_times_row, int> session::lwp_info_row(tid_t lwp)
{
    return read_lwp_times_row(files_, lwp);
}

std::vector<std::expected<lwp_times_row, int>> session::lwp_info_rows(const std::vector<tid_t>& lwps)
{
    return read_lwp_times_rows(files_, lwps);
}

std::expected<lwp_times, int> session::lwp_info(tid_t lwp)
{
    return member_of(lwp_info_row(lwp), &lwp_times_row::times);
}

// ---------------------------------------------------------------- usage windows

void session::open_usage_window(counter_depth depth, std::size_t named_rows)
{
    usage_.emplace(files_, depth, lwps(), named_rows);
}

window_usage session::take_usage_window()
{
    return usage_ ? usage_->take(lwps()) : window_usage{};
}

}  // namespace tdctl::core
