#include "core/stacks/backtrace.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include <elf.h>
#include <elfutils/libdwfl.h>
#include <fmt/format.h>
#include <libelf.h>

#include "base/error.hpp"
#include "ptrace/procfs.hpp"
#include "symbols/demangle.hpp"
#include "symbols/elf_module.hpp"

namespace tdctl::core {

namespace {

std::string base_name(const char* path)
{
    if (path == nullptr)
        return {};
    const char* slash = std::strrchr(path, '/');
    return slash ? std::string(slash + 1) : std::string(path);
}

char* debuginfo_path = nullptr;
const Dwfl_Callbacks proc_callbacks = {
    dwfl_linux_proc_find_elf,
    dwfl_standard_find_debuginfo,
    nullptr,
    &debuginfo_path,
};

// The ELF header of an x86_64 file and nothing else: what libdwfl needs to
// open the frame unwinder of the machine (register count, ABI CFI, the
// frame-pointer fallback). Kept with the unwinder, which outlives its Dwfl.
struct machine_header {
    alignas(8) Elf64_Ehdr ehdr{};
    Elf* elf = nullptr;

    machine_header()
    {
        std::memcpy(ehdr.e_ident, ELFMAG, SELFMAG);
        ehdr.e_ident[EI_CLASS] = ELFCLASS64;
        ehdr.e_ident[EI_DATA] = ELFDATA2LSB;
        ehdr.e_ident[EI_VERSION] = EV_CURRENT;
        ehdr.e_type = ET_CORE;
        ehdr.e_machine = EM_X86_64;
        ehdr.e_version = EV_CURRENT;
        ehdr.e_ehsize = sizeof ehdr;
    }
    ~machine_header()
    {
        if (elf != nullptr)
            elf_end(elf);
    }
    machine_header(const machine_header&) = delete;
    machine_header& operator=(const machine_header&) = delete;

    /// The header as a libelf descriptor (nullptr when libelf refuses it).
    Elf* open()
    {
        if (elf == nullptr && elf_version(EV_CURRENT) != EV_NONE)
            elf = elf_memory(reinterpret_cast<char*>(&ehdr), sizeof ehdr);
        return elf;
    }
};

constexpr std::uint64_t page_size = 4096;
// Stack pages kept for one unwind: a deep stack touches a few.
constexpr std::size_t cached_pages = 16;

// What a code address is called (one lookup per address per session).
struct code_name {
    std::string function;
    std::uint64_t symbol_start = 0;   // 0: no symbol
    std::string module;
    std::string file;
    int line = 0;
};

}  // namespace

struct unwinder::impl {
    pid_t pid;
    target_memory& mem;
    const symbols::module_set* modules;
    machine_header machine;   // declared before dwfl: destroyed after it
    Dwfl* dwfl = nullptr;
    bool attached = false;
    std::string maps;   // /proc/PID/maps as last reported to libdwfl

    // The unwind under way.
    tid_t tid;
    Dwarf_Word regs[17] = {};
    std::vector<std::pair<std::uint64_t, std::array<std::byte, page_size>>> pages;
    std::vector<stack_frame>* frames = nullptr;
    int max_frames = 0;
    bool first_is_return = false;   // frame 0 of libdwfl is a caller (after a synthesized frame)
    bool missed_module = false;     // a pc outside every reported module

    std::unordered_map<std::uint64_t, code_name> names;   // by lookup address

    impl(pid_t p, target_memory& m, const symbols::module_set* ms) : pid(p), mem(m), modules(ms) {}
    ~impl()
    {
        if (dwfl != nullptr)
            dwfl_end(dwfl);
    }

