#include "core/session/report_changes.hpp"

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
    return agent_->set_event(events);
}

td_status report_changes::ta_clear_event(const td_thr_events_t& events)
{
    if (agent_ == nullptr)
        return td_fail(TD_NOLIBTHREAD);
    will_write();
    return agent_->clear_event(events);
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
