// `top`: each thread's CPU, run-queue wait, off-CPU time and rates, one table
// per interval, read from /proc while the target runs (like `pidstat -t`).
#include <fmt/format.h>

#include "base/clock.hpp"
#include "cmd/records.hpp"
#include "cmd/runner.hpp"
#include "cmd/usage_view.hpp"

namespace tdctl::cmd {

command_status runner::cmd_top(const words& w, const std::string& where)
{
    static constexpr run_option_grammar grammar{
        option_interval | option_count | option_sort | option_limit, run_option_grammar::operand_kind::none, "",
        "usage: top [--interval SECONDS] [--count N] [--sort COLUMN] [--limit N]"};
    auto options = parse_options(w, 1, grammar, where);
    if (!options || !require_target(where))
        return command_status::failed;
    auto order = parse_top_column(options->sort.value_or("cpu"));
    if (!order)
        return usage_error(where, fmt::format("unknown column '{}' for --sort; expected one of: {}", *options->sort,
                                              top_column_words));
    top_view view{session_->target().pid(), {}, *order, options->limit};
    // The threads' exit stops close their rows; between samples the target
    // runs, and nothing but /proc is read.
    core::usage_window_scope usage(session_->accounting(), core::counter_depth::full);
    let_run();
    for (long long n = 0; !options->count || n < *options->count; ++n) {
        if (run_for(options->interval.value_or(1.0)) != run_end::timeout)
            break;
        const auto window = session_->accounting().take_usage_window();
        view.name = session_->target().thread_name(tid_t{session_->target().pid()});
        const auto table = top_table(window, view, seconds_since_start());
        output::bulk batch(out_);
        // A blank line between intervals, as pidstat prints them.
        out_.heading("\n" + top_columns());
        out_.print(table.process);
        for (const auto& row : table.rows)
            out_.print(row);
    }
    return command_status::ok;
}

}  // namespace tdctl::cmd
