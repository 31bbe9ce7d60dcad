// A scope with every thread of the target held (stop_all), released at its
// end even when an error is on its way out.
#pragma once

#include <exception>

#include "base/log.hpp"
#include "ptrace/traced_process.hpp"

namespace tdctl::core {

/// Holds every thread of `process` (traced_process::stop_all) for the life of
/// the object; the destructor releases them and never throws: a failure is
/// logged as a warning naming `after` ("after arming", "after routing").
class held_target {
public:
    held_target(ptrace::traced_process& process, const char* after) : process_(process), after_(after)
    {
        process_.stop_all();
    }
    ~held_target()
    {
        try {
            process_.release_all();
        } catch (const std::exception& e) {
            log::warning("the target could not be let run on {}: {}", after_, e.what());
        }
    }
    held_target(const held_target&) = delete;
    held_target& operator=(const held_target&) = delete;

private:
    ptrace::traced_process& process_;
    const char* after_;
};

}  // namespace tdctl::core
