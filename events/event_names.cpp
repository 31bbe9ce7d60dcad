#include "events/event_names.hpp"

#include <algorithm>
#include <array>
#include <string>

#include "base/quoting.hpp"
#include "events/event_set.hpp"

namespace tdctl::events {

namespace {

struct event_entry {
    td_event_e event;
    std::string_view name;        // as in <thread_db.h>
    std::string_view short_name;  // the word users type
};

// Indexed by event number - 1; the tests check it against the enum values.
constexpr std::array<event_entry, 14> event_table{{
    {TD_READY, "TD_READY", "ready"},
    {TD_SLEEP, "TD_SLEEP", "sleep"},
    {TD_SWITCHTO, "TD_SWITCHTO", "switchto"},
    {TD_SWITCHFROM, "TD_SWITCHFROM", "switchfrom"},
    {TD_LOCK_TRY, "TD_LOCK_TRY", "lock_try"},
    {TD_CATCHSIG, "TD_CATCHSIG", "catchsig"},
    {TD_IDLE, "TD_IDLE", "idle"},
    {TD_CREATE, "TD_CREATE", "create"},
    {TD_DEATH, "TD_DEATH", "death"},
    {TD_PREEMPT, "TD_PREEMPT", "preempt"},
    {TD_PRI_INHERIT, "TD_PRI_INHERIT", "pri_inherit"},
    {TD_REAP, "TD_REAP", "reap"},
    {TD_CONCURRENCY, "TD_CONCURRENCY", "concurrency"},
    {TD_TIMEOUT, "TD_TIMEOUT", "timeout"},
}};
static_assert(static_cast<std::size_t>(TD_MAX_EVENT_NUM - TD_MIN_EVENT_NUM + 1) == event_table.size());

const event_entry* find_entry(td_event_e e) {
    const int n = static_cast<int>(e);
    if (n < TD_MIN_EVENT_NUM || n > TD_MAX_EVENT_NUM) return nullptr;
    return &event_table[static_cast<std::size_t>(n - TD_MIN_EVENT_NUM)];
}

char ascii_lower(char c) {
    return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool is_blank(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
    while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
    return s;
}

// Lowercased, without a leading "td_": the form compared against short names.
std::string normalize(std::string_view word) {
    std::string out;
    out.reserve(word.size());
    for (char c : trim(word)) out.push_back(ascii_lower(c));
    if (out.size() > 3 && out.starts_with("td_")) out.erase(0, 3);
    return out;
}

bool is_all_word(const std::string& normalized) {
    // "TD_ALL_EVENTS" is glibc's own name for the pseudo-event meaning "all".
    return normalized == "all" || normalized == "all_events";
}

}  // namespace

const std::vector<td_event_e>& all_events() {
    static const std::vector<td_event_e> events = [] {
        std::vector<td_event_e> v;
        for (const auto& entry : event_table) v.push_back(entry.event);
        return v;
    }();
    return events;
}

std::string event_name(td_event_e e) {
    if (const auto* entry = find_entry(e)) return std::string{entry->name};
    if (static_cast<int>(e) == TD_EVENT_NONE) return "TD_EVENT_NONE";
    return "TD_EVENT_" + std::to_string(static_cast<int>(e));
}

std::string event_short_name(td_event_e e) {
    if (const auto* entry = find_entry(e)) return std::string{entry->short_name};
    if (static_cast<int>(e) == TD_EVENT_NONE) return "none";
    return "event_" + std::to_string(static_cast<int>(e));
}

std::optional<td_event_e> parse_event(std::string_view word) {
    const std::string key = normalize(word);
    for (const auto& entry : event_table) {
        if (key == entry.short_name) return entry.event;
    }
    return std::nullopt;
}

std::string valid_event_names() {
    std::string out;
    for (const auto& entry : event_table) {
        out += entry.short_name;
        out += ", ";
    }
    out += "all (case-insensitive, TD_ prefix optional)";
    return out;
}

std::expected<std::vector<td_event_e>, std::string> parse_event_list(std::string_view text) {
    if (trim(text).empty()) {
        return std::unexpected("no event name given; valid names: " + valid_event_names());
    }

    td_thr_events_t seen;
    td_event_emptyset(seen);
    std::size_t item_index = 0;
    std::string_view rest = text;
    while (true) {
        const auto comma = rest.find(',');
        const std::string_view raw = rest.substr(0, comma);
        ++item_index;

        const std::string_view item = trim(raw);
        if (item.empty()) {
            return std::unexpected("empty event name (item " + std::to_string(item_index) + ") in " +
                                   quoted_word(text) + "; valid names: " + valid_event_names());
        }
        const std::string key = normalize(item);
        if (is_all_word(key)) {
            for (auto e : all_events()) td_event_addset(seen, e);
        } else if (key == "none") {
            // Nothing to add: accepted so that format_event_set's "none" parses back.
        } else if (auto e = parse_event(item)) {
            td_event_addset(seen, *e);
        } else {
            return std::unexpected("unknown event " + quoted_word(item) + "; valid names: " + valid_event_names());
        }

        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
    }
    // Collecting through a set gives numeric order and drops duplicates.
    return from_event_set(seen);
}

td_thr_events_t to_event_set(const std::vector<td_event_e>& list) {
    td_thr_events_t set;
    td_event_emptyset(set);
    for (auto e : list) td_event_addset(set, e);
    return set;
}

std::vector<td_event_e> from_event_set(const td_thr_events_t& set) {
    std::vector<td_event_e> out;
    for (const auto& entry : event_table) {
        if (td_eventismember(set, entry.event)) out.push_back(entry.event);
    }
    return out;
}

std::string format_event_set(const td_thr_events_t& set) {
    const auto events = from_event_set(set);
    if (events.empty()) return "none";
    if (events.size() == event_table.size()) return "all";
    std::string out;
    for (auto e : events) {
        if (!out.empty()) out += ',';
        out += event_short_name(e);
    }
    return out;
}

}  // namespace tdctl::events
