#include "core/stacks/event_stacks.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "base/log.hpp"
#include "core/locks/lock_probe.hpp"

namespace tdctl::core {

event_stacks::~event_stacks() = default;

std::expected<std::vector<stack_frame>, std::string> event_stacks::stack_of(tid_t lwp, int max_frames)
{
    auto& process = target_.process();
    const auto* t = process.find(lwp);
    if (t == nullptr || !t->is_stopped())
        return std::unexpected(fmt::format("LWP {} is not stopped by tdctl", lwp.value));
    auto regs = process.tasks().trap_registers(lwp);
    if (!regs)
        regs = ptrace::registers::read(lwp);
    if (!regs)
        return std::unexpected(std::string("no frame could be read: the LWP is exiting"));
    unwind_start start;
    start.regs = regs->raw();
    // The trap byte is a site's first: one past it, the LWP has not run the
    // reporting function's `ret` yet.
    if (target_addr site = regs->pc() - ptrace::breakpoint_pc_adjust; process.sites().at(site) != nullptr) {
        start.report_site = site;
    } else if (process.sites().at(t->returned_from_site()) != nullptr) {
        start.report_site = t->returned_from_site();
        start.returned = true;
    }
    if (!unwinder_)
        unwinder_ = std::make_unique<unwinder>(target_.pid(), target_.memory(), &target_.modules());
    return unwinder_->unwind(lwp, start, max_frames);
}

void event_stacks::decorate(events::event_message& msg, tid_t reporter)
{
    if (depth_ <= 0)
        return;
    // Noted first: a TD_LOCK_TRY opens the wait whose TD_SLEEP gets the stack.
    if (!wants_lock_stack(msg))
        return;
    if (!only_.empty() && std::find(only_.begin(), only_.end(), msg.event) == only_.end())
        return;
    if (auto frames = stack_of(reporter, depth_))
        msg.frames = std::move(*frames);
    else
        log::debug("stack of {}: {}", reporter.value, frames.error());
    attach_lock_owner(msg);
}

bool event_stacks::wants_lock_stack(const events::event_message& msg)
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

void event_stacks::attach_lock_owner(events::event_message& msg)
{
    if (!lock_probes_ || msg.event != TD_SLEEP || msg.frames.empty())
        return;
    msg.lock = lock_kind_of(msg.frames);
    if (msg.lock == events::lock_kind::semaphore) {
        if (!lock_semaphores_)
            lock_semaphores_ = find_lock_semaphores(target_);
        auto holder = lock_semaphores_ ? lock_semaphore_holder(target_.memory(), *lock_semaphores_, target_addr{msg.data})
                                       : std::nullopt;
        if (holder && *holder != 0)
            msg.lock_owner = *holder;
    } else {
        msg.lock_owner = lock_owner_of(target_.memory(), target_addr{msg.data}, msg.lock);
    }
    // The kind is named by the agent's frames; the call site starts below them.
    drop_reporter_frames(msg.frames, target_.modules());
}

void event_stacks::decorate_streamed(events::event_message& msg)
{
    if (!lock_probes_ || msg.event != TD_SLEEP || msg.lock == events::lock_kind::unknown || msg.call_site.is_null())
        return;
    if (!unwinder_)
        unwinder_ = std::make_unique<unwinder>(target_.pid(), target_.memory(), &target_.modules());
    if (auto frame = unwinder_->frame_of_return_address(msg.call_site))
        msg.frames = {std::move(*frame)};
}

call_site_reader& event_stacks::call_sites()
{
    if (!call_sites_)
        call_sites_ = std::make_unique<call_site_reader>(target_.pid());
    return *call_sites_;
}

target_addr event_stacks::call_site_from(target_addr site, const ptrace::registers& regs,
                                         std::span<const std::byte> stack)
{
    return call_sites().read_from(regs, site, stack).value_or(target_addr{});
}

target_addr event_stacks::call_site_of(tid_t creator, target_addr site)
{
    // The registers the trap was recognised by; read again only if gone.
    auto regs = target_.process().tasks().trap_registers(creator);
    if (!regs)
        regs = ptrace::registers::read(creator);
    if (!regs)
        return {};
    return call_sites().read(*regs, site, target_.memory()).value_or(target_addr{});
}

}  // namespace tdctl::core
