// td_ta_reset_stats: start the averages again from now.
#include "core/accounting/lwp_accounting.hpp"

namespace tdctl::core {

td_status lwp_accounting::reset_stats()
{
    stats_.reset(target_.lwps());
    return {};
}

}  // namespace tdctl::core
