// The task table (ptrace/task_table.hpp): records by TID, the exec's change
// of TID, and the per-record questions a remote call asks; no tracee.
#include <csignal>
#include <sys/ptrace.h>

#include <doctest/doctest.h>

#include "ptrace/task_table.hpp"

using namespace tdctl;
using namespace tdctl::ptrace;

TEST_CASE("an exec keeps only the exec'ing thread, under the leader's TID")
{
    task_table tasks;
    tasks.add(tid_t{100}, task_state::stopped).set_thread_pointer(target_addr{0x1000});
    tasks.add(tid_t{101}, task_state::stopped);
    tasks.add(tid_t{102}, task_state::stopped).set_thread_pointer(target_addr{0x3000});

    task& leader = tasks.keep_only_leader(tid_t{102}, tid_t{100});
    CHECK(tasks.tids() == std::vector<tid_t>{tid_t{100}});
    CHECK(leader.tid() == tid_t{100});
    // The record is the former thread's, not the old leader's.
    CHECK(leader.thread_pointer() == target_addr{0x3000});
    CHECK(tasks.find(tid_t{102}) == nullptr);
}

TEST_CASE("an exec by the leader itself, or by a thread with no record, leaves one leader record")
{
    task_table tasks;
    tasks.add(tid_t{200}, task_state::stopped).set_thread_pointer(target_addr{0x2000});
    tasks.add(tid_t{201});
    CHECK(tasks.keep_only_leader(tid_t{200}, tid_t{200}).thread_pointer() == target_addr{0x2000});
    CHECK(tasks.size() == 1);

    task_table empty;
    task& made = empty.keep_only_leader(tid_t{305}, tid_t{300});
    CHECK(made.tid() == tid_t{300});
    CHECK(empty.tids() == std::vector<tid_t>{tid_t{300}});
}

TEST_CASE("a pending signal is taken once and given back only when there was one")
{
    task_table tasks;
    tasks.add(tid_t{10}, task_state::stopped).keep_signal(SIGUSR1);
    CHECK(tasks.take_pending_signal(tid_t{10}) == SIGUSR1);
    CHECK(tasks.take_pending_signal(tid_t{10}) == 0);
    tasks.restore_pending_signal(tid_t{10}, 0);
    CHECK(tasks.find(tid_t{10})->pending_signal == 0);
    tasks.restore_pending_signal(tid_t{10}, SIGUSR1);
    CHECK(tasks.find(tid_t{10})->pending_signal == SIGUSR1);
    CHECK(tasks.take_pending_signal(tid_t{99}) == 0);  // no such task
}

TEST_CASE("only a task in a stop of its own, with no hit, may run code for us")
{
    task_table tasks;
    tasks.add(tid_t{1}, task_state::stopped);
    tasks.add(tid_t{2}, task_state::running);
    tasks.add(tid_t{3}, task_state::exit_stopped);
    tasks.add(tid_t{4}, task_state::stopped).in_group_stop = true;
    tasks.add(tid_t{5}, task_state::stopped).hit = trap_hit{target_addr{0x10}, false, {}};
    tasks.add(tid_t{6}, task_state::vfork_blocked);
    CHECK_FALSE(tasks.is_unfit_for_call(tid_t{1}));
    for (pid_t unfit : {2, 3, 4, 5, 6, 7})
        CHECK_MESSAGE(tasks.is_unfit_for_call(tid_t{unfit}), "tid ", unfit);
    CHECK(tasks.trap_registers(tid_t{5}).has_value());
    CHECK_FALSE(tasks.trap_registers(tid_t{1}).has_value());
}

TEST_CASE("keep_stopped marks only a stopped task as the owner's")
{
    task_table tasks;
    tasks.add(tid_t{1}, task_state::stopped);
    tasks.add(tid_t{2}, task_state::running);
    tasks.keep_stopped(tid_t{1});
    tasks.keep_stopped(tid_t{2});
    tasks.keep_stopped(tid_t{3});
    CHECK(tasks.find(tid_t{1})->needs_owner);
    CHECK_FALSE(tasks.find(tid_t{2})->needs_owner);
}
