#include "ptrace/traced_process.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <elf.h>
#include <linux/kcmp.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/log.hpp"
#include "base/unique_fd.hpp"
#include "ptrace/attach_diagnosis.hpp"
#include "ptrace/procfs.hpp"
#include "ptrace/ptrace_call.hpp"
#include "ptrace/task.hpp"

namespace tdctl::ptrace {

namespace {

constexpr long trace_options = PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXIT | PTRACE_O_TRACEEXEC | PTRACE_O_TRACEFORK |
                               PTRACE_O_TRACEVFORK;

// A task that never reports a stop after PTRACE_INTERRUPT is stuck in the
// kernel; bound the wait.
constexpr int stop_all_timeout_ms = 10000;
// How long stop-all waits before it looks for tasks blocked in vfork().
constexpr int vfork_check_ms = 50;
// How long detach reaps threads past their exit stop (the leader excepted).
constexpr int reap_budget_ms = 100;

void* as_ptr(long v) { return reinterpret_cast<void*>(v); }

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

traced_process::traced_process(pid_t pid, bool launched)
    : pid_(pid), launched_(launched), waiter_(std::make_unique<waiter>())
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

std::vector<tid_t> traced_process::tids() const
{
    std::vector<tid_t> out;
    out.reserve(tasks_.size());
    for (const auto& [tid, t] : tasks_)
        out.push_back(tid);
    return out;
}

const task_info* traced_process::find(tid_t tid) const
{
    auto it = tasks_.find(tid);
    return it == tasks_.end() ? nullptr : it->second.get();
}

std::optional<registers> traced_process::trap_registers(tid_t tid) const
{
    auto it = tasks_.find(tid);
    if (it == tasks_.end() || !it->second->hit)
        return std::nullopt;
    return it->second->hit->regs;
}

task* traced_process::find_task(tid_t tid)
{
    auto it = tasks_.find(tid);
    return it == tasks_.end() ? nullptr : it->second.get();
}

task& traced_process::add_task(tid_t tid, task_state state)
{
    auto t = std::make_unique<task>(tid, state);
    task& added = *t;
    tasks_[tid] = std::move(t);
    return added;
}

void traced_process::forget_task(tid_t tid)
{
    tasks_.erase(tid);
}

void traced_process::mark_process_gone(int raw_status)
{
    gone_ = true;
    exit_status_ = raw_status;
    tasks_.clear();
    sites_.clear();
}

// ---------------------------------------------------------------- attach

void traced_process::seize(tid_t tid, bool is_leader)
{
    int err = ptrace_call(PTRACE_SEIZE, tid, nullptr, as_ptr(trace_options));
    if (err == 0) {
        add_task(tid);
        return;
    }
    if (err == ESRCH && !is_leader)
        return;  // a thread that died during the attach
    if (err == EPERM && !is_leader) {
        // A thread created during the attach is auto-attached through its
        // parent's PTRACE_O_TRACECLONE (its clone event will introduce it); a
        // thread that is exiting cannot be attached and needs not be.
        auto st = procfs::read_task_status(pid_, tid);
        if (!st || st->tracer_pid == ::getpid() || st->state == 'Z' || st->state == 'X')
            return;
    }
    throw error(error_domain::os, err, explain_seize_failure(pid_, err));
}

std::unique_ptr<traced_process> traced_process::attach(pid_t pid, int cancel_fd)
{
    if (auto why = precheck_attach(pid))
        throw error(error_domain::target, 0, *why);

    std::unique_ptr<traced_process> p(new traced_process(pid, false));
    p->cancel_fd_ = cancel_fd;
    p->seize(tid_t{pid}, true);
    // Needed by the wait loop as soon as any task is ours (clone events read
    // the parent's memory), including when a later step of attach fails.
    p->memory_ = std::make_unique<process_memory>(pid);
    p->journal_ = std::make_unique<change_journal>(*p->memory_, pid);
    // One pass over the threads listed now. Threads born meanwhile of a
    // seized parent are ours already (PTRACE_O_TRACECLONE); the others are
    // found by the pass below, once every seized task is stopped — a second
    // listing here would only repeat its work (a listing of /proc/PID/task
    // costs about 1.3 µs a thread).
    for (tid_t tid : procfs::list_tasks(pid)) {
        if (p->tasks_.contains(tid) || p->early_stops_.contains(tid))
            continue;
        p->seize(tid, false);
    }
    p->throw_if_cancelled();
    p->stop_all();
    // A task seized while it was inside clone() makes an untraced thread
    // (the kernel decides whether to trace the child before we seized the
    // parent), and an untraced thread can make more. Once every seized task
    // is stopped, no seized task can be half-way through a clone, so a pass
    // over /proc/PID/task that finds no stranger proves every thread of the
    // process is ours and stopped: only then may a byte be planted.
    for (int pass = 0;; ++pass) {
        std::vector<tid_t> strangers;
        for (tid_t tid : procfs::list_tasks(pid))
            if (!p->tasks_.contains(tid) && !p->early_stops_.contains(tid))
                strangers.push_back(tid);
        if (strangers.empty())
            break;
        if (pass == 1000)
            throw error::target(fmt::format("process {} creates threads faster than they can be attached", pid));
        for (tid_t tid : strangers)
            p->seize(tid, false);
        p->stop_running();
    }
    for (auto& [tid, t] : p->tasks_) {
        if (auto tp = registers::read_thread_pointer(tid))
            t->set_thread_pointer(*tp);
    }
    p->cancel_fd_ = -1;
    log::debug("attached to {} with {} tasks", pid, p->tasks_.size());
    return p;
}

// ---------------------------------------------------------------- launch

namespace {

// The two pipes between launch() and its child, both close-on-exec.
struct launch_pipes {
    unique_fd go_read, go_write;    // one byte from the parent once it has seized the child
    unique_fd err_read, err_write;  // the child's errno when exec fails; EOF when it succeeds
};

launch_pipes open_launch_pipes()
{
    launch_pipes p;
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
        throw error::from_errno(errno, "pipe");
    p.go_read.reset(fds[0]);
    p.go_write.reset(fds[1]);
    if (::pipe2(fds, O_CLOEXEC) != 0)
        throw error::from_errno(errno, "pipe");
    p.err_read.reset(fds[0]);
    p.err_write.reset(fds[1]);
    return p;
}

// The launched child after fork(): waits until the parent has seized it, then
// execs with the signal state the program would have had without us. Only
// async-signal-safe calls; a failed exec's errno goes to err_fd.
[[noreturn]] void exec_child(char* const* argv, const std::vector<std::string>& extra_env, int go_fd, int err_fd)
{
    char c;
    while (::read(go_fd, &c, 1) < 0 && errno == EINTR) {
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    for (const auto& e : extra_env)
        ::putenv(const_cast<char*>(e.c_str()));
    ::execvp(argv[0], argv);
    int e = errno;
    [[maybe_unused]] auto n = ::write(err_fd, &e, sizeof e);
    ::_exit(127);
}

}  // namespace

std::unique_ptr<traced_process> traced_process::launch(const launch_options& opts)
{
    if (opts.argv.empty())
        throw error::usage("no program to launch");
    launch_pipes pipes = open_launch_pipes();
    std::vector<char*> argv;  // built before fork(): the child may not allocate
    for (const auto& a : opts.argv)
        argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);

