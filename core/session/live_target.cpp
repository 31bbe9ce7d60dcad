#include "core/session/live_target.hpp"

#include "base/clock.hpp"
#include "base/log.hpp"
#include "core/inject/got_routing.hpp"
#include "core/thread_handle.hpp"
#include "ptrace/procfs.hpp"

namespace tdctl::core {

live_target::live_target(std::unique_ptr<ptrace::traced_process> process, bool late_agent_serves)
    : process_(std::move(process)),
      late_agent_serves_(late_agent_serves),
      files_(process_->pid(), procfs::task_files::descriptor_budget() / 2)
{
    // NSpid lists the process's PID in every namespace from ours inward: more
    // than one entry means the thread library records other TIDs than ours.
    if (auto st = procfs::read_status(process_->pid()); st && st->ns_pids.size() > 1)
        ns_pid_ = st->ns_pids.back();
}

// The agent refers to this object (target_access): it goes first.
live_target::~live_target()
{
    agent_.reset();
}

void live_target::read_modules(std::optional<symbols::module_set> early)
{
    if (early && early->maps_unchanged(pid()))
        modules_ = std::move(*early);
    else
        modules_ = symbols::module_set::load(pid());
    late_modules_.reset();
    late_modules_at_ = -1;
}

const symbols::module_set* live_target::modules_holding(target_addr a)
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

void live_target::find_thread_library()
{
    agent_.reset();
    no_agent_reason_.clear();
    // A late agent (dlopen()ed after libc) sees no call until they are
    // routed to it; without --agent, nptl serves.
    bool consider_tdagent = late_agent_serves_ || !has_module("libtdagent.so") ||
                            agent_precedes_libc(*this).value_or(true);
    if (auto agent = thread_agent::create(*this, &no_agent_reason_, consider_tdagent))
        agent_ = std::move(*agent);
    if (agent_ && process_->is_alive())
        agent_->protocol().set_journal(&process_->journal());
    log::debug("thread library: {}", agent_ ? agent_->backend() : no_agent_reason_);
}

std::optional<target_addr> live_target::handle_of(tid_t lwp)
{
    return agent_ ? agent_->seam().handle_of(lwp) : std::nullopt;
}

std::optional<target_addr> live_target::own_record_of(tid_t lwp)
{
    auto handle = handle_of(lwp);
    if (!handle)
        return std::nullopt;
    auto tid = agent_->protocol().read_tid(*handle);
    if (!tid || *tid != ns_tid_of(lwp))
        return std::nullopt;
    return handle;
}

tid_t live_target::lwp_of(target_addr handle)
{
    if (!agent_ || handle.is_null())
        return tid_t{};
    auto lwp = thread_handle(*agent_, handle).lwp();
    return lwp && *lwp ? **lwp : tid_t{};
}

// ---------------------------------------------------------------- target_access

std::optional<symbols::symbol> live_target::lookup_symbol(std::string_view module, std::string_view name)
{
    if (module.empty())
        return modules_.lookup(name);
    if (const auto* m = modules_.find(module))
        return m->lookup(name);
    return std::nullopt;
}

bool live_target::has_module(std::string_view module)
{
    return modules_.find(module) != nullptr;
}

std::string live_target::module_problem(std::string_view module)
{
    for (const auto& why : modules_.skipped())
        if (why.find(module) != std::string::npos)
            return why;
    return {};
}

std::vector<tid_t> live_target::lwps()
{
    if (is_alive())
        return process_->tids();
    return procfs::list_tasks(pid());
}

std::optional<target_addr> live_target::thread_pointer(tid_t lwp)
{
    const auto* t = process_->find(lwp);
    if (t == nullptr || t->thread_pointer().is_null())
        return std::nullopt;
    return t->thread_pointer();
}

std::optional<std::uint64_t> live_target::lwp_start_ticks(tid_t lwp) const
{
    auto st = files_.stat(lwp);
    return st ? std::optional<std::uint64_t>(st->starttime) : std::nullopt;
}

// ---------------------------------------------------------------- PID namespaces

std::optional<pid_t> live_target::ns_tid_of(tid_t lwp)
{
    if (!ns_pid_)
        return lwp.value;
    if (auto known = known_ns_tid(lwp))
        return known;
    auto st = files_.status(lwp);
    if (!st || st->ns_pids.empty())
        return std::nullopt;
    pid_t ns_tid = st->ns_pids.back();
    ns_tid_by_lwp_[lwp] = ns_tid;
    lwp_by_ns_tid_[ns_tid] = lwp;
    return ns_tid;
}

std::optional<pid_t> live_target::known_ns_tid(tid_t lwp) const
{
    auto it = ns_tid_by_lwp_.find(lwp);
    return it == ns_tid_by_lwp_.end() ? std::nullopt : std::optional<pid_t>(it->second);
}

std::optional<tid_t> live_target::mapped_lwp(pid_t ns_tid) const
{
    auto it = lwp_by_ns_tid_.find(ns_tid);
    if (it == lwp_by_ns_tid_.end())
        return std::nullopt;
    auto fwd = ns_tid_by_lwp_.find(it->second);
    if (fwd == ns_tid_by_lwp_.end() || fwd->second != ns_tid)
        return std::nullopt;
    if (is_alive() && process_->find(it->second) == nullptr)
        return std::nullopt;
    return it->second;
}

std::optional<tid_t> live_target::lwp_of_ns_tid(pid_t ns_tid)
{
    if (ns_tid <= 0)
        return std::nullopt;
    if (!ns_pid_) {
        if (is_alive())
            return process_->find(tid_t{ns_tid}) ? std::optional<tid_t>(tid_t{ns_tid}) : std::nullopt;
        return target_access::lwp_of_ns_tid(ns_tid);
    }
    if (auto lwp = mapped_lwp(ns_tid))
        return lwp;
    // Not seen yet: read NSpid of every LWP not mapped so far.
    for (tid_t t : lwps())
        if (!ns_tid_by_lwp_.contains(t))
            (void)ns_tid_of(t);
    return mapped_lwp(ns_tid);
}

void live_target::forget_lwp(tid_t lwp)
{
    files_.forget(lwp);
    auto it = ns_tid_by_lwp_.find(lwp);
    if (it == ns_tid_by_lwp_.end())
        return;
    if (auto back = lwp_by_ns_tid_.find(it->second); back != lwp_by_ns_tid_.end() && back->second == lwp)
        lwp_by_ns_tid_.erase(back);
    ns_tid_by_lwp_.erase(it);
}

void live_target::forget_lwps()
{
    ns_tid_by_lwp_.clear();
    lwp_by_ns_tid_.clear();
    files_.clear();
}

}  // namespace tdctl::core
