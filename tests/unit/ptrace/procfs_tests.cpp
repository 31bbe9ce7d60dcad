// /proc parsers on canned text, and the readers on this test process.
#include <cstring>
#include <elf.h>
#include <string>
#include <sys/auxv.h>
#include <unistd.h>
#include <vector>

#include <doctest/doctest.h>

#include "ptrace/procfs.hpp"

using namespace tdctl;

TEST_CASE("stat: a comm with spaces and ')' does not shift fields")
{
    std::string text =
        "1234 (a b) c) S 1 1234 1234 0 -1 4194368 111 0 2 0 55 66 0 0 20 0 3 0 9999 1000 100 18446744073709551615 "
        "1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
    auto st = procfs::parse_stat(text);
    REQUIRE(st);
    CHECK(st->pid == 1234);
    CHECK(st->comm == "a b) c");
    CHECK(st->state == 'S');
    CHECK(st->ppid == 1);
    CHECK(st->flags == 4194368u);
    CHECK(st->minflt == 111);
    CHECK(st->majflt == 2);
    CHECK(st->utime == 55);
    CHECK(st->stime == 66);
    CHECK(st->num_threads == 3);
    CHECK(st->starttime == 9999);
    CHECK(st->processor == 1);
}

TEST_CASE("stat: truncated or garbage text is rejected")
{
    CHECK_FALSE(procfs::parse_stat(""));
    CHECK_FALSE(procfs::parse_stat("1234 no parens S 1"));
    CHECK_FALSE(procfs::parse_stat("1234 (x) S 1 2 3"));
}

TEST_CASE("status fields")
{
    std::string text = "Name:\ta b) c\nState:\tT (stopped)\nTgid:\t77\nPid:\t78\nPPid:\t1\nTracerPid:\t4242\n"
                       "Uid:\t1000\t1001\t1000\t1000\nVmHWM:\t   12345 kB\nThreads:\t5\n"
                       "CapEff:\t000001ffffffffff\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t4\n";
    auto st = procfs::parse_status(text);
    CHECK(st.name == "a b) c");
    CHECK(st.state == 'T');
    CHECK(st.tgid == 77);
    CHECK(st.pid == 78);
    CHECK(st.tracer_pid == 4242);
    CHECK(st.uid_real == 1000);
    CHECK(st.uid_effective == 1001);
    CHECK(st.vm_hwm_kb == 12345);
    CHECK(st.threads == 5);
    CHECK(st.cap_effective == 0x1ffffffffffULL);
    CHECK(st.voluntary_ctxt_switches == 17);
    CHECK(st.nonvoluntary_ctxt_switches == 4);
    CHECK(st.ns_pids.empty());   // no NSpid line (kernels before 4.1)
}

TEST_CASE("status NSpid: one ID per PID namespace, the host's first, the task's own last")
{
    auto nested = procfs::parse_status("Name:\tsleeper\nNSpid:\t10518\t2\nNSsid:\t10510\t0\n");
    CHECK(nested.ns_pids == std::vector<pid_t>{10518, 2});
    auto twice = procfs::parse_status("NSpid:\t40000\t310\t7\n");
    CHECK(twice.ns_pids == std::vector<pid_t>{40000, 310, 7});
    auto same = procfs::parse_status("Pid:\t99\nNSpid:\t99\n");
    CHECK(same.ns_pids == std::vector<pid_t>{99});
}

TEST_CASE("NSpid of this process: its own PID first (tests run in the namespace their /proc shows)")
{
    auto st = procfs::read_status(getpid());
    REQUIRE(st);
    REQUIRE_FALSE(st->ns_pids.empty());
    CHECK(st->ns_pids.front() == getpid());
}

TEST_CASE("auxv of this process matches getauxval")
{
    auto auxv = procfs::read_auxv(getpid());
    REQUIRE(auxv.contains(AT_ENTRY));
    CHECK(auxv.at(AT_ENTRY) == getauxval(AT_ENTRY));
    CHECK(auxv.at(AT_PAGESZ) == getauxval(AT_PAGESZ));
}

TEST_CASE("auxv parse stops at AT_NULL")
{
    std::uint64_t words[] = {AT_ENTRY, 0x1000, AT_NULL, 0, AT_BASE, 0x2000};
    auto auxv = procfs::parse_auxv(std::string_view(reinterpret_cast<const char*>(words), sizeof words));
    CHECK(auxv.size() == 1);
    CHECK(auxv.at(AT_ENTRY) == 0x1000);
}

TEST_CASE("readers on this process; a vanished pid is no error")
{
    auto tasks = procfs::list_tasks(getpid());
    REQUIRE(tasks.size() >= 1);
    CHECK(tasks.front().value == getpid());
    auto st = procfs::read_status(getpid());
    REQUIRE(st);
    CHECK(st->tgid == getpid());
    CHECK(procfs::read_comm(getpid(), tid_t{getpid()}).size() > 0);
    // pid_max is at most 4194304; this one cannot exist.
    CHECK(procfs::list_tasks(999999999).empty());
    CHECK_FALSE(procfs::read_status(999999999));
    CHECK_FALSE(procfs::read_stat(999999999));
}

TEST_CASE("syscall file: a blocked call with its arguments, outside a call, running, malformed")
{
    // A thread blocked in clone(CLONE_VM|CLONE_VFORK|SIGCHLD) (posix_spawn).
    auto in_clone = procfs::parse_syscall("56 0x4111 0x7ffd5c0e2000 0x0 0x0 0x0 0x0 0x7ffd5c0e1f38 0x7f3a1c2e4b1d\n");
    REQUIRE(in_clone);
    CHECK(in_clone->number == 56);
    CHECK(in_clone->args[0] == 0x4111);
    CHECK(in_clone->args[1] == 0x7ffd5c0e2000);
    auto outside = procfs::parse_syscall("-1 0x7ffd5c0e1f38 0x7f3a1c2e4b1d\n");
    REQUIRE(outside);
    CHECK(outside->number == -1);
    CHECK_FALSE(procfs::parse_syscall("running\n"));
    CHECK_FALSE(procfs::parse_syscall("58 0x1 zz\n"));
    CHECK_FALSE(procfs::parse_syscall(""));
}
