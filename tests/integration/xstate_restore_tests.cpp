// A remote call puts back every register of the thread it ran on: the ptrace
// layer's hijacked_thread (what `-p PID --agent` uses for its libc calls)
// runs a fixture function that overwrites ymm0-15 whole (zmm0-31 and k0-7 on
// an AVX-512 CPU), MXCSR and the x87 control word on a thread that holds
// known values in all of them, then restores the thread as the agent load
// does. The thread compares its registers afterwards (fixtures/
// xstate_target.c). Without the XSAVE restore the vector upper halves come
// back wrong; without the legacy FP restore too, xmm, MXCSR and the control
// word do.
//
// Before the restore the test reads the thread's XSAVE area itself
// (PTRACE_GETREGSET NT_X86_XSTATE, component offsets from CPUID leaf 0xD),
// so a fixture function that did not really overwrite the registers fails
// here rather than passing by accident.
#include <doctest/doctest.h>

#include <cpuid.h>
#include <elf.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "base/change_journal.hpp"
#include "ptrace/process_memory.hpp"
#include "ptrace/remote_call.hpp"
#include "ptrace/return_frame_x86_64.hpp"
#include "ptrace/traced_process.hpp"
#include "tests/support/support.hpp"

using namespace tdctl;
using tdctl::journal_storage;
using tdctl::change_journal;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t clobber_result = 0x5ca1ab1e;   // what the fixture's clobber functions return

/// The running fixture and what its ready line said.
struct holder_target {
    test::child_process process;
    pid_t tid = 0;
    std::uint64_t clobber = 0, loop_begin = 0, loop_end = 0, slow = 0;

    explicit holder_target(bool avx512)
        : process(test::child_process::spawn(avx512 ? std::vector<std::string>{test::fixture_path("xstate_target"),
                                                                               "--avx512"}
                                                    : std::vector<std::string>{test::fixture_path("xstate_target")}))
    {
        std::string line = process.require_line(10000ms);
        int pid = 0;
        REQUIRE_MESSAGE(std::sscanf(line.c_str(), "ready %d tid=%d clobber=%lx loop=%lx-%lx slow=%lx", &pid, &tid,
                                    &clobber, &loop_begin, &loop_end, &slow) == 6,
                        line);
    }
};

/// The fixture's answer to "check": passes, and passes with each part changed.
struct holder_check {
    int passes = -1, bad = -1, ymm_upper = -1, xmm = -1, mxcsr = -1, fcw = -1, zmm_upper = -1, zmm_high = -1,
        opmask = -1;
};

holder_check check(holder_target& t)
{
    std::string line = t.process.ask("check", 20000ms);
    holder_check c;
    REQUIRE_MESSAGE(std::sscanf(line.c_str(),
                                "passes=%d bad=%d ymm_upper=%d xmm=%d mxcsr=%d fcw=%d zmm_upper=%d zmm_high=%d "
                                "opmask=%d",
                                &c.passes, &c.bad, &c.ymm_upper, &c.xmm, &c.mxcsr, &c.fcw, &c.zmm_upper, &c.zmm_high,
                                &c.opmask) == 9,
                    "fixture answered: " << line);
    return c;
}

/// The holder ran on since `before` and no pass saw a register changed.
void require_all_put_back(const holder_check& c, const holder_check& before)
{
    CHECK(c.passes > before.passes);
    CHECK(c.ymm_upper == 0);
    CHECK(c.xmm == 0);
    CHECK(c.mxcsr == 0);
    CHECK(c.fcw == 0);
    CHECK(c.zmm_upper == 0);
    CHECK(c.zmm_high == 0);
    CHECK(c.opmask == 0);
    CHECK(c.bad == 0);
}

/// Offset and size of XSAVE state component `n` in the standard (non-compacted)
/// format ptrace gives (CPUID leaf 0xD, sub-leaf n: EAX size, EBX offset).
std::pair<unsigned, unsigned> xsave_component(unsigned n)
{
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    __cpuid_count(0xd, n, eax, ebx, ecx, edx);
    return {ebx, eax};
}

