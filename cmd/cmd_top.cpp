// `top`: each thread's CPU, run-queue wait, off-CPU time and rates, one table
// per interval, read from /proc while the target runs (like `pidstat -t`).
#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/quoting.hpp"
#include "cmd/commands.hpp"
#include "cmd/records.hpp"
#include "cmd/usage_view.hpp"

namespace tdctl::cmd {

command_status cmd_top(command_context& c, const words& w, const std::string& where)
{
    static constexpr run_option_grammar grammar{
        option_interval | option_count | option_sort | option_limit, run_option_grammar::operand_kind::none, "",
        "usage: top [--interval SECONDS] [--count N] [--sort COLUMN] [--limit N]"};
    auto options = c.check.parse_options(w, 1, grammar, where);
    if (!options || !c.check.require_target(where))
        return command_status::failed;
    auto order = parse_top_column(options->sort.value_or("cpu"));
    if (!order)
        return c.check.usage_error(where, fmt::format("unknown column {} for --sort; expected one of: {}",
                                                      quoted_word(*options->sort), top_column_words));
    top_view view{c.session().target().pid(), {}, *order, options->limit};
    // The threads' exit stops close their rows; between samples the target
    // runs, and nothing but /proc is read.
    core::usage_window_scope usage(c.session().accounting(), core::counter_depth::full);
    c.loop.let_run();
    for (long long n = 0; !options->count || n < *options->count; ++n) {
        if (c.loop.run_for(options->interval.value_or(1.0)) != run_end::timeout)
            break;
        const auto window = c.session().accounting().take_usage_window();
        view.name = c.session().target().thread_name(tid_t{c.session().target().pid()});
        const auto table = top_table(window, view, seconds_since_start());
        output::bulk batch(c.out);
        // A blank line between intervals, as pidstat prints them.
        c.out.heading("\n" + top_columns());
        c.out.print(table.process);
        for (const auto& row : table.rows)
            c.out.print(row);
    }
    return command_status::ok;
}

}  // namespace tdctl::cmd
