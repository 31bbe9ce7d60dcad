#include "tests/agent_e2e/agent_e2e_support.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include <unistd.h>

#include <fmt/format.h>

#include "tdctl_test/fixture_paths.hpp"
#include "tests/support/fixtures.hpp"
#include "tests/support/json_lines.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/temp_file.hpp"

namespace tdctl::agent_e2e {

std::string fixture_path(std::string_view name)
{
    return fmt::format("{}/tests/agent_e2e/fixtures/{}", test::binary_dir, name);
}

std::string agent_library()
{
    return fmt::format("{}/agent/libtdagent.so", test::binary_dir);
}

std::optional<std::string> find_on_path(std::string_view name)
{
    const char* path = std::getenv("PATH");
    std::stringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
    std::string dir;
    while (std::getline(dirs, dir, ':')) {
        std::string candidate = fmt::format("{}/{}", dir.empty() ? "." : dir, name);
        if (::access(candidate.c_str(), X_OK) == 0)
            return candidate;
    }
    return std::nullopt;
}

std::string hex(std::uint64_t v)
{
    return fmt::format("0x{:x}", v);
}

std::uint64_t parse_number(std::string_view text)
{
    int base = 10;
    std::string_view digits = text;
    if (digits.starts_with("0x") || digits.starts_with("0X")) {
        base = 16;
        digits.remove_prefix(2);
    }
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
    if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size())
        throw std::runtime_error(fmt::format("not a number: '{}'", text));
    return v;
}

std::string event_fact::text() const
{
    return fmt::format("{} {} {}", event, reporter, data);
}

std::size_t fixture_record::count(std::string_view event) const
{
    return static_cast<std::size_t>(
        std::count_if(events.begin(), events.end(), [&](const event_fact& e) { return e.event == event; }));
}

fixture_record read_fixture_record(const std::string& path)
{
    auto text = test::read_text_file(path);
    if (!text)
        throw std::runtime_error(fmt::format("cannot read the fixture record {}", path));
    fixture_record rec;
    std::string_view rest = *text;
    std::size_t line_number = 0;
    while (!rest.empty()) {
        auto nl = rest.find('\n');
        if (nl == std::string_view::npos)
            break;  // still being written: not a fact yet
        std::string line(rest.substr(0, nl));
        rest.remove_prefix(nl + 1);
        ++line_number;
        rec.lines.push_back(line);
        std::istringstream in(line);
        std::string kind;
        in >> kind;
        auto bad = [&](std::string_view why) {
            return std::runtime_error(fmt::format("{} line {} {}: '{}'", path, line_number, why, line));
        };
        try {
            if (kind == "event") {
                event_fact e;
                std::string reporter, data;
                in >> e.event >> reporter >> data;
                if (in.fail() || !e.event.starts_with("TD_") || data.empty())
                    throw bad("is not 'event TD_NAME TID DATA'");
                e.reporter = static_cast<pid_t>(parse_number(reporter));
                e.data = data.starts_with('@') ? fmt::format("@{}", parse_number(data.substr(1)))
                                               : hex(parse_number(data));
                rec.events.push_back(std::move(e));
            } else if (kind == "thread") {
                std::string tid, handle, label;
                in >> tid >> handle;
                std::getline(in >> std::ws, label);
                if (in.bad() || tid.empty())
                    throw bad("is not 'thread TID PTHREAD_T LABEL'");
                rec.threads[static_cast<pid_t>(parse_number(tid))] = label;
            } else if (kind == "start") {
                std::string pid;
                in >> pid;
                rec.pid = static_cast<pid_t>(parse_number(pid));
            } else if (kind == "done") {
                rec.done = true;
            } else if (kind != "signal-sent" && kind != "note") {
                throw bad("has an unknown kind");
            }
        } catch (const std::runtime_error& e) {
            if (std::string_view(e.what()).starts_with(path))
                throw;
            throw bad(e.what());
        }
    }
    return rec;
}

std::vector<nlohmann::json> tdctl_run::of_type(std::string_view type) const
{
    std::vector<nlohmann::json> out;
    for (const auto& r : records)
        if (r.value("type", "") == type)
            out.push_back(r);
    return out;
}

std::size_t tdctl_run::count(std::string_view event) const
{
    return static_cast<std::size_t>(
        std::count_if(events.begin(), events.end(), [&](const observed_event& e) { return e.event == event; }));
}

std::pair<std::map<pid_t, int>, std::map<pid_t, int>> tdctl_run::creates_and_deaths() const
{
    std::map<pid_t, int> creates, deaths;
    for (const auto& e : events) {
        if (e.event == "TD_CREATE")
            ++creates[e.tid];
        else if (e.event == "TD_DEATH")
            ++deaths[e.tid];
    }
    return {creates, deaths};
}

namespace {

// Runs cmd (which writes its JSON to `out`) and splits the records up.
tdctl_run run_and_parse(const std::vector<std::string>& cmd, const test::temp_file& out,
                        std::chrono::milliseconds timeout)
{
    tdctl_run run{test::run_command(cmd, timeout), {}, {}, {}, {}, {}};
    auto text = test::read_text_file(out.path());
    if (!text)
        throw std::runtime_error(fmt::format("`{}` wrote no JSON file\n{}", run.result.command, run.result.describe()));
    run.records = test::json_lines(*text);
    for (const auto& r : run.records) {
        std::string type = r.value("type", "");
        if (type == "launched" && !run.launched)
            run.launched = r;
        else if (type == "exit")
            run.exit = r;
        else if (type == "watch_end")
            run.watch_end = r;
        else if (type == "event") {
            observed_event e;
            e.event = r.value("event", "");
            e.tid = r.value("tid", 0);
            e.reporter = r.value("reporter", 0);
            e.handle = parse_number(r.value("handle", "0x0"));
            e.data = parse_number(r.value("data", "0x0"));
            e.name = r.value("name", "");
            e.origin = r.value("origin", "");
            e.raw = r;
            run.events.push_back(std::move(e));
        }
    }
    return run;
}

std::vector<std::string> with_commands(std::vector<std::string> cmd, const std::vector<std::string>& commands)
{
    for (const auto& c : commands) {
        cmd.push_back("-e");
        cmd.push_back(c);
    }
    return cmd;
}

}  // namespace