bool all_ones(const std::vector<std::uint8_t>& area, std::size_t at, std::size_t length)
{
    if (at + length > area.size())
        return false;
    for (std::size_t i = at; i < at + length; ++i)
        if (area[i] != 0xff)
            return false;
    return true;
}

/// Reads the XSAVE area of a stopped task and checks that the clobber
/// function's values are in it: every vector (and mask) register all ones,
/// MXCSR 0x3f80, x87 control word 0x077f (legacy area: FCW at 0, MXCSR at
/// 24, xmm0-15 at 160; AVX-512 components 5, 6, 7).
void require_clobbered(pid_t tid, bool avx512)
{
    std::vector<std::uint8_t> area(16384);
    iovec io{area.data(), area.size()};
    REQUIRE(::ptrace(PTRACE_GETREGSET, tid, reinterpret_cast<void*>(NT_X86_XSTATE), &io) == 0);
    area.resize(io.iov_len);
    std::uint16_t fcw = 0;
    std::uint32_t mxcsr = 0;
    std::memcpy(&fcw, area.data(), sizeof fcw);
    std::memcpy(&mxcsr, area.data() + 24, sizeof mxcsr);
    CHECK(fcw == 0x077f);
    CHECK(mxcsr == 0x3f80);
    CHECK(all_ones(area, 160, 16 * 16));                        // xmm0-15
    auto [ymm_at, ymm_size] = xsave_component(2);               // ymm0-15 upper halves
    CHECK(ymm_size == 256);
    CHECK(all_ones(area, ymm_at, 256));
    if (!avx512)
        return;
    auto [k_at, k_size] = xsave_component(5);                   // k0-7, 8 bytes each
    auto [zup_at, zup_size] = xsave_component(6);               // zmm0-15 bits 256-511
    auto [zhi_at, zhi_size] = xsave_component(7);               // zmm16-31 whole
    CHECK(zup_size == 512);
    CHECK(zhi_size == 1024);
    for (unsigned k = 0; k < 8; ++k)
        CHECK(all_ones(area, k_at + k * 8, 2));                 // kxnorw sets 16 bits
    CHECK(all_ones(area, zup_at, 512));
    CHECK(all_ones(area, zhi_at, 1024));
}

/// Attaches, waits until the holder thread is inside its spin loop (the
/// values live in its registers there), and returns held.
std::unique_ptr<ptrace::traced_process> attach_in_loop(const holder_target& t)
{
    auto process = ptrace::traced_process::attach(t.process.pid());
    for (int tries = 0; tries < 200; ++tries) {
        auto regs = ptrace::registers::read(tid_t{t.tid});
        REQUIRE(regs.has_value());
        std::uint64_t pc = regs->pc().value;
        if (pc >= t.loop_begin && pc <= t.loop_end)
            return process;
        process->release_all();
        std::this_thread::sleep_for(1ms);
        process->stop_all();
    }
    FAIL("the holder thread was never found inside its spin loop");
    return process;
}

/// Stops of threads that are not part of the call: let them go on.
void let_go(ptrace::traced_process& process, const ptrace::stop_event& ev)
{
    if (ev.kind == ptrace::stop_kind::thread_created)
        process.resume(ev.child);
    if (ev.kind != ptrace::stop_kind::thread_exited && ev.kind != ptrace::stop_kind::process_exited)
        process.resume(ev.tid);
}

/// One round: hijack the holder in its loop, call the clobber function on
/// it (twice, as the agent load makes several calls), check the registers
/// really changed, restore as the load does, detach.
void clobber_and_restore(holder_target& t, bool avx512)
{
    auto process = attach_in_loop(t);
    auto sigreturn = ptrace::find_sigreturn_code(t.process.pid(), process->memory());
    REQUIRE(sigreturn.has_value());
    {
        ptrace::hijacked_thread h(*process, tid_t{t.tid}, *sigreturn);
        process->release_all();
        auto others = [&](const ptrace::stop_event& ev) { let_go(*process, ev); };
        for (int call = 0; call < 2; ++call) {
            auto rax = h.call(target_addr{t.clobber}, {}, 10000, others);
            REQUIRE(rax.has_value());
            CHECK(*rax == clobber_result);
        }
        require_clobbered(t.tid, avx512);
        h.restore();
    }
    process->set_call_marker(target_addr{});
    process->detach();
}

