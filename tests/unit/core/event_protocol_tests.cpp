// The protocol reader over a memory image laid out like glibc's (offsets
// chosen here, passed in as a layout): list unlinking anywhere, the cycles
// glibc's own reporting can create, corrupted lists, masks kept on consume.
#include <array>
#include <cstring>
#include <map>
#include <vector>

#include <doctest/doctest.h>

#include "core/protocol/event_protocol.hpp"
#include "events/event_set.hpp"
#include "tests/unit/core/nptl_image.hpp"

using namespace tdctl;
using namespace tdctl::core;

namespace {

// Records and variables as tests/unit/core/nptl_image.hpp lays them out.
struct fixture {
    test::memory_target<> target;
    protocol_layout layout = test::nptl_image_layout();
    target_addr head_var = test::last_event_var;
    target_addr mask_var = test::global_mask_var;
    target_addr list_head{0x100020};     // a list_t
    fixture()
    {
        layout.thread_list_heads = {list_head};
    }
    target_addr record(int i) const { return test::record_at(i); }
    void put64(target_addr a, std::uint64_t v) { target.mem.write_value(a, v); }
    std::uint64_t get64(target_addr a)
    {
        std::uint64_t v = 0;
        target.mem.read_value(a, v);
        return v;
    }
    // Builds the message list head -> r[0] -> r[1] ... -> 0.
    void chain(const std::vector<int>& order)
    {
        put64(head_var, order.empty() ? 0 : record(order[0]).value);
        for (std::size_t i = 0; i < order.size(); ++i)
            put64(record(order[i]) + 40, i + 1 < order.size() ? record(order[i + 1]).value : 0);
    }
    std::vector<std::uint64_t> walk(std::size_t limit = 16)
    {
        std::vector<std::uint64_t> out;
        for (std::uint64_t cur = get64(head_var); cur != 0 && out.size() < limit; cur = get64(target_addr{cur + 40}))
            out.push_back(cur);
        return out;
    }
};

}  // namespace

TEST_CASE("unlink at head, middle and tail, and clear the link")
{
    for (int victim : {0, 1, 2}) {
        fixture f;
        f.chain({0, 1, 2});
        event_protocol p(f.target, f.layout);
        REQUIRE(p.unlink(f.record(victim)));
        std::vector<std::uint64_t> expect;
        for (int i : {0, 1, 2})
            if (i != victim)
                expect.push_back(f.record(i).value);
        CHECK(f.walk() == expect);
        CHECK(f.get64(f.record(victim) + 40) == 0);
    }
}

TEST_CASE("unlinking a record that is not listed only clears its link")
{
    fixture f;
    f.chain({0, 1});
    f.put64(f.record(5) + 40, f.record(1).value);  // stale link
    event_protocol p(f.target, f.layout);
    REQUIRE(p.unlink(f.record(5)));
    CHECK(f.walk() == std::vector<std::uint64_t>{f.record(0).value, f.record(1).value});
    CHECK(f.get64(f.record(5) + 40) == 0);
}

TEST_CASE("glibc's re-push of the list's last record makes a cycle; unlink cuts it")
{
    // A -> B -> 0, then B reports again: B.next = A, head = B: B -> A -> B -> ...
    fixture f;
    f.chain({0, 1});
    f.put64(f.record(1) + 40, f.record(0).value);
    f.put64(f.head_var, f.record(1).value);
    event_protocol p(f.target, f.layout);
    auto listed = p.message_list();
    REQUIRE(listed);
    CHECK(listed->size() == 2);
    REQUIRE(p.unlink(f.record(1)));
    CHECK(f.walk() == std::vector<std::uint64_t>{f.record(0).value});
    CHECK(f.get64(f.record(1) + 40) == 0);
}

TEST_CASE("a record linked to itself")
{
    fixture f;
    f.put64(f.head_var, f.record(0).value);
    f.put64(f.record(0) + 40, f.record(0).value);
    event_protocol p(f.target, f.layout);
    REQUIRE(p.unlink(f.record(0)));
    CHECK(f.walk().empty());
}

