// td_thr_events_t set operations with glibc's bit layout (<thread_db.h>):
// event n is bit (n-1)%32 of word (n-1)/32. Named after the seed's macros.
#pragma once

#include <initializer_list>

#include <thread_db.h>

// glibc spells these six as function-like macros, which would rewrite every
// declaration and call below (namespace qualification does not stop the
// preprocessor). These functions replace them with the same bit layout;
// <thread_db.h> has an include guard, so it cannot bring them back later.
#undef td_event_emptyset
#undef td_event_fillset
#undef td_event_addset
#undef td_event_delset
#undef td_eventismember
#undef td_eventisempty

namespace tdctl::events {

/// Number of event numbers a td_thr_events_t can hold (1..64 with glibc's
/// TD_EVENTSIZE of 2 words); numbers outside 1..event_set_capacity are never
/// members and are ignored by add/del.
inline constexpr int event_set_capacity = TD_EVENTSIZE * 32;

/// Clears every bit (the seed's "NULL event set").
void td_event_emptyset(td_thr_events_t& set);
/// Sets every bit of every word, as glibc's macro does (not only TD_READY..TD_TIMEOUT).
void td_event_fillset(td_thr_events_t& set);
/// Adds event number e; no-op outside 1..event_set_capacity.
void td_event_addset(td_thr_events_t& set, td_event_e e);
/// Removes event number e; no-op outside 1..event_set_capacity.
void td_event_delset(td_thr_events_t& set, td_event_e e);
/// Whether e's bit is set; false outside 1..event_set_capacity.
bool td_eventismember(const td_thr_events_t& set, td_event_e e);
/// Whether no bit at all is set.
bool td_eventisempty(const td_thr_events_t& set);

// Pointer forms, so code written against the seed/glibc spelling
// (td_event_addset(&set, TD_CREATE)) keeps compiling against these.
void td_event_emptyset(td_thr_events_t* set);
void td_event_fillset(td_thr_events_t* set);
void td_event_addset(td_thr_events_t* set, td_event_e e);
void td_event_delset(td_thr_events_t* set, td_event_e e);
bool td_eventismember(const td_thr_events_t* set, td_event_e e);
bool td_eventisempty(const td_thr_events_t* set);

/// A set with just these events (e.g. make_event_set({TD_CREATE, TD_DEATH})).
td_thr_events_t make_event_set(std::initializer_list<td_event_e> events);

/// a | b and a & ~b, word by word.
td_thr_events_t event_union(const td_thr_events_t& a, const td_thr_events_t& b);
td_thr_events_t event_difference(const td_thr_events_t& a, const td_thr_events_t& b);
/// Word-by-word equality. td_thr_events_t lives in the global namespace, so
/// callers outside tdctl::events need `using tdctl::events::operator==;`.
bool operator==(const td_thr_events_t& a, const td_thr_events_t& b);

}  // namespace tdctl::events
