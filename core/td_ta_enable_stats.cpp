// td_ta_enable_stats: start (reset) or freeze the statistics of a target.
#include "core/accounting/lwp_accounting.hpp"

namespace tdctl::core {

td_status lwp_accounting::enable_stats(bool on)
{
    stats_.enable(on, target_.lwps());
    return {};
}

}  // namespace tdctl::core
