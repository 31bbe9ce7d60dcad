#include "tests/agent_e2e/agent_memory_snapshot.hpp"

#include <algorithm>
#include <cstring>
#include <regex>
#include <sstream>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "core/inject/got_routing.hpp"
#include "symbols/elf_module.hpp"
#include "tests/support/support.hpp"

namespace tdctl::agent_e2e {

namespace {

std::uint64_t read_u64(pid_t pid, std::uint64_t address, std::size_t length = 8)
{
    auto b = test::read_proc_mem(pid, address, length);
    std::uint64_t v = 0;
    std::memcpy(&v, b.data(), std::min<std::size_t>(length, b.size()));
    return v;
}

/// The agent's per-thread settings: for every record on __tdagent_thread_list,
/// its report_events flag and its event mask (offsets and sizes from the
/// agent's _tdagent_db_* descriptors: uint32 size in bits, count, offset).
void add_agent_records(pid_t pid, const symbols::elf_module& agent, std::vector<memory_span>& out)
{
    auto list = agent.lookup("__tdagent_thread_list");
    auto flag = agent.lookup("_tdagent_db_pthread_report_events");
    auto mask = agent.lookup("_tdagent_db_pthread_eventbuf_eventmask");
    auto link = agent.lookup("_tdagent_db_pthread_list");
    REQUIRE((list && flag && mask && link));
    const auto flag_bytes = read_u64(pid, flag->address.value, 4) / 8;
    const auto flag_offset = read_u64(pid, flag->address.value + 8, 4);
    const auto mask_bytes = read_u64(pid, mask->address.value, 4) / 8;
    const auto mask_offset = read_u64(pid, mask->address.value + 8, 4);
    const auto link_offset = read_u64(pid, link->address.value + 8, 4);
    REQUIRE((flag_bytes > 0 && mask_bytes > 0));
    std::size_t records = 0;
    const std::uint64_t head = list->address.value;
    for (std::uint64_t l = read_u64(pid, head); l != head && l != 0 && records < 10000; l = read_u64(pid, l)) {
        ++records;
        const std::uint64_t record = l - link_offset;
        out.push_back({fmt::format("record {:#x} report_events", record), record + flag_offset,
                       test::read_proc_mem(pid, record + flag_offset, flag_bytes)});
        out.push_back({fmt::format("record {:#x} event mask", record), record + mask_offset,
                       test::read_proc_mem(pid, record + mask_offset, mask_bytes)});
    }
}

bool is_mapped(pid_t pid, std::uint64_t address)
{
    for (const auto& m : test::proc_maps(pid))
        if (address >= m.start && address < m.end)
            return true;
    return false;
}

bool covers(const std::vector<memory_span>& snap, const journal_entry& e)
{
    return std::any_of(snap.begin(), snap.end(), [&](const memory_span& s) {
        return e.address >= s.address && e.address + e.length <= s.address + s.bytes.size();
    });
}

}  // namespace

std::vector<memory_span> snapshot(pid_t pid)
{
    std::vector<memory_span> out;
    auto modules = symbols::module_set::load(pid);
    auto wrapped = core::agent_wrapped_functions();
    const auto* libc = modules.find("libc.so.6");
    REQUIRE(libc != nullptr);
    for (const auto& m : modules.modules())
        for (const auto& slot : m->import_slots())
            if (std::find(wrapped.begin(), wrapped.end(), slot.name) != wrapped.end()) {
                auto bound = libc->lookup(slot.version.empty() ? slot.name : slot.name + "@" + slot.version);
                out.push_back({m->path() + ":" + slot.name, slot.address.value,
                               test::read_proc_mem(pid, slot.address.value, 8), bound ? bound->address.value : 0});
            }
    const auto* agent = modules.find("libtdagent.so");
    if (agent == nullptr)
        return out;
    for (const char* e : {"create", "death", "reap", "ready", "sleep", "lock_try", "catchsig", "timeout",
                          "concurrency", "pri_inherit", "switchto", "switchfrom", "preempt", "idle"}) {
        // Each is a `ret` and padding to 16 bytes; a breakpoint covers more than the `ret`.
        auto s = agent->lookup(std::string("__tdagent_event_") + e);
        if (s)
            out.push_back({s->name, s->address.value, test::read_proc_mem(pid, s->address.value, 16)});
    }
    // The global mask, the unknown threads' record, the per-event stop
    // flags (a signal-stop site's byte), and what a streaming watch writes:
    // the streamed events' mask and the streaming flag.
    for (const char* name : {"__tdagent_threads_events", "__tdagent_unknown_thread", "__tdagent_stop_signals",
                             "__tdagent_stream_events", "__tdagent_streaming"}) {
        auto s = agent->lookup(name);
        REQUIRE_MESSAGE(s.has_value(), name);
        out.push_back({name, s->address.value, test::read_proc_mem(pid, s->address.value, std::max<std::size_t>(s->size, 8))});
    }
    add_agent_records(pid, *agent, out);
    return out;
}

std::string bytes_hex(const std::vector<std::uint8_t>& bytes)
{
    std::string out;
    for (auto b : bytes)
        out += fmt::format("{:02x}", b);
    return out;
}

std::string differences(const std::vector<memory_span>& before, const std::vector<memory_span>& after,
                        std::size_t& only_one, std::size_t& bound)
{
    std::map<std::string, const memory_span*> later;
    for (const auto& s : after)
        later[s.what] = &s;
    std::string out;
    std::size_t unmatched = 0;
    for (const auto& s : before) {
        auto it = later.find(s.what);
        if (it == later.end()) {
            ++unmatched;
            continue;
        }
        std::uint64_t now = 0;
        std::memcpy(&now, it->second->bytes.data(), std::min<std::size_t>(8, it->second->bytes.size()));
        if (it->second->bytes != s.bytes && s.loader_binding != 0 && now == s.loader_binding)
            ++bound;
        else if (it->second->bytes != s.bytes)
            out += fmt::format("{} at {:#x}: {} before, {} after\n", s.what, s.address, bytes_hex(s.bytes),
                               bytes_hex(it->second->bytes));
        later.erase(it);
    }
    only_one = unmatched + later.size();
    return out;
}

std::vector<journal_entry> journal_entries(const std::string& debug_text)
{
    static const std::regex line(R"(tdctl: debug: journal: (.+) (\d+) bytes at 0x([0-9a-f]+))");
    std::vector<journal_entry> out;
    std::istringstream in(debug_text);
    for (std::string l; std::getline(in, l);) {
        std::smatch m;
        if (std::regex_search(l, m, line))
            out.push_back({m[1], std::stoull(m[3], nullptr, 16), std::stoul(m[2])});
    }
    return out;
}

std::string uncovered(pid_t pid, const std::vector<journal_entry>& entries,
                      const std::vector<const std::vector<memory_span>*>& compared,
                      const std::vector<memory_span>& live, std::map<std::string, int>& kinds)
{
    std::string out;
    for (const auto& e : entries) {
        ++kinds[e.kind];
        if (std::any_of(compared.begin(), compared.end(), [&](const auto* snap) { return covers(*snap, e); }))
            continue;
        if (e.kind == "injected bytes" && (!is_mapped(pid, e.address) || e.length == 8))
            continue;
        const bool record = e.kind == "thread enable flag" || e.kind == "thread event mask";
        auto now = test::read_proc_mem(pid, e.address, e.length);
        const bool zero = std::all_of(now.begin(), now.end(), [](std::uint8_t b) { return b == 0; });
        if (record && !covers(live, e)) {
            ++kinds[fmt::format("  of them, records of ended threads, {}", zero ? "zero" : "not zero")];
            continue;
        }
        if (record && zero) {
            ++kinds["  of them, records of threads born since, zero"];
            continue;
        }
        out += fmt::format("{} {} bytes at {:#x}: {}\n", e.kind, e.length, e.address, bytes_hex(now));
    }
    return out;
}

}  // namespace tdctl::agent_e2e
