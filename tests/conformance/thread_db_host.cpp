#include "tests/conformance/thread_db_host.hpp"

#include <array>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>

#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/user.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "base/error.hpp"
#include "tests/support/skip.hpp"

// ---------------------------------------------------------------- ps_* callbacks
//
// libthread_db calls these with the ps_prochandle it was given at td_ta_new.
// They must have C linkage and be exported from the executable (CMake:
// ENABLE_EXPORTS), or dlopen with RTLD_NOW fails on the undefined references.

namespace {

using tdctl::target_addr;

std::vector<std::string>& lookup_log()
{
    static std::vector<std::string> log;
    return log;
}

// x86_64 register indexes of <sys/reg.h>, which ps_get_thread_area receives
// (glibc publishes FS as _thread_db_const_thread_area). The header itself
// defines bare macros (FS, RAX, ...) that would collide with C++ names.
constexpr int reg_index_fs = 25;
constexpr int reg_index_gs = 26;

bool read_regs(lwpid_t lwp, user_regs_struct& regs)
{
    return ::ptrace(PTRACE_GETREGS, lwp, nullptr, &regs) == 0;
}

}  // namespace

ps_err_e ps_pdread(struct ps_prochandle* ph, psaddr_t addr, void* buf, size_t size)
{
    if (ph == nullptr || ph->target == nullptr)
        return PS_BADPID;
    try {
        std::size_t n = ph->target->memory().read(target_addr{reinterpret_cast<std::uint64_t>(addr)},
                                                  std::span(static_cast<std::byte*>(buf), size));
        return n == size ? PS_OK : PS_ERR;
    } catch (const tdctl::error&) {
        return PS_ERR;
    }
}

ps_err_e ps_pdwrite(struct ps_prochandle* ph, psaddr_t addr, const void* buf, size_t size)
{
    if (ph == nullptr || ph->target == nullptr)
        return PS_BADPID;
    try {
        bool ok = ph->target->memory().write(target_addr{reinterpret_cast<std::uint64_t>(addr)},
                                             std::span(static_cast<const std::byte*>(buf), size));
        return ok ? PS_OK : PS_ERR;
    } catch (const tdctl::error&) {
        return PS_ERR;
    }
}

ps_err_e ps_pglobal_lookup(struct ps_prochandle* ph, const char* object_name, const char* sym_name,
                           psaddr_t* sym_addr)
{
    if (ph == nullptr || ph->target == nullptr)
        return PS_BADPID;
    std::string entry = fmt::format("{}:{}", object_name ? object_name : "", sym_name);
    auto sym = ph->target->lookup_symbol(object_name ? object_name : "", sym_name);
    if (!sym && object_name != nullptr && object_name[0] != '\0') {
        // gdb resolves these names in every loaded object; so do we, and say so.
        sym = ph->target->lookup_symbol("", sym_name);
        if (sym)
            entry += " -> any module";
    }
    if (!sym) {
        lookup_log().push_back(entry + " -> missing");
        return PS_NOSYM;
    }
    lookup_log().push_back(entry);
    *sym_addr = reinterpret_cast<psaddr_t>(sym->address.value);
    return PS_OK;
}

ps_err_e ps_lgetregs(struct ps_prochandle*, lwpid_t lwp, prgregset_t out)
{
    static_assert(sizeof(prgregset_t) == sizeof(user_regs_struct));
    user_regs_struct regs{};
    if (!read_regs(lwp, regs))
        return PS_ERR;
    std::memcpy(out, &regs, sizeof regs);
    return PS_OK;
}

ps_err_e ps_lsetregs(struct ps_prochandle*, lwpid_t lwp, const prgregset_t in)
{
    user_regs_struct regs{};
    std::memcpy(&regs, in, sizeof regs);
    return ::ptrace(PTRACE_SETREGS, lwp, nullptr, &regs) == 0 ? PS_OK : PS_ERR;
}

ps_err_e ps_lgetfpregs(struct ps_prochandle*, lwpid_t lwp, prfpregset_t* out)
{
    static_assert(sizeof(prfpregset_t) == sizeof(user_fpregs_struct));
    return ::ptrace(PTRACE_GETFPREGS, lwp, nullptr, out) == 0 ? PS_OK : PS_ERR;
}

ps_err_e ps_lsetfpregs(struct ps_prochandle*, lwpid_t lwp, const prfpregset_t* in)
{
    return ::ptrace(PTRACE_SETFPREGS, lwp, nullptr, const_cast<prfpregset_t*>(in)) == 0 ? PS_OK : PS_ERR;
}

