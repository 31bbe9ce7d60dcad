#include "ptrace/ptrace_call.hpp"

#include <cerrno>
#include <unordered_map>

#include "base/error.hpp"
#include "base/log.hpp"

namespace tdctl::ptrace {

const char* request_name(__ptrace_request req)
{
    switch (static_cast<int>(req)) {
    case PTRACE_PEEKDATA: return "PTRACE_PEEKDATA";
    case PTRACE_PEEKUSER: return "PTRACE_PEEKUSER";
    case PTRACE_POKEDATA: return "PTRACE_POKEDATA";
    case PTRACE_CONT: return "PTRACE_CONT";
    case PTRACE_KILL: return "PTRACE_KILL";
    case PTRACE_SINGLESTEP: return "PTRACE_SINGLESTEP";
    case PTRACE_GETREGS: return "PTRACE_GETREGS";
    case PTRACE_SETREGS: return "PTRACE_SETREGS";
    case PTRACE_DETACH: return "PTRACE_DETACH";
    case PTRACE_SETOPTIONS: return "PTRACE_SETOPTIONS";
    case PTRACE_GETEVENTMSG: return "PTRACE_GETEVENTMSG";
    case PTRACE_GETSIGINFO: return "PTRACE_GETSIGINFO";
    case PTRACE_SEIZE: return "PTRACE_SEIZE";
    case PTRACE_INTERRUPT: return "PTRACE_INTERRUPT";
    case PTRACE_LISTEN: return "PTRACE_LISTEN";
    case PTRACE_GETFPREGS: return "PTRACE_GETFPREGS";
    case PTRACE_SETFPREGS: return "PTRACE_SETFPREGS";
    case PTRACE_GETREGSET: return "PTRACE_GETREGSET";
    case PTRACE_SETREGSET: return "PTRACE_SETREGSET";
    case PTRACE_GETSIGMASK: return "PTRACE_GETSIGMASK";
    case PTRACE_SETSIGMASK: return "PTRACE_SETSIGMASK";
    default: return "PTRACE_?";
    }
}

namespace {
// TID -> raw status; empty except while a stop-all takes stops by peeking.
std::unordered_map<pid_t, int>& unconsumed_stops()
{
    static std::unordered_map<pid_t, int> stops;
    return stops;
}

bool resumes(__ptrace_request req)
{
    switch (static_cast<int>(req)) {
    case PTRACE_CONT:
    case PTRACE_DETACH:
    case PTRACE_SINGLESTEP:
    case PTRACE_SYSCALL:
    case PTRACE_KILL:
        return true;
    default:
        return false;
    }
}
}  // namespace

void note_unconsumed_stop(tid_t tid, int raw)
{
    unconsumed_stops()[tid.value] = raw;
}

bool take_unconsumed_stop(tid_t tid, int raw)
{
    auto& stops = unconsumed_stops();
    if (stops.empty())
        return false;  // every waitpid() passes here
    auto it = stops.find(tid.value);
    if (it == stops.end())
        return false;
    bool same = it->second == raw;
    stops.erase(it);  // a different status: the task left that stop (killed)
    return same;
}

void log_request(__ptrace_request req, tid_t tid, void* addr, void* data, long r, int err)
{
    if (log::debug_enabled())
        log::debug("{}({}, {:#x}, {:#x}) = {}{}", request_name(req), tid.value, reinterpret_cast<std::uintptr_t>(addr),
                   reinterpret_cast<std::uintptr_t>(data), r, err != 0 ? fmt::format(" errno {}", err) : "");
}

int ptrace_call(__ptrace_request req, tid_t tid, void* addr, void* data, long* result)
{
    errno = 0;
    long r = ::ptrace(req, tid.value, addr, data);
    int err = (r == -1) ? errno : 0;
    // PEEK requests return data; -1 with errno 0 is a valid word.
    if (r == -1 && err == 0 && (req == PTRACE_PEEKDATA || req == PTRACE_PEEKUSER))
        err = 0;
    log_request(req, tid, addr, data, r, err);
    if (result != nullptr)
        *result = r;
    // A resumed task (or one gone: ESRCH) no longer has the stop's status.
    if ((err == 0 || err == ESRCH) && resumes(req) && !unconsumed_stops().empty())
        unconsumed_stops().erase(tid.value);
    return err;
}

void ptrace_or_throw(__ptrace_request req, tid_t tid, void* addr, void* data, const char* what)
{
    if (int err = ptrace_call(req, tid, addr, data); err != 0)
        throw error::from_errno(err, fmt::format("{} of task {}", what, tid.value));
}

}  // namespace tdctl::ptrace