tdctl_run run_tdctl_agent(const std::vector<std::string>& commands, const std::vector<std::string>& argv,
                          std::chrono::milliseconds timeout, const std::vector<std::string>& extra_options)
{
    // JSON goes to a file of its own: the target shares tdctl's stdout.
    test::temp_file out("tdctl-agent-e2e-json");
    std::vector<std::string> cmd{test::tdctl_path(), "--agent", "--json", "-o", out.path()};
    cmd.insert(cmd.end(), extra_options.begin(), extra_options.end());
    cmd = with_commands(std::move(cmd), commands);
    cmd.push_back("--");
    cmd.insert(cmd.end(), argv.begin(), argv.end());
    return run_and_parse(cmd, out, timeout);
}

tdctl_run run_tdctl_agent_attached(const std::vector<std::string>& commands, pid_t pid,
                                   std::chrono::milliseconds timeout)
{
    test::temp_file out("tdctl-agent-e2e-json");
    auto cmd = with_commands({test::tdctl_path(), "-p", std::to_string(pid), "--agent", "--json", "-o", out.path()},
                             commands);
    return run_and_parse(cmd, out, timeout);
}

std::vector<event_fact> as_facts(const std::vector<observed_event>& events)
{
    std::map<std::uint64_t, pid_t> handle_of_tid;   // handle -> tid, as the latest TD_CREATE says
    std::vector<event_fact> out;
    out.reserve(events.size());
    for (const auto& e : events) {
        if (e.event == "TD_CREATE")
            handle_of_tid[e.data] = e.tid;
        event_fact f;
        f.event = e.event;
        f.reporter = e.reporter;
        auto it = handle_of_tid.find(e.data);
        bool handle_data = e.event == "TD_CREATE" || e.event == "TD_DEATH" || e.event == "TD_REAP" ||
                           e.event == "TD_SLEEP" || e.event == "TD_READY";
        f.data = handle_data && it != handle_of_tid.end() ? fmt::format("@{}", it->second) : hex(e.data);
        out.push_back(std::move(f));
    }
    return out;
}

comparison compare(const std::vector<event_fact>& expected, const std::vector<event_fact>& observed)
{
    comparison c;
    auto e = expected, o = observed;
    std::sort(e.begin(), e.end());
    std::sort(o.begin(), o.end());
    std::set_difference(e.begin(), e.end(), o.begin(), o.end(), std::back_inserter(c.missing));
    std::set_difference(o.begin(), o.end(), e.begin(), e.end(), std::back_inserter(c.unexpected));

    std::map<pid_t, std::pair<std::vector<std::string>, std::vector<std::string>>> seqs;
    for (const auto& f : expected)
        seqs[f.reporter].first.push_back(f.event + " " + f.data);
    for (const auto& f : observed)
        seqs[f.reporter].second.push_back(f.event + " " + f.data);
    for (auto& [reporter, pair] : seqs)
        if (pair.first != pair.second)
            c.order.emplace(reporter, std::move(pair));
    return c;
}

std::string comparison::describe() const
{
    std::string out;
    if (!missing.empty()) {
        out += fmt::format("{} recorded by the fixture but not reported by tdctl:\n", missing.size());
        for (const auto& f : missing)
            out += "  " + f.text() + "\n";
    }
    if (!unexpected.empty()) {
        out += fmt::format("{} reported by tdctl but not recorded by the fixture:\n", unexpected.size());
        for (const auto& f : unexpected)
            out += "  " + f.text() + "\n";
    }
    for (const auto& [reporter, pair] : order) {
        out += fmt::format("thread {}: recorded order / reported order differ\n", reporter);
        std::size_t n = std::max(pair.first.size(), pair.second.size());
        for (std::size_t i = 0; i < n; ++i)
            out += fmt::format("  {:<3} {:<40} {}\n", i, i < pair.first.size() ? pair.first[i] : "-",
                               i < pair.second.size() ? pair.second[i] : "-");
    }
    return out.empty() ? "same events, same order per thread" : out;
}

std::string describe_run(const tdctl_run& run, std::size_t max_lines)
{
    // The first and the last records: how it began, and how it ended (the
    // exit, the last events before an error).
    std::string out = run.result.describe() + "\n--- JSON records ---\n";
    const std::size_t total = run.records.size();
    const std::size_t head = total <= max_lines ? total : max_lines / 2;
    const std::size_t tail_from = total <= max_lines ? total : total - (max_lines - head);
    for (std::size_t i = 0; i < head; ++i)
        out += run.records[i].dump() + "\n";
    if (tail_from > head)
        out += fmt::format("... {} more ...\n", tail_from - head);
    for (std::size_t i = std::max(head, tail_from); i < total; ++i)
        out += run.records[i].dump() + "\n";
    return out;
}

}  // namespace tdctl::agent_e2e
