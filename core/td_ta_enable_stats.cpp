// td_ta_enable_stats: start (reset) or freeze the statistics of a target.
#include "core/session.hpp"

namespace tdctl::core {

td_status session::enable_stats(bool on)
{
    stats_.enable(on, lwps());
    return {};
}

}  // namespace tdctl::core
