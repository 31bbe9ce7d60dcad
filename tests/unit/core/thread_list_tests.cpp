// The thread list over a memory image laid out like glibc's (offsets chosen
// here), with the LWPs, thread pointers and PID-namespace TIDs of a target
// made up: which record each LWP runs, which records no LWP runs (ended:
// tid 0, -1 or a TID kept after exit; starting: not cloned yet), and the
// namespace translation both ways.
#include <cstring>
#include <map>
#include <vector>

#include <doctest/doctest.h>

#include "core/thread_agent.hpp"
#include "core/thread_handle.hpp"
#include "core/protocol/thread_list.hpp"
#include "tests/unit/core/nptl_image.hpp"

using namespace tdctl;
using namespace tdctl::core;

namespace {

// A target in a PID namespace of its own: LWP 100 + i is TID 1 + i there.
class namespaced_target final : public test::memory_target<> {
public:
    std::vector<tid_t> tasks;
    std::map<tid_t, target_addr> pointers;

    namespaced_target() : memory_target(100) {}
    std::vector<tid_t> lwps() override { return tasks; }
    std::optional<target_addr> thread_pointer(tid_t lwp) override
    {
        auto it = pointers.find(lwp);
        return it == pointers.end() ? std::nullopt : std::optional(it->second);
    }
    std::optional<pid_t> ns_tid_of(tid_t lwp) override
    {
        for (tid_t t : tasks)
            if (t == lwp)
                return lwp.value - 99;
        return std::nullopt;
    }
    std::optional<tid_t> lwp_of_ns_tid(pid_t ns_tid) override
    {
        for (tid_t t : tasks)
            if (t.value - 99 == ns_tid)
                return t;
        return std::nullopt;
    }
};

// Records as tests/unit/core/nptl_image.hpp lays them out.
constexpr std::int32_t exiting = 0x10, terminated = 0x20;   // glibc's cancelhandling bits

struct fixture {
    namespaced_target target;
    protocol_layout layout = test::nptl_image_layout();
    target_addr list_head{0x100020};
    std::vector<target_addr> listed;

    fixture()
    {
        layout.thread_list_heads = {list_head};
    }
    target_addr record(int i) const { return test::record_at(i); }
    // Adds record i to the live-thread list with this tid and cancelhandling.
    void add(int i, std::int32_t tid, std::int32_t cancel)
    {
        target.mem.write_value(record(i), tid);
        target.mem.write_value(record(i) + 4, cancel);
        listed.push_back(record(i));
        // head -> r0.link -> r1.link ... -> head
        target.mem.write_value(list_head, (listed.front() + 48).value);
        for (std::size_t k = 0; k < listed.size(); ++k) {
            std::uint64_t next = k + 1 < listed.size() ? (listed[k + 1] + 48).value : list_head.value;
            target.mem.write_value(listed[k] + 48, next);
        }
    }
    // LWP 100 + i runs record i.
    void lwp(int i)
    {
        target.tasks.push_back(tid_t{100 + i});
        target.pointers[tid_t{100 + i}] = record(i);
    }
};

}  // namespace

TEST_CASE("each record once by handle, LWPs in host TIDs, ended and starting records apart")
{
    fixture f;
    f.add(0, 1, 0);                        // main: TID 1 in its namespace, LWP 100
    f.add(1, 2, 0);                        // LWP 101
    f.add(2, 3, exiting);                  // LWP 102, exiting but not gone yet
    f.add(3, 0, exiting);                  // ended, not joined: tid cleared by the kernel
    f.add(4, 0, 0);                        // set up, not cloned yet
    f.add(5, 2, exiting);                  // ended; tid kept (glibc > 2.42), now LWP 101's
    f.add(6, -1, exiting | terminated);    // being joined
    f.add(7, 9, exiting);                  // ended; tid kept, no LWP has it
    for (int i : {0, 1, 2})
        f.lwp(i);
    f.target.tasks.push_back(tid_t{103});  // an LWP with no record
    thread_agent agent(f.target, f.layout);

    auto rows = list_threads(f.target, &agent);
    REQUIRE(rows);
    struct want {
        thread_entry_kind kind;
        pid_t lwp;
        std::optional<pid_t> ns_tid;
        target_addr handle;
    };
    using k = thread_entry_kind;
    std::vector<want> expected{
        {k::running, 100, 1, f.record(0)}, {k::running, 101, 2, f.record(1)},   {k::running, 102, 3, f.record(2)},
        {k::lwp_only, 103, 4, {}},         {k::ended, 0, std::nullopt, f.record(3)}, {k::starting, 0, std::nullopt, f.record(4)},
        {k::ended, 0, std::nullopt, f.record(5)}, {k::ended, 0, std::nullopt, f.record(6)},
        {k::ended, 0, std::nullopt, f.record(7)},
    };
    REQUIRE(rows->size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
        INFO("row ", i);
        const auto& r = (*rows)[i];
        CHECK(r.kind == expected[i].kind);
        CHECK(r.lwp.value == expected[i].lwp);
        CHECK(r.ns_tid == expected[i].ns_tid);
        CHECK(r.handle == expected[i].handle);
        CHECK(r.has_record == !expected[i].handle.is_null());
        CHECK(r.info.has_value() == r.has_record);
    }
    // td_thr_get_info: LWPs in host TIDs; no LWP: the process ID.
    CHECK((*rows)[1].info->ti_lid == 101);
    CHECK((*rows)[4].info->ti_lid == 100);
    CHECK((*rows)[4].info->ti_state == TD_THR_ZOMBIE);
    CHECK((*rows)[7].info->ti_lid == 100);
    CHECK((*rows)[7].info->ti_state == TD_THR_UNKNOWN);

    // map_lwp2thr takes host TIDs and finds the record holding the
    // namespace TID, not the ended one that kept the same value.
    auto m = agent.map_lwp2thr(tid_t{101});
    REQUIRE(m);
    CHECK(m->value() == f.record(1));
    CHECK(agent.map_lwp2thr(tid_t{2}).error() == TD_NOTHR);   // a namespace TID is not an LWP here
    CHECK(agent.map_lwp2thr(tid_t{103}).error() == TD_NOTHR);
}

TEST_CASE("without a thread library: the LWPs, main thread first")
{
    fixture f;
    f.target.tasks = {tid_t{50}, tid_t{100}, tid_t{120}};
    auto rows = list_threads(f.target, nullptr);
    REQUIRE(rows);
    REQUIRE(rows->size() == 3);
    CHECK((*rows)[0].lwp.value == 100);
    CHECK((*rows)[1].lwp.value == 50);
    CHECK((*rows)[2].lwp.value == 120);
    for (const auto& r : *rows) {
        CHECK(r.kind == thread_entry_kind::lwp_only);
        CHECK_FALSE(r.has_record);
    }
}

TEST_CASE("before the library set up its lists: one thread without a record handle, run by the main LWP")
{
    fixture f;
    f.target.tasks = {tid_t{100}};
    thread_agent agent(f.target, f.layout);   // the list head reads as null: not initialised
    auto rows = list_threads(f.target, &agent);
    REQUIRE(rows);
    REQUIRE(rows->size() == 1);
    CHECK((*rows)[0].kind == thread_entry_kind::running);
    CHECK((*rows)[0].lwp.value == 100);
    CHECK((*rows)[0].handle.is_null());
    CHECK((*rows)[0].has_record);
}
