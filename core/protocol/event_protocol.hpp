// The one reader of the thread-event protocol that both backends publish in
// target memory (glibc's nptl, and tdagent in the same shape): a global event
// mask, per-thread records with an enable flag, an event buffer and a
// `nextevent` link, a LIFO list of threads with buffered messages, and lists
// of live threads. Every access is bounded: lists have length and cycle limits.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <thread_db.h>

#include "base/change_journal.hpp"
#include "base/types.hpp"
#include "core/protocol/db_descriptor.hpp"
#include "core/target_access.hpp"
#include "core/td_result.hpp"

namespace tdctl::core {

/// Most records walked in one list before it is declared corrupt (TD_DBERR).
inline constexpr std::size_t max_list_length = 1 << 17;

/// An event reporting address, as td_ta_event_addr returns it (NOTIFY_BPT).
struct reporting_address {
    target_addr address;
    std::uint64_t function_size = 0;   ///< st_size of the reporting function, bytes
    std::string symbol;                ///< e.g. "__nptl_create_event"
    /// The byte that makes the reporting code stop its thread with a signal
    /// instead of being trapped (libtdagent.so's __tdagent_stop_signals[e]);
    /// null when the library has none (nptl: a trap byte is the only way).
    target_addr stop_flag;
};

/// Where one thread library keeps the protocol. Record fields are offsets from
/// a thread handle (the record's address); variables are target addresses.
struct protocol_layout {
    std::string backend;               ///< "nptl" or "tdagent"
    std::string module;                ///< module that publishes it ("libc.so.6")
    std::string version;               ///< the library's version string, if published

    db_field report_events;            ///< bool: event reporting enabled (ti_traceme)
    db_field eventmask;                ///< td_thr_events_t words of the thread's mask
    db_field eventnum;                 ///< td_event_e of the buffered message (TD_EVENT_NONE: empty)
    db_field eventdata;                ///< void *: the message's data
    db_field nextevent;                ///< record *: link of the buffered-message list
    db_field tid;                      ///< pid_t: the LWP (0 once the thread has exited)
    db_field start_routine;            ///< void *(*)(void *): ti_startfunc
    db_field cancelhandling;           ///< int: exiting/terminated bits (nptl only; may be invalid)
    db_field list_link;                ///< list_t member linking live threads
    db_field list_next;                ///< list_t.next
    std::uint32_t eventmask_words = TD_EVENTSIZE;

    target_addr global_mask;           ///< td_thr_events_t: the global event mask
    target_addr last_event;            ///< record *: head of the buffered-message list
    target_addr nthreads;              ///< int: the library's live-thread counter (null if none)
    std::optional<target_addr> initial_report_events;  ///< bool: enable flag before the library initialises
    std::vector<target_addr> thread_list_heads;        ///< list_t heads of live-thread lists
    target_addr concurrency_level;     ///< int: pthread_setconcurrency's level (null if not found)
    /// pc of a thread stopped by a report signal (__tdagent_report_stopped);
    /// null when the library cannot stop its threads itself.
    target_addr report_stopped_pc;
    /// The stop flags (__tdagent_stop_signals): also the si_value of the
    /// agent's report signal. Null with report_stopped_pc.
    target_addr stop_flags;

    std::map<td_event_e, reporting_address> event_addresses;
};

/// Reads the thread-record fields of a layout from descriptors in glibc's
/// format (`<prefix>pthread_eventbuf`, `<prefix>td_eventbuf_t_eventnum`, ...)
/// published by `module`, and the library's version string from
/// `version_symbol`. False when a field the protocol needs is missing.
bool read_record_layout(target_access& target, std::string_view module, std::string_view prefix,
                        std::string_view version_symbol, protocol_layout& l);

/// One event buffer as read from a record.
struct event_buffer {
    td_event_e eventnum = TD_EVENT_NONE;
    std::uint64_t eventdata = 0;
    target_addr nextevent;
    /// The record's start routine, when consume() was asked for it (null
    /// otherwise, or when the library publishes none).
    target_addr start_routine;
    /// consume() with consume_extras: the extra reads all came in full.
    bool extras_read = false;
    /// consume() with consume_extras: the flag change was written (and
    /// journaled); false when the record's tid was not the one expected.
    bool flag_changed = false;
    bool is_empty() const { return eventnum == TD_EVENT_NONE; }
};

/// What one consume() also does in its one read and one write of the target
/// (the per-report path: no system call of its own for any of it).
struct consume_extras {
    /// What becomes of the record's enable flag (report_events).
    enum class flag_change {
        keep,      ///< left alone
        enable,    ///< turned on, journaled: a new thread at its TD_CREATE (it has not run yet)
        put_back,  ///< its journaled original back, the entry settled: a thread at its TD_DEATH
    };
    /// Ranges read after the record's, in the same call (a stack window);
    /// at most two. event_buffer::extras_read tells whether they came whole.
    std::span<const std::pair<target_addr, std::span<std::byte>>> reads;
    flag_change flag = flag_change::keep;
    /// The value the record's tid field must hold for the flag change (the
    /// thread's TID as the target sees it, its namespace TID).
    std::int32_t record_tid = 0;
};

class event_protocol {
public:
    event_protocol(target_access& target, protocol_layout layout) : target_(target), layout_(std::move(layout)) {}

    const protocol_layout& layout() const { return layout_; }
    target_access& target() { return target_; }

