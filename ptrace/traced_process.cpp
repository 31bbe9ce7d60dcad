#include "ptrace/traced_process.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <elf.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/log.hpp"
#include "ptrace/attach_diagnosis.hpp"
#include "ptrace/breakpoints.hpp"
#include "ptrace/procfs.hpp"
#include "ptrace/ptrace_call.hpp"
#include "ptrace/site_hits.hpp"
#include "ptrace/stop_all.hpp"
#include "ptrace/step_over.hpp"

namespace tdctl::ptrace {

namespace {

// How long detach reaps threads past their exit stop (the leader excepted).
constexpr int reap_budget_ms = 100;

void* as_ptr(long v) { return reinterpret_cast<void*>(v); }

// The signal a task detached at `stop` goes on with: the one it stopped
// for, but never a SIGSTOP (a newborn's first stop under PTRACE_TRACEME,
// or an interrupt of ours): that would stop the whole process after us.
int signal_after_detach(const wait_status& stop)
{
    const int sig = stop.signal_to_deliver();
    return sig == SIGSTOP ? 0 : sig;
}

// Threads that are traced by this tracer and were not detached: born
// during the detach (their creator's clone stop not handled before it
// stopped), so unknown to the task table. Each is waited for at its first
// stop (the kernel queues it at once; at most `budget` in all) and let go.
// Returns how many were found.
int detach_unknown_newborns(pid_t pid, waiter& wait, std::vector<pid_t> known, std::chrono::milliseconds budget)
{
    // TracerPid names the tracing thread: this one (ptrace requests come from it).
    const pid_t tracer = static_cast<pid_t>(::gettid());
    const auto start = std::chrono::steady_clock::now();
    std::ranges::sort(known);
    int found = 0;
    for (tid_t tid : procfs::list_tasks(pid)) {
        if (std::ranges::binary_search(known, tid.value))
            continue;
        auto st = procfs::read_task_status(pid, tid);
        if (!st || st->tracer_pid != tracer)
            continue;
        ++found;
        for (;;) {
            taken_status taken = wait.try_wait(tid);
            if (taken.status && !taken.status->has_ended())
                ptrace_call(PTRACE_DETACH, tid, nullptr, as_ptr(signal_after_detach(*taken.status)));
            if (taken.status || taken.no_child || std::chrono::steady_clock::now() - start >= budget)
                break;
            ::usleep(1000);
        }
    }
    return found;
}

// The tasks a detach could not let go at once: each is reaped, or detached
// at the stop it makes next.
struct left_at_detach {
    /// Past their exit stop: reaped (the leader's status is the process's).
    std::vector<tid_t> dying;
    /// Not in a stop, one to come: a newborn before its first stop, or a
    /// thread a SIGKILL (a group exit) woke from its stop as it was being
    /// let go (PTRACE_DETACH failed, ESRCH), on its way to its exit stop.
    /// Left traced, it would sit in that stop for as long as tdctl lives.
    std::vector<tid_t> stop_to_come;
    /// Blocked in vfork(): stops for our interrupt once its child execs or
    /// exits.
    std::vector<tid_t> in_vfork;
    /// Threads other than the leader let go alive: a leader among the dying
    /// (it called pthread_exit) cannot be reaped before they end.
    int let_go_alive = 0;
    bool empty() const { return dying.empty() && stop_to_come.empty() && in_vfork.empty(); }
};

// Reaps the dying tasks and detaches the others at their next stop, for at
// most about a second; what is left stays in `left` (and is named in a
// warning). Returns the leader's
// status when it was among the dying and has ended.
std::optional<int> reap_after_detach(pid_t pid, waiter& wait, left_at_detach& left)
{
    // A traced thread that exits stays a zombie until its tracer reaps it, and
    // the leader cannot be reaped before its threads: reap them here. Reaping
    // takes one waitpid() each, microseconds normally; when waitpid() is slow
    // (a loaded host) threads other than the leader are reaped for at most
    // reap_budget_ms: those left are released by the kernel when tdctl's
    // tracer exits, right after (exit_ptrace() frees a traced zombie thread).
    // A task whose stop is to come has no such budget: were it left, it
    // would stop for good.
    constexpr auto reap_budget = std::chrono::milliseconds(reap_budget_ms);
    const auto start = std::chrono::steady_clock::now();
    std::optional<int> leader_status;
    auto reaped_or_let_go = [&](tid_t tid) {
        taken_status taken = wait.try_wait(tid);
        if (taken.status && tid.value == pid && taken.status->has_ended())
            leader_status = taken.status->raw();
        if (taken.status && !taken.status->has_ended()) {
            log::debug("detach: thread {} let go at its next stop ({})", tid.value, taken.status->to_string());
            ptrace_call(PTRACE_DETACH, tid, nullptr, as_ptr(signal_after_detach(*taken.status)));
        }
        return taken.status.has_value() || taken.no_child;
    };
    for (int round = 0; round < 200 && !left.empty(); ++round) {
        std::erase_if(left.dying, [&](tid_t tid) {
            if (tid.value == pid && left.let_go_alive > 0)
                return true;  // reaped once the others end (wait_launched_exit, or the parent)
            return (tid.value != pid && std::chrono::steady_clock::now() - start >= reap_budget) ||
                   reaped_or_let_go(tid);
        });
        std::erase_if(left.stop_to_come, reaped_or_let_go);
        std::erase_if(left.in_vfork, [&wait](tid_t tid) {
            // Stopped for our interrupt, or for a signal it goes on with.
            taken_status taken = wait.try_wait(tid);
            if (taken.status && !taken.status->has_ended())
                ptrace_call(PTRACE_DETACH, tid, nullptr, as_ptr(taken.status->signal_to_deliver()));
            return taken.status.has_value() || taken.no_child;
        });
        if (!left.empty())
            ::usleep(5000);
    }
    // The kernel lets a tracee go, with no stop pending, when its tracer
    // exits; a launched program's are let go as tdctl waits for its end.
    for (tid_t tid : left.in_vfork)
        log::warning("thread {} is still inside vfork(); it is let go when tdctl exits", tid.value);
    for (tid_t tid : left.stop_to_come)
        log::warning("thread {} did not stop to be let go; it is let go when tdctl exits", tid.value);
    return leader_status;
}

/// Takes run_to()'s site at `where` out: reason count zero, bytes restored.
void take_site_out(site_table& sites, change_journal& journal, target_addr where)
{
    if (breakpoint_site* site = sites.find(where))
        site->remove(journal);
    sites.erase(where);
}

}  // namespace

const char* stop_kind_name(stop_kind k)
{
    switch (k) {
    case stop_kind::breakpoint: return "breakpoint";
    case stop_kind::thread_created: return "thread-created";
    case stop_kind::thread_exiting: return "thread-exiting";
    case stop_kind::thread_exited: return "thread-exited";
    case stop_kind::exec: return "exec";
    case stop_kind::process_exited: return "process-exited";
    case stop_kind::call_returned: return "call-returned";
    }
    return "?";
}

traced_process::traced_process(pid_t pid, bool launched, std::unique_ptr<waiter> wait)
    : pid_(pid), launched_(launched), waiter_(std::move(wait)), births_(pid, *waiter_, sites_), new_threads_(pid, tasks_, births_), sigtrap_guard_(pid)
{
}

traced_process::~traced_process()
{
    if (gone_ && journal_)
        journal_->forget_all();  // the memory it describes is gone
    if (gone_ || detached_)
        return;
    try {
        detach();
    } catch (const std::exception& e) {
        log::warning("detaching from {} failed: {}", pid_, e.what());
    }
}

void traced_process::open_memory()
{
    memory_ = std::make_unique<process_memory>(pid_);
    journal_ = std::make_unique<change_journal>(*memory_, pid_);
    stop_router& router = *this;
    stepper_ = std::make_unique<stepper>(pid_, tasks_, sites_, *memory_, *waiter_, queue_, router);
    stopper_ = std::make_unique<task_stopper>(pid_, tasks_, *waiter_, *memory_, router);
    breakpoints_ = std::make_unique<ptrace::breakpoints>(sites_, *memory_, *journal_, *stepper_);
}

void traced_process::mark_process_gone(int raw_status)
{
    gone_ = true;
    exit_status_ = raw_status;
    tasks_.clear();
    sites_.clear();
}

std::unique_ptr<traced_process> traced_process::attach(pid_t pid, int cancel_fd)
{
    if (auto refusal = precheck_attach(pid))
        throw error(error_domain::target, refusal->transition == process_transition::execing ? exec_under_way : 0,
                    refusal->why);

    // The leader first: a process that ends before its seize (a storm at
    // its exit) is refused before any traced_process owns it.
    auto wait = std::make_unique<waiter>();
    seize_task(pid, tid_t{pid}, true);
    std::unique_ptr<traced_process> p(new traced_process(pid, false, std::move(wait)));
    p->cancel_fd_ = cancel_fd;
    p->tasks_.add(tid_t{pid});
    // Needed by the wait loop as soon as any task is ours (clone events read
    // the parent's memory), including when a later step of attach fails.
    p->open_memory();
    // One pass over the threads listed now. Threads born meanwhile of a
    // seized parent are ours already (PTRACE_O_TRACECLONE); the others are
    // found by the pass below, once every seized task is stopped — a second
    // listing here would only repeat its work (a listing of /proc/PID/task
    // costs about 1.3 µs a thread).
    p->new_threads_.seize(procfs::list_tasks(pid));
    throw_if_cancelled(p->cancel_fd_, pid);
    p->stop_all();
    // A task seized while it was inside clone() makes an untraced thread
    // (the kernel decides whether to trace the child before we seized the
    // parent), and an untraced thread can make more. Once every seized task
    // is stopped, no seized task can be half-way through a clone, so a pass
    // over /proc/PID/task that finds no stranger proves every thread of the
    // process is ours and stopped: only then may a byte be planted.
    p->new_threads_.seize_strangers([&p] { p->stopper_->stop_running(false, p->cancel_fd_); });
    for (auto& [tid, t] : p->tasks_) {
        if (auto tp = registers::read_thread_pointer(tid))
            t->set_thread_pointer(*tp);
    }
    p->cancel_fd_ = -1;
    log::debug("attached to {} with {} tasks", pid, p->tasks_.size());
    return p;
}

std::unique_ptr<traced_process> traced_process::launch(const launch_options& opts)
{
    auto wait = std::make_unique<waiter>();
    started_program started = start_traced(opts, *wait);
    std::unique_ptr<traced_process> p(new traced_process(started.pid, true, std::move(wait)));
    p->terminal_interrupts_ = terminal_interrupts(opts.prompt_takes_interrupts);
    p->tasks_.add(tid_t{started.pid}).note_status(started.exec_stop);
    p->open_memory();
    if (!run_to_entry(*p))
        throw error::target("the launched program exited before reaching its entry point");
    return p;
}

bool traced_process::run_to(target_addr where)
{
    breakpoints_->add(where, 0);
    tid_t leader{pid_};
    task& lt = *tasks_.find(leader);
    lt.needs_owner = false;
    // Stopped there by the previous run_to: step over the site first. (A
    // fresh exec's pc also sits on its entry point, where the trap must come
    // at once, before the first instruction runs.)
    if (auto regs = registers::read(leader); regs && regs->pc() == where && where == run_to_reached_)
        lt.hit = trap_hit{where, false, *regs};
    // An exec queued during a hold: run the lone new task anyway.
    int saved_depth = hold_depth_;
    hold_depth_ = 0;
    restart(lt);

    for (;;) {
        auto got = waiter_->wait_any(-1);
        if (got.end == wait_end::woken)
            continue;  // not this wait's business
        if (got.end != wait_end::status) {
            take_site_out(sites_, *journal_, where);
            hold_depth_ = saved_depth;
            return false;  // vanished (reaped elsewhere)
        }
        tid_t tid = got.tid;
        wait_status ws = *got.status;
        if (tid == leader && ws.kind() == wait_kind::signal_stop && ws.signal() == SIGTRAP) {
            auto regs = registers::read(leader);
            if (regs && regs->pc() - breakpoint_pc_adjust == where) {
                regs->set_pc(where);
                regs->write(leader);
                task& t = *tasks_.find(leader);
                t.set_thread_pointer(regs->thread_pointer());
                t.note_status(ws);
                t.note_trap_of_ours();
                break;
            }
        }
        route(tid, ws);
        // A fatal signal (or an exit) got there first: the leader's exit
        // stop, or its end, is queued for the owner, who lets it die.
        if (gone_ || (tid == leader && ws.kind() == wait_kind::exit_event)) {
            take_site_out(sites_, *journal_, where);
            hold_depth_ = saved_depth;
            return false;
        }
    }
    take_site_out(sites_, *journal_, where);
    run_to_reached_ = where;
    stop_all();
    hold_depth_ += saved_depth;  // one hold more than before the call
    return true;
}

std::optional<stop_event> traced_process::take_queued()
{
    if (queue_.empty())
        return std::nullopt;
    stop_event ev = queue_.front();
    queue_.pop_front();
    if (ev.kind == stop_kind::thread_exited || ev.kind == stop_kind::process_exited) {
        if (task* t = tasks_.find(ev.tid); t != nullptr && t->state() == task_state::exiting)
            tasks_.forget(ev.tid);
        if (ev.kind == stop_kind::process_exited && !gone_)
            mark_process_gone(ev.status);
    }
    return ev;
}

std::optional<stop_event> traced_process::next_event(int timeout_ms)
{
    last_wait_ = wait_end::status;
    if (auto ev = take_queued())
        return ev;
    if (gone_)
        return std::nullopt;
    using clock = std::chrono::steady_clock;
    const auto deadline = clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
    for (;;) {
        int left = timeout_ms;
        if (timeout_ms > 0)
            left = static_cast<int>(std::max<long long>(
                0, std::chrono::ceil<std::chrono::milliseconds>(deadline - clock::now()).count()));
        auto got = waiter_->wait_any(left);
        last_wait_ = got.end;
        if (got.end != wait_end::status)
            return std::nullopt;
        if (auto ev = handle_status(got.tid, *got.status)) {
            leave_to_owner(*ev);
            return ev;
        }
        // A status handled here may have queued stops for the owner.
        if (!queue_.empty() || gone_)
            return take_queued();
    }
}

void traced_process::leave_to_owner(const stop_event& ev)
{
    if (task* t = tasks_.find(ev.tid); t != nullptr && t->is_stopped())
        t->needs_owner = true;
    if (ev.kind == stop_kind::thread_created)
        if (task* c = tasks_.find(ev.child); c != nullptr)
            c->needs_owner = true;
}

void traced_process::restart_if_free(task& t)
{
    if (!is_holding() && !t.needs_owner)
        restart(t);
}

std::optional<stop_event> traced_process::handle_status(tid_t tid, wait_status ws)
{
    task* t = tasks_.find(tid);
    if (t == nullptr) {
        births_.on_unknown_task(tid, ws);
        return std::nullopt;
    }
    // Every status moves the task's state (task_state.hpp). Any ptrace-stop
    // clears the kernel's pending interrupt trap: the PTRACE_INTERRUPT is
    // satisfied by whichever stop comes first.
    bool interrupted = !ws.has_ended() && t->note_status(ws);
    switch (ws.kind()) {
    case wait_kind::exited:
    case wait_kind::killed:
        tasks_.forget(tid);
        if (tid.value != pid_)
            return stop_event{stop_kind::thread_exited, tid, {}, {}, ws.raw()};
        // The leader is reaped last; the process is gone.
        mark_process_gone(ws.raw());
        return stop_event{stop_kind::process_exited, tid, {}, {}, ws.raw()};
    case wait_kind::signal_stop:
        return on_signal_stop(*t, ws.signal());
    case wait_kind::group_stop:
        t->in_group_stop = true;
        break;
    case wait_kind::event_stop:
        return on_event_stop(*t, interrupted);
    case wait_kind::clone_event:
        return on_clone(*t);
    case wait_kind::fork_event:
    case wait_kind::vfork_event:
        births_.let_go_forked(*t, ws.kind() == wait_kind::vfork_event, peek_stops_);
        break;
    case wait_kind::exec_event:
        return on_exec(tid, ws);
    case wait_kind::exit_event:
        return stop_event{stop_kind::thread_exiting, tid, {}, {}, 0};
    case wait_kind::vfork_done:
    case wait_kind::syscall_stop:
    case wait_kind::other:
        break;
    }
    restart_if_free(*t);
    return std::nullopt;
}

void traced_process::route(tid_t tid, wait_status ws)
{
    if (auto ev = handle_status(tid, ws)) {
        leave_to_owner(*ev);
        queue_.push_back(*ev);
    }
}

std::optional<stop_event> traced_process::on_clone(task& parent)
{
    auto child = births_.new_thread(parent, peek_stops_);
    if (!child) {
        if (!is_holding())
            restart(parent);  // no-op when the event was lost: parent is running
        return std::nullopt;
    }
    // Stopped where its first stop says: an exit stop when a SIGKILL (the
    // group's exit, an exec) came before it, where an exec waits for it to
    // be let go.
    task& t = tasks_.add(child->tid, task_state::stopped);
    t.note_status(child->first_stop);
    // Its thread pointer (fs_base, set from clone's TLS argument): one word
    // of its saved registers.
    if (auto tp = registers::read_thread_pointer(child->tid))
        t.set_thread_pointer(*tp);
    parent.set_newest_clone_child(child->tid);
    // A pthread_create that reports TD_CREATE traps with every signal blocked.
    if (!sites_.empty())
        sigtrap_guard_.open_window(parent);
    return stop_event{stop_kind::thread_created, parent.tid(), child->tid, {}, 0};
}

std::optional<stop_event> traced_process::on_signal_stop(task& t, int sig)
{
    if (int report = sites_.report_signal().signo; report != 0 && sig == report) {
        std::optional<stop_event> ev;
        switch (hit_by_report_signal(t, sites_, ev)) {
        case report_stop::hit: return ev;
        case report_stop::vanished: return std::nullopt;
        case report_stop::dropped: restart_if_free(t); return std::nullopt;
        case report_stop::not_ours: break;
        }
    }
    if (sig == SIGTRAP && t.sigtrap_owed) {
        // The queued SIGTRAP of a hit already reported through an interrupt.
        t.sigtrap_owed = false;
        restart_if_free(t);
        return std::nullopt;
    }
    if (sig == SIGTRAP) {
        if (auto ev = hit_by_trap(t, sites_)) {
            t.note_trap_of_ours();
            sigtrap_guard_.put_back(t);
            return ev;
        }
        if (t.hit || !t.is_stopped())
            return std::nullopt;
    }
    if (sig == SIGSEGV && !call_marker_.is_null())
        if (auto r = registers::read(t.tid()); r && r->pc() == call_marker_)
            return stop_event{stop_kind::call_returned, t.tid(), {}, call_marker_, 0};
    if (sig == SIGCONT)
        for (auto& [id, other] : tasks_)
            other->in_group_stop = false;
    if (terminal_interrupts_.takes(t.tid(), sig)) {
        restart_if_free(t);
        return std::nullopt;
    }
    t.keep_signal(sig);
    restart_if_free(t);
    return std::nullopt;
}

std::optional<stop_event> traced_process::on_event_stop(task& t, bool interrupted)
{
    // The kernel reports a pending jobctl trap before a queued signal: a
    // thread that had just executed a trap byte shows up here, past the
    // site, with the trap's SIGTRAP still queued. It is a hit.
    if (auto ev = hit_before_interrupt(t, sites_)) {
        sigtrap_guard_.put_back(t);
        return ev;
    }
    if (!interrupted && t.in_group_stop)
        t.in_group_stop = false;  // a LISTENing task reports the end of its group-stop
    restart_if_free(t);
    return std::nullopt;
}

std::optional<stop_event> traced_process::on_exec(tid_t tid, wait_status ws)
{
    // The exec'ing thread now has the leader's TID; every other thread is gone
    // and the new image has none of our breakpoints.
    // The wait reports the leader's TID; PTRACE_GETEVENTMSG gives the TID the
    // exec'ing thread had before.
    tid_t leader{pid_};
    unsigned long msg = 0;
    ptrace_call(PTRACE_GETEVENTMSG, tid, nullptr, &msg);
    tid_t former{msg != 0 ? static_cast<pid_t>(msg) : pid_};
    target_addr former_tp;
    if (task* f = tasks_.find(former))
        former_tp = f->thread_pointer();
    task& t = tasks_.keep_only_leader(former, leader);  // the exec'ing thread takes the leader's place
    sites_.forget_image();
    queue_.erase(std::remove_if(queue_.begin(), queue_.end(),
                                [](const stop_event& e) { return e.kind != stop_kind::process_exited; }),
                 queue_.end());
    memory_->reopen();
    journal_->forget_all();  // the old image's changes went with it
    sigtrap_guard_.reopen();
    new_threads_.after_exec(leader);
    t.note_status(ws);
    t.hit.reset();
    t.set_newest_clone_child({});
    if (auto regs = registers::read(leader))
        t.set_thread_pointer(regs->thread_pointer());
    // child/address: the thread that exec'd, as it was before (for a non-main
    // thread, its old TID and thread pointer).
    return stop_event{stop_kind::exec, leader, former, former_tp, 0};
}

void traced_process::resume(tid_t tid)
{
    task* t = tasks_.find(tid);
    if (t == nullptr)
        return;
    t->needs_owner = false;
    if (!is_holding() && t->is_stopped())
        restart(*t);
}

std::optional<stop_event> traced_process::run_alone(tid_t tid, int timeout_ms)
{
    task* t = tasks_.find(tid);
    if (t == nullptr || !is_live_stop(t->state()) || gone_)
        return std::nullopt;
    restart(*t);
    std::optional<wait_status> ws;
    for (int waited = 0; !ws && waited < timeout_ms; ++waited) {
        taken_status taken = waiter_->try_wait(tid);
        if (taken.no_child) {
            t->note_gone();
            return std::nullopt;
        }
        ws = taken.status;
        if (ws && ws->kind() == wait_kind::event_stop) {
            // Stop-all's interrupt, sent as t stopped for something else (a
            // clone event), still pending: it stops t at once and carries
            // nothing. t runs on to what it was run alone for.
            t->note_status(*ws);
            restart(*t);
            ws.reset();
            continue;
        }
        if (!ws)
            ::usleep(1000);
    }
    if (!ws) {
        // Stopped the way stop-all stops a task: that follows an exec it
        // may be in (the others, killed by it, wait at their exit stops for
        // tdctl; a waitpid() for this task alone would wait for ever, and
        // the exec with it). Its stop, routed, is queued for the owner.
        stopper_->stop_running(peek_stops_, -1);
        return std::nullopt;
    }
    auto ev = handle_status(tid, *ws);
    if (ev)
        leave_to_owner(*ev);
    return ev;
}

void traced_process::restart(task& t)
{
    if (!t.is_stopped())
        return;
    int err = 0;
    if (t.in_group_stop && !t.hit) {
        err = ptrace_call(PTRACE_LISTEN, t.tid(), nullptr, nullptr);
    } else {
        if (t.hit)
            stepper_->step_over(t);
        err = ptrace_call(PTRACE_CONT, t.tid(), nullptr, as_ptr(t.pending_signal));
        if (t.in_group_stop && err == 0)
            t.in_group_stop = false;
    }
    t.pending_signal = 0;
    t.note_resumed();
    t.set_returned_from_site({});
    if (err != 0 && err != ESRCH)
        throw error::from_errno(err, fmt::format("resuming task {}", t.tid().value));
}

void traced_process::stop_all()
{
    ++hold_depth_;
    if (gone_)
        return;
    stopper_->stop_running(peek_stops_, cancel_fd_);
    // Threads born untraced run on: they are seized and stopped too.
    if (new_threads_.leaves_births_untraced())
        new_threads_.seize_strangers([this] { stopper_->stop_running(peek_stops_, cancel_fd_); });
}

bool traced_process::park_signal_stop(tid_t tid)
{
    task* t = tasks_.find(tid);
    if (t == nullptr || !is_live_stop(t->state()) || gone_ || t->hit)
        return false;
    t->note_trap_of_ours();  // park() moves tasks out of signal-delivery-stops of ours
    stepper_->park(*t);
    return t->is_stopped() && t->state() != task_state::trap_stopped;
}

void traced_process::release_all()
{
    if (hold_depth_ > 0)
        --hold_depth_;
    if (hold_depth_ > 0 || gone_)
        return;
    for (auto& [tid, t] : tasks_)
        if (t->is_stopped() && !t->needs_owner)
            restart(*t);
}

void traced_process::detach()
{
    if (gone_ || detached_)
        return;
    if (!stopper_) {
        // An attach that failed before the memory was opened wrote
        // nothing: let go of what it seized (a running task refuses, and
        // the kernel lets it go when tdctl exits). Was a null stop-all:
        // tdctl died of SIGSEGV, 1 attach in 120-400 to a storm at its exit.
        for (auto& [tid, t] : tasks_)
            (void)ptrace_call(PTRACE_DETACH, tid, nullptr, nullptr);
        detached_ = true;
        return;
    }
    cancel_fd_ = -1;  // a detach is never given up
    peek_stops_ = true;
    try {
        stop_all();
    } catch (const error& e) {
        // Detach what can be detached; a task that never stopped keeps running.
        log::warning("{}", e.what());
    }
    stepper_->clear_all_sites();
    sites_.remove_all(*journal_);
    left_at_detach left;
    std::vector<pid_t> known;
    known.reserve(tasks_.size());
    for (auto& [tid, t] : tasks_) {
        known.push_back(tid.value);
        if (!t->is_stopped()) {
            // Cannot be detached now: see left_at_detach.
            (t->state() == task_state::vfork_blocked ? left.in_vfork
             : t->is_exiting()                       ? left.dying
                                                     : left.stop_to_come)
                .push_back(tid);
            continue;
        }
        sigtrap_guard_.put_back(*t);
        if (int err = ptrace_call(PTRACE_DETACH, tid, nullptr, as_ptr(t->pending_signal)); err == ESRCH)
            left.stop_to_come.push_back(tid);  // woken by a SIGKILL: its exit stop comes
        else if (err == 0 && tid.value != pid_ && !t->is_exiting())
            ++left.let_go_alive;
    }
    if (int n = detach_unknown_newborns(pid_, *waiter_, std::move(known), std::chrono::milliseconds(reap_budget_ms)))
        log::debug("detach: {} thread(s) born during the detach let go", n);
    if (auto leader_status = reap_after_detach(pid_, *waiter_, left)) {
        exit_status_ = leader_status;  // the leader was dying too: its status is the process's
        gone_ = true;
    }
    tasks_.clear();
    queue_.clear();
    detached_ = true;
    hold_depth_ = 0;
    log::debug("detached from {}", pid_);
}

void traced_process::kill()
{
    if (gone_)
        return;
    ::kill(pid_, SIGKILL);
    queue_.clear();
    // A child forked just now has a copy of our bytes, and its parent's
    // event never comes to let it go clean: it is let go here, the sites'
    // original bytes written into its copy (so they are kept until the end).
    births_.note_group_killed();
    // Each task may still report a stop (PTRACE_EVENT_EXIT) on its way out:
    // let it go on until the leader, reaped last, is gone.
    for (int i = 0; i < 100000 && !gone_; ++i) {
        auto got = waiter_->wait_any(5000);
        if (got.end == wait_end::woken)
            continue;
        if (got.end != wait_end::status)
            break;
        tid_t tid = got.tid;
        wait_status ws = *got.status;
        if (ws.is_stop() && tasks_.find(tid) == nullptr) {
            births_.on_unknown_task(tid, ws);  // a new process let go; a new thread dies with the rest
            continue;
        }
        if (ws.is_stop()) {
            ptrace_call(PTRACE_CONT, tid, nullptr, nullptr);
            continue;
        }
        tasks_.forget(tid);
        if (tid.value == pid_) {
            gone_ = true;
            exit_status_ = ws.raw();
        }
    }
    sites_.clear();
    tasks_.clear();
    gone_ = true;
}

std::optional<int> traced_process::wait_launched_exit(int timeout_ms)
{
    if (exit_status_)
        return exit_status_;
    if (!launched_)
        return std::nullopt;
    long long waited = 0;
    for (;;) {
        // Any child, with __WALL: that also reaps any thread of ours still
        // traced as a zombie, which would otherwise keep the leader from ever
        // being reaped.
        taken_status taken = waiter_->try_wait_any();
        if (taken.status && taken.tid.value == pid_ && taken.status->has_ended()) {
            exit_status_ = taken.status->raw();
            gone_ = true;
            return exit_status_;
        }
        // A stop of a thread the detach could not let go (detach()): held
        // there, it would keep the program from ever ending.
        if (taken.status && !taken.status->has_ended() && detached_)
            ptrace_call(PTRACE_DETACH, taken.tid, nullptr, as_ptr(signal_after_detach(*taken.status)));
        if (taken.status)
            continue;
        if (taken.no_child) {
            gone_ = true;  // reaped elsewhere: the status is not ours to know
            return exit_status_;
        }
        if (timeout_ms >= 0 && waited >= timeout_ms)
            return std::nullopt;
        ::usleep(2000);
        waited += 2;
    }
}


bool run_to_entry(traced_process& process)
{
    pid_t pid = process.pid();
    auto auxv = procfs::read_auxv(pid);
    auto it = auxv.find(AT_ENTRY);
    if (it == auxv.end())
        throw error::target(fmt::format("process {} has no AT_ENTRY in /proc/{}/auxv", pid, pid));
    return process.run_to(target_addr{it->second});
}

}  // namespace tdctl::ptrace
