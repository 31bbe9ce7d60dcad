#include "ptrace/task_table.hpp"

#include <utility>

namespace tdctl::ptrace {

task& task_table::add(tid_t tid, task_state state)
{
    auto t = std::make_unique<task>(tid, state);
    task& added = *t;
    tasks_[tid] = std::move(t);
    return added;
}

task* task_table::find(tid_t tid)
{
    auto it = tasks_.find(tid);
    return it == tasks_.end() ? nullptr : it->second.get();
}

const task* task_table::find(tid_t tid) const
{
    auto it = tasks_.find(tid);
    return it == tasks_.end() ? nullptr : it->second.get();
}

std::vector<tid_t> task_table::tids() const
{
    std::vector<tid_t> out;
    out.reserve(tasks_.size());
    for (const auto& [tid, t] : tasks_)
        out.push_back(tid);
    return out;
}

task& task_table::keep_only_leader(tid_t former, tid_t leader)
{
    if (former != leader) {
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
    if (task* t = find(leader))
        return *t;
    return add(leader);
}

std::optional<registers> task_table::trap_registers(tid_t tid) const
{
    const task* t = find(tid);
    if (t == nullptr || !t->hit)
        return std::nullopt;
    return t->hit->regs;
}

int task_table::take_pending_signal(tid_t tid)
{
    task* t = find(tid);
    return t == nullptr ? 0 : std::exchange(t->pending_signal, 0);
}

void task_table::restore_pending_signal(tid_t tid, int sig)
{
    if (task* t = find(tid); t != nullptr && sig != 0)
        t->pending_signal = sig;
}

void task_table::keep_stopped(tid_t tid)
{
    if (task* t = find(tid); t != nullptr && t->is_stopped())
        t->needs_owner = true;
}

bool task_table::is_unfit_for_call(tid_t tid) const
{
    const task* t = find(tid);
    return t == nullptr || !is_live_stop(t->state()) || t->in_group_stop || t->hit;
}

}  // namespace tdctl::ptrace
