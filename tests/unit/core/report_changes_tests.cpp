// core::report_changes over a memory image laid out like glibc's: each td_*
// write is journaled and counted in an epoch, restore_originals() puts the
// target's own values back, and only messages queued after a change are
// consumed at detach (those listed when tdctl came are the target's).
#include <doctest/doctest.h>

#include <unistd.h>

#include "base/change_journal.hpp"
#include "core/session/report_changes.hpp"
#include "core/thread_agent.hpp"
#include "events/event_names.hpp"
#include "tests/unit/core/nptl_image.hpp"

using namespace tdctl;
using namespace tdctl::core;

namespace {

// Records and variables as tests/unit/core/nptl_image.hpp lays them out.
struct image {
    test::memory_target<> target{::getpid()};
    target_addr head_var = test::last_event_var;
    target_addr mask_var = test::global_mask_var;
    change_journal journal{target.mem, ::getpid()};
    std::unique_ptr<thread_agent> agent;

    image()
    {
        protocol_layout layout = test::nptl_image_layout();
        for (int i = 0; i < 4; ++i)
            put32(record(i), 100 + i);  // each record's tid
        agent = std::make_unique<thread_agent>(target, layout);
        agent->protocol().set_journal(&journal);
    }
    ~image() { journal.forget_all(); }
    target_addr record(int i) const { return test::record_at(i); }
    void put32(target_addr a, std::uint32_t v) { target.mem.write_value(a, v); }
    void put64(target_addr a, std::uint64_t v) { target.mem.write_value(a, v); }
    std::uint64_t get64(target_addr a)
    {
        std::uint64_t v = 0;
        target.mem.read_value(a, v);
        return v;
    }
    /// A message from record i, pushed as glibc pushes it (head first).
    void queue_message(int i)
    {
        put32(record(i) + 24, TD_CREATE);
        put64(record(i) + 32, record(i).value);
        put64(record(i) + 40, get64(head_var));
        put64(head_var, record(i).value);
    }
    std::uint8_t flag(int i)
    {
        std::uint8_t v = 0;
        target.mem.read_value(record(i) + 8, v);
        return v;
    }
};

}  // namespace

TEST_CASE("a td_* write is journaled, moves the epoch, and restore_originals() puts the target's value back")
{
    image m;
    report_changes changes;
    changes.bind(m.agent.get(), m.journal);
    CHECK_FALSE(changes.reports_may_be_pending());
    const auto epoch = changes.epoch();

    REQUIRE(changes.ta_set_event(events::to_event_set({TD_CREATE, TD_DEATH})).has_value());
    CHECK(changes.epoch() == epoch + 1);
    CHECK(changes.reports_may_be_pending());
    CHECK(m.get64(m.mask_var) != 0);

    thread_handle th(*m.agent, m.record(1));
    REQUIRE(changes.thr_event_enable(th, true).has_value());
    CHECK(changes.epoch() == epoch + 2);
    CHECK(m.flag(1) == 1);

    changes.restore_originals();
    CHECK(m.get64(m.mask_var) == 0);
    CHECK(m.flag(1) == 0);
}

TEST_CASE("a write that changes no running thread's reporting keeps the epoch but asks for settling")
{
    image m;
    report_changes changes;
    changes.bind(m.agent.get(), m.journal);
    const auto epoch = changes.epoch();
    changes.will_write_quietly();
    CHECK(changes.epoch() == epoch);
    CHECK(changes.reports_may_be_pending());
    changes.settled();
    CHECK_FALSE(changes.reports_may_be_pending());
    changes.new_epoch();
    CHECK(changes.epoch() == epoch + 1);
}

TEST_CASE("after a change, messages queued since the bind are consumed at detach; those listed before stay")
{
    image m;
    m.queue_message(0);  // the target's own, listed when tdctl came
    report_changes changes;
    changes.bind(m.agent.get(), m.journal);
    REQUIRE(changes.thr_event_enable(thread_handle(*m.agent, m.record(2)), true).has_value());
    m.queue_message(2);  // pushed because of that change
    changes.restore_originals();
    changes.consume_our_messages();
    auto listed = m.agent->protocol().message_list();
    REQUIRE(listed.has_value());
    CHECK(*listed == std::vector<target_addr>{m.record(0)});
    CHECK(m.get64(m.record(2) + 24) == 0);  // its buffer consumed
}

TEST_CASE("without a change, nothing listed is consumed at detach, whenever it was queued")
{
    image m;
    report_changes changes;
    changes.bind(m.agent.get(), m.journal);
    m.queue_message(3);
    changes.restore_originals();
    changes.consume_our_messages();
    auto listed = m.agent->protocol().message_list();
    REQUIRE(listed.has_value());
    CHECK(*listed == std::vector<target_addr>{m.record(3)});
}

TEST_CASE("without a thread library, the td_* writes answer TD_NOLIBTHREAD and change nothing")
{
    image m;
    report_changes changes;
    changes.bind(nullptr, m.journal);
    auto r = changes.ta_set_event(events::to_event_set({TD_CREATE}));
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error() == TD_NOLIBTHREAD);
    CHECK(changes.restore() == nullptr);
    CHECK(m.get64(m.mask_var) == 0);
}
