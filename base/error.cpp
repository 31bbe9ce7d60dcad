#include "base/error.hpp"

#include <cstring>

namespace tdctl {

error error::from_errno(int err, const std::string& what)
{
    return {error_domain::os, err, what + ": " + std::strerror(err)};
}

error error::from_td(td_err_e err, const std::string& what)
{
    return {error_domain::td, static_cast<int>(err), what.empty() ? std::string(td_err_name(err)) : what};
}

const char* td_err_name(td_err_e err)
{
    switch (err) {
    case TD_OK: return "TD_OK";
    case TD_ERR: return "TD_ERR";
    case TD_NOTHR: return "TD_NOTHR";
    case TD_NOSV: return "TD_NOSV";
    case TD_NOLWP: return "TD_NOLWP";
    case TD_BADPH: return "TD_BADPH";
    case TD_BADTH: return "TD_BADTH";
    case TD_BADSH: return "TD_BADSH";
    case TD_BADTA: return "TD_BADTA";
    case TD_BADKEY: return "TD_BADKEY";
    case TD_NOMSG: return "TD_NOMSG";
    case TD_NOFPREGS: return "TD_NOFPREGS";
    case TD_NOLIBTHREAD: return "TD_NOLIBTHREAD";
    case TD_NOEVENT: return "TD_NOEVENT";
    case TD_NOCAPAB: return "TD_NOCAPAB";
    case TD_DBERR: return "TD_DBERR";
    case TD_NOAPLIC: return "TD_NOAPLIC";
    case TD_NOTSD: return "TD_NOTSD";
    case TD_MALLOC: return "TD_MALLOC";
    case TD_PARTIALREG: return "TD_PARTIALREG";
    case TD_NOXREGS: return "TD_NOXREGS";
    case TD_NOTALLOC: return "TD_NOTALLOC";
    case TD_VERSION: return "TD_VERSION";
    case TD_NOTLS: return "TD_NOTLS";
    }
    return "TD_UNKNOWN";
}

const char* td_err_description(td_err_e err)
{
    switch (err) {
    case TD_OK: return "no error";
    case TD_ERR: return "parameter or internal error";
    case TD_NOTHR: return "no such thread";
    case TD_NOSV: return "no such synchronization object";
    case TD_NOLWP: return "no such LWP";
    case TD_BADPH: return "invalid process handle";
    case TD_BADTH: return "invalid thread handle";
    case TD_BADSH: return "invalid synchronization object handle";
    case TD_BADTA: return "invalid thread agent";
    case TD_BADKEY: return "invalid thread-specific data key";
    case TD_NOMSG: return "no event message is buffered";
    case TD_NOFPREGS: return "no floating-point registers";
    case TD_NOLIBTHREAD: return "no thread library found in the target";
    case TD_NOEVENT: return "the thread library does not report this event";
    case TD_NOCAPAB: return "the thread library has not initialised yet";
    case TD_DBERR: return "reading or writing the target failed";
    case TD_NOAPLIC: return "operation not applicable";
    case TD_NOTSD: return "no thread-specific data for this thread";
    case TD_MALLOC: return "out of memory";
    case TD_PARTIALREG: return "only part of the register set was written";
    case TD_NOXREGS: return "no extra registers";
    case TD_NOTALLOC: return "TLS not allocated";
    case TD_VERSION: return "thread library version mismatch";
    case TD_NOTLS: return "no TLS in this module";
    }
    return "unknown thread_db error";
}

}  // namespace tdctl
