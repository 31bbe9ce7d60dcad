#include "ptrace/step_over.hpp"

#include <csignal>

#include "base/log.hpp"
#include "ptrace/procfs.hpp"
#include "ptrace/ptrace_call.hpp"

namespace tdctl::ptrace {

stepper::stepper(pid_t pid, task_table& tasks, site_table& sites, process_memory& memory, waiter& wait,
                 std::deque<stop_event>& queue, stop_router& router)
    : pid_(pid), tasks_(tasks), sites_(sites), memory_(memory), waiter_(wait), queue_(queue), router_(router)
{
}

void stepper::clear_threads_from(const breakpoint_site& site)
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
        if (regs->emulate_return(memory_) && regs->write(tid))
            t->set_returned_from_site(site.address());
    }
}

void stepper::consume_owed_sigtrap(task& t)
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
        if (ws->kind() == wait_kind::exit_event) {
            // Killed meanwhile: no signal reaches it again. It stays at its
            // exit stop, as every other task the group's exit stops there.
            t.note_status(*ws);
            break;
        }
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

void stepper::finish_step_over(task& t)
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

std::optional<wait_status> stepper::next_stop_of(task& t)
{
    auto ws = wait_resumed(t);
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

std::optional<wait_status> stepper::wait_resumed(task& t)
{
    if (t.tid().value != pid_)
        return waiter_.wait_for(t.tid());  // a thread's end is reported at once
    // The leader may have been at its exit stop rather than in the stop its
    // record says (the group's SIGKILL wakes a held task, which stops again
    // at its exit): resumed, it dies, and its end is reported only once every
    // other thread has gone, while they wait for tdctl at their own exit
    // stops. So it is looked for, asleep on the SIGCHLD descriptor between
    // looks, and a leader found dead has no stop to come.
    for (bool looked = false;; looked = true) {
        waiter_.drain_fd();
        taken_status taken = waiter_.try_wait(t.tid());
        if (taken.status || taken.no_child)
            return taken.status;
        if (looked) {
            auto st = procfs::read_task_status(pid_, t.tid());
            if (!st || st->state == 'Z' || st->state == 'X') {
                log::debug("leader {} died when resumed: its end comes after the others'", pid_);
                return std::nullopt;
            }
        }
        waiter_.wait_ready(waiter::repoll_ms);
    }
}

void stepper::note_vanished(task& t, wait_status ws)
{
    // Its exit status was taken here, outside the wait loop: report it from
    // the queue, where the task is forgotten when the owner takes the event.
    t.note_gone();
    bool leader = t.tid().value == pid_;
    queue_.push_back(stop_event{leader ? stop_kind::process_exited : stop_kind::thread_exited, t.tid(), {}, {},
                                ws.raw()});
}

void stepper::step_over(task& t)
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

void stepper::return_from_trap(task& t)
{
    registers regs = t.regs_at_trap();
    if (regs.emulate_return(memory_) && regs.write(t.tid()))
        t.set_returned_from_site(t.hit ? t.hit->site : target_addr{});
}

void stepper::step_over_single(task& t, breakpoint_site& site)
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
    if (!router_.is_holding()) {
        router_.stop_all();
        stopped_others = true;
    }
    struct relift_guard {
        stepper* self;
        breakpoint_site& site;
        bool stopped_others;
        ~relift_guard()
        {
            site.reinsert(self->memory_);
            if (!stopped_others)
                return;
            try {
                self->router_.release_all();
            } catch (const std::exception& e) {
                // Not thrown on from a destructor: a task that could not be
                // restarted stays stopped, the others run.
                log::warning("after stepping over {}: {}", site.address(), e.what());
            }
        }
    } guard{this, site, stopped_others};

    site.lift(memory_);
    if (auto regs = registers::read(t.tid())) {
        regs->set_pc(site.address());
        regs->write(t.tid());
    }
    single_step_once(t);
}

void stepper::single_step_once(task& t)
{
    for (int attempt = 0; attempt < 16; ++attempt) {
        if (ptrace_call(PTRACE_SINGLESTEP, t.tid(), nullptr, nullptr) != 0)
            return;
        auto ws = wait_resumed(t);
        if (!ws) {
            t.note_gone();
            return;
        }
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
        router_.route(t.tid(), *ws);
        return;
    }
}

void stepper::park_trap_stops()
{
    for (auto& [tid, t] : tasks_)
        if (is_live_stop(t->state()) && (t->state() == task_state::trap_stopped || t->sigtrap_owed))
            park(*t);
}

void stepper::park(task& t)
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
    router_.route(t.tid(), *ws);
}

void stepper::clear_all_sites()
{
    // Finish every step-over, and drop every trap's queued SIGTRAP, before
    // the bytes go back: a detached thread must never meet either.
    for (target_addr addr : sites_.addresses())
        if (const breakpoint_site* site = sites_.find(addr))
            clear_threads_from(*site);
    for (auto& [tid, t] : tasks_)
        consume_owed_sigtrap(*t);
}


}  // namespace tdctl::ptrace