    bool read_word(std::uint64_t addr, std::uint64_t& out);
    const std::array<std::byte, page_size>* page_at(std::uint64_t page);
    /// Reports the modules of the maps to libdwfl (attaching at the first
    /// time) when they changed since the last report: true when it did.
    std::expected<bool, std::string> report_modules();
    const code_name& name_of(std::uint64_t lookup);
    void name_from_dwfl(std::uint64_t lookup, code_name& n);
    void add_frame(std::uint64_t pc, bool is_return_address);
};

namespace {

pid_t next_thread(Dwfl*, void* arg, void** thread_argp)
{
    if (*thread_argp != nullptr)
        return 0;
    *thread_argp = arg;
    return static_cast<unwinder::impl*>(arg)->tid.value;
}

bool get_thread(Dwfl*, pid_t tid, void* arg, void** thread_argp)
{
    if (tid != static_cast<unwinder::impl*>(arg)->tid.value)
        return false;
    *thread_argp = arg;
    return true;
}

bool memory_read(Dwfl*, Dwarf_Addr addr, Dwarf_Word* result, void* arg)
{
    std::uint64_t v = 0;
    if (!static_cast<unwinder::impl*>(arg)->read_word(addr, v))
        return false;
    *result = v;
    return true;
}

bool set_initial_registers(Dwfl_Thread* thread, void* arg)
{
    auto& u = *static_cast<unwinder::impl*>(arg);
    // DWARF numbering on x86_64: rax rdx rcx rbx rsi rdi rbp rsp r8–r15, then
    // the return-address column (rip).
    if (!dwfl_thread_state_registers(thread, 0, 17, u.regs))
        return false;
    dwfl_thread_state_register_pc(thread, u.regs[16]);
    return true;
}

const Dwfl_Thread_Callbacks thread_callbacks = {
    next_thread, get_thread, memory_read, set_initial_registers, nullptr, nullptr,
};

int on_frame(Dwfl_Frame* state, void* arg)
{
    auto& u = *static_cast<unwinder::impl*>(arg);
    Dwarf_Addr pc = 0;
    bool activation = false;
    if (!dwfl_frame_pc(state, &pc, &activation))
        return DWARF_CB_ABORT;
    // libdwfl's first frame is an activation, unless it is the caller of a
    // frame 0 made here (a reporting function), at its return address.
    bool is_return = !activation || (u.first_is_return && u.frames->size() == 1);
    u.add_frame(pc, is_return);
    return static_cast<int>(u.frames->size()) >= u.max_frames ? DWARF_CB_ABORT : DWARF_CB_OK;
}

void fill_registers(Dwarf_Word (&r)[17], const user_regs_struct& g)
{
    const unsigned long long order[17] = {g.rax, g.rdx, g.rcx, g.rbx, g.rsi, g.rdi, g.rbp, g.rsp, g.r8,
                                          g.r9,  g.r10, g.r11, g.r12, g.r13, g.r14, g.r15, g.rip};
    for (int i = 0; i < 17; ++i)
        r[i] = order[i];
}

}  // namespace

const std::array<std::byte, page_size>* unwinder::impl::page_at(std::uint64_t page)
{
    for (const auto& [addr, bytes] : pages)
        if (addr == page)
            return &bytes;
    if (pages.size() >= cached_pages)
        return nullptr;
    std::array<std::byte, page_size> bytes{};
    try {
        if (mem.read(target_addr{page}, bytes) != page_size)
            return nullptr;
    } catch (const error&) {
        return nullptr;   // the process is gone
    }
    pages.emplace_back(page, bytes);
    return &pages.back().second;
}

bool unwinder::impl::read_word(std::uint64_t addr, std::uint64_t& out)
{
    const std::uint64_t page = addr & ~(page_size - 1);
    if (addr - page <= page_size - sizeof out) {
        if (const auto* p = page_at(page)) {
            std::memcpy(&out, p->data() + (addr - page), sizeof out);
            return true;
        }
    }
    // Across a page end, or a page that cannot be read whole.
    try {
        return mem.read_value(target_addr{addr}, out);
    } catch (const error&) {
        return false;
    }
}

std::expected<bool, std::string> unwinder::impl::report_modules()
{
    auto text = procfs::read_file(fmt::format("/proc/{}/maps", pid));
    if (!text)
        return std::unexpected(std::string("cannot read the maps of the process"));
    if (attached && *text == maps)
        return false;
    if (dwfl == nullptr && (dwfl = dwfl_begin(&proc_callbacks)) == nullptr)
        return std::unexpected(std::string(dwfl_errmsg(-1)));
    // Modules reported again at the same place keep what libdwfl has read.
    dwfl_report_begin(dwfl);
    int r = dwfl_linux_proc_report(dwfl, pid);
    dwfl_report_end(dwfl, nullptr, nullptr);
    if (r != 0)
        return std::unexpected(std::string("cannot read the modules of the process"));
    maps = std::move(*text);
    names.clear();
    if (!attached) {
        // Given no ELF, libdwfl would borrow the first module's backend, and
        // free it with that module when a later report drops or resizes it
        // (node remaps its executable for every isolate): the next unwind
        // would read freed memory (an assertion in state_alloc). Given one,
        // libdwfl opens a backend of its own, kept until dwfl_end.
        Elf* elf = machine.open();
        if (elf == nullptr)
            return std::unexpected(std::string("cannot unwind: ") + elf_errmsg(-1));
        if (!dwfl_attach_state(dwfl, elf, pid, &thread_callbacks, this))
            return std::unexpected(std::string("cannot unwind: ") + dwfl_errmsg(-1));
        attached = true;
    }
    return true;
}

void unwinder::impl::name_from_dwfl(std::uint64_t lookup, code_name& n)
{
    Dwfl_Module* mod = dwfl_addrmodule(dwfl, lookup);
    if (mod == nullptr) {
        missed_module = true;
        return;
    }
    const char* mainfile = nullptr;
    const char* modname = dwfl_module_info(mod, nullptr, nullptr, nullptr, nullptr, nullptr, &mainfile, nullptr);
    n.module = base_name(mainfile ? mainfile : modname);
    if (n.function.empty()) {
        GElf_Sym sym;
        GElf_Off off = 0;
        if (const char* name = dwfl_module_addrinfo(mod, lookup, &off, &sym, nullptr, nullptr, nullptr)) {
            n.function = symbols::demangled(name);
            n.symbol_start = lookup - off;
        }
    }
    if (Dwfl_Line* line = dwfl_module_getsrc(mod, lookup)) {
        int lineno = 0;
        if (const char* file = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr)) {
            n.file = base_name(file);
            n.line = lineno;
        }
    }
}

