#include "core/protocol/event_protocol.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <unordered_set>
#include <utility>


namespace tdctl::core {

namespace {

constexpr std::uint64_t zero_word = 0;
constexpr std::uint64_t one_word = 1;

// The low `bytes` bytes of a variable read into or written from (little-endian).
std::span<std::byte> low_bytes(std::uint64_t& v, std::uint32_t bytes)
{
    return std::as_writable_bytes(std::span(&v, 1)).first(bytes);
}

std::span<const std::byte> low_bytes(const std::uint64_t& v, std::uint32_t bytes)
{
    return std::as_bytes(std::span(&v, 1)).first(bytes);
}

bool read_mask(target_memory& mem, target_addr addr, td_thr_events_t& out)
{
    std::memset(&out, 0, sizeof out);
    return mem.read(addr, std::as_writable_bytes(std::span(out.event_bits))) == sizeof out.event_bits;
}

}  // namespace

bool read_record_layout(target_access& target, std::string_view module, std::string_view prefix,
                        std::string_view version_symbol, protocol_layout& l)
{
    if (auto v = target.lookup_symbol(module, version_symbol)) {
        std::array<char, 32> buf{};
        std::size_t n = target.memory().read(v->address, std::as_writable_bytes(std::span(buf)));
        l.version = std::string(buf.data(), strnlen(buf.data(), std::min(n, buf.size())));
    }
    auto field = [&](std::string_view name) { return read_db_field(target, module, prefix, name).value_or(db_field{}); };
    db_field eventbuf = field("pthread_eventbuf");
    db_field eventnum = field("td_eventbuf_t_eventnum");
    db_field eventdata = field("td_eventbuf_t_eventdata");
    db_field eventmask = field("pthread_eventbuf_eventmask");
    l.report_events = field("pthread_report_events");
    l.nextevent = field("pthread_nextevent");
    l.tid = field("pthread_tid");
    l.start_routine = field("pthread_start_routine");
    l.cancelhandling = field("pthread_cancelhandling");
    l.list_link = field("pthread_list");
    l.list_next = field("list_t_next");
    if (!eventbuf.is_valid() || !eventnum.is_valid() || !eventdata.is_valid() || !l.report_events.is_valid() ||
        !l.nextevent.is_valid() || !l.tid.is_valid() || !l.list_link.is_valid())
        return false;
    // The buffer's fields are published relative to td_eventbuf_t.
    l.eventnum = {eventnum.bits, eventnum.count, eventbuf.offset + eventnum.offset};
    l.eventdata = {eventdata.bits, eventdata.count, eventbuf.offset + eventdata.offset};
    l.eventmask = eventmask.is_valid() ? eventmask : db_field{64, 1, eventbuf.offset};
    if (!l.list_next.is_valid())
        l.list_next = db_field{64, 1, 0};
    return true;
}

td_result<td_thr_events_t> event_protocol::read_global_mask()
{
    if (layout_.global_mask.is_null())
        return td_fail(TD_DBERR);
    td_thr_events_t mask;
    if (!read_mask(target_.memory(), layout_.global_mask, mask))
        return td_fail(TD_DBERR);
    return mask;
}

td_status event_protocol::write_global_mask(const td_thr_events_t& mask)
{
    if (layout_.global_mask.is_null())
        return td_fail(TD_DBERR);
    if (!write_setting(layout_.global_mask, std::as_bytes(std::span(mask.event_bits)), change_kind::global_mask))
        return td_fail(TD_DBERR);
    return {};
}

bool event_protocol::write_setting(target_addr address, std::span<const std::byte> bytes, change_kind kind,
                                   target_addr record, std::optional<std::int32_t> record_tid)
{
    if (journal_ == nullptr)
        return target_.memory().write(address, bytes);
    // Put back only while the record still belongs to the thread it serves
    // now (a record may pass to another thread between two writes).
    std::optional<change_guard> guard;
    if (!record.is_null())
        guard = record_tid ? change_guard::on(record + layout_.tid.offset, *record_tid) : record_guard(record);
    return journal_->write(address, bytes, kind, guard);
}

std::optional<change_guard> event_protocol::record_guard(target_addr record)
{
    auto tid = read_uint(target_.memory(), record + layout_.tid.offset, layout_.tid.element_bytes());
    if (!tid)
        return std::nullopt;
    return change_guard::on(record + layout_.tid.offset, static_cast<std::int32_t>(*tid));
}

td_result<bool> event_protocol::read_report_events(target_addr handle)
{
    auto v = read_uint(target_.memory(), handle + layout_.report_events.offset, layout_.report_events.element_bytes());
    if (!v)
        return td_fail(TD_DBERR);
    return *v != 0;
}

td_status event_protocol::write_report_events(target_addr handle, bool on, std::optional<std::int32_t> record_tid)
{
    const std::uint32_t n = layout_.report_events.element_bytes();
    const std::uint64_t v = on ? 1 : 0;
    if (n == 0 || n > 8 ||
        !write_setting(handle + layout_.report_events.offset, std::as_bytes(std::span(&v, 1)).first(n),
                       change_kind::thread_enable, handle, record_tid))
        return td_fail(TD_DBERR);
    return {};
}

td_result<bool> event_protocol::read_initial_report_events()
{
    if (!layout_.initial_report_events)
        return td_fail(TD_NOCAPAB);
    std::uint8_t v = 0;
    if (!target_.memory().read_value(*layout_.initial_report_events, v))
        return td_fail(TD_DBERR);
    return v != 0;
}

td_status event_protocol::write_initial_report_events(bool on)
{
    if (!layout_.initial_report_events)
        return td_fail(TD_NOCAPAB);
    std::uint8_t v = on ? 1 : 0;
    if (!write_setting(*layout_.initial_report_events, std::as_bytes(std::span(&v, 1)), change_kind::initial_flag))
        return td_fail(TD_DBERR);
    return {};
}

td_result<td_thr_events_t> event_protocol::read_thread_mask(target_addr handle)
{
    td_thr_events_t mask;
    if (!read_mask(target_.memory(), handle + layout_.eventmask.offset, mask))
        return td_fail(TD_DBERR);
    return mask;
}

td_result<event_protocol::record_info> event_protocol::read_record_info(target_addr handle)
{
    auto bytes = [](const db_field& f) { return f.is_valid() && f.element_bytes() <= 8 ? f.element_bytes() : 0u; };
    const std::uint32_t tid_bytes = bytes(layout_.tid), start_bytes = bytes(layout_.start_routine),
                        flag_bytes = bytes(layout_.report_events), cancel_bytes = bytes(layout_.cancelhandling);
    if (tid_bytes == 0 || flag_bytes == 0)
        return td_fail(TD_DBERR);
    std::uint64_t tid = 0, start = 0, flag = 0, cancel = 0;
    record_info info;
    auto into = [](std::uint64_t& v, std::uint32_t n) { return std::as_writable_bytes(std::span(&v, 1)).first(n); };
    const std::array<std::pair<target_addr, std::span<std::byte>>, 5> ranges{{
        {handle + layout_.tid.offset, into(tid, tid_bytes)},
        {handle + layout_.report_events.offset, into(flag, flag_bytes)},
        {handle + layout_.eventmask.offset, std::as_writable_bytes(std::span(info.mask.event_bits))},
        {handle + layout_.start_routine.offset, into(start, start_bytes)},
        {handle + layout_.cancelhandling.offset, into(cancel, cancel_bytes)},
    }};
    const std::size_t want = tid_bytes + flag_bytes + sizeof info.mask.event_bits + start_bytes + cancel_bytes;
    if (target_.memory().read_many(ranges) != want)
        return td_fail(TD_DBERR);
    info.tid = static_cast<pid_t>(static_cast<std::int32_t>(tid));
    info.report_events = flag != 0;
    info.start_routine = target_addr{start};
    info.cancelhandling = static_cast<std::uint32_t>(cancel);
    return info;
}

td_status event_protocol::write_thread_mask(target_addr handle, const td_thr_events_t& mask)
{
    if (!write_setting(handle + layout_.eventmask.offset, std::as_bytes(std::span(mask.event_bits)),
                       change_kind::thread_mask, handle))
        return td_fail(TD_DBERR);
    return {};
}

td_result<event_buffer> event_protocol::read_buffer(target_addr handle)
{
    std::uint32_t num_bytes = layout_.eventnum.element_bytes();
    std::uint32_t data_bytes = layout_.eventdata.element_bytes();
    std::uint32_t next_bytes = layout_.nextevent.element_bytes();
    if (num_bytes == 0 || num_bytes > 8 || data_bytes == 0 || data_bytes > 8 || next_bytes == 0 || next_bytes > 8)
        return td_fail(TD_DBERR);
    std::array<std::byte, 8> num{}, data{}, next{};
    std::array<std::pair<target_addr, std::span<std::byte>>, 3> ranges{{
        {handle + layout_.eventnum.offset, std::span(num.data(), num_bytes)},
        {handle + layout_.eventdata.offset, std::span(data.data(), data_bytes)},
        {handle + layout_.nextevent.offset, std::span(next.data(), next_bytes)},
    }};
    std::size_t want = num_bytes + data_bytes + next_bytes;
    // One process_vm_readv for the three fields.
    if (target_.memory().read_many(ranges) != want)
        return td_fail(TD_DBERR);
    event_buffer b;
    std::uint64_t v = 0;
    std::memcpy(&v, num.data(), 8);
    b.eventnum = static_cast<td_event_e>(static_cast<std::uint32_t>(v));
    std::memcpy(&b.eventdata, data.data(), 8);
    std::memcpy(&v, next.data(), 8);
    b.nextevent = target_addr{v};
    return b;
}

td_status event_protocol::clear_buffer(target_addr handle)
{
    auto& mem = target_.memory();
    if (!write_uint(mem, handle + layout_.eventnum.offset, layout_.eventnum.element_bytes(), 0) ||
        !write_uint(mem, handle + layout_.eventdata.offset, layout_.eventdata.element_bytes(), 0))
        return td_fail(TD_DBERR);
    return {};
}

td_result<event_buffer> event_protocol::consume_field_by_field(target_addr handle, bool with_start_routine)
{
    auto b = read_buffer(handle);
    if (!b)
        return b;
    if (!b->is_empty())
        if (auto r = clear_buffer(handle); !r)
            return td_fail(r.error());
    if (auto r = unlink(handle); !r)
        return td_fail(r.error());
    if (with_start_routine)
        b->start_routine = read_start_routine(handle).value_or(target_addr{});
    return b;
}

td_result<event_buffer> event_protocol::consume(target_addr handle, bool with_start_routine)
{
    return consume(handle, with_start_routine, consume_extras{});
}

void event_protocol::finish_extras(target_addr handle, const consume_extras& extras, event_buffer& b)
{
    if (!extras.reads.empty()) {
        std::size_t want = 0;
        for (const auto& r : extras.reads)
            want += r.second.size();
        b.extras_read = target_.memory().read_many(extras.reads) == want;
    }
    if (extras.flag == consume_extras::flag_change::keep)
        return;
    auto tid = read_tid(handle);
    if (!tid || *tid != extras.record_tid)
        return;
    if (extras.flag == consume_extras::flag_change::enable) {
        if (journal_ != nullptr)
            journal_->settle(handle + layout_.report_events.offset, false);
        b.flag_changed = static_cast<bool>(write_report_events(handle, true, extras.record_tid));
    } else if (journal_ != nullptr) {
        journal_->settle(handle + layout_.report_events.offset, true);
        b.flag_changed = true;
    }
}

// What consume() reads in its one call: the span from eventnum to eventdata
// (with whatever padding lies between, written back unchanged), the link,
// the list head; the start routine when asked; for a flag change the
// record's tid (its guard) and flag. Sizes are bytes, 0 for what is not read.
struct event_protocol::record_snapshot {
    target_addr handle;
    std::uint32_t lo = 0, hi = 0;  ///< the span, as offsets in the record
    std::uint32_t next_bytes = 0, start_bytes = 0, tid_bytes = 0, flag_bytes = 0;
    bool flag_change = false;
    target_addr tid_at, flag_at;

