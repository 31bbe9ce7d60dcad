// Results of the td_* surface: a value or a td_err_e, never errno or -1.
#pragma once

#include <expected>

#include <thread_db.h>

namespace tdctl::core {

template <typename T>
using td_result = std::expected<T, td_err_e>;

/// For calls that return nothing but TD_OK or an error.
using td_status = std::expected<void, td_err_e>;

inline std::unexpected<td_err_e> td_fail(td_err_e e) { return std::unexpected(e); }

}  // namespace tdctl::core