pid_t ps_getpid(struct ps_prochandle* ph)
{
    return ph != nullptr && ph->target != nullptr ? ph->target->pid() : -1;
}

ps_err_e ps_get_thread_area(struct ps_prochandle* ph, lwpid_t lwp, int idx, psaddr_t* out)
{
    if (idx != reg_index_fs && idx != reg_index_gs)
        return PS_BADADDR;
    // The kernel's value of a stopped LWP first (independent of what tdctl
    // remembered); tdctl's own record only when the LWP cannot be asked.
    user_regs_struct regs{};
    if (read_regs(lwp, regs)) {
        *out = reinterpret_cast<psaddr_t>(idx == reg_index_fs ? regs.fs_base : regs.gs_base);
        return PS_OK;
    }
    if (idx == reg_index_fs && ph != nullptr && ph->target != nullptr) {
        if (auto tp = ph->target->thread_pointer(tdctl::tid_t{lwp})) {
            *out = reinterpret_cast<psaddr_t>(tp->value);
            return PS_OK;
        }
    }
    return PS_ERR;
}

// libthread_db stops nothing itself here: the tests hold the target through
// the session (interrupt()) whenever it must not move.
ps_err_e ps_pstop(struct ps_prochandle*)
{
    return PS_OK;
}

ps_err_e ps_pcontinue(struct ps_prochandle*)
{
    return PS_OK;
}

ps_err_e ps_lstop(struct ps_prochandle*, lwpid_t)
{
    return PS_OK;
}

ps_err_e ps_lcontinue(struct ps_prochandle*, lwpid_t)
{
    return PS_OK;
}

// ---------------------------------------------------------------- the library