void run_rounds(bool avx512)
{
    test::require_ptrace();
    holder_target t(avx512);
    holder_check before = check(t);
    REQUIRE(before.bad == 0);   // the fixture's own comparison holds without any tracer
    constexpr int rounds = 10;
    for (int round = 0; round < rounds; ++round) {
        CAPTURE(round);
        clobber_and_restore(t, avx512);
        holder_check c = check(t);
        require_all_put_back(c, before);
    }
    CHECK_FALSE(t.process.wait_exit(0ms).has_value());
}

}  // namespace

TEST_CASE("a remote call that overwrites ymm0-15, MXCSR and the x87 control word: all put back")
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx"))
        test::skip_test("this CPU has no AVX");
    run_rounds(false);
}

TEST_CASE("a remote call that overwrites zmm0-31 and k0-7 (AVX-512): all put back")
{
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f")) {
        MESSAGE("this CPU has no AVX-512F: only the AVX case ran");
        return;
    }
    run_rounds(true);
}

namespace {

/// A call that outlasts its time limit (xstate_clobber_slow(call_ms) with a
/// limit of limit_ms) on thread `tid`, taken back, then tdctl's part ends:
/// detach. The call returns later, with no tracer; only its frame can give
/// the thread its registers back.
void outlast_and_detach(std::unique_ptr<ptrace::traced_process> process, holder_target& t, pid_t tid,
                        unsigned call_ms, int limit_ms)
{
    auto sigreturn = ptrace::find_sigreturn_code(t.process.pid(), process->memory());
    REQUIRE(sigreturn.has_value());
    {
        ptrace::hijacked_thread h(*process, tid_t{tid}, *sigreturn);
        process->release_all();
        auto others = [&](const ptrace::stop_event& ev) { let_go(*process, ev); };
        const std::uint64_t args[] = {call_ms};
        auto rax = h.call(target_addr{t.slow}, args, limit_ms, others);
        CHECK_FALSE(rax.has_value());
        CHECK(h.is_stuck());
        CHECK(h.taken_back());
    }
    process->set_call_marker(target_addr{});
    process->detach();
}

bool avx512_here()
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f");
}

}  // namespace

// Before the way back, a call past its limit was left to return to the
// call marker, and the thread died of SIGSEGV there once tdctl had gone.
TEST_CASE("a remote call past its time limit is taken back: returning untraced, the thread is itself again")
{
    test::require_ptrace();
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx"))
        test::skip_test("this CPU has no AVX");
    const bool avx512 = avx512_here();
    holder_target t(avx512);
    holder_check before = check(t);
    REQUIRE(before.bad == 0);
    for (int round = 0; round < 3; ++round) {
        CAPTURE(round);
        outlast_and_detach(attach_in_loop(t), t, t.tid, 400, 100);
        std::this_thread::sleep_for(400ms);   // the call returns meanwhile, through its frame
        REQUIRE_FALSE(t.process.wait_exit(0ms).has_value());
        holder_check c = check(t);
        require_all_put_back(c, before);
        before = c;
    }
}

// The main thread waits in read() on stdin (fgets). Taken back, it must
// start that read again, as the kernel restarts an interrupted call: with
// EINTR fgets would return NULL and the fixture would end.
TEST_CASE("a thread taken back out of a blocking read(): the read starts again, no EINTR")
{
    test::require_ptrace();
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx"))
        test::skip_test("this CPU has no AVX");
    holder_target t(false);
    REQUIRE(check(t).bad == 0);
    for (int round = 0; round < 3; ++round) {
        CAPTURE(round);
        std::this_thread::sleep_for(20ms);   // main is back in read() after answering
        auto process = ptrace::traced_process::attach(t.process.pid());
        auto state = ptrace::thread_state::read(tid_t{t.process.pid()});
        REQUIRE(state.has_value());
        REQUIRE_MESSAGE(state->in_restartable_syscall(), "main is not in a system call");
        CHECK(state->general().raw().orig_rax == 0);   // read
        outlast_and_detach(std::move(process), t, t.process.pid(), 300, 50);
        std::this_thread::sleep_for(300ms);
        REQUIRE_FALSE(t.process.wait_exit(0ms).has_value());
        holder_check c = check(t);   // main read the line: its read() was restarted
        CHECK(c.bad == 0);
    }
    REQUIRE_FALSE(t.process.wait_exit(0ms).has_value());
}