TEST_CASE("a cycle not through the unlinked record is cut where it closes")
{
    fixture f;
    f.chain({0, 1, 2});
    f.put64(f.record(2) + 40, f.record(1).value);  // 0 -> 1 -> 2 -> 1 -> ...
    event_protocol p(f.target, f.layout);
    REQUIRE(p.unlink(f.record(7)));
    CHECK(f.walk() == std::vector<std::uint64_t>{f.record(0).value, f.record(1).value, f.record(2).value});
}

TEST_CASE("a link into unmapped memory ends the list there (glibc freed that record's stack), no crash")
{
    fixture f;
    f.chain({0, 1});
    f.put64(f.record(1) + 40, 0xdead0000);   // 0 -> 1 -> unmapped
    event_protocol p(f.target, f.layout);
    auto list = p.message_list();
    REQUIRE(list.has_value());
    CHECK(*list == std::vector<target_addr>{f.record(0), f.record(1)});
    CHECK(f.walk() == std::vector<std::uint64_t>{f.record(0).value, f.record(1).value});   // the link was cut

    f.put64(f.head_var, 0xdead0000);
    REQUIRE(p.unlink(f.record(0)));
    CHECK(f.walk().empty());
    f.put64(f.head_var, 0xdead0000);
    auto none = p.message_list();
    REQUIRE(none.has_value());
    CHECK(none->empty());
    CHECK(f.walk().empty());
}

TEST_CASE("buffer read and clear keep the mask")
{
    fixture f;
    event_protocol p(f.target, f.layout);
    auto r = f.record(3);
    auto mask = events::make_event_set({TD_CREATE, TD_DEATH});
    REQUIRE(p.write_thread_mask(r, mask));
    std::uint32_t num = TD_DEATH;
    f.target.mem.write_value(r + 24, num);
    f.put64(r + 32, r.value);
    auto buf = p.read_buffer(r);
    REQUIRE(buf);
    CHECK(buf->eventnum == TD_DEATH);
    CHECK(buf->eventdata == r.value);
    REQUIRE(p.clear_buffer(r));
    CHECK(p.read_buffer(r)->is_empty());
    using events::operator==;
    CHECK(*p.read_thread_mask(r) == mask);
}

TEST_CASE("thread list walk: order, and a corrupted list is bounded")
{
    fixture f;
    event_protocol p(f.target, f.layout);
    // head -> r0.link -> r1.link -> head
    auto link = [&](int i) { return f.record(i) + 48; };
    f.put64(f.list_head, link(0).value);
    f.put64(link(0), link(1).value);
    f.put64(link(1), f.list_head.value);
    auto recs = p.thread_records();
    REQUIRE(recs);
    CHECK(*recs == std::vector<target_addr>{f.record(0), f.record(1)});

    // r1 points back to r0: never returns to the head.
    f.put64(link(1), link(0).value);
    CHECK(p.thread_records().error() == TD_DBERR);
}

TEST_CASE("global mask round trip and the enable flag")
{
    fixture f;
    event_protocol p(f.target, f.layout);
    auto mask = events::make_event_set({TD_CREATE});
    REQUIRE(p.write_global_mask(mask));
    using events::operator==;
    CHECK(*p.read_global_mask() == mask);
    auto r = f.record(2);
    REQUIRE(p.write_report_events(r, true));
    CHECK(*p.read_report_events(r));
    REQUIRE(p.write_report_events(r, false));
    CHECK_FALSE(*p.read_report_events(r));
    // No initial flag in this layout: TD_NOCAPAB, as before libc initialises.
    CHECK(p.read_initial_report_events().error() == TD_NOCAPAB);
}

