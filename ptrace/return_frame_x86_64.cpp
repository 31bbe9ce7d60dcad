#include "ptrace/return_frame_x86_64.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <sys/syscall.h>
#include <sys/ucontext.h>

#include "ptrace/procfs.hpp"

namespace tdctl::ptrace {

namespace {

// glibc's ucontext_t begins as the kernel's struct ucontext does (flags,
// link, stack_t, then the 256-byte sigcontext whose first 23 words are
// gregs[] in REG_* order, then the signal mask); only its sigset_t is
// longer, and the kernel reads 8 bytes of it.
static_assert(offsetof(ucontext_t, uc_stack) == 16);
static_assert(offsetof(ucontext_t, uc_mcontext) == 40);
static_assert(offsetof(ucontext_t, uc_sigmask) == 296);
static_assert(sizeof(mcontext_t) == 256);
static_assert(REG_R8 == 0 && REG_RIP == 16 && REG_EFL == 17 && REG_CSGSFS == 18);

constexpr std::size_t ucontext_bytes = 296 + 8;   // up to the kernel's 8-byte signal mask
constexpr std::size_t siginfo_bytes = 128;
constexpr std::size_t sigframe_bytes = 8 + ucontext_bytes + siginfo_bytes;   // struct rt_sigframe
constexpr std::size_t red_zone_bytes = 128;
constexpr std::size_t fxsave_bytes = 512;

// arch/x86/include/uapi/asm/ucontext.h and sigcontext.h.
constexpr unsigned long uc_fp_xstate = 0x1;
constexpr unsigned long uc_sigcontext_ss = 0x2;
constexpr unsigned long uc_strict_restore_ss = 0x4;
constexpr std::uint32_t fp_xstate_magic1 = 0x46505853;
constexpr std::uint32_t fp_xstate_magic2 = 0x46505845;
constexpr std::size_t sw_reserved_at = 464;   // struct _fpx_sw_bytes in the FXSAVE image
constexpr std::size_t xstate_bv_at = 512;     // the XSAVE header's first word

// An ss_flags mode that is none of 0, SS_ONSTACK and SS_DISABLE: the
// kernel's do_sigaltstack() answers EINVAL and changes nothing.
constexpr int altstack_unchanged = 3;

// include/linux/errno.h (kernel-internal restart codes).
constexpr long erestart_restartblock = 516;

std::uint64_t align_down(std::uint64_t v, std::uint64_t a) { return v & ~(a - 1); }

/// `s`'s general registers as the thread is to resume: a system call it
/// was stopped in set up to run again, as the kernel does for a stopped
/// task resumed without a handler to run (arch/x86/kernel/signal.c,
/// arch_do_signal_or_restart); rt_sigreturn itself restarts nothing.
user_regs_struct registers_to_resume(const thread_state& s)
{
    user_regs_struct r = s.general().raw();
    if (s.in_restartable_syscall()) {
        r.rax = static_cast<long>(r.rax) == -erestart_restartblock ? SYS_restart_syscall : r.orig_rax;
        r.rip -= 2;
    }
    return r;
}

/// The ucontext of the frame: registers, signal mask, FP area pointer.
ucontext_t frame_context(const thread_state& s, const return_frame_layout& layout)
{
    const user_regs_struct r = registers_to_resume(s);
    ucontext_t uc{};
    uc.uc_flags = uc_sigcontext_ss | uc_strict_restore_ss | (s.xstate().empty() ? 0 : uc_fp_xstate);
    uc.uc_stack.ss_flags = altstack_unchanged;
    greg_t* g = uc.uc_mcontext.gregs;
    g[REG_R8] = static_cast<greg_t>(r.r8);
    g[REG_R9] = static_cast<greg_t>(r.r9);
    g[REG_R10] = static_cast<greg_t>(r.r10);
    g[REG_R11] = static_cast<greg_t>(r.r11);
    g[REG_R12] = static_cast<greg_t>(r.r12);
    g[REG_R13] = static_cast<greg_t>(r.r13);
    g[REG_R14] = static_cast<greg_t>(r.r14);
    g[REG_R15] = static_cast<greg_t>(r.r15);
    g[REG_RDI] = static_cast<greg_t>(r.rdi);
    g[REG_RSI] = static_cast<greg_t>(r.rsi);
    g[REG_RBP] = static_cast<greg_t>(r.rbp);
    g[REG_RBX] = static_cast<greg_t>(r.rbx);
    g[REG_RDX] = static_cast<greg_t>(r.rdx);
    g[REG_RAX] = static_cast<greg_t>(r.rax);
    g[REG_RCX] = static_cast<greg_t>(r.rcx);
    g[REG_RSP] = static_cast<greg_t>(r.rsp);
    g[REG_RIP] = static_cast<greg_t>(r.rip);
    g[REG_EFL] = static_cast<greg_t>(r.eflags);
    // cs, gs, fs, ss as four 16-bit fields; the kernel takes cs and (with
    // UC_STRICT_RESTORE_SS) ss, and leaves fs_base and gs_base as they are.
    const std::uint64_t csgsfs = (r.cs & 0xffff) | (r.gs & 0xffff) << 16 | (r.fs & 0xffff) << 32 |
                                 (r.ss & 0xffff) << 48;
    g[REG_CSGSFS] = static_cast<greg_t>(csgsfs);
    uc.uc_mcontext.fpregs = reinterpret_cast<fpregset_t>(layout.fpstate);
    const std::uint64_t mask = s.signal_mask();
    std::memcpy(&uc.uc_sigmask, &mask, sizeof mask);
    return uc;
}

/// Writes `s`'s FP area at `fp_at` in `frame`: the FXSAVE image, or the
/// XSAVE area described in its sw_reserved bytes and closed by
/// FP_XSTATE_MAGIC2.
void put_fp_area(std::vector<std::byte>& frame, std::size_t fp_at, const thread_state& s)
{
    auto put = [&](std::size_t at, const void* p, std::size_t n) { std::memcpy(frame.data() + at, p, n); };
    if (s.xstate().empty()) {
        put(fp_at, &s.fpregs(), fxsave_bytes);
        return;
    }
    const auto xs = s.xstate();
    put(fp_at, xs.data(), xs.size());
    // The kernel's PTRACE_GETREGSET fills sw_reserved with the same
    // description a signal frame carries; should it not, say it here: the
    // area's size, and the components its header holds (the others are
    // restored to their initial state, which is what the header means).
    std::uint32_t magic1 = 0;
    std::memcpy(&magic1, xs.data() + sw_reserved_at, sizeof magic1);
    if (magic1 != fp_xstate_magic1 && xs.size() >= xstate_bv_at + 8) {
        struct {
            std::uint32_t magic1, extended_size;
            std::uint64_t xfeatures;
            std::uint32_t xstate_size;
        } sw{fp_xstate_magic1, static_cast<std::uint32_t>(xs.size() + sizeof fp_xstate_magic2), 0,
             static_cast<std::uint32_t>(xs.size())};
        std::memcpy(&sw.xfeatures, xs.data() + xstate_bv_at, sizeof sw.xfeatures);
        put(fp_at + sw_reserved_at, &sw.magic1, 4);
        put(fp_at + sw_reserved_at + 4, &sw.extended_size, 4);
        put(fp_at + sw_reserved_at + 8, &sw.xfeatures, 8);
        put(fp_at + sw_reserved_at + 16, &sw.xstate_size, 4);
    }
    std::uint32_t xstate_size = 0;
    std::memcpy(&xstate_size, frame.data() + fp_at + sw_reserved_at + 16, sizeof xstate_size);
    xstate_size = std::min<std::uint32_t>(xstate_size, static_cast<std::uint32_t>(xs.size()));
    put(fp_at + xstate_size, &fp_xstate_magic2, sizeof fp_xstate_magic2);
}

}  // namespace

std::size_t return_frame_fp_bytes(const thread_state& s)
{
    return s.xstate().empty() ? fxsave_bytes : s.xstate().size() + sizeof fp_xstate_magic2;
}

return_frame_layout layout_return_frame(std::uint64_t sp, std::size_t fp_bytes)
{
    return_frame_layout l;
    const std::uint64_t top = align_down(sp - red_zone_bytes, 64);
    l.fpstate = align_down(top - fp_bytes, 64);
    l.slot = align_down(l.fpstate - sigframe_bytes, 16) - 8;
    l.size = static_cast<std::size_t>(l.fpstate + fp_bytes - l.slot);
    return l;
}

std::vector<std::byte> build_return_frame(const thread_state& s, const return_frame_layout& layout,
                                          std::uint64_t return_address)
{
    std::vector<std::byte> frame(layout.size);
    std::memcpy(frame.data(), &return_address, sizeof return_address);
    const ucontext_t uc = frame_context(s, layout);
    std::memcpy(frame.data() + 8, &uc, ucontext_bytes);
    const std::size_t fp_at = static_cast<std::size_t>(layout.fpstate - layout.slot);
    put_fp_area(frame, fp_at, s);
    return frame;
}

std::optional<target_addr> find_sigreturn_code(pid_t pid, target_memory& memory)
{
    static constexpr std::array<unsigned char, 9> code{0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05};
    auto maps = procfs::read_file(fmt::format("/proc/{}/maps", pid));
    if (!maps)
        return std::nullopt;
    std::istringstream lines(*maps);
    for (std::string line; std::getline(lines, line);) {
        // start-end perms offset dev inode path
        std::istringstream fields(line);
        std::string range, perms, offset, dev, inode, path;
        fields >> range >> perms >> offset >> dev >> inode >> path;
        if (perms.size() < 3 || perms[2] != 'x' || !path.ends_with("/libc.so.6"))
            continue;
        std::uint64_t start = 0, end = 0;
        if (std::sscanf(range.c_str(), "%lx-%lx", &start, &end) != 2 || end <= start)
            continue;
        std::vector<std::byte> text(end - start);
        text.resize(memory.read(target_addr{start}, text));
        auto* first = reinterpret_cast<const unsigned char*>(text.data());
        auto* hit = std::search(first, first + text.size(), code.begin(), code.end());
        if (hit != first + text.size())
            return target_addr{start + static_cast<std::uint64_t>(hit - first)};
    }
    return std::nullopt;
}

}  // namespace tdctl::ptrace
