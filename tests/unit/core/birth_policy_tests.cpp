// core::birth_policy over a memory image laid out like glibc's (nptl): when
// a new thread's reporting is switched on while watching — at its clone stop,
// or in its creator's TD_CREATE report once that creator is known to report
// in this epoch — and that nothing is enabled while late reports settle or
// for a record that is not the child's.
#include <doctest/doctest.h>

#include <map>
#include <unistd.h>

#include "base/change_journal.hpp"
#include "core/session/birth_policy.hpp"
#include "core/session/report_changes.hpp"
#include "core/thread_agent.hpp"
#include "events/event_names.hpp"
#include "tests/unit/core/nptl_image.hpp"

using namespace tdctl;
using namespace tdctl::core;

namespace {

/// A target whose LWP n runs the thread of record n (fs_base), with tid n;
/// records as tests/unit/core/nptl_image.hpp lays them out.
class image_target final : public test::memory_target<library_access> {
public:
    std::unique_ptr<thread_agent> library;
    std::map<pid_t, target_addr> thread_pointers;

    image_target() : memory_target(::getpid()) {}
    std::optional<target_addr> thread_pointer(tid_t lwp) override
    {
        auto it = thread_pointers.find(lwp.value);
        return it == thread_pointers.end() ? std::nullopt : std::optional<target_addr>(it->second);
    }
    thread_agent* agent() override { return library.get(); }
};

struct image {
    image_target target;
    change_journal journal{target.mem, ::getpid()};
    report_changes changes;
    birth_policy births{target, changes};

    image()
    {
        protocol_layout layout = test::nptl_image_layout();
        target.library = std::make_unique<thread_agent>(target, layout);
        target.library->protocol().set_journal(&journal);
        changes.bind(target.library.get(), journal);
    }
    ~image() { journal.forget_all(); }
    target_addr record(int lwp) const { return test::record_at(lwp); }
    /// LWP `lwp` is a thread of the library: its record holds its tid.
    void thread(int lwp, bool reporting = false)
    {
        target.mem.write_value(record(lwp), static_cast<std::uint32_t>(lwp));
        target.mem.write_value(record(lwp) + 8, static_cast<std::uint8_t>(reporting ? 1 : 0));
        target.thread_pointers[lwp] = record(lwp);
    }
    bool reports(int lwp)
    {
        std::uint8_t v = 0;
        target.mem.read_value(record(lwp) + 8, v);
        return v != 0;
    }
    int writes() const { return target.mem.write_calls; }
};

// Watching TD_CREATE and TD_DEATH.
constexpr watch_mode watching{.armed = true, .stops = false, .creates_reported = true};

}  // namespace

TEST_CASE("a creator's first child in an epoch is enabled at its clone stop; from then on, in the creator's report")
{
    image m;
    m.thread(10, true);   // the creator, enabled by arm()
    m.thread(11);
    m.births.on_clone(tid_t{10}, tid_t{11}, watching);
    CHECK(m.reports(11));   // written at the clone stop
    CHECK_FALSE(m.births.enables_at_report(tid_t{11}));

    // Its next pthread_create decided after that clone: it reports for sure.
    m.thread(12);
    const int before = m.writes();
    m.births.on_clone(tid_t{10}, tid_t{12}, watching);
    CHECK(m.writes() == before);   // nothing written: left to the report
    CHECK_FALSE(m.reports(12));
    CHECK(m.births.enables_at_report(tid_t{12}));

    // The report's own write did it.
    m.births.after_create_report(tid_t{12}, /*flag_changed=*/true, watching);
    CHECK_FALSE(m.births.enables_at_report(tid_t{12}));
}

TEST_CASE("a child left to a report whose write did not change the flag is enabled the clone stop's way")
{
    image m;
    m.thread(10, true);
    m.thread(11);
    m.thread(12);
    m.births.on_clone(tid_t{10}, tid_t{11}, watching);
    m.births.on_clone(tid_t{10}, tid_t{12}, watching);
    REQUIRE(m.births.enables_at_report(tid_t{12}));
    m.births.after_create_report(tid_t{12}, /*flag_changed=*/false, watching);
    CHECK(m.reports(12));
}

TEST_CASE("a change of a mask or flag starts a new epoch: the creator is unknown again")
{
    image m;
    m.thread(10, true);
    m.thread(11);
    m.thread(12);
    m.births.on_clone(tid_t{10}, tid_t{11}, watching);
    m.changes.will_write();
    m.births.on_clone(tid_t{10}, tid_t{12}, watching);
    CHECK(m.reports(12));
    CHECK_FALSE(m.births.enables_at_report(tid_t{12}));
}

TEST_CASE("a creator that exits between its clone and its report: its child is enabled at the exit stop")
{
    image m;
    m.thread(10, true);
    m.thread(11);
    m.thread(12);
    m.births.on_clone(tid_t{10}, tid_t{11}, watching);
    m.births.on_clone(tid_t{10}, tid_t{12}, watching);
    REQUIRE_FALSE(m.reports(12));
    m.births.on_exit(tid_t{10}, watching);
    CHECK(m.reports(12));
}

TEST_CASE("while late reports settle, nor after the watch, nothing is enabled")
{
    image m;
    m.thread(10, true);
    m.thread(11);
    m.births.set_settling(true);
    m.births.on_clone(tid_t{10}, tid_t{11}, watching);
    CHECK_FALSE(m.reports(11));
    m.births.set_settling(false);
    m.thread(12);
    m.births.on_clone(tid_t{10}, tid_t{12}, watch_mode{});
    CHECK_FALSE(m.reports(12));
}

TEST_CASE("a record whose tid is not the child's is no thread of the library: left alone")
{
    image m;
    m.thread(10, true);
    m.target.thread_pointers[11] = m.record(11);   // fs_base points at a record holding another tid
    m.target.mem.write_value(m.record(11), std::uint32_t{999});
    m.births.on_clone(tid_t{10}, tid_t{11}, watching);
    CHECK_FALSE(m.reports(11));
}

TEST_CASE("while only `stop`s wait, a child is enabled only when its creator reports (glibc does not pass the flag on)")
{
    image m;
    const watch_mode stopping{.armed = false, .stops = true, .creates_reported = false};
    m.thread(10, false);
    m.thread(11);
    m.births.on_clone(tid_t{10}, tid_t{11}, stopping);
    CHECK_FALSE(m.reports(11));
    m.thread(20, true);
    m.thread(21);
    m.births.on_clone(tid_t{20}, tid_t{21}, stopping);
    CHECK(m.reports(21));
}

TEST_CASE("a child of a creator whose mask tdctl changed is journaled with the creator's own mask as its natural one")
{
    image m;
    m.thread(10, true);
    m.thread(11);
    thread_handle creator(*m.target.library, m.record(10));
    REQUIRE(m.changes.thr_set_event(creator, events::to_event_set({TD_CREATE})).has_value());
    // glibc copies the creator's event buffer into the child.
    std::array<std::byte, 8> mask{};
    m.target.mem.read(m.record(10) + 16, mask);
    m.target.mem.write(m.record(11) + 16, mask);
    m.births.on_clone(tid_t{10}, tid_t{11}, watching);
    m.changes.restore_originals();
    std::uint64_t child_mask = 1;
    m.target.mem.read_value(m.record(11) + 16, child_mask);
    CHECK(child_mask == 0);   // the creator's natural mask, not the copy of ours
}