    std::array<std::byte, 32> span{};
    std::uint64_t next = 0, head = 0, start = 0, tid = 0;
    std::array<std::byte, 8> flag_now{};

    std::size_t fixed_bytes() const { return (hi - lo) + 2 * next_bytes + start_bytes + tid_bytes + flag_bytes; }
};

// The writes of one consume(), made with one call.
struct event_protocol::write_batch {
    std::array<std::pair<target_addr, std::span<const std::byte>>, 4> ranges;
    std::size_t count = 0;

    void add(target_addr at, std::span<const std::byte> bytes) { ranges[count++] = {at, bytes}; }
    std::span<const std::pair<target_addr, std::span<const std::byte>>> view() const { return {ranges.data(), count}; }
};

// What consume() does to the record's enable flag, decided before its write.
struct event_protocol::flag_write {
    bool tid_matches = false;         ///< the record's tid is extras.record_tid
    bool settle_after = false;        ///< put_back: the journal's entry is settled once written
    std::vector<std::byte> original;  ///< put_back: the bytes written back
};

td_result<event_buffer> event_protocol::consume(target_addr handle, bool with_start_routine,
                                                const consume_extras& extras)
{
    record_snapshot s;
    if (!fits_one_read(handle, with_start_routine, extras, s)) {
        auto b = consume_field_by_field(handle, with_start_routine);
        if (b)
            finish_extras(handle, extras, *b);
        return b;
    }
    event_buffer b;
    if (!read_snapshot(s, extras, b))
        return td_fail(TD_DBERR);
    decode_buffer(s, b);

    // The writes, in this order, with one call where the memory allows:
    // the emptied buffer; then, at the head (the usual case when every
    // message is drained at its stop), the head taken off and its link
    // cleared; then the flag. Elsewhere on the list, unlink() walks it.
    write_batch writes;
    const bool at_head = queue_buffer_writes(s, b, writes);
    flag_write flag;
    queue_flag_write(s, extras, writes, flag);
    if (writes.count != 0 && !target_.memory().write_many(writes.view()))
        return td_fail(TD_DBERR);
    if (flag.settle_after)
        journal_->settle(s.flag_at, false);
    b.flag_changed = flag.tid_matches && (extras.flag == consume_extras::flag_change::enable || flag.settle_after);
    if (!at_head && (s.head != 0 || s.next != 0))
        if (auto r = unlink(handle); !r)
            return td_fail(r.error());
    return b;
}

bool event_protocol::fits_one_read(target_addr handle, bool with_start_routine, const consume_extras& extras,
                                   record_snapshot& s) const
{
    const db_field& num = layout_.eventnum;
    const db_field& data = layout_.eventdata;
    s.handle = handle;
    s.next_bytes = layout_.nextevent.element_bytes();
    s.lo = std::min(num.offset, data.offset);
    s.hi = std::max(num.offset + num.element_bytes(), data.offset + data.element_bytes());
    s.flag_change = extras.flag != consume_extras::flag_change::keep;
    s.tid_bytes = s.flag_change ? layout_.tid.element_bytes() : 0;
    s.flag_bytes = s.flag_change ? layout_.report_events.element_bytes() : 0;
    if (s.hi - s.lo > 32 || num.element_bytes() > 8 || data.element_bytes() > 8 || s.next_bytes == 0 ||
        s.next_bytes > 8 || extras.reads.size() > 2 ||
        (s.flag_change && (s.tid_bytes == 0 || s.tid_bytes > 8 || s.flag_bytes == 0 || s.flag_bytes > 8)))
        return false;
    const db_field& routine = layout_.start_routine;
    s.start_bytes =
        with_start_routine && routine.is_valid() && routine.element_bytes() <= 8 ? routine.element_bytes() : 0;
    s.tid_at = handle + layout_.tid.offset;
    s.flag_at = handle + layout_.report_events.offset;
    return true;
}

bool event_protocol::read_snapshot(record_snapshot& s, const consume_extras& extras, event_buffer& b)
{
    std::array<std::pair<target_addr, std::span<std::byte>>, 8> ranges{};
    std::size_t nranges = 0;
    ranges[nranges++] = {s.handle + s.lo, std::span(s.span.data(), s.hi - s.lo)};
    ranges[nranges++] = {s.handle + layout_.nextevent.offset, low_bytes(s.next, s.next_bytes)};
    ranges[nranges++] = {layout_.last_event, low_bytes(s.head, s.next_bytes)};
    if (s.start_bytes != 0)
        ranges[nranges++] = {s.handle + layout_.start_routine.offset, low_bytes(s.start, s.start_bytes)};
    if (s.flag_change) {
        ranges[nranges++] = {s.tid_at, low_bytes(s.tid, s.tid_bytes)};
        ranges[nranges++] = {s.flag_at, std::span(s.flag_now.data(), s.flag_bytes)};
    }
    const std::size_t nfixed = nranges;
    std::size_t extra_want = 0;
    for (const auto& r : extras.reads) {
        ranges[nranges++] = r;
        extra_want += r.second.size();
    }
    // One process_vm_readv for all of it; the extras (a stack window) may
    // run into unmapped memory, then the record's part is read again alone.
    const std::size_t want = s.fixed_bytes() + extra_want;
    const std::size_t got = target_.memory().read_many(std::span(ranges.data(), nranges));
    b.extras_read = extra_want != 0 && got == want;
    return got == want || target_.memory().read_many(std::span(ranges.data(), nfixed)) == s.fixed_bytes();
}

void event_protocol::decode_buffer(const record_snapshot& s, event_buffer& b) const
{
    std::uint64_t v = 0;
    std::memcpy(&v, s.span.data() + (layout_.eventnum.offset - s.lo), layout_.eventnum.element_bytes());
    b.eventnum = static_cast<td_event_e>(static_cast<std::uint32_t>(v));
    std::memcpy(&b.eventdata, s.span.data() + (layout_.eventdata.offset - s.lo), layout_.eventdata.element_bytes());
    b.nextevent = target_addr{s.next};
    b.start_routine = target_addr{s.start};
}

bool event_protocol::queue_buffer_writes(record_snapshot& s, const event_buffer& b, write_batch& writes) const
{
    if (!b.is_empty() || b.eventdata != 0) {
        std::memset(s.span.data() + (layout_.eventnum.offset - s.lo), 0, layout_.eventnum.element_bytes());
        std::memset(s.span.data() + (layout_.eventdata.offset - s.lo), 0, layout_.eventdata.element_bytes());
        writes.add(s.handle + s.lo, std::span<const std::byte>(s.span.data(), s.hi - s.lo));
    }
    const bool at_head = s.head == s.handle.value && s.next != s.handle.value;
    if (at_head) {
        writes.add(layout_.last_event, low_bytes(std::as_const(s.next), s.next_bytes));
        if (s.next != 0)
            writes.add(s.handle + layout_.nextevent.offset, low_bytes(zero_word, s.next_bytes));
    }
    return at_head;
}

void event_protocol::queue_flag_write(const record_snapshot& s, const consume_extras& extras, write_batch& writes,
                                      flag_write& flag)
{
    flag.tid_matches =
        s.flag_change && static_cast<std::int32_t>(static_cast<std::uint32_t>(s.tid)) == extras.record_tid;
    if (!flag.tid_matches)
        return;
    const auto flag_now = std::span<const std::byte>(s.flag_now.data(), s.flag_bytes);
    if (extras.flag == consume_extras::flag_change::enable) {
        // Journaled before it is written; a record reused from an ended
        // thread starts a new change whose original is the record's own.
        auto on = low_bytes(one_word, s.flag_bytes);
        if (journal_ != nullptr) {
            journal_->settle(s.flag_at, false);
            journal_->note(s.flag_at, flag_now, on, change_kind::thread_enable,
                           change_guard::on(s.tid_at, extras.record_tid));
        }
        writes.add(s.flag_at, on);
        return;
    }
    if (journal_ == nullptr || !journal_->is_active(s.flag_at))
        return;
    // put_back: only with the guard the journal holds for the entry.
    auto guard = journal_->guard_of(s.flag_at);
    if (guard && (guard->address != s.tid_at || guard->length != s.tid_bytes))
        return;
    std::span<const std::byte> guard_now;
    if (guard)
        guard_now = low_bytes(s.tid, s.tid_bytes);
    flag.original = journal_->put_back_bytes(s.flag_at, flag_now, guard_now);
    if (!flag.original.empty())
        writes.add(s.flag_at, std::span<const std::byte>(flag.original));
    flag.settle_after = true;
}

td_status event_protocol::unlink(target_addr handle)
{
    auto& mem = target_.memory();
    const std::uint32_t ptr_bytes = layout_.nextevent.element_bytes();
    auto next_of = [&](target_addr rec) { return read_uint(mem, rec + layout_.nextevent.offset, ptr_bytes); };

    auto head = read_uint(mem, layout_.last_event, ptr_bytes);
    if (!head)
        return td_fail(TD_DBERR);
    auto own_next = next_of(handle);
    if (!own_next)
        return td_fail(TD_DBERR);

    // `link` is where the pointer to the current record lives: the head
    // variable, then each record's nextevent field. The record may sit on the
    // list more than once: glibc's own reporting re-pushes the list's last
    // record when it reports again, which closes a cycle through it. Splice
    // out every occurrence and cut any cycle where it closes.
    target_addr link = layout_.last_event;
    target_addr cur{*head};
    std::unordered_set<std::uint64_t> seen;
    while (!cur.is_null()) {
        if (cur == handle) {
            auto succ = next_of(cur);
            if (!succ)
                return td_fail(TD_DBERR);
            if (*succ == handle.value || seen.contains(*succ))
                *succ = 0;
            if (!write_uint(mem, link, ptr_bytes, *succ))
                return td_fail(TD_DBERR);
            cur = target_addr{*succ};
            continue;
        }
        if (seen.contains(cur.value)) {
            write_uint(mem, link, ptr_bytes, 0);
            break;
        }
        seen.insert(cur.value);
        if (seen.size() > max_list_length)
            return td_fail(TD_DBERR);
        auto next = next_of(cur);
        if (!next) {
            cut_unmapped(link);
            break;
        }
        link = cur + layout_.nextevent.offset;
        cur = target_addr{*next};
    }
    if (*own_next != 0 && !write_uint(mem, handle + layout_.nextevent.offset, ptr_bytes, 0))
        return td_fail(TD_DBERR);
    return {};
}

td_result<std::vector<target_addr>> event_protocol::message_list()
{
    auto& mem = target_.memory();
    const std::uint32_t ptr_bytes = layout_.nextevent.element_bytes();
    auto head = read_uint(mem, layout_.last_event, ptr_bytes);
    if (!head)
        return td_fail(TD_DBERR);
    std::vector<target_addr> out;
    std::unordered_set<std::uint64_t> seen;
    target_addr link = layout_.last_event;
    target_addr cur{*head};
    while (!cur.is_null()) {
        if (!seen.insert(cur.value).second)
            break;  // cycle: every record has been listed once
        if (out.size() >= max_list_length)
            return td_fail(TD_DBERR);
        auto next = read_uint(mem, cur + layout_.nextevent.offset, ptr_bytes);
        if (!next) {
            if (auto r = cut_unmapped(link); !r)
                return td_fail(r.error());
            break;
        }
        out.push_back(cur);
        link = cur + layout_.nextevent.offset;
        cur = target_addr{*next};
    }
    return out;
}

td_status event_protocol::cut_unmapped(target_addr link)
{
    // glibc frees the stack (and so the record) of a thread that ended with
    // its message still listed once its stack cache is full: nothing after
    // it can be reached, and nothing will write it again. The list ends
    // before it.
    if (!write_uint(target_.memory(), link, layout_.nextevent.element_bytes(), 0))
        return td_fail(TD_DBERR);
    return {};
}

td_result<std::vector<target_addr>> event_protocol::thread_records()
{
    auto& mem = target_.memory();
    const std::uint32_t ptr_bytes = layout_.list_next.element_bytes() ? layout_.list_next.element_bytes() : 8;
    std::vector<target_addr> out;
    for (target_addr head : layout_.thread_list_heads) {
        auto first = read_uint(mem, head + layout_.list_next.offset, ptr_bytes);
        if (!first)
            return td_fail(TD_DBERR);
        target_addr cur{*first};
        std::size_t steps = 0;
        // An uninitialised list (before the library set it up) reads as null.
        while (!cur.is_null() && cur != head) {
            if (++steps > max_list_length)
                return td_fail(TD_DBERR);
            out.push_back(cur - layout_.list_link.offset);
            auto next = read_uint(mem, cur + layout_.list_next.offset, ptr_bytes);
            if (!next)
                return td_fail(TD_DBERR);
            cur = target_addr{*next};
        }
    }
    return out;
}

td_result<pid_t> event_protocol::read_tid(target_addr handle)
{
    auto v = read_uint(target_.memory(), handle + layout_.tid.offset, layout_.tid.element_bytes());
    if (!v)
        return td_fail(TD_DBERR);
    return static_cast<pid_t>(static_cast<std::int32_t>(*v));
}

td_result<target_addr> event_protocol::read_start_routine(target_addr handle)
{
    if (!layout_.start_routine.is_valid())
        return target_addr{};
    auto v = read_uint(target_.memory(), handle + layout_.start_routine.offset, layout_.start_routine.element_bytes());
    if (!v)
        return td_fail(TD_DBERR);
    return target_addr{*v};
}

td_result<std::uint32_t> event_protocol::read_cancelhandling(target_addr handle)
{
    if (!layout_.cancelhandling.is_valid())
        return 0u;
    auto v = read_uint(target_.memory(), handle + layout_.cancelhandling.offset, layout_.cancelhandling.element_bytes());
    if (!v)
        return td_fail(TD_DBERR);
    return static_cast<std::uint32_t>(*v);
}

td_result<int> event_protocol::read_nthreads()
{
    if (layout_.nthreads.is_null())
        return td_fail(TD_NOCAPAB);
    std::int32_t v = 0;
    if (!target_.memory().read_value(layout_.nthreads, v))
        return td_fail(TD_DBERR);
    return v;
}

}  // namespace tdctl::core
