// Event names both ways: TD_CREATE <-> "TD_CREATE" / "create".
#pragma once

#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <thread_db.h>

namespace tdctl::events {

/// Every real event, TD_READY .. TD_TIMEOUT, in numeric order (14 of them).
const std::vector<td_event_e>& all_events();

/// "TD_CREATE" for TD_CREATE; "TD_EVENT_NONE" for 0 (glibc's
/// TD_EVENT_NONE/TD_ALL_EVENTS); "TD_EVENT_<n>" for any other number outside
/// TD_READY..TD_TIMEOUT (target memory may hold anything).
std::string event_name(td_event_e e);

/// "create" for TD_CREATE, "lock_try" for TD_LOCK_TRY, ...; "none" for 0 and
/// "event_<n>" outside TD_READY..TD_TIMEOUT.
std::string event_short_name(td_event_e e);

/// Parses one name: "create", "TD_CREATE", "td_create", "Create"
/// (ASCII case-insensitive, surrounding blanks ignored). Only the 14 real
/// events; "all" is a list word, see parse_event_list.
std::optional<td_event_e> parse_event(std::string_view word);

/// Parses a comma list ("create,death", "TD_CREATE, death") or "all". The
/// result lists each event once, in numeric order; "all" gives all_events().
/// Blanks around items are ignored; "all" may appear as an item, and so may
/// "none" (adds nothing, so format_event_set's output parses back).
/// On error the message names the bad word (or the empty item) and lists the
/// valid names. Never throws except std::bad_alloc.
std::expected<std::vector<td_event_e>, std::string> parse_event_list(std::string_view text);

/// The valid words for parse_event_list, for help and error messages:
/// "ready, sleep, ..., timeout, all (case-insensitive, TD_ prefix optional)".
std::string valid_event_names();

/// The events of a list as a set; numbers the set cannot hold are skipped.
td_thr_events_t to_event_set(const std::vector<td_event_e>& list);

/// The events of a set, in numeric order (only TD_MIN_EVENT_NUM..TD_MAX_EVENT_NUM).
std::vector<td_event_e> from_event_set(const td_thr_events_t& set);

/// "create,death" (short names), "all" when every real event is in the set,
/// or "none" when none is. Bits outside TD_READY..TD_TIMEOUT are not shown.
std::string format_event_set(const td_thr_events_t& set);

}  // namespace tdctl::events
