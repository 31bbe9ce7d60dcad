#include "core/locks/deadlock_scan.hpp"

#include <algorithm>
#include <array>
#include <string_view>

#include <fmt/format.h>
#include <linux/futex.h>
#include <sys/syscall.h>

#include "core/stacks/event_stacks.hpp"
#include "core/session/live_target.hpp"
#include "core/locks/lock_semaphores.hpp"
#include "core/locks/wait_for_graph.hpp"

namespace tdctl::core {

namespace {

// The kernel's restart codes (include/linux/errno.h, not exported to user
// space): rax holds one of them while a stop interrupts a blocking syscall.
constexpr long erestartsys = 512;
constexpr long erestart_restartblock = 516;

// How many frames from the innermost may decide what a futex wait is for.
constexpr std::size_t frames_to_classify = 8;

// glibc 2.36's mutex lock paths down to the futex call (nptl/
// pthread_mutex_lock.c, pthread_mutex_timedlock.c, lowlevellock.c,
// futex-internal.c); internal names with one, two or three underscores.
constexpr std::array<std::string_view, 14> mutex_functions = {
    "pthread_mutex_lock",      "__pthread_mutex_lock",         "___pthread_mutex_lock",
    "__pthread_mutex_lock_full", "__pthread_mutex_cond_lock", "__pthread_mutex_cond_lock_full",
    "__lll_lock_wait",         "__futex_lock_pi64",            "pthread_mutex_timedlock",
    "__pthread_mutex_timedlock", "pthread_mutex_clocklock",     "__pthread_mutex_clocklock",
    "__pthread_mutex_clocklock_common", "__lll_clocklock_wait",
};

// Other objects that wait in futex: their functions' names start so.
constexpr std::array<std::string_view, 7> other_sync_prefixes = {
    "pthread_cond_", "__pthread_cond_", "___pthread_cond_", "__condvar_",
    "pthread_barrier_", "pthread_rwlock_", "__pthread_rwlock_",
};
// glibc's semaphore waits (nptl/sem_wait.c, sem_waitcommon.c) and the agent's.
constexpr std::array<std::string_view, 2> semaphore_prefixes = {"sem_", "__new_sem_"};
// glibc 2.36's join paths (nptl/pthread_join_common.c: __pthread_clockjoin_ex).
constexpr std::array<std::string_view, 4> join_functions = {
    "pthread_join", "__pthread_join", "pthread_timedjoin_np", "pthread_clockjoin_np"};
constexpr std::array<std::string_view, 2> join_prefixes = {"__pthread_clockjoin", "__pthread_timedjoin"};

wait_site classify_function(std::string_view f)
{
    if (std::ranges::find(mutex_functions, f) != mutex_functions.end())
        return wait_site::mutex_lock;
    if (std::ranges::find(join_functions, f) != join_functions.end())
        return wait_site::join;
    for (std::string_view p : join_prefixes)
        if (f.starts_with(p))
            return wait_site::join;
    for (std::string_view p : semaphore_prefixes)
        if (f.starts_with(p))
            return wait_site::semaphore;
    for (std::string_view p : other_sync_prefixes)
        if (f.starts_with(p))
            return wait_site::other_sync;
    return wait_site::unknown;
}

/// A mutex wait's operation agrees with the mutex's kind: PI mutexes are
/// waited on with FUTEX_LOCK_PI(2), the others with FUTEX_WAIT(_BITSET).
bool command_fits_kind(int command, const mutex_kind& kind)
{
    const bool pi_command = command == FUTEX_LOCK_PI || command == FUTEX_LOCK_PI2;
    const bool wait_command = command == FUTEX_WAIT || command == FUTEX_WAIT_BITSET;
    return kind.priority_inherit ? pi_command : wait_command;
}

/// A futex word this close above the stack pointer is a local of the
/// waiting function, not a mutex: glibc's park after EDEADLK.
constexpr std::uint64_t own_stack_span = 64 * 1024;
/// How much of a parked or restarted thread's stack is searched for its
/// mutex: the frames of the lock functions, from the stack pointer up.
constexpr std::size_t parked_search_bytes = 1024;

/// A mutex `fields` could be the one thread `self` waits for, found on its
/// stack: known kind bits, PI when `pi_only`, owned by another thread of the
/// target (not `self`: mutexes it holds may be on its stack too), and, when
/// `with_waiters`, marked as having waiters (2 in a plain futex word;
/// FUTEX_WAITERS in a robust or PI one).
bool fits_stack_search(live_target& s, tid_t self, const mutex_fields& fields, bool pi_only, bool with_waiters)
{
    constexpr std::int32_t known_kind_bits = 0x3f3;   // type, robust, PI, PP, pshared, elision
    const mutex_kind kind = decode_mutex_kind(fields.kind);
    if ((fields.kind & ~known_kind_bits) != 0 || (pi_only && !kind.priority_inherit))
        return false;
    const auto word = static_cast<std::uint32_t>(fields.lock);
    const bool tid_in_word = kind.robust || kind.priority_inherit;
    if (with_waiters && (tid_in_word ? (word & FUTEX_WAITERS) == 0 : word != 2))
        return false;
    const mutex_owner o = owner_of(fields);
    const auto owner = o.tid != 0 ? s.lwp_of_ns_tid(o.tid) : std::nullopt;
    return owner && *owner != self;
}

/// The first 8-byte word of [sp, sp + parked_search_bytes) that points at a
/// mutex fits_stack_search() accepts (the lock call's argument, kept in a
/// saved register or a spill slot).
std::optional<target_addr> mutex_on_stack(live_target& s, tid_t self, target_addr sp, bool pi_only, bool with_waiters)
{
    std::array<std::uint64_t, parked_search_bytes / 8> words{};
    const std::size_t got = s.memory().read(sp, std::as_writable_bytes(std::span(words)));
    for (std::size_t i = 0; i < got / 8; ++i) {
        auto fields = read_mutex(s.memory(), target_addr{words[i]});
        if (fields && fits_stack_search(s, self, *fields, pi_only, with_waiters))
            return target_addr{words[i]};
    }
    return std::nullopt;
}

/// The mutex a thread waits on: the futex word itself; for a thread parked
/// after EDEADLK the PI mutex on its stack (sets `parked`); for a restarted
/// wait the mutex with waiters on its stack.
std::optional<target_addr> waited_mutex(live_target& s, tid_t self, const futex_call& call, target_addr sp,
                                        bool& parked)
{
    if (call.restarted)
        return mutex_on_stack(s, self, sp, false, true);
    parked = call.word.value >= sp.value && call.word.value - sp.value < own_stack_span;
    if (!parked)
        return call.word;
    return mutex_on_stack(s, self, sp, true, false);
}

/// How far above a thread pointer (struct pthread on x86-64) its `tid`
/// field may lie: glibc 2.36 has it at 0x2d0.
constexpr std::uint64_t pthread_tid_span = 0x1000;

/// The join wait of a held LWP whose futex call waits on `call.word`, or
/// std::nullopt when the word is not a live thread's `tid` field.
std::optional<mutex_wait> join_wait_of(live_target& s, tid_t lwp, const futex_call& call)
{
    std::int32_t value = 0;
    if (call.restarted || !s.memory().read_value(call.word, value) || value <= 0)
        return std::nullopt;
    auto joined = s.lwp_of_ns_tid(value);
    const ptrace::task_info* t = joined ? s.process().find(*joined) : nullptr;
    if (t == nullptr || *joined == lwp)
        return std::nullopt;
    const std::uint64_t tp = t->thread_pointer().value;
    if (tp == 0 || call.word.value < tp || call.word.value - tp >= pthread_tid_span)
        return std::nullopt;
    mutex_wait w;
    w.waiter = lwp;
    w.name = s.thread_name(lwp);
    w.joined = *joined;
    w.owner_lwp = *joined;
    return w;
}

/// The wait of a held LWP in sem_wait on `call.word` (glibc waits on the
/// semaphore's value, its first word on x86-64), when the agent knows that
/// semaphore as a lock; std::nullopt otherwise.
std::optional<mutex_wait> semaphore_wait_of(live_target& s, const std::optional<lock_semaphore_table>& table,
                                            tid_t lwp, const futex_call& call)
{
    if (!table || call.restarted)
        return std::nullopt;
    auto holder = lock_semaphore_holder(s.memory(), *table, call.word);
    if (!holder)
        return std::nullopt;
    mutex_wait w;
    w.waiter = lwp;
    w.name = s.thread_name(lwp);
    w.mutex = call.word;
    w.symbol = s.modules().describe(call.word);
    w.semaphore = true;
    w.owner.tid = *holder;
    w.owner.source = "last taker";
    if (*holder != 0)
        w.owner_lwp = s.lwp_of_ns_tid(*holder);
    return w;
}

/// The mutex, lock semaphore or join wait of one held LWP, or std::nullopt
/// when it is not in one.
std::optional<mutex_wait> mutex_wait_of(live_target& s, event_stacks& stacks, tid_t lwp, const futex_call& call, target_addr sp,
                                        int max_frames, const std::optional<lock_semaphore_table>& semaphores,
                                        std::vector<std::string>& problems)
{
    auto frames = stacks.stack_of(lwp, max_frames);
    if (!frames) {
        problems.push_back(fmt::format("thread {}: {}", lwp.value, frames.error()));
        return std::nullopt;
    }
    const wait_site site = classify_wait_frames(*frames);
    if (site == wait_site::join || site == wait_site::semaphore) {
        auto w = site == wait_site::join ? join_wait_of(s, lwp, call) : semaphore_wait_of(s, semaphores, lwp, call);
        if (w)
            w->frames = std::move(*frames);
        return w;
    }
    if (site != wait_site::mutex_lock)
        return std::nullopt;
    mutex_wait w;
    auto address = waited_mutex(s, lwp, call, sp, w.parked_after_edeadlk);
    auto fields = address ? read_mutex(s.memory(), *address) : std::nullopt;
    if (!fields) {
        problems.push_back(fmt::format("thread {}: blocked in a mutex lock, but its mutex cannot be read{}", lwp.value,
                                       w.parked_after_edeadlk || call.restarted ? " (none found on its stack)" : ""));
        return std::nullopt;
    }
    w.kind = decode_mutex_kind(fields->kind);
    w.restarted = call.restarted;
    if (!w.parked_after_edeadlk && !w.restarted && !command_fits_kind(call.command, w.kind))
        return std::nullopt;
    w.waiter = lwp;
    w.name = s.thread_name(lwp);
    w.mutex = *address;
    w.symbol = s.modules().describe(*address);
    w.owner = owner_of(*fields);
    if (!w.owner.owner_died)
        w.owner_lwp = s.lwp_of_ns_tid(w.owner.tid);
    w.frames = std::move(*frames);
    return w;
}

}  // namespace

wait_site classify_wait_frames(const std::vector<stack_frame>& frames)
{
    const std::size_t n = std::min(frames.size(), frames_to_classify);
    for (std::size_t i = 0; i < n; ++i)
        if (wait_site site = classify_function(frames[i].function); site != wait_site::unknown)
            return site;
    return wait_site::unknown;
}

bool was_blocked_in_syscall(const ptrace::registers& regs)
{
    const long result = regs.syscall_result();
    return regs.syscall_number() >= 0 && result <= -erestartsys && result >= -erestart_restartblock;
}

std::optional<futex_call> blocked_futex_call(const ptrace::registers& regs)
{
    if (!was_blocked_in_syscall(regs))
        return std::nullopt;
    if (regs.syscall_number() == SYS_restart_syscall) {
        futex_call call;
        call.restarted = true;
        return call;
    }
    if (regs.syscall_number() != SYS_futex)
        return std::nullopt;
    return futex_call{target_addr{regs.arg0()}, static_cast<int>(regs.arg1() & FUTEX_CMD_MASK)};
}

deadlock_scan scan_for_deadlocks(live_target& s, event_stacks& stacks, int max_frames)
{
    deadlock_scan scan;
    std::vector<tid_t> lwps = s.lwps();
    std::ranges::sort(lwps);
    const auto semaphores = find_lock_semaphores(s);
    for (tid_t lwp : lwps) {
        auto regs = ptrace::registers::read(lwp);
        if (!regs)
            continue;   // gone meanwhile
        ++scan.threads;
        if (auto call = blocked_futex_call(*regs)) {
            if (auto w = mutex_wait_of(s, stacks, lwp, *call, regs->sp(), max_frames, semaphores, scan.problems)) {
                scan.waits.push_back(std::move(*w));
                continue;
            }
        }
        if (was_blocked_in_syscall(*regs))
            ++scan.blocked_other;
        else
            ++scan.running;
    }
    std::vector<wait_edge> edges;
    for (const auto& w : scan.waits)
        edges.push_back({w.waiter, w.owner_lwp.value_or(tid_t{0})});
    scan.cycles = find_cycles(edges);
    return scan;
}

}  // namespace tdctl::core
