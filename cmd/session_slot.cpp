#include "cmd/session_slot.hpp"

#include <utility>

namespace tdctl::cmd {

session_slot::session_slot(std::unique_ptr<core::session> session, bool launched)
    : session_(std::move(session)), launched_(launched)
{
}

void session_slot::start(std::unique_ptr<core::session> next, bool launched)
{
    session_ = std::move(next);
    launched_ = launched;
    exit_status_.reset();
    detached_ = false;
}

}  // namespace tdctl::cmd