namespace tdctl::conformance {

namespace {

template <typename F>
void bind(void* handle, F& fn, const char* name)
{
    void* p = ::dlsym(handle, name);
    if (p == nullptr)
        throw std::runtime_error(fmt::format("libthread_db.so.1 lacks {}", name));
    fn = reinterpret_cast<F>(p);
}

bool any_file_exists(std::initializer_list<const char*> paths)
{
    std::error_code ec;
    for (const char* p : paths)
        if (std::filesystem::exists(p, ec))
            return true;
    return false;
}

core::td_status status_of(td_err_e e)
{
    if (e == TD_OK)
        return {};
    return core::td_fail(e);
}

}  // namespace

thread_db_library& thread_db_library::get_or_skip()
{
    static std::unique_ptr<thread_db_library> lib;
    if (lib)
        return *lib;
    void* handle = ::dlopen("libthread_db.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        std::string why = ::dlerror();
        if (!any_file_exists({"/lib/x86_64-linux-gnu/libthread_db.so.1", "/usr/lib/x86_64-linux-gnu/libthread_db.so.1",
                              "/lib64/libthread_db.so.1", "/usr/lib64/libthread_db.so.1"}))
            test::skip_test(fmt::format("the system has no libthread_db.so.1 to compare with ({})", why));
        throw std::runtime_error(fmt::format("libthread_db.so.1 exists but does not load: {}", why));
    }
    std::unique_ptr<thread_db_library> l(new thread_db_library());
    l->handle_ = handle;
    bind(handle, l->init, "td_init");
    bind(handle, l->ta_new, "td_ta_new");
    bind(handle, l->ta_delete, "td_ta_delete");
    bind(handle, l->ta_event_addr, "td_ta_event_addr");
    bind(handle, l->ta_set_event, "td_ta_set_event");
    bind(handle, l->ta_clear_event, "td_ta_clear_event");
    bind(handle, l->ta_event_getmsg, "td_ta_event_getmsg");
    bind(handle, l->ta_thr_iter, "td_ta_thr_iter");
    bind(handle, l->ta_map_lwp2thr, "td_ta_map_lwp2thr");
    bind(handle, l->thr_get_info, "td_thr_get_info");
    bind(handle, l->thr_event_enable, "td_thr_event_enable");
    bind(handle, l->thr_set_event, "td_thr_set_event");
    bind(handle, l->thr_clear_event, "td_thr_clear_event");
    bind(handle, l->thr_event_getmsg, "td_thr_event_getmsg");
    link_map* lm = nullptr;
    if (::dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm != nullptr && lm->l_name != nullptr)
        l->path = lm->l_name;
    if (td_err_e e = l->init(); e != TD_OK)
        throw std::runtime_error(fmt::format("td_init failed: {}", td_err_name(e)));
    lib = std::move(l);
    return *lib;
}

const std::vector<std::string>& oracle_lookups()
{
    return lookup_log();
}

thread_db_agent::thread_db_agent(thread_db_library& lib, core::target_access& target) : lib_(lib)
{
    ph_.target = &target;
    std::size_t first = lookup_log().size();
    td_err_e e = lib_.ta_new(&ph_, &ta_);
    if (e != TD_OK) {
        std::string asked;
        for (std::size_t i = first; i < lookup_log().size(); ++i)
            asked += "\n  " + lookup_log()[i];
        ta_ = nullptr;
        FAIL("td_ta_new of ", lib_.path, " failed with ", std::string(td_err_name(e)), "; ps_pglobal_lookup was asked:", asked);
    }
}

thread_db_agent::~thread_db_agent()
{
    if (ta_ != nullptr)
        lib_.ta_delete(ta_);
}

td_thrhandle_t thread_db_agent::make_handle(target_addr th) const
{
    td_thrhandle_t h{};
    h.th_ta_p = ta_;
    h.th_unique = reinterpret_cast<psaddr_t>(th.value);
    return h;
}

core::td_result<td_notify_t> thread_db_agent::event_addr(td_event_e e)
{
    td_notify_t n{};
    if (td_err_e err = lib_.ta_event_addr(ta_, e, &n); err != TD_OK)
        return core::td_fail(err);
    return n;
}

core::td_result<std::vector<target_addr>> thread_db_agent::thr_iter()
{
    std::vector<target_addr> out;
    auto collect = [](const td_thrhandle_t* th, void* data) -> int {
        static_cast<std::vector<target_addr>*>(data)->push_back(
            target_addr{reinterpret_cast<std::uint64_t>(th->th_unique)});
        return 0;
    };
    sigset_t all;
    sigfillset(&all);
    td_err_e err = lib_.ta_thr_iter(ta_, collect, &out, TD_THR_ANY_STATE, TD_THR_LOWEST_PRIORITY, &all,
                                    TD_THR_ANY_USER_FLAGS);
    if (err != TD_OK)
        return core::td_fail(err);
    return out;
}

core::td_result<td_thrinfo_t> thread_db_agent::get_info(target_addr th)
{
    td_thrhandle_t h = make_handle(th);
    td_thrinfo_t info;
    std::memset(&info, 0, sizeof info);
    if (td_err_e err = lib_.thr_get_info(&h, &info); err != TD_OK)
        return core::td_fail(err);
    return info;
}

core::td_result<target_addr> thread_db_agent::map_lwp2thr(pid_t lwp)
{
    td_thrhandle_t h{};
    if (td_err_e err = lib_.ta_map_lwp2thr(ta_, lwp, &h); err != TD_OK)
        return core::td_fail(err);
    return target_addr{reinterpret_cast<std::uint64_t>(h.th_unique)};
}

core::td_status thread_db_agent::event_enable(target_addr th, bool on)
{
    td_thrhandle_t h = make_handle(th);
    return status_of(lib_.thr_event_enable(&h, on ? 1 : 0));
}

core::td_status thread_db_agent::thr_set_event(target_addr th, td_thr_events_t mask)
{
    td_thrhandle_t h = make_handle(th);
    return status_of(lib_.thr_set_event(&h, &mask));
}

core::td_status thread_db_agent::thr_clear_event(target_addr th, td_thr_events_t mask)
{
    td_thrhandle_t h = make_handle(th);
    return status_of(lib_.thr_clear_event(&h, &mask));
}

core::td_status thread_db_agent::ta_set_event(td_thr_events_t mask)
{
    return status_of(lib_.ta_set_event(ta_, &mask));
}

core::td_status thread_db_agent::ta_clear_event(td_thr_events_t mask)
{
    return status_of(lib_.ta_clear_event(ta_, &mask));
}

core::td_result<core::td_message> thread_db_agent::ta_event_getmsg()
{
    td_event_msg_t msg{};
    if (td_err_e err = lib_.ta_event_getmsg(ta_, &msg); err != TD_OK)
        return core::td_fail(err);
    core::td_message out;
    out.event = msg.event;
    out.handle = msg.th_p != nullptr ? target_addr{reinterpret_cast<std::uint64_t>(msg.th_p->th_unique)}
                                     : target_addr{};
    out.data = msg.msg.data;
    return out;
}

core::td_result<core::td_message> thread_db_agent::thr_event_getmsg(target_addr th)
{
    td_thrhandle_t h = make_handle(th);
    td_event_msg_t msg{};
    if (td_err_e err = lib_.thr_event_getmsg(&h, &msg); err != TD_OK)
        return core::td_fail(err);
    core::td_message out;
    out.event = msg.event;
    out.handle = th;
    out.data = msg.msg.data;
    return out;
}

}  // namespace tdctl::conformance