const code_name& unwinder::impl::name_of(std::uint64_t lookup)
{
    if (auto it = names.find(lookup); it != names.end())
        return it->second;
    code_name n;
    // The session's tables name aliases as people expect
    // (pthread_create, not __pthread_create_2_1).
    if (const auto* m = modules ? modules->containing(target_addr{lookup}) : nullptr)
        if (auto s = m->nearest_symbol(target_addr{lookup})) {
            n.function = symbols::demangled(s->name);
            n.symbol_start = s->address.value;
        }
    name_from_dwfl(lookup, n);
    return names.emplace(lookup, std::move(n)).first->second;
}

void unwinder::impl::add_frame(std::uint64_t pc, bool is_return_address)
{
    // A return address points after the call: look the caller up inside it.
    const std::uint64_t lookup = is_return_address && pc > 0 ? pc - 1 : pc;
    const code_name& n = name_of(lookup);
    stack_frame f;
    f.pc = target_addr{pc};
    f.function = n.function;
    f.offset = n.function.empty() ? 0 : pc - n.symbol_start;
    f.module = n.module;
    f.file = n.file;
    f.line = n.line;
    frames->push_back(std::move(f));
}

unwinder::unwinder(pid_t pid, target_memory& mem, const symbols::module_set* modules)
    : impl_(std::make_unique<impl>(pid, mem, modules))
{
}

unwinder::~unwinder() = default;

std::expected<std::vector<stack_frame>, std::string> unwinder::unwind(tid_t tid, const unwind_start& start,
                                                                      int max_frames)
{
    impl& u = *impl_;
    if (!u.attached) {
        auto r = u.report_modules();
        if (!r || !u.attached)
            return std::unexpected(r ? std::string("cannot unwind") : r.error());
        maps_checked_ = true;   // just read
    }
    std::vector<stack_frame> frames;
    u.tid = tid;
    u.pages.clear();
    u.pages.reserve(cached_pages);
    u.frames = &frames;
    u.max_frames = std::max(1, max_frames);
    u.missed_module = false;
    user_regs_struct regs = start.regs;
    u.first_is_return = false;
    if (!start.report_site.is_null()) {
        // A reporting function is a bare `ret`: frame 0 is that function, and
        // its caller's registers are these with the `ret` performed.
        u.add_frame(start.report_site.value, false);
        std::uint64_t ra = 0;
        if (!start.returned) {
            if (!u.read_word(regs.rsp, ra))
                return frames;
            regs.rip = ra;
            regs.rsp += 8;
        }
        u.first_is_return = true;
    }
    fill_registers(u.regs, regs);
    if (static_cast<int>(frames.size()) < u.max_frames) {
        int r = dwfl_getthread_frames(u.dwfl, tid.value, on_frame, &u);
        if (r != 0 && frames.empty()) {
            if (int err = dwfl_errno(); err != 0)
                return std::unexpected(std::string(dwfl_errmsg(err)));
            return std::unexpected(std::string("no frame could be read: the LWP is exiting"));
        }
    }
    u.frames = nullptr;
    if (u.missed_module && !maps_checked_) {
        // Code mapped since the modules were reported (dlopen): one new look
        // at the maps, and if they changed, the stack again.
        maps_checked_ = true;
        if (auto r = u.report_modules(); r && *r)
            return unwind(tid, start, max_frames);
    }
    // An unwind that ends early (no CFI further out) keeps what it found.
    return frames;
}

std::optional<stack_frame> unwinder::frame_of_return_address(target_addr ret)
{
    impl& u = *impl_;
    if (!u.attached) {
        auto r = u.report_modules();
        if (!r || !u.attached)
            return std::nullopt;
        maps_checked_ = true;
    }
    std::vector<stack_frame> frames;
    u.frames = &frames;
    u.missed_module = false;
    u.add_frame(ret.value, true);
    u.frames = nullptr;
    if (u.missed_module && !maps_checked_) {
        maps_checked_ = true;
        if (auto r = u.report_modules(); r && *r) {
            u.names.erase(ret.value - 1);  // named without its module: again
            return frame_of_return_address(ret);
        }
    }
    return frames.front();
}

}  // namespace tdctl::core