TEST_CASE("consume: buffer read, emptied (padding and mask kept) and unlinked, at the head or deeper")
{
    for (int position : {0, 1}) {
        fixture f;
        event_protocol p(f.target, f.layout);
        auto victim = f.record(position == 0 ? 4 : 5);
        f.chain(position == 0 ? std::vector<int>{4, 5} : std::vector<int>{4, 5});
        auto mask = events::make_event_set({TD_DEATH});
        REQUIRE(p.write_thread_mask(victim, mask));
        std::uint32_t num = TD_DEATH, pad = 0xabcd1234;
        f.target.mem.write_value(victim + 24, num);
        f.target.mem.write_value(victim + 28, pad);  // between eventnum and eventdata
        f.put64(victim + 32, victim.value);

        auto b = p.consume(victim);
        REQUIRE(b);
        CHECK(b->eventnum == TD_DEATH);
        CHECK(b->eventdata == victim.value);
        CHECK(p.read_buffer(victim)->is_empty());
        std::uint32_t pad_after = 0;
        f.target.mem.read_value(victim + 28, pad_after);
        CHECK(pad_after == pad);
        using events::operator==;
        CHECK(*p.read_thread_mask(victim) == mask);
        auto other = f.record(position == 0 ? 5 : 4);
        CHECK(f.walk() == std::vector<std::uint64_t>{other.value});
        CHECK(f.get64(victim + 40) == 0);
    }
}

TEST_CASE("consume of an empty, unlisted record writes nothing")
{
    fixture f;
    event_protocol p(f.target, f.layout);
    auto before = f.target.mem.bytes;
    auto b = p.consume(f.record(9));
    REQUIRE(b);
    CHECK(b->is_empty());
    CHECK(f.target.mem.bytes == before);
}

TEST_CASE("consume with the start routine: read in the same pass; null when not asked or not published")
{
    fixture f;
    f.layout.start_routine = {64, 1, 64};
    event_protocol p(f.target, f.layout);
    auto r = f.record(3);
    f.chain({3});
    std::uint32_t num = TD_CREATE;
    f.target.mem.write_value(r + 24, num);
    f.put64(r + 32, r.value);
    f.put64(r + 64, 0x401136);
    auto b = p.consume(r, true);
    REQUIRE(b);
    CHECK(b->eventnum == TD_CREATE);
    CHECK(b->start_routine == target_addr{0x401136});
    CHECK(f.walk().empty());
    // Consumed already: the buffer is empty, the start routine still read.
    auto again = p.consume(r, true);
    REQUIRE(again);
    CHECK(again->is_empty());
    CHECK(again->start_routine == target_addr{0x401136});
    CHECK(p.consume(r)->start_routine.is_null());

    fixture without;   // a library that publishes no start routine
    event_protocol q(without.target, without.layout);
    REQUIRE(q.consume(without.record(1), true));
    CHECK(q.consume(without.record(1), true)->start_routine.is_null());
}

namespace {

// A record holding a TD_CREATE (or TD_DEATH) message at the list's head, its
// tid field `tid`, its enable flag `flag`.
target_addr listed_message(fixture& f, int i, td_event_e event, std::int32_t tid, std::uint8_t flag)
{
    auto r = f.record(i);
    f.chain({i});
    f.target.mem.write_value(r + 0, tid);
    f.target.mem.write_value(r + 8, flag);
    f.target.mem.write_value(r + 24, static_cast<std::uint32_t>(event));
    f.put64(r + 32, r.value);
    return r;
}

std::uint8_t flag_of(fixture& f, target_addr r)
{
    std::uint8_t v = 0;
    f.target.mem.read_value(r + 8, v);
    return v;
}

}  // namespace

TEST_CASE("consume with extras: a new thread enabled and a stack window read, one read and one write in all")
{
    fixture f;
    change_journal journal(f.target.mem, 0);
    event_protocol p(f.target, f.layout);
    p.set_journal(&journal);
    auto r = listed_message(f, 3, TD_CREATE, 77, 0);
    target_addr stack{0x180000};
    for (std::uint64_t i = 0; i < 8; ++i)
        f.put64(stack + static_cast<std::int64_t>(8 * i), 0x1000 + i);
    std::array<std::byte, 64> window{};
    const std::array<std::pair<target_addr, std::span<std::byte>>, 1> reads{{{stack, std::span(window)}}};
    consume_extras x;
    x.reads = reads;
    x.flag = consume_extras::flag_change::enable;
    x.record_tid = 77;

    f.target.mem.read_calls = f.target.mem.write_calls = 0;
    auto b = p.consume(r, false, x);
    REQUIRE(b);
    CHECK(f.target.mem.read_calls == 1);
    CHECK(f.target.mem.write_calls == 1);
    CHECK(b->eventnum == TD_CREATE);
    CHECK(b->extras_read);
    CHECK(b->flag_changed);
    std::uint64_t third = 0;
    std::memcpy(&third, window.data() + 16, 8);
    CHECK(third == 0x1002);
    CHECK(flag_of(f, r) == 1);
    CHECK(f.walk().empty());
    CHECK(p.read_buffer(r)->is_empty());
    // Journaled before the write: the restore takes the flag back.
    const target_addr flag_at = r + 8;
    CHECK(journal.is_active(flag_at));
    journal.restore_all();
    CHECK(flag_of(f, r) == 0);
}