    pid_t child = ::fork();
    if (child < 0)
        throw error::from_errno(errno, "fork");
    if (child == 0) {
        pipes.go_write.reset();
        pipes.err_read.reset();
        exec_child(argv.data(), opts.extra_env, pipes.go_read.get(), pipes.err_write.get());
    }

    std::unique_ptr<traced_process> p(new traced_process(child, true));
    pipes.go_read.reset();
    pipes.err_write.reset();
    p->seize_launched();
    char go = 'g';
    [[maybe_unused]] auto n = ::write(pipes.go_write.get(), &go, 1);
    pipes.go_write.reset();
    p->run_to_exec(pipes.err_read, opts.argv[0]);
    p->memory_ = std::make_unique<process_memory>(child);
    p->journal_ = std::make_unique<change_journal>(*p->memory_, child);
    p->run_to_entry();
    return p;
}

void traced_process::seize_launched()
{
    tid_t leader{pid_};
    if (int err = ptrace_call(PTRACE_SEIZE, leader, nullptr, as_ptr(trace_options)); err != 0) {
        ::kill(pid_, SIGKILL);
        waiter_->wait_for(leader);  // reap it: it never ran a byte of the program
        gone_ = true;
        throw error::from_errno(err, "cannot trace the launched program");
    }
    add_task(leader);
}

void traced_process::run_to_exec(const unique_fd& err_read, const std::string& program)
{
    // Until exec, only our own child code runs: pass its signals on.
    tid_t leader{pid_};
    for (;;) {
        auto ws = waiter_->wait_for(leader);
        if (!ws || ws->has_ended()) {
            gone_ = true;
            tasks_.clear();
            int e = 0;
            if (::read(err_read.get(), &e, sizeof e) == sizeof e)
                throw error::from_errno(e, fmt::format("cannot run {}", program));
            throw error::target(fmt::format("{} exited before it started", program));
        }
        if (ws->kind() == wait_kind::exec_event) {
            find_task(leader)->note_status(*ws);
            return;
        }
        ptrace_call(PTRACE_CONT, leader, nullptr, as_ptr(ws->signal_to_deliver()));
    }
}

void traced_process::run_to_entry()
{
    auto auxv = procfs::read_auxv(pid_);
    auto it = auxv.find(AT_ENTRY);
    if (it == auxv.end())
        throw error::target(fmt::format("process {} has no AT_ENTRY in /proc/{}/auxv", pid_, pid_));
    run_to(target_addr{it->second}, "its entry point");
}

void traced_process::run_to(target_addr where, const char* what)
{
    add_breakpoint(where, 0);
    tid_t leader{pid_};
    task& lt = *find_task(leader);
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
        if (got.end != wait_end::status)
            throw error::target(fmt::format("the launched program vanished before reaching {}", what));
        tid_t tid = got.tid;
        wait_status ws = *got.status;
        if (tid == leader && ws.kind() == wait_kind::signal_stop && ws.signal() == SIGTRAP) {
            auto regs = registers::read(leader);
            if (regs && regs->pc() - breakpoint_pc_adjust == where) {
                regs->set_pc(where);
                regs->write(leader);
                task& t = *find_task(leader);
                t.set_thread_pointer(regs->thread_pointer());
                t.note_status(ws);
                t.note_trap_of_ours();
                break;
            }
        }
        if (auto ev = handle_status(tid, ws)) {
            if (ev->kind == stop_kind::process_exited)
                throw error::target(fmt::format("the launched program exited before reaching {}", what));
            leave_to_owner(*ev);
            queue_.push_back(*ev);
        }
    }
    // Leave the site's reason count at zero and its bytes restored.
    if (breakpoint_site* site = sites_.find(where))
        site->remove(*journal_);
    sites_.erase(where);
    run_to_reached_ = where;
    stop_all();
    hold_depth_ += saved_depth;  // one hold more than before the call
}

// ---------------------------------------------------------------- breakpoints

const breakpoint_site& traced_process::add_breakpoint(target_addr addr, std::uint64_t function_size)
{
    return sites_.add_breakpoint(addr, function_size, *memory_, *journal_);
}

void traced_process::remove_breakpoint(target_addr addr)
{
    breakpoint_site* site = sites_.drop_reason(addr);
    if (site == nullptr)
        return;
    clear_threads_from(*site);
    if (!gone_)
        site->remove(*journal_);
    sites_.erase(addr);
}

void traced_process::clear_threads_from(const breakpoint_site& site)
{
    // A thread stopped on the site has its step-over finished, so it does not
    // trap again on the same report should the site come back. A thread
    // resumed in place sits on the patch's own `ret` (site+1) until it runs
    // it; once the original bytes are back, that byte is padding again, so
    // the thread performs its return here.
    for (auto& [tid, t] : tasks_) {
        if (!is_live_stop(t->state()))
            continue;
        if (t->hit && t->hit->site == site.address()) {
            finish_step_over(*t);
            continue;
        }
        if (site.kind() != step_over_kind::resume_in_place || t->hit)
            continue;
        auto regs = registers::read(tid);
        if (!regs || regs->pc() != site.address() + breakpoint_pc_adjust)
            continue;
        consume_owed_sigtrap(*t);
        if (regs->emulate_return(*memory_) && regs->write(tid))
            t->set_returned_from_site(site.address());
    }
}

void traced_process::withdraw_sites()
{
    park_trap_stops();
    for (target_addr addr : sites_.addresses()) {
        breakpoint_site* site = sites_.inserted_at(addr);
        if (site == nullptr)
            continue;
        clear_threads_from(*site);
        if (!gone_ && !site->remove(*journal_))
            log::warning("could not put back the code at {}", addr);
        sites_.mark_withdrawn(addr);
    }
}

void traced_process::reinsert_withdrawn_sites()
{
    sites_.reinsert_withdrawn(*memory_, *journal_, !gone_);
}

const breakpoint_site& traced_process::add_signal_site(target_addr addr, stop_flag flag)
{
    return sites_.add_signal_site(addr, flag, *memory_, *journal_);
}

const breakpoint_site* traced_process::site_at(target_addr addr) const
{
    return sites_.find(addr);
}

std::vector<const breakpoint_site*> traced_process::sites() const
{
    return sites_.all();
}

// ---------------------------------------------------------------- wait loop

std::optional<stop_event> traced_process::take_queued()
{
    if (queue_.empty())
        return std::nullopt;
    stop_event ev = queue_.front();
    queue_.pop_front();
    if (ev.kind == stop_kind::thread_exited || ev.kind == stop_kind::process_exited) {
        if (task* t = find_task(ev.tid); t != nullptr && t->state() == task_state::exiting)
            forget_task(ev.tid);
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
    if (task* t = find_task(ev.tid); t != nullptr && t->is_stopped())
        t->needs_owner = true;
    if (ev.kind == stop_kind::thread_created)
        if (task* c = find_task(ev.child); c != nullptr)
            c->needs_owner = true;
}

void traced_process::restart_if_free(task& t)
{
    if (!is_holding() && !t.needs_owner)
        restart(t);
}

std::optional<stop_event> traced_process::handle_status(tid_t tid, wait_status ws)
{
    task* t = find_task(tid);
    if (t == nullptr) {
        on_unknown_task(tid, ws);
        return std::nullopt;
    }
    // Every status moves the task's state (task_state.hpp). Any ptrace-stop
    // clears the kernel's pending interrupt trap: the PTRACE_INTERRUPT is
    // satisfied by whichever stop comes first.
    bool interrupted = !ws.has_ended() && t->note_status(ws);
    switch (ws.kind()) {
    case wait_kind::exited:
    case wait_kind::killed:
        return on_task_ended(tid, ws);
    case wait_kind::signal_stop:
        return on_signal_stop(*t, ws.signal());
    case wait_kind::group_stop:
        on_group_stop(*t);
        return std::nullopt;
    case wait_kind::event_stop:
        return on_event_stop(*t, interrupted);
    case wait_kind::clone_event:
        return on_clone(*t);
    case wait_kind::fork_event:
    case wait_kind::vfork_event:
        on_fork(*t, ws.kind() == wait_kind::vfork_event);
        return std::nullopt;
    case wait_kind::exec_event:
        return on_exec(tid, ws);
    case wait_kind::exit_event:
        return stop_event{stop_kind::thread_exiting, tid, {}, {}, 0};
    case wait_kind::vfork_done:
    case wait_kind::syscall_stop:
    case wait_kind::other:
        restart_if_free(*t);
        return std::nullopt;
    }
    return std::nullopt;
}

void traced_process::on_unknown_task(tid_t tid, wait_status ws)
{
    if (ws.kind() == wait_kind::exit_event) {
        // A clone whose parent died (SIGKILL, the group's exit or an
        // exec) before reporting it: SIGKILL woke it from its first stop
        // and it is exiting. Nothing is owed to it, and the group's exit
        // (or the exec's de_thread) waits until it has gone.
        early_stops_.erase(tid);
        ptrace_call(PTRACE_CONT, tid, nullptr, nullptr);
    } else if (ws.is_stop()) {
        // A new clone whose first stop came before its parent's clone event.
        early_stops_.insert_or_assign(tid, ws);
        if (parent_events_lost_)
            let_go_orphan_processes();
    } else {
        early_stops_.erase(tid);  // it has gone
    }
}

std::optional<stop_event> traced_process::on_task_ended(tid_t tid, wait_status ws)
{
    forget_task(tid);
    if (tid.value == pid_) {
        // The leader is reaped last; the process is gone.
        mark_process_gone(ws.raw());
        return stop_event{stop_kind::process_exited, tid, {}, {}, ws.raw()};
    }
    return stop_event{stop_kind::thread_exited, tid, {}, {}, ws.raw()};
}

std::optional<stop_event> traced_process::on_signal_stop(task& t, int sig)
{
    if (int report = sites_.report_signal().signo; report != 0 && sig == report) {
        std::optional<stop_event> ev;
        if (on_report_signal(t, ev))
            return ev;
    }
    if (sig == SIGTRAP && t.sigtrap_owed) {
        // The queued SIGTRAP of a hit already reported through an interrupt.
        t.sigtrap_owed = false;
        restart_if_free(t);
        return std::nullopt;
    }
    if (sig == SIGTRAP) {
        if (auto ev = on_breakpoint_trap(t)) {
            t.note_trap_of_ours();
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
    t.keep_signal(sig);
    restart_if_free(t);
    return std::nullopt;
}

void traced_process::on_group_stop(task& t)
{
    t.in_group_stop = true;
    restart_if_free(t);
}

std::optional<stop_event> traced_process::on_event_stop(task& t, bool interrupted)
{
    // The kernel reports a pending jobctl trap before a queued signal: a
    // thread that had just executed a trap byte shows up here, past the
    // site, with the trap's SIGTRAP still queued. It is a hit.
    if (auto ev = on_trap_before_interrupt(t))
        return ev;
    if (!interrupted && t.in_group_stop)
        t.in_group_stop = false;  // a LISTENing task reports the end of its group-stop
    restart_if_free(t);
    return std::nullopt;
}

std::optional<stop_event> traced_process::on_breakpoint_trap(task& t)
{
    auto regs = registers::read(t.tid());
    if (!regs) {
        t.note_resumed();  // vanished (SIGKILL); its exit status follows
        return std::nullopt;
    }
    target_addr at = regs->pc() - breakpoint_pc_adjust;
    if (sites_.inserted_at(at) == nullptr) {
        // Not (or no longer) ours: a real SIGTRAP, passed on by the caller.
        return std::nullopt;
    }
    t.hit = trap_hit{at, false, *regs};
    stop_event ev{stop_kind::breakpoint, t.tid(), {}, at, 0};
    ev.arg0 = regs->arg0();
    return ev;
}

bool traced_process::on_report_signal(task& t, std::optional<stop_event>& ev)
{
    auto regs = registers::read(t.tid());
    if (!regs) {
        t.note_resumed();  // vanished (SIGKILL); its exit status follows
        return true;
    }
    // Only the agent's stub stops there with this signal queued by itself:
    // anything else is somebody's signal, delivered as usual.
    const report_signal_setting& report = sites_.report_signal();
    if (regs->pc() != report.stopped_pc)
        return false;
    // The program may have been sent the same signal (it may even catch it
    // by now): only the agent's own carries its value.
    siginfo_t info{};
    if (ptrace_call(PTRACE_GETSIGINFO, t.tid(), nullptr, &info) != 0 || info.si_code != SI_QUEUE ||
        reinterpret_cast<std::uint64_t>(info.si_value.sival_ptr) != report.value.value)
        return false;
    target_addr at{regs->arg4()};
    if (const breakpoint_site* site = sites_.inserted_at(at);
        site == nullptr || site->kind() != step_over_kind::signal_stop) {
        // Raised just before its flag went back to 0: ours, dropped.
        restart_if_free(t);
        return true;
    }
    // Seen from above, the thread is where a trap byte would have left it:
    // one byte into the reporting function, its return address on top of the
    // stack (the stub is a leaf and touched no stack), the subject record as
    // the function's argument. Stacks and step-over code need no second case.
    ev = stop_event{stop_kind::breakpoint, t.tid(), {}, at, 0};
    ev->arg0 = regs->arg5();
    regs->set_pc(at + breakpoint_pc_adjust);
    t.hit = trap_hit{at, true, *regs};
    return true;
}

std::optional<stop_event> traced_process::on_trap_before_interrupt(task& t)
{
    if (sites_.empty() || t.hit)
        return std::nullopt;
    auto regs = registers::read(t.tid());
    if (!regs)
        return std::nullopt;
    target_addr at = regs->pc() - breakpoint_pc_adjust;
    // pc one past an inserted site is reachable only through its trap byte:
    // the site holds a `ret` or the first byte of a longer instruction.
    if (sites_.inserted_at(at) == nullptr)
        return std::nullopt;
    // pc one past a site is also where a thread resumed in place sits before
    // its `ret`: only a trap's SIGTRAP still queued for the thread tells.
    if (!has_queued_trap(t.tid()))
        return std::nullopt;
    t.hit = trap_hit{at, false, *regs};
    t.sigtrap_owed = true;
    stop_event ev{stop_kind::breakpoint, t.tid(), {}, at, 0};
    ev.arg0 = regs->arg0();
    return ev;
}

bool traced_process::has_queued_trap(tid_t tid)
{
    // The thread's private queue (no PTRACE_PEEKSIGINFO_SHARED): a trap
    // byte's SIGTRAP is sent to the thread with si_code SI_KERNEL.
    siginfo_t pending[16];
    __ptrace_peeksiginfo_args args{0, 0, 16};
    long n = 0;
    if (ptrace_call(PTRACE_PEEKSIGINFO, tid, &args, pending, &n) != 0 || n <= 0)
        return false;
    for (long i = 0; i < n; ++i)
        if (pending[i].si_signo == SIGTRAP && pending[i].si_code == SI_KERNEL)
            return true;
    return false;
}

void traced_process::note_vanished(task& t, wait_status ws)
{
    // Its exit status was taken here, outside the wait loop: report it from
    // the queue, where the task is forgotten when the owner takes the event.
    t.note_gone();
    bool leader = t.tid().value == pid_;
    queue_.push_back(stop_event{leader ? stop_kind::process_exited : stop_kind::thread_exited, t.tid(), {}, {},
                                ws.raw()});
}

std::optional<wait_status> traced_process::next_stop_of(task& t)
{
    auto ws = waiter_->wait_for(t.tid());
    if (!ws) {
        t.note_gone();
        return std::nullopt;
    }
    if (!ws->is_stop()) {
        note_vanished(t, *ws);
        return std::nullopt;
    }
    return ws;
}

void traced_process::consume_owed_sigtrap(task& t)
{
    if (!t.sigtrap_owed || !t.is_stopped())
        return;
    // Resuming dequeues the SIGTRAP before any instruction runs: the task
    // stops again in its signal-delivery-stop, and the signal is dropped.
    if (ptrace_call(PTRACE_CONT, t.tid(), nullptr, nullptr) != 0)
        return;
    for (int i = 0; i < 8; ++i) {
        auto ws = next_stop_of(t);
        if (!ws)
            return;
        if (ws->kind() == wait_kind::exit_event)
            t.note_status(*ws);  // killed meanwhile: let it finish dying
        if (ws->kind() == wait_kind::signal_stop && ws->signal() == SIGTRAP) {
            t.note_trap_of_ours();
            break;
        }
        if (ws->kind() == wait_kind::signal_stop)
            t.keep_signal(ws->signal());
        if (ptrace_call(PTRACE_CONT, t.tid(), nullptr, nullptr) != 0)
            return;
    }
    t.sigtrap_owed = false;
}

void traced_process::finish_step_over(task& t)
{
    breakpoint_site* found = t.hit ? sites_.find(t.hit->site) : nullptr;
    if (found == nullptr)
        return;
    breakpoint_site& site = *found;
    consume_owed_sigtrap(t);
    if (site.kind() == step_over_kind::single_step) {
        step_over_single(t, site);
    } else {
        // The site holds a return: perform it, so the thread is past the site
        // and the same report cannot trap again once the bytes change.
        return_from_trap(t);
    }
    t.hit.reset();
}

std::optional<wait_status> traced_process::wait_first_stop(tid_t child)
{
    if (auto it = early_stops_.find(child); it != early_stops_.end()) {
        auto ws = it->second;
        early_stops_.erase(it);
        return ws;
    }
    // During detach's stop-all the child has usually reached its first stop
    // already: read it without a waitpid() (see peek_stops_).
    if (peek_stops_)
        if (auto peeked = peek_stop(child))
            return peeked;
    return waiter_->wait_for(child);
}

std::optional<std::uint64_t> traced_process::read_clone_flags(long syscall_number, std::uint64_t arg0)
{
    // clone(2) passes flags in its first argument; clone3(2) passes a struct
    // clone_args whose first field is the flags.
    std::uint64_t flags = 0;
    if (syscall_number == SYS_vfork)
        return CLONE_VFORK;
    if (syscall_number == SYS_clone)
        return arg0;
    if (syscall_number == SYS_clone3 && memory_->read_value(target_addr{arg0}, flags))
        return flags;
    return std::nullopt;
}

bool traced_process::is_in_thread_group(tid_t task_id) const
{
    // Signal 0 checks existence only; ESRCH also when task_id is in another
    // thread group. EPERM comes after the group check: it is in this one.
    if (::syscall(SYS_tgkill, pid_, task_id.value, 0) == 0)
        return true;
    return errno == EPERM;
}

std::optional<stop_event> traced_process::on_clone(task& parent)
{
    auto new_tid = read_new_tid(parent);
    if (!new_tid)
        return std::nullopt;
    tid_t child = *new_tid;

    auto first = wait_first_stop(child);
    if (!first || !first->is_stop()) {
        log::debug("clone child {} vanished before its first stop", child.value);
        if (!is_holding())
            restart(parent);
        return std::nullopt;
    }
    // A thread of this process, or a new process (a clone without
    // CLONE_THREAD whose exit signal is not SIGCHLD)? One system call, where
    // the parent's registers and its clone3 arguments took two.
    if (!is_in_thread_group(child)) {
        // Not ours to keep; a copy of our memory gets the original bytes back.
        let_go_new_process(child, !shares_memory_with_target(child));
        if (!is_holding())
            restart(parent);
        return std::nullopt;
    }

    // Whatever its first stop is, it is stopped there.
    task& t = add_task(child, task_state::stopped);
    // Its thread pointer (fs_base, set from clone's TLS argument): one word
    // of its saved registers.
    if (auto tp = registers::read_thread_pointer(child))
        t.set_thread_pointer(*tp);
    parent.set_newest_clone_child(child);
    return stop_event{stop_kind::thread_created, parent.tid(), child, {}, 0};
}

void traced_process::on_fork(task& parent, bool is_vfork)
{
    auto new_tid = read_new_tid(parent);
    if (!new_tid)
        return;
    tid_t child = *new_tid;
    if (auto first = wait_first_stop(child); first && first->is_stop()) {
        // A vfork child shares our memory: its bytes are the parent's and must stay.
        let_go_new_process(child, !is_vfork);
        log::debug("{} child {} detached", is_vfork ? "vfork" : "fork", child.value);
    }
    restart_if_free(parent);
}

std::optional<tid_t> traced_process::read_new_tid(task& parent)
{
    unsigned long msg = 0;
    if (ptrace_call(PTRACE_GETEVENTMSG, parent.tid(), nullptr, &msg) == 0 && msg > 0)
        return tid_t{static_cast<pid_t>(msg)};
    // A SIGKILL (the group's exit, another thread's exec) took the parent out
    // of its event stop: it is no longer stopped and its next status is its
    // exit. The new task, if any, is met as a stranger (on_unknown_task);
    // waiting for "TID 0" would take any child's status.
    log::debug("task {}: its clone/fork event has gone (parent killed)", parent.tid().value);
    parent.note_resumed();
    parent_events_lost_ = true;
    let_go_orphan_processes();
    return std::nullopt;
}

void traced_process::let_go_orphan_processes()
{
    // A new process (fork, vfork, clone without CLONE_THREAD) is never ours
    // to keep; one whose parent's event is lost would stay stopped. Whether
    // its parent's event is still to come or not, it goes now (a later wait
    // for it finds no such child).
    for (auto it = early_stops_.begin(); it != early_stops_.end();) {
        auto st = procfs::read_status(it->first.value);
        if (st && st->tgid != pid_) {
            let_go_new_process(it->first, !shares_memory_with_target(it->first));
            it = early_stops_.erase(it);
        } else {
            ++it;
        }
    }
}

bool traced_process::shares_memory_with_target(tid_t other) const
{
    return ::syscall(SYS_kcmp, pid_, other.value, KCMP_VM, 0, 0) == 0;
}

void traced_process::let_go_new_process(tid_t child, bool has_own_memory)
{
    // Its own copy of our patched text gets the original bytes back first.
    if (has_own_memory) {
        try {
            process_memory child_mem(child.value);
            sites_.write_saved_bytes(child_mem);
        } catch (const error& e) {
            log::debug("cleaning child process {}: {}", child.value, e.what());
        }
    }
    ptrace_call(PTRACE_DETACH, child, nullptr, nullptr);
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
    if (task* f = find_task(former))
        former_tp = f->thread_pointer();
    if (former != leader) {
        // The exec'ing thread takes the leader's place (and record).
        auto node = tasks_.extract(former);
        tasks_.erase(leader);
        if (!node.empty()) {
            node.key() = leader;
            node.mapped()->set_tid(leader);
            tasks_.insert(std::move(node));
        }
    }
    for (auto it = tasks_.begin(); it != tasks_.end();)
        it = it->first == leader ? std::next(it) : tasks_.erase(it);
    if (!find_task(leader))
        add_task(leader);
    sites_.forget_image();
    queue_.erase(std::remove_if(queue_.begin(), queue_.end(),
                                [](const stop_event& e) { return e.kind != stop_kind::process_exited; }),
                 queue_.end());
    memory_->reopen();
    journal_->forget_all();  // the old image's changes went with it
    task& t = *find_task(leader);
    t.note_status(ws);
    t.hit.reset();
    t.set_newest_clone_child({});
    if (auto regs = registers::read(leader))
        t.set_thread_pointer(regs->thread_pointer());
    // child/address: the thread that exec'd, as it was before (for a non-main
    // thread, its old TID and thread pointer).
    return stop_event{stop_kind::exec, leader, former, former_tp, 0};
}

// ---------------------------------------------------------------- run control

int traced_process::take_pending_signal(tid_t tid)
{
    task* t = find_task(tid);
    if (t == nullptr)
        return 0;
    return std::exchange(t->pending_signal, 0);
}

void traced_process::restore_pending_signal(tid_t tid, int sig)
{
    if (task* t = find_task(tid); t != nullptr && sig != 0)
        t->pending_signal = sig;
}

void traced_process::keep_stopped(tid_t tid)
{
    if (task* t = find_task(tid); t != nullptr && t->is_stopped())
        t->needs_owner = true;
}

bool traced_process::is_unfit_for_call(tid_t tid) const
{
    auto it = tasks_.find(tid);
    if (it == tasks_.end())
        return true;
    const task& t = *it->second;
    return !is_live_stop(t.state()) || t.in_group_stop || t.hit;
}

void traced_process::resume(tid_t tid)
{
    task* t = find_task(tid);
    if (t == nullptr)
        return;
    t->needs_owner = false;
    if (!is_holding() && t->is_stopped())
        restart(*t);
}

std::optional<stop_event> traced_process::run_alone(tid_t tid, int timeout_ms)
{
    task* t = find_task(tid);
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
        if (!ws)
            ::usleep(1000);
    }
    if (!ws) {
        if (ptrace_call(PTRACE_INTERRUPT, tid, nullptr, nullptr) == 0)
            t->note_interrupt_sent();
        ws = next_stop_of(*t);
        if (!ws)
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
            step_over(t);
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

void traced_process::step_over(task& t)
{
    const trap_hit& hit = *t.hit;
    breakpoint_site* inserted = sites_.inserted_at(hit.site);
    if (hit.by_signal) {
        // Stopped in the agent's stub, not in the reporting function: its
        // own `ret` is next, whatever became of the site.
    } else if (inserted == nullptr) {
        // The site went away meanwhile: re-execute the original bytes.
        if (auto regs = registers::read(t.tid())) {
            regs->set_pc(hit.site);
            regs->write(t.tid());
        }
    } else {
        breakpoint_site& site = *inserted;
        switch (site.kind()) {
        case step_over_kind::resume_in_place:
            break;  // the pc already sits on the `ret` after the trap byte
        case step_over_kind::emulate_return:
            return_from_trap(t);
            break;
        case step_over_kind::single_step:
            step_over_single(t, site);
            break;
        case step_over_kind::signal_stop:
            break;  // resumed without the signal: the stub's `ret` comes next
        }
    }
    t.hit.reset();
}

void traced_process::return_from_trap(task& t)
{
    registers regs = t.regs_at_trap();
    if (regs.emulate_return(*memory_) && regs.write(t.tid()))
        t.set_returned_from_site(t.hit ? t.hit->site : target_addr{});
}

void traced_process::step_over_single(task& t, breakpoint_site& site)
{
    consume_owed_sigtrap(t);
    // The caller restarts t once the step is done: releasing the others must
    // not restart it (nor step it over again).
    struct owner_guard {
        task& t;
        bool saved;
        ~owner_guard() { t.needs_owner = saved; }
    } owner{t, t.needs_owner};
    t.needs_owner = true;
    // Other threads must not run past the site while its bytes are lifted.
    bool stopped_others = false;
    if (!is_holding()) {
        stop_all();
        stopped_others = true;
    }
    struct relift_guard {
        traced_process* self;
        breakpoint_site& site;
        bool stopped_others;
        ~relift_guard()
        {
            site.reinsert(*self->memory_);
            if (!stopped_others)
                return;
            try {
                self->release_all();
            } catch (const std::exception& e) {
                // Not thrown on from a destructor: a task that could not be
                // restarted stays stopped, the others run.
                log::warning("after stepping over {}: {}", site.address(), e.what());
            }
        }
    } guard{this, site, stopped_others};

    site.lift(*memory_);
    if (auto regs = registers::read(t.tid())) {
        regs->set_pc(site.address());
        regs->write(t.tid());
    }
    single_step_once(t);
}

void traced_process::single_step_once(task& t)
{
    for (int attempt = 0; attempt < 16; ++attempt) {
        if (ptrace_call(PTRACE_SINGLESTEP, t.tid(), nullptr, nullptr) != 0)
            return;
        auto ws = waiter_->wait_for(t.tid());
        if (!ws)
            return;
        if (ws->kind() == wait_kind::signal_stop && ws->signal() == SIGTRAP) {
            t.note_trap_of_ours();
            return;
        }
        if (ws->kind() == wait_kind::signal_stop) {
            // A signal arrived before the step: keep it for the final resume.
            t.keep_signal(ws->signal());
            continue;
        }
        if (!ws->is_stop()) {
            note_vanished(t, *ws);
            return;
        }
        if (auto ev = handle_status(t.tid(), *ws))
            queue_.push_back(*ev);
        return;
    }
}

void traced_process::stop_all()
{
    ++hold_depth_;
    stop_running();
}

void traced_process::park_trap_stops()
{
    for (auto& [tid, t] : tasks_)
        if (is_live_stop(t->state()) && (t->state() == task_state::trap_stopped || t->sigtrap_owed))
            park(*t);
}

void traced_process::park(task& t)
{
    if (t.hit) {
        // A hit: its step-over is done now, so that the task stands where
        // its run goes on (after the reporting function's return, or on the
        // patch's own `ret`). A single-step site needs its bytes lifted and
        // the others held at restart: that task stays as it is.
        if (const breakpoint_site* site = sites_.inserted_at(t.hit->site);
            site != nullptr && site->kind() == step_over_kind::single_step)
            return;
        consume_owed_sigtrap(t);
        step_over(t);
    }
    if (t.state() != task_state::trap_stopped)
        return;
    // Restarted with no signal from its signal-delivery-stop, the task meets
    // the interrupt's trap before it runs an instruction or takes another
    // signal (get_signal() looks at jobctl traps first) and stops again in a
    // PTRACE_EVENT_STOP, which carries no signal.
    if (ptrace_call(PTRACE_INTERRUPT, t.tid(), nullptr, nullptr) != 0 ||
        ptrace_call(PTRACE_CONT, t.tid(), nullptr, nullptr) != 0)
        return;
    t.note_resumed();
    t.note_interrupt_sent();
    auto ws = next_stop_of(t);
    if (!ws)
        return;
    if (ws->kind() == wait_kind::event_stop) {
        t.note_status(*ws);
        return;
    }
    // Killed meanwhile (an exit event), or something the wait loop knows.
    if (auto ev = handle_status(t.tid(), *ws)) {
        leave_to_owner(*ev);
        queue_.push_back(*ev);
    }
}

bool traced_process::park_signal_stop(tid_t tid)
{
    task* t = find_task(tid);
    if (t == nullptr || !is_live_stop(t->state()) || gone_ || t->hit)
        return false;
    t->note_trap_of_ours();  // park() moves tasks out of signal-delivery-stops of ours
    park(*t);
    return t->is_stopped() && t->state() != task_state::trap_stopped;
}

void traced_process::stop_running()
{
    if (gone_)
        return;
    std::vector<tid_t> pending;
    for (auto& [tid, t] : tasks_) {
        // An exiting task (e.g. a leader that called pthread_exit and waits as
        // a zombie for the rest) never stops again.
        if (t->is_stopped() || t->is_exiting())
            continue;
        if (!is_interrupt_sent(t->state()) && ptrace_call(PTRACE_INTERRUPT, tid, nullptr, nullptr) == 0)
            t->note_interrupt_sent();
        if (is_interrupt_sent(t->state()))
            pending.push_back(tid);
    }
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    auto next_vfork_check = start + std::chrono::milliseconds(vfork_check_ms);
    while (!gone_) {
        // Each task's status is taken by its TID: waitpid(-1) would make the
        // kernel walk every traced task per call, T times for T tasks.
        // The descriptor is emptied first, so a status that comes after the
        // pass wakes the poll below.
        waiter_->drain_fd();
        take_stops_of(pending);
        if (pending.empty())
            break;
        waiter_->wait_ready(vfork_check_ms, cancel_fd_);
        throw_if_cancelled();
        auto now = clock::now();
        if (now < next_vfork_check)
            continue;
        mark_vfork_blocked();
        next_vfork_check = now + std::chrono::milliseconds(vfork_check_ms);
        if (now - start >= std::chrono::milliseconds(stop_all_timeout_ms))
            throw_stuck(pending);
    }
}

void traced_process::take_stops_of(std::vector<tid_t>& pending)
{
    std::erase_if(pending, [this](tid_t tid) {
        task* t = find_task(tid);
        if (t == nullptr || !is_running(t->state()))
            return true;
        // At detach most tasks sit in their stop by now: read it without a
        // waitpid() (see peek_stops_).
        taken_status taken;
        std::optional<wait_status> peeked;
        if (peek_stops_)
            peeked = peek_stop(tid);
        if (peeked)
            taken = taken_status{tid, *peeked, false};
        else
            taken = waiter_->try_wait(tid);
        if (taken.no_child) {
            t->note_gone();  // reaped elsewhere, or no longer ours
            return true;
        }
        if (!taken.status)
            return false;
        // Tasks born meanwhile are stopped at birth; nothing else to interrupt.
        if (auto ev = handle_status(tid, *taken.status)) {
            leave_to_owner(*ev);
            queue_.push_back(*ev);
        }
        t = find_task(tid);
        return t == nullptr || !is_running(t->state());
    });
}

void traced_process::throw_stuck(const std::vector<tid_t>& pending) const
{
    // A few TIDs and a count: a list of thousands helps nobody.
    constexpr std::size_t shown = 8;
    std::string stuck;
    for (std::size_t i = 0; i < pending.size() && i < shown; ++i)
        stuck += fmt::format(" {}", pending[i].value);
    if (pending.size() > shown)
        stuck += fmt::format(" and {} more", pending.size() - shown);
    throw error::target(fmt::format("{} tasks did not stop within {} s:{}", pending.size(),
                                    stop_all_timeout_ms / 1000, stuck));
}

void traced_process::throw_if_cancelled() const
{
    if (cancel_fd_ < 0)
        return;
    pollfd p{cancel_fd_, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0)
        throw error::from_errno(EINTR, fmt::format("attaching to process {} was interrupted", pid_));
}

void traced_process::mark_vfork_blocked()
{
    for (auto& [tid, t] : tasks_) {
        if (!is_running(t->state()))
            continue;
        auto sc = procfs::read_task_syscall(pid_, tid);
        if (!sc)
            continue;
        if ((read_clone_flags(sc->number, sc->args[0]).value_or(0) & CLONE_VFORK) != 0) {
            t->note_vfork_blocked();
            log::debug("task {} is blocked in vfork(); held until its child execs or exits", tid.value);
        }
    }
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

// ---------------------------------------------------------------- detach / kill

void traced_process::detach()
{
    if (gone_ || detached_)
        return;
    cancel_fd_ = -1;  // a detach is never given up
    peek_stops_ = true;
    try {
        stop_all();
    } catch (const error& e) {
        // Detach what can be detached; a task that never stopped keeps running.
        log::warning("{}", e.what());
    }
    remove_all_sites();
    std::vector<tid_t> dying, in_vfork;
    for (auto& [tid, t] : tasks_) {
        if (!t->is_stopped()) {
            // Past its exit stop, or blocked in vfork(): cannot be detached now.
            (t->state() == task_state::vfork_blocked ? in_vfork : dying).push_back(tid);
            continue;
        }
        ptrace_call(PTRACE_DETACH, tid, nullptr, as_ptr(t->pending_signal));
    }
    finish_detach(dying, in_vfork);
    // The kernel lets a tracee go, with no stop pending, when its tracer exits.
    for (tid_t tid : in_vfork)
        log::warning("thread {} is still inside vfork(); it is let go when tdctl exits", tid.value);
    tasks_.clear();
    queue_.clear();
    detached_ = true;
    hold_depth_ = 0;
    log::debug("detached from {}", pid_);
}

void traced_process::remove_all_sites()
{
    // Finish every step-over, and drop every trap's queued SIGTRAP, before
    // the bytes go back: a detached thread must never meet either.
    for (target_addr addr : sites_.addresses())
        if (const breakpoint_site* site = sites_.find(addr))
            clear_threads_from(*site);
    for (auto& [tid, t] : tasks_)
        consume_owed_sigtrap(*t);
    sites_.remove_all(*journal_);
}

void traced_process::finish_detach(std::vector<tid_t>& dying, std::vector<tid_t>& in_vfork)
{
    // A traced thread that exits stays a zombie until its tracer reaps it, and
    // the leader cannot be reaped before its threads: reap them here. A vfork
    // parent stops for our interrupt once its child execs or exits: let it go
    // then (with the signal it stopped for, if any). Reaping takes one
    // waitpid() each, microseconds normally; when waitpid() is slow (a loaded
    // host) threads other than the leader are reaped for at most
    // reap_budget_ms: those left are released by the kernel when tdctl's
    // tracer exits, right after (exit_ptrace() frees a traced zombie thread).
    constexpr auto reap_budget = std::chrono::milliseconds(reap_budget_ms);
    const auto start = std::chrono::steady_clock::now();
    for (int round = 0; round < 200 && !(dying.empty() && in_vfork.empty()); ++round) {
        std::erase_if(dying, [&](tid_t tid) {
            if (tid.value != pid_ && std::chrono::steady_clock::now() - start >= reap_budget)
                return true;
            taken_status taken = waiter_->try_wait(tid);
            if (taken.status && tid.value == pid_ && taken.status->has_ended()) {
                // The leader was dying too: its status is the process's.
                exit_status_ = taken.status->raw();
                gone_ = true;
            }
            return taken.status.has_value() || taken.no_child;
        });
        std::erase_if(in_vfork, [this](tid_t tid) {
            taken_status taken = waiter_->try_wait(tid);
            if (taken.status && !taken.status->has_ended())
                ptrace_call(PTRACE_DETACH, tid, nullptr, as_ptr(taken.status->signal_to_deliver()));
            return taken.status.has_value() || taken.no_child;
        });
        if (!(dying.empty() && in_vfork.empty()))
            ::usleep(5000);
    }
}

void traced_process::kill()
{
    if (gone_)
        return;
    ::kill(pid_, SIGKILL);
    sites_.clear();
    queue_.clear();
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
        if (ws.is_stop()) {
            ptrace_call(PTRACE_CONT, tid, nullptr, nullptr);
            continue;
        }
        tasks_.erase(tid);
        if (tid.value == pid_) {
            gone_ = true;
            exit_status_ = ws.raw();
        }
    }
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

}  // namespace tdctl::ptrace
