#include "cmd/target_hold.hpp"

#include <exception>

namespace tdctl::cmd {

target_hold::target_hold(core::session& session, output& out)
    : session_(session), out_(out), was_held_(session.is_held())
{
    if (!was_held_ && session_.is_alive())
        session_.interrupt();
}

target_hold::~target_hold()
{
    if (was_held_ || !session_.is_alive())
        return;
    try {
        session_.end_command_hold();
    } catch (const std::exception& e) {
        // The command's own result is already out; the hold outlives it.
        out_.error("resume", std::string("resuming the target after the command: ") + e.what() +
                                 "; the target stays held (`continue` resumes)");
    }
}

}  // namespace tdctl::cmd