TEST_CASE("consume with extras: a record whose tid is another thread's keeps its flag; an unreadable window is said")
{
    fixture f;
    change_journal journal(f.target.mem, 0);
    event_protocol p(f.target, f.layout);
    p.set_journal(&journal);
    auto r = listed_message(f, 4, TD_CREATE, 78, 0);
    std::array<std::byte, 64> window{};
    const std::array<std::pair<target_addr, std::span<std::byte>>, 1> reads{{{target_addr{0x900000}, std::span(window)}}};
    consume_extras x;
    x.reads = reads;
    x.flag = consume_extras::flag_change::enable;
    x.record_tid = 77;
    auto b = p.consume(r, false, x);
    REQUIRE(b);
    CHECK(b->eventnum == TD_CREATE);
    CHECK_FALSE(b->extras_read);
    CHECK_FALSE(b->flag_changed);
    CHECK(flag_of(f, r) == 0);
    CHECK_FALSE(journal.contains(r + 8));
    CHECK(f.walk().empty());  // the message is taken all the same
}

TEST_CASE("consume with extras at TD_DEATH: the flag goes back in the same write and the entry is settled")
{
    fixture f;
    change_journal journal(f.target.mem, 0);
    event_protocol p(f.target, f.layout);
    p.set_journal(&journal);
    auto r = listed_message(f, 5, TD_DEATH, 91, 0);
    REQUIRE(p.write_report_events(r, true, 91));
    REQUIRE(flag_of(f, r) == 1);
    consume_extras x;
    x.flag = consume_extras::flag_change::put_back;
    x.record_tid = 91;

    f.target.mem.read_calls = f.target.mem.write_calls = 0;
    auto b = p.consume(r, false, x);
    REQUIRE(b);
    CHECK(f.target.mem.read_calls == 1);
    CHECK(f.target.mem.write_calls == 1);
    CHECK(b->eventnum == TD_DEATH);
    CHECK(b->flag_changed);
    CHECK(flag_of(f, r) == 0);
    CHECK_FALSE(journal.is_active(r + 8));
    // Settled: the record's next owner may turn it on; no restore touches it.
    f.target.mem.write_value(r + 8, std::uint8_t{1});
    journal.restore_all();
    CHECK(flag_of(f, r) == 1);
}

TEST_CASE("consume with extras at TD_DEATH: a guard that fails leaves the flag, settled as at the exit stop")
{
    fixture f;
    change_journal journal(f.target.mem, 0);
    event_protocol p(f.target, f.layout);
    p.set_journal(&journal);
    auto r = listed_message(f, 6, TD_DEATH, 91, 0);
    REQUIRE(p.write_report_events(r, true, 91));
    f.target.mem.write_value(r + 0, std::int32_t{92});  // the record passed to another thread
    consume_extras x;
    x.flag = consume_extras::flag_change::put_back;
    x.record_tid = 92;
    auto b = p.consume(r, false, x);
    REQUIRE(b);
    CHECK(flag_of(f, r) == 1);
    CHECK_FALSE(journal.is_active(r + 8));
    // Another thread's value, someone else's write: neither goes back.
    x.record_tid = 91;
    f.target.mem.write_value(r + 0, std::int32_t{91});
    auto r2 = listed_message(f, 7, TD_DEATH, 93, 0);
    REQUIRE(p.write_report_events(r2, true, 93));
    f.target.mem.write_value(r2 + 8, std::uint8_t{2});
    x.record_tid = 93;
    REQUIRE(p.consume(r2, false, x));
    CHECK(flag_of(f, r2) == 2);
}