    /// From now on, every write of a mask or flag (global mask, thread mask,
    /// enable flag, initial-report flag) is recorded in `journal` before it
    /// is made, a thread record's guarded by its tid field. nullptr: plain
    /// writes (hosted tests, a target without a journal).
    void set_journal(change_journal* journal) { journal_ = journal; }
    /// The guard of a change to a thread record: its tid field still holds
    /// what it holds now. std::nullopt when the field cannot be read.
    std::optional<change_guard> record_guard(target_addr record);

    td_result<td_thr_events_t> read_global_mask();
    td_status write_global_mask(const td_thr_events_t& mask);

    td_result<bool> read_report_events(target_addr handle);
    /// `record_tid`, when the caller has just read the record's tid field,
    /// is used for the journal's guard instead of reading it again.
    td_status write_report_events(target_addr handle, bool on, std::optional<std::int32_t> record_tid = {});
    /// Before the library initialises there is no record: the flag new
    /// threads start with (glibc's __nptl_initial_report_events).
    td_result<bool> read_initial_report_events();
    td_status write_initial_report_events(bool on);

    td_result<td_thr_events_t> read_thread_mask(target_addr handle);

    /// What td_thr_get_info needs of one record, with one read of the
    /// target (process_vm_readv of five ranges): tid, start routine (null
    /// when the layout has none), enable flag, event mask, cancelhandling
    /// (0 when the layout has none). TD_DBERR when any of it is unreadable.
    struct record_info {
        pid_t tid = 0;
        target_addr start_routine;
        bool report_events = false;
        td_thr_events_t mask{};
        std::uint32_t cancelhandling = 0;
    };
    td_result<record_info> read_record_info(target_addr handle);
    td_status write_thread_mask(target_addr handle, const td_thr_events_t& mask);

    /// eventnum, eventdata and nextevent with one read of the target.
    td_result<event_buffer> read_buffer(target_addr handle);
    /// Empties the buffer (eventnum and eventdata), keeping the mask.
    td_status clear_buffer(target_addr handle);

    /// The drain's fast path, the same as read_buffer + clear_buffer + unlink
    /// with one read of the target (buffer, link and list head together) and
    /// usually two writes. Returns the buffer as it was. With
    /// `with_start_routine`, the record's start routine comes in the same read.
    td_result<event_buffer> consume(target_addr handle, bool with_start_routine = false);
    /// consume() that also reads `extras.reads` and changes the record's
    /// enable flag in the same two calls (the flag's tid guard and current
    /// value come in the read). With a layout whose buffer does not fit one
    /// read, the same work is done with more calls.
    td_result<event_buffer> consume(target_addr handle, bool with_start_routine, const consume_extras& extras);

    /// Removes handle from the buffered-message list wherever it is, and
    /// clears its link. Not finding it is not an error (the link is cleared
    /// anyway); a cycle or overlong list is TD_DBERR.
    td_status unlink(target_addr handle);

    /// Records on the buffered-message list, head first (bounded, cycle-safe).
    /// A listed record that is no longer mapped ends the list: the link to it
    /// is cleared in the target (cut_unmapped).
    td_result<std::vector<target_addr>> message_list();

    /// Every record on the live-thread lists (bounded, cycle-safe).
    td_result<std::vector<target_addr>> thread_records();

    td_result<pid_t> read_tid(target_addr handle);
    td_result<target_addr> read_start_routine(target_addr handle);
    /// cancelhandling, or 0 when the library does not publish it.
    td_result<std::uint32_t> read_cancelhandling(target_addr handle);

    /// The library's live-thread counter (SPEC §6 nthreads).
    td_result<int> read_nthreads();

private:
    struct record_snapshot;
    struct write_batch;
    struct flag_write;
    /// Sizes what consume() reads into `s`; false when the layout's buffer
    /// or the extras do not fit one read (the field-by-field path).
    bool fits_one_read(target_addr handle, bool with_start_routine, const consume_extras& extras,
                       record_snapshot& s) const;
    /// consume()'s one read: the snapshot and the extras (extras_read set in
    /// `b`); false when the snapshot's part could not be read whole.
    bool read_snapshot(record_snapshot& s, const consume_extras& extras, event_buffer& b);
    /// The buffer's fields, link and start routine as the snapshot holds them.
    void decode_buffer(const record_snapshot& s, event_buffer& b) const;
    /// Queues the emptied buffer and, when the record heads the list, its
    /// removal; true when it heads it.
    bool queue_buffer_writes(record_snapshot& s, const event_buffer& b, write_batch& writes) const;
    /// Queues the flag change extras ask for (journaled first), when the
    /// record's tid still names the thread.
    void queue_flag_write(const record_snapshot& s, const consume_extras& extras, write_batch& writes,
                          flag_write& flag);
    /// consume() for a layout whose buffer fields do not fit its one read.
    td_result<event_buffer> consume_field_by_field(target_addr handle, bool with_start_routine);
    /// consume_extras done with calls of their own (the field-by-field path).
    void finish_extras(target_addr handle, const consume_extras& extras, event_buffer& b);
    /// Ends the list at `link` (the head variable or a record's nextevent):
    /// the record it points to can no longer be read.
    td_status cut_unmapped(target_addr link);
    /// Writes a mask or flag, through the journal when there is one.
    /// `record`: the thread record the field belongs to (guard on its tid,
    /// `record_tid` when known, else read now).
    bool write_setting(target_addr address, std::span<const std::byte> bytes, change_kind kind,
                       target_addr record = {}, std::optional<std::int32_t> record_tid = {});
    target_access& target_;
    change_journal* journal_ = nullptr;
    protocol_layout layout_;
};

}  // namespace tdctl::core
