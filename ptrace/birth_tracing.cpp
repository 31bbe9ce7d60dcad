#include "ptrace/birth_tracing.hpp"

#include <cerrno>

#include <fmt/format.h>

#include "base/error.hpp"
#include "base/log.hpp"
#include "ptrace/procfs.hpp"
#include "ptrace/ptrace_call.hpp"
#include "ptrace/registers_x86_64.hpp"
#include "ptrace/seize.hpp"

namespace tdctl::ptrace {

namespace {

constexpr long untraced_births_options = trace_options & ~static_cast<long>(PTRACE_O_TRACECLONE);

/// PTRACE_SETOPTIONS of `options` on `tid`: 0 or the errno.
int set_options(tid_t tid, long options)
{
    return ptrace_call(PTRACE_SETOPTIONS, tid, nullptr, reinterpret_cast<void*>(options));
}

}  // namespace

long birth_tracing::options() const
{
    return untraced_ ? untraced_births_options : trace_options;
}

bool birth_tracing::leave_untraced()
{
    std::vector<tid_t> set;
    bool refused = false;
    for (auto& [tid, t] : tasks_) {
        if (t->is_exiting())
            continue;  // clones nothing any more
        if (!is_live_stop(t->state()) || set_options(tid, untraced_births_options) != 0) {
            refused = true;
            break;
        }
        set.push_back(tid);
    }
    if (refused) {
        for (tid_t tid : set)
            (void)set_options(tid, trace_options);
        log::debug("births stay traced: a task of {} is not in a ptrace-stop", pid_);
        return false;
    }
    untraced_ = true;
    log::debug("births in {} left untraced ({} tasks)", pid_, set.size());
    return true;
}

void birth_tracing::trace_again()
{
    if (!untraced_)
        return;
    untraced_ = false;
    for (auto& [tid, t] : tasks_)
        if (!t->is_exiting())
            stale_.insert(tid);
    set_stale();
    log::debug("births in {} traced again{}", pid_,
               stale_.empty() ? std::string() : fmt::format(" ({} tasks later)", stale_.size()));
}

void birth_tracing::set_stale()
{
    for (auto it = stale_.begin(); it != stale_.end();) {
        const task* t = tasks_.find(*it);
        if (t == nullptr || t->is_exiting() ||
            (is_stopped(t->state()) && set_options(*it, trace_options) == 0))
            it = stale_.erase(it);
        else
            ++it;
    }
}

void birth_tracing::after_exec(tid_t leader)
{
    stale_.clear();
    if (std::exchange(untraced_, false) && set_options(leader, trace_options) != 0)
        stale_.insert(leader);
}

void birth_tracing::seize(const std::vector<tid_t>& tids)
{
    seize_bound bound;
    const long with = options();
    for (tid_t tid : tids)
        if (!tasks_.contains(tid) && !births_.is_met_early(tid) && seize_task(pid_, tid, false, with))
            tasks_.add(tid);
}

void birth_tracing::seize_strangers(const std::function<void()>& stop_seized)
{
    for (int pass = 0;; ++pass) {
        std::vector<tid_t> strangers;
        for (tid_t tid : procfs::list_tasks(pid_))
            if (!tasks_.contains(tid) && !births_.is_met_early(tid))
                strangers.push_back(tid);
        if (strangers.empty())
            break;
        if (pass == 1000)
            throw error::target(fmt::format("process {} creates threads faster than they can be attached", pid_));
        seize(strangers);
        stop_seized();
        // Its thread pointer, as at a clone stop: one word of its registers.
        for (tid_t tid : strangers)
            if (task* t = tasks_.find(tid); t != nullptr && is_stopped(t->state()))
                if (auto tp = registers::read_thread_pointer(tid))
                    t->set_thread_pointer(*tp);
    }
    set_stale();
}

}  // namespace tdctl::ptrace
