#include "core/stacks/call_site.hpp"

#include <array>
#include <cstdlib>
#include <cstring>
#include <dwarf.h>
#include <elfutils/libdwfl.h>

#include "ptrace/registers_x86_64.hpp"

namespace tdctl::core {

namespace {

char* debuginfo_path = nullptr;
const Dwfl_Callbacks callbacks = {
    dwfl_linux_proc_find_elf,
    dwfl_standard_find_debuginfo,
    nullptr,
    &debuginfo_path,
};

// DWARF register numbers of rbp and rsp on x86_64.
constexpr unsigned dwarf_rbp = 6;
constexpr unsigned dwarf_rsp = 7;

}  // namespace

// The target's modules as libdwfl reports them from /proc/PID/maps; read
// again once when an address is in none of them (a library loaded later).
struct call_site_reader::modules {
    Dwfl* dwfl = nullptr;
    explicit modules(pid_t pid)
    {
        dwfl = dwfl_begin(&callbacks);
        if (dwfl == nullptr)
            return;
        dwfl_report_begin(dwfl);
        dwfl_linux_proc_report(dwfl, pid);
        dwfl_report_end(dwfl, nullptr, nullptr);
    }
    ~modules()
    {
        if (dwfl != nullptr)
            dwfl_end(dwfl);
    }
    modules(const modules&) = delete;
    modules& operator=(const modules&) = delete;
};

call_site_reader::call_site_reader(pid_t pid) : pid_(pid) {}
call_site_reader::~call_site_reader() = default;

void call_site_reader::reset()
{
    modules_.reset();
    offsets_.clear();
}

const void* call_site_reader::module_of(std::uint64_t pc)
{
    for (int pass = 0; pass < 2; ++pass) {
        if (!modules_)
            modules_ = std::make_unique<modules>(pid_);
        if (modules_->dwfl != nullptr)
            if (Dwfl_Module* m = dwfl_addrmodule(modules_->dwfl, pc))
                return m;
        if (pass == 0) {
            modules_.reset();
            offsets_.clear();
        }
    }
    return nullptr;
}

std::optional<call_site_reader::cfa_rule> call_site_reader::cfa_of(std::uint64_t ret)
{
    if (auto it = offsets_.find(ret); it != offsets_.end())
        return it->second;
    std::optional<cfa_rule> result;
    auto* mod = static_cast<Dwfl_Module*>(const_cast<void*>(module_of(ret)));
    Dwarf_Addr bias = 0;
    Dwarf_CFI* cfi = mod ? dwfl_module_eh_cfi(mod, &bias) : nullptr;
    if (cfi == nullptr && mod != nullptr)
        cfi = dwfl_module_dwarf_cfi(mod, &bias);
    Dwarf_Frame* frame = nullptr;
    // The rule inside the call instruction: a return address may be the
    // first byte after the function.
    if (cfi != nullptr && dwarf_cfi_addrframe(cfi, ret - 1 - bias, &frame) == 0) {
        Dwarf_Op* ops = nullptr;
        size_t nops = 0;
        if (dwarf_frame_cfa(frame, &ops, &nops) == 0 && nops == 1) {
            if (ops[0].atom == DW_OP_bregx && (ops[0].number == dwarf_rsp || ops[0].number == dwarf_rbp))
                result = cfa_rule{ops[0].number == dwarf_rbp, static_cast<std::int64_t>(ops[0].number2)};
            else if (ops[0].atom == DW_OP_breg0 + dwarf_rsp || ops[0].atom == DW_OP_breg0 + dwarf_rbp)
                result = cfa_rule{ops[0].atom == DW_OP_breg0 + dwarf_rbp, static_cast<std::int64_t>(ops[0].number)};
        }
        std::free(frame);
    }
    offsets_.emplace(ret, result);
    return result;
}

std::optional<target_addr> call_site_reader::read(const ptrace::registers& regs, target_addr site,
                                                   target_memory& mem)
{
    std::array<std::byte, stack_window> stack{};
    const std::size_t got = mem.read(regs.sp(), stack);
    return read_from(regs, site, std::span<const std::byte>(stack.data(), got));
}

std::optional<target_addr> call_site_reader::read_from(const ptrace::registers& regs, target_addr site,
                                                       std::span<const std::byte> stack)
{
    const std::uint64_t sp = regs.sp().value;
    const std::size_t got = stack.size();
    auto word = [&](std::uint64_t addr) -> std::optional<std::uint64_t> {
        if (addr < sp || addr + 8 > sp + got)
            return std::nullopt;
        std::uint64_t v = 0;
        std::memcpy(&v, stack.data() + (addr - sp), sizeof v);
        return v;
    };
    const void* library = module_of(site.value);
    auto ret = word(sp);
    std::uint64_t cfa = sp + 8;  // frame 0 is at its first instruction
    for (int depth = 0; ret && depth <= max_library_frames; ++depth) {
        const void* m = module_of(*ret);
        if (m == nullptr)
            return std::nullopt;
        if (m != library)
            return target_addr{*ret};
        auto rule = cfa_of(*ret);
        // A frame-pointer rule holds only in the first caller: the
        // reporting function (a bare `ret`) left rbp as that caller had it.
        if (!rule || (rule->from_rbp && depth > 0))
            return std::nullopt;
        // In the caller, at the return address, sp is the callee's CFA.
        cfa = (rule->from_rbp ? regs.raw().rbp : cfa) + static_cast<std::uint64_t>(rule->offset);
        ret = word(cfa - 8);
    }
    return std::nullopt;
}

}  // namespace tdctl::core
