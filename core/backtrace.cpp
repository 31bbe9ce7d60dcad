#include "core/backtrace.hpp"

#include <cstdlib>
#include <cxxabi.h>
#include <memory>

#include <elfutils/libdwfl.h>

namespace tdctl::core {

namespace {

// A C++ symbol as people read it (`ns::f(int)`); other names as they are.
std::string demangled(const char* name)
{
    int status = 0;
    std::unique_ptr<char, decltype(&std::free)> plain(abi::__cxa_demangle(name, nullptr, nullptr, &status), &std::free);
    return status == 0 && plain ? std::string(plain.get()) : std::string(name);
}

struct dwfl_deleter {
    void operator()(Dwfl* d) const { dwfl_end(d); }
};

char* debuginfo_path = nullptr;
const Dwfl_Callbacks proc_callbacks = {
    dwfl_linux_proc_find_elf,
    dwfl_standard_find_debuginfo,
    nullptr,
    &debuginfo_path,
};

struct unwind_state {
    Dwfl* dwfl;
    int max_frames;
    std::vector<stack_frame> frames;
};

int on_frame(Dwfl_Frame* state, void* arg)
{
    auto& u = *static_cast<unwind_state*>(arg);
    Dwarf_Addr pc = 0;
    bool activation = false;
    if (!dwfl_frame_pc(state, &pc, &activation))
        return DWARF_CB_ABORT;
    // A return address points after the call: look the caller up inside it.
    Dwarf_Addr lookup = activation ? pc : pc - 1;
    stack_frame f;
    f.pc = target_addr{pc};
    if (Dwfl_Module* mod = dwfl_addrmodule(u.dwfl, lookup)) {
        GElf_Sym sym;
        GElf_Off off = 0;
        if (const char* name = dwfl_module_addrinfo(mod, lookup, &off, &sym, nullptr, nullptr, nullptr)) {
            f.function = demangled(name);
            f.offset = off + (pc - lookup);
        }
        const char* mainfile = nullptr;
        const char* modname = dwfl_module_info(mod, nullptr, nullptr, nullptr, nullptr, nullptr, &mainfile, nullptr);
        std::string path = mainfile ? mainfile : (modname ? modname : "");
        auto slash = path.rfind('/');
        f.module = slash == std::string::npos ? path : path.substr(slash + 1);
    }
    u.frames.push_back(std::move(f));
    return static_cast<int>(u.frames.size()) >= u.max_frames ? DWARF_CB_ABORT : DWARF_CB_OK;
}

}  // namespace

std::expected<std::vector<stack_frame>, std::string> unwind_lwp(pid_t pid, tid_t tid, int max_frames)
{
    std::unique_ptr<Dwfl, dwfl_deleter> dwfl(dwfl_begin(&proc_callbacks));
    if (!dwfl)
        return std::unexpected(std::string(dwfl_errmsg(-1)));
    dwfl_report_begin(dwfl.get());
    if (dwfl_linux_proc_report(dwfl.get(), pid) != 0)
        return std::unexpected(std::string("cannot read the modules of the process"));
    dwfl_report_end(dwfl.get(), nullptr, nullptr);
    // The tracer is us and the LWP is stopped: libdwfl must not attach.
    if (int err = dwfl_linux_proc_attach(dwfl.get(), pid, true); err != 0)
        return std::unexpected(std::string("cannot unwind: ") + dwfl_errmsg(-1));
    unwind_state u{dwfl.get(), max_frames, {}};
    int r = dwfl_getthread_frames(dwfl.get(), tid.value, on_frame, &u);
    if (r != 0 && u.frames.empty()) {
        if (int err = dwfl_errno(); err != 0)
            return std::unexpected(std::string(dwfl_errmsg(err)));
        // libdwfl gives no reason when the LWP's registers or stack cannot
        // be read: it is exiting (or has just gone).
        return std::unexpected(std::string("no frame could be read: the LWP is exiting"));
    }
    // An unwind that ends early (no CFI further out) keeps what it found.
    return std::move(u.frames);
}

}  // namespace tdctl::core
