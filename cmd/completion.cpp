#include "cmd/completion.hpp"

#include <algorithm>

#include "cmd/commands.hpp"
#include "cmd/usage_view.hpp"
#include "events/event_names.hpp"

namespace tdctl::cmd {

namespace {

using word_list = std::vector<std::string>;

// Lowercase short names (`create`, `lock_try`) and `all`.
word_list event_words()
{
    word_list out{"all"};
    for (td_event_e e : events::all_events())
        out.push_back(events::event_short_name(e));
    return out;
}

word_list tid_words(const std::vector<pid_t>& tids, bool with_all)
{
    word_list out;
    for (pid_t t : tids)
        out.push_back(std::to_string(t));
    if (with_all)
        out.push_back("all");
    return out;
}

word_list top_columns_words()
{
    word_list out;
    std::string_view rest = top_column_words;
    while (!rest.empty()) {
        auto comma = rest.find(',');
        out.emplace_back(rest.substr(0, comma));
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 2);
    }
    return out;
}

// The options a command line takes (`words`: the words before the cursor).
word_list options_of(const word_list& words)
{
    const std::string& c = words.front();
    const std::string sub = words.size() > 1 ? words[1] : "";
    if (c == "watch")
        return {"--count", "--for", "--bt", "--stream", "--drop", "--stop"};
    if (c == "stop")
        return {"--for"};
    if (c == "top")
        return {"--interval", "--count", "--sort", "--limit"};
    if (c == "locks")
        return {"--for", "--interval", "--top", "--bt", "--stream", "--stop"};
    if ((c == "stats" && sub == "watch") || (c == "rusage" && sub == "collect"))
        return {"--interval", "--count"};
    return {};
}

// The words that fit after `words` (which hold at least the command).
word_list operands_of(const word_list& words, const std::vector<pid_t>& tids)
{
    const std::string& c = words.front();
    const std::size_t n = words.size();
    const std::string sub = n > 1 ? words[1] : "";
    if (words.back() == "--sort" && c == "top")
        return top_columns_words();
    if (words.back().starts_with("--"))
        return {};  // a value: a number or a duration
    if (c == "event") {
        if (n == 1)
            return {"addr", "set", "clear", "enable", "getmsg"};
        if (n == 2 && (sub == "addr" || sub == "set" || sub == "clear"))
            return event_words();
        if (n == 2 && sub == "enable")
            return {"on", "off"};
        if ((n == 2 && sub == "getmsg") || (n == 3 && (sub == "set" || sub == "clear")))
            return tid_words(tids, false);
        if (n == 3 && sub == "enable")
            return tid_words(tids, true);
        return {};
    }
    if (c == "stats" && n == 1)
        return {"enable", "disable", "reset", "show", "watch"};
    if (c == "rusage" && n == 1)
        return {"start", "stop", "collect"};
    if (c == "rusage" && n == 2 && sub == "collect")
        return tid_words(tids, true);
    if ((c == "stop" || c == "watch") && n == 1)
        return event_words();
    if ((c == "lwpinfo" || c == "bt" || c == "backtrace") && n == 1)
        return tid_words(tids, true);
    if (c == "help" && n == 1) {
        word_list names;
        for (const auto& entry : command_table())
            names.emplace_back(entry.name);
        return names;
    }
    return {};
}

// Blank-separated words; a trailing blank makes an empty last word.
word_list split_blanks(std::string_view line)
{
    word_list words{""};
    for (char ch : line) {
        if (ch == ' ' || ch == '\t') {
            if (!words.back().empty())
                words.emplace_back();
        } else {
            words.back() += ch;
        }
    }
    return words;
}

}  // namespace

completion complete_line(std::string_view line, const std::vector<pid_t>& tids)
{
    word_list words = split_blanks(line);
    std::string last = words.back();
    words.pop_back();
    word_list pool;
    if (words.empty()) {
        for (const auto& entry : command_table())
            pool.emplace_back(entry.name);
    } else if (last.starts_with("-")) {
        pool = options_of(words);
    } else {
        pool = operands_of(words, tids);
    }
    // In an event list, each name after a comma is completed on its own.
    const bool is_event_list = !pool.empty() && std::ranges::find(pool, "create") != pool.end();
    if (auto comma = last.rfind(','); is_event_list && comma != std::string::npos)
        last = last.substr(comma + 1);
    completion out{last, {}};
    for (auto& w : pool)
        if (w.starts_with(last))
            out.candidates.push_back(std::move(w));
    std::ranges::sort(out.candidates);
    out.candidates.erase(std::unique(out.candidates.begin(), out.candidates.end()), out.candidates.end());
    return out;
}

std::string common_prefix(const std::vector<std::string>& words)
{
    if (words.empty())
        return {};
    std::string prefix = words.front();
    for (const auto& w : words) {
        std::size_t i = 0;
        while (i < prefix.size() && i < w.size() && prefix[i] == w[i])
            ++i;
        prefix.resize(i);
    }
    return prefix;
}

}  // namespace tdctl::cmd