// The tracer dies (SIGKILL) while the thread is hijacked. The process that
// keeps the shared journal (tdctl's first process; here this test, as
// cmd/guardian.cpp does it) puts every entry back. During a call, the return
// slot gets its original, the way to rt_sigreturn, and the call, returning
// later with no tracer, lands on its frame (before, the slot's original was
// whatever the stack held, and the thread jumped there). Between two calls
// the thread waits parked on that rt_sigreturn (before, it sat in the
// SIGSEGV stop of its return, and the kernel delivered that SIGSEGV).
TEST_CASE("the tracer SIGKILLed while a thread is hijacked: during a call or between two, the thread lives as itself")
{
    test::require_ptrace();
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx"))
        test::skip_test("this CPU has no AVX");
    holder_target t(avx512_here());
    holder_check before = check(t);
    REQUIRE(before.bad == 0);
    const pid_t pid = t.process.pid();
    for (bool during_call : {true, false}) {
        CAPTURE(during_call);
        // A block of its own per tracer (the last one's mutex is this process's now).
        journal_storage& storage = journal_storage::create_shared(256);
        int ready[2];
        REQUIRE(::pipe(ready) == 0);
        pid_t tracer = ::fork();
        REQUIRE(tracer >= 0);
        if (tracer == 0) {
            // The tracer: no test macros here, only an exit status.
            try {
                storage.hold_as_tracer();
                auto process = ptrace::traced_process::attach(pid);
                for (int tries = 0; tries < 200; ++tries) {
                    auto regs = ptrace::registers::read(tid_t{t.tid});
                    if (regs && regs->pc().value >= t.loop_begin && regs->pc().value <= t.loop_end)
                        break;
                    process->release_all();
                    std::this_thread::sleep_for(1ms);
                    process->stop_all();
                }
                auto sigreturn = ptrace::find_sigreturn_code(pid, process->memory());
                if (sigreturn) {
                    ptrace::hijacked_thread h(*process, tid_t{t.tid}, *sigreturn);
                    process->release_all();
                    auto others = [&](const ptrace::stop_event& ev) { let_go(*process, ev); };
                    char c = 'x';
                    if (during_call) {
                        (void)!::write(ready[1], &c, 1);
                        const std::uint64_t args[] = {800};
                        (void)h.call(target_addr{t.slow}, args, 20000, others);
                    } else {
                        (void)h.call(target_addr{t.clobber}, {}, 10000, others);
                        (void)!::write(ready[1], &c, 1);
                        for (;;)
                            ::pause();
                    }
                }
            } catch (...) {
            }
            ::_exit(3);
        }
        ::close(ready[1]);
        char c = 0;
        REQUIRE(::read(ready[0], &c, 1) == 1);
        ::close(ready[0]);
        std::this_thread::sleep_for(150ms);   // during a call: 150 ms into its 800 ms of sleep
        ::kill(tracer, SIGKILL);
        int raw = 0;
        REQUIRE(::waitpid(tracer, &raw, 0) == tracer);
        CHECK(WIFSIGNALED(raw));
        CHECK(storage.wait_for_tracer_death(2000) == journal_storage::tracer_state::dead);
        ptrace::process_memory memory(pid);
        auto tally = change_journal::restore_abandoned(storage, memory);
        if (during_call)
            CHECK(tally.restored >= 1);   // the return slot
        std::this_thread::sleep_for(900ms);   // the call returns, untraced
        REQUIRE_FALSE(t.process.wait_exit(0ms).has_value());
        holder_check after = check(t);
        CHECK(after.passes > before.passes);
        CHECK(after.bad == 0);
        before = after;
    }
}
