#include "core/session/report_changes.hpp"

#include <algorithm>

namespace tdctl::core {

void report_changes::bind(thread_agent* agent, change_journal& journal)
{
    agent_ = agent;
    restore_.reset();
    listed_at_attach_.clear();
    if (agent_ == nullptr)
        return;
    restore_.emplace(agent_->protocol(), journal);
    if (auto listed = agent_->protocol().message_list())
        listed_at_attach_.insert(listed->begin(), listed->end());
}

void report_changes::will_write()
{
    may_be_pending_ = true;
    ++epoch_;
}

td_status report_changes::ta_set_event(const td_thr_events_t& events)
{
    if (agent_ == nullptr)
        return td_fail(TD_NOLIBTHREAD);
    will_write();
    for (std::size_t i = 0; i < TD_EVENTSIZE; ++i)
        asked_mask_.event_bits[i] |= events.event_bits[i];
    return agent_->set_event(events);
}

td_status report_changes::ta_clear_event(const td_thr_events_t& events)
{
    if (agent_ == nullptr)
        return td_fail(TD_NOLIBTHREAD);
    will_write();
    for (std::size_t i = 0; i < TD_EVENTSIZE; ++i)
        asked_mask_.event_bits[i] &= ~events.event_bits[i];
    return agent_->clear_event(events);
}

bool report_changes::apply_to_new_image()
{
    if (agent_ == nullptr)
        return false;
    bool applied = false;
    if (std::ranges::any_of(asked_mask_.event_bits, [](auto bits) { return bits != 0; })) {
        const td_thr_events_t asked = asked_mask_;
        applied = ta_set_event(asked).has_value();
    }
    if (enable_all_)
        if (auto threads = agent_->thr_iter())
            for (const auto& th : *threads)
                applied = thr_event_enable(th, true).has_value() || applied;
    return applied;
}

td_status report_changes::thr_set_event(const thread_handle& th, const td_thr_events_t& events)
{
    will_write();
    return th.set_event(events);
}

td_status report_changes::thr_clear_event(const thread_handle& th, const td_thr_events_t& events)
{
    will_write();
    return th.clear_event(events);
}

td_status report_changes::thr_event_enable(const thread_handle& th, bool on)
{
    will_write();
    return th.event_enable(on);
}

void report_changes::restore_originals()
{
    // A second restore (the detach of a running target restores before and
    // after its settling) finds nothing left to put back: what the first
    // found still makes the listed messages ours.
    if (restore_ && restore_->restore_originals())
        messages_are_ours_ = true;
}

void report_changes::consume_our_messages()
{
    if (agent_ == nullptr || !messages_are_ours_)
        return;
    // Messages buffered because of our masks and flags go with them.
    auto& p = agent_->protocol();
    if (auto listed = p.message_list())
        for (target_addr rec : *listed)
            if (!listed_at_attach_.contains(rec))
                (void)p.consume(rec);
    messages_are_ours_ = false;
}

}  // namespace tdctl::core
