// The one error type of the project. It keeps the number (an errno value or a
// td_err_e) next to the message, so callers can decide on the number.
#pragma once

#include <stdexcept>
#include <string>

#include <thread_db.h>

namespace tdctl {

enum class error_domain {
    os,         ///< code is an errno value
    td,         ///< code is a td_err_e value
    usage,      ///< bad input from the user (command, option, script); code unused
    target,     ///< the target is not in a state we can work with; code unused
};

/// Thrown by ptrace/ and symbols/ for unexpected failures; carried by core/'s
/// td_result as a td_err_e. Caught only at command boundaries in cmd/.
class error : public std::runtime_error {
public:
    error(error_domain domain, int code, const std::string& what)
        : std::runtime_error(what), domain_(domain), code_(code) {}

    /// An OS failure: `what` is prefixed to strerror(err).
    static error from_errno(int err, const std::string& what);
    static error from_td(td_err_e err, const std::string& what);
    static error usage(const std::string& what) { return {error_domain::usage, 0, what}; }
    static error target(const std::string& what) { return {error_domain::target, 0, what}; }

    error_domain domain() const { return domain_; }
    int code() const { return code_; }

private:
    error_domain domain_;
    int code_;
};

/// "TD_NOMSG" for TD_NOMSG, etc.; "TD_<n>" for values the header does not name.
const char* td_err_name(td_err_e err);

/// One line saying what a td_err_e means, for people.
const char* td_err_description(td_err_e err);

}  // namespace tdctl
