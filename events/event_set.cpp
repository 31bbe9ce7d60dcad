#include "events/event_set.hpp"

#include <cstdint>
#include <initializer_list>

namespace tdctl::events {

namespace {

bool in_range(td_event_e e) {
    const int n = static_cast<int>(e);
    return n >= 1 && n <= event_set_capacity;
}

// Event n lives in word (n-1)>>5 at bit (n-1)&31, exactly as glibc's
// __td_eventword/__td_eventmask compute it.
unsigned word_of(td_event_e e) {
    return static_cast<unsigned>(static_cast<int>(e) - 1) >> 5;
}

std::uint32_t mask_of(td_event_e e) {
    return std::uint32_t{1} << ((static_cast<unsigned>(e) - 1) & 31U);
}

}  // namespace

void td_event_emptyset(td_thr_events_t& set) {
    for (auto& word : set.event_bits) word = 0;
}

void td_event_fillset(td_thr_events_t& set) {
    for (auto& word : set.event_bits) word = UINT32_C(0xffffffff);
}

void td_event_addset(td_thr_events_t& set, td_event_e e) {
    if (in_range(e)) set.event_bits[word_of(e)] |= mask_of(e);
}

void td_event_delset(td_thr_events_t& set, td_event_e e) {
    if (in_range(e)) set.event_bits[word_of(e)] &= ~mask_of(e);
}

bool td_eventismember(const td_thr_events_t& set, td_event_e e) {
    return in_range(e) && (set.event_bits[word_of(e)] & mask_of(e)) != 0;
}

bool td_eventisempty(const td_thr_events_t& set) {
    for (auto word : set.event_bits) {
        if (word != 0) return false;
    }
    return true;
}

void td_event_emptyset(td_thr_events_t* set) { td_event_emptyset(*set); }
void td_event_fillset(td_thr_events_t* set) { td_event_fillset(*set); }
void td_event_addset(td_thr_events_t* set, td_event_e e) { td_event_addset(*set, e); }
void td_event_delset(td_thr_events_t* set, td_event_e e) { td_event_delset(*set, e); }
bool td_eventismember(const td_thr_events_t* set, td_event_e e) { return td_eventismember(*set, e); }
bool td_eventisempty(const td_thr_events_t* set) { return td_eventisempty(*set); }

td_thr_events_t make_event_set(std::initializer_list<td_event_e> events) {
    td_thr_events_t set;
    td_event_emptyset(set);
    for (auto e : events) td_event_addset(set, e);
    return set;
}

td_thr_events_t event_union(const td_thr_events_t& a, const td_thr_events_t& b) {
    td_thr_events_t out;
    for (int i = 0; i < TD_EVENTSIZE; ++i) out.event_bits[i] = a.event_bits[i] | b.event_bits[i];
    return out;
}

td_thr_events_t event_difference(const td_thr_events_t& a, const td_thr_events_t& b) {
    td_thr_events_t out;
    for (int i = 0; i < TD_EVENTSIZE; ++i) out.event_bits[i] = a.event_bits[i] & ~b.event_bits[i];
    return out;
}

bool operator==(const td_thr_events_t& a, const td_thr_events_t& b) {
    for (int i = 0; i < TD_EVENTSIZE; ++i) {
        if (a.event_bits[i] != b.event_bits[i]) return false;
    }
    return true;
}

}  // namespace tdctl::events
