// td_ta_reset_stats: start the averages again from now.
#include "core/session.hpp"

namespace tdctl::core {

td_status session::reset_stats()
{
    stats_.reset(lwps());
    return {};
}

}  // namespace tdctl::core
