// tdctl: a thread debugger controller. Attaches to a process (-p PID) or
// launches one (-- PROG ARGS), then runs commands from -e/-x, stdin or an
// interactive prompt.
//
// Exit status: a launched target's own status (128+N when killed by signal
// N); after an attach session in batch mode 0, or 1 when the last command
// found nothing there (TD_NOMSG, no event reported), 3 when it timed out (a
// `stop --for` with no hit); 2 when the attach or launch fails or any batch
// command failed (the commands after it still run; the exit comes after a
// clean detach); 64 for a usage error; 128+N when tdctl itself was ended by
// signal N.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <expected>
#include <fcntl.h>
#include <fstream>
#include <malloc.h>
#include <memory>
#include <optional>
#include <poll.h>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/log.hpp"
#include "base/quoting.hpp"
#include "cmd/batch.hpp"
#include "cmd/command_line.hpp"
#include "cmd/commands.hpp"
#include "cmd/guardian.hpp"
#include "cmd/output.hpp"
#include "cmd/records.hpp"
#include "cmd/repl.hpp"
#include "cmd/runner.hpp"
#include "cmd/signal_source.hpp"
#include "cmd/terminal.hpp"
#include "cmd/trace_output.hpp"
#include "core/session/session.hpp"
#include "events/event_names.hpp"
#include "events/json_format.hpp"
#include "ptrace/attach_diagnosis.hpp"
#include "ptrace/procfs.hpp"

namespace {

using namespace tdctl;

constexpr int exit_usage = 64;
constexpr int exit_failed = 2;
constexpr int exit_nothing = 1;
constexpr int exit_timed_out = 3;

using cmd::script_line;

// The lines of a -x file, each named "FILE:N"; false with `error` set when
// it cannot be read.
bool add_command_file(const std::string& path, std::vector<script_line>& lines, std::string& error)
{
    std::ifstream in(path);
    if (!in) {
        error = fmt::format("cannot read command file {}: {}", word_excerpt(path), std::strerror(errno));
        return false;
    }
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        error = fmt::format("cannot read command file {}: {}", word_excerpt(path), std::strerror(EISDIR));
        return false;
    }
    std::string line;
    int n = 0;
    while (std::getline(in, line))
        lines.push_back({line, fmt::format("{}:{}", path, ++n)});
    return true;
}

// -e and -x run in the order given, so they are collected from argv directly
// (the option parser has already validated them).
std::optional<std::vector<script_line>> ordered_scripts(int argc, char** argv, std::string& error)
{
    std::vector<script_line> lines;
    int eval_no = 0;
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a == "--" || !a.starts_with("-"))
            break;  // the program to launch starts here
        std::optional<std::string> eval, file;
        if ((a == "-e" || a == "--eval") && i + 1 < argc)
            eval = argv[++i];
        else if (a.starts_with("--eval="))
            eval = std::string(a.substr(7));
        else if (a.starts_with("-e") && a.size() > 2 && !a.starts_with("--"))
            eval = std::string(a.substr(2));
        else if ((a == "-x" || a == "--command") && i + 1 < argc)
            file = argv[++i];
        else if (a.starts_with("--command="))
            file = std::string(a.substr(10));
        else if (a.starts_with("-x") && a.size() > 2)
            file = std::string(a.substr(2));
        else if (a == "-p" || a == "--pid" || a == "-o" || a == "--output" || a == "--trace" ||
                 a == "--trace-format")
            ++i;
        if (eval)
            lines.push_back({*eval, fmt::format("-e {}", ++eval_no)});
        if (file && !add_command_file(*file, lines, error))
            return std::nullopt;
    }
    return lines;
}

// libtdagent.so: $TDCTL_AGENT, or beside the tdctl binary in the build tree
// (cmd/../agent/) or the install tree (bin/../lib/).
std::optional<std::string> find_agent_library()
{
    if (const char* env = std::getenv("TDCTL_AGENT"); env && *env)
        return ::access(env, R_OK) == 0 ? std::optional<std::string>(env) : std::nullopt;
    char self[4096];
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return std::nullopt;
    self[n] = '\0';
    std::string dir(self);
    dir = dir.substr(0, dir.rfind('/'));
    for (const char* rel : {"/../agent/libtdagent.so", "/../lib/libtdagent.so"}) {
        char resolved[4096];
        std::string candidate = dir + rel;
        if (::realpath(candidate.c_str(), resolved) != nullptr && ::access(resolved, R_OK) == 0)
            return std::string(resolved);
    }
    return std::nullopt;
}

int status_to_exit_code(int raw)
{
    if (WIFSIGNALED(raw))
        return 128 + WTERMSIG(raw);
    return WEXITSTATUS(raw);
}

/// What a usage error needs to know of the command line before it is
/// parsed: whether to write a JSON record, and where (usage_destination).
struct early_options {
    bool json = false;
    bool launch = false;          ///< a program is named (or `--`)
    std::string output_path;      ///< -o
    std::string pid_text;         ///< -p

    /// Reads argv the way the option parser will, up to the program.
    static early_options scan(int argc, char** argv);
};

early_options early_options::scan(int argc, char** argv)
{
    early_options e;
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        const bool has_value = i + 1 < argc;
        if (a == "--" || !a.starts_with("-")) {
            e.launch = true;
            break;
        }
        if (a == "--json")
            e.json = true;
        else if ((a == "-o" || a == "--output") && has_value)
            e.output_path = argv[++i];
        else if (a.starts_with("--output="))
            e.output_path = std::string(a.substr(9));
        else if (a.starts_with("-o") && a.size() > 2)
            e.output_path = std::string(a.substr(2));
        else if ((a == "-p" || a == "--pid") && has_value)
            e.pid_text = argv[++i];
        else if (a.starts_with("--pid="))
            e.pid_text = std::string(a.substr(6));
        else if ((a == "-e" || a == "--eval" || a == "-x" || a == "--command") && has_value)
            ++i;
    }
    return e;
}

// The stream records go to: the -o file, else stderr for a launch with
// --json (the program keeps stdout), else stdout. nullptr when the -o file
// cannot be opened.
std::FILE* record_stream(bool json, bool launch, const std::string& output_path)
{
    if (!output_path.empty())
        return std::fopen(output_path.c_str(), "w");
    return json && launch ? stderr : stdout;
}

// A usage error: one line on stderr, and with --json an error record where
// the records would have gone; exit status 64.
int usage_error(const early_options& early, const std::string& message)
{
    std::FILE* records = early.json ? record_stream(true, early.launch, early.output_path) : nullptr;
    if (records != stderr)
        std::fprintf(stderr, "tdctl: %s\nRun tdctl --help for usage.\n", message.c_str());
    if (records != nullptr) {
        events::json_record rec;
        rec["type"] = "error";
        rec["error"] = "usage";
        rec["message"] = message;
        rec["time"] = events::json_seconds(seconds_since_start());
        char* end = nullptr;
        long pid = std::strtol(early.pid_text.c_str(), &end, 10);
        const bool pid_ok = !early.pid_text.empty() && *end == '\0' && pid > 0 && pid <= 0x3fffffff;
        rec["pid"] = pid_ok ? events::json_record(pid) : events::json_record(nullptr);
        events::write_json_line(records, rec);
        if (records != stdout && records != stderr)
            std::fclose(records);
    }
    return exit_usage;
}

/// What tdctl's own command line asks for.
struct cli_options {
    std::string pid_text;                  ///< -p as given
    bool pid_given = false;                ///< -p was given (its text may be empty)
    pid_t pid = 0;                         ///< -p, checked; 0 for a launch
    std::vector<std::string> program;      ///< the program to launch and its arguments
    bool json = false, batch = false, interactive = false, debug = false, agent = false, follow_loads = false;
    std::string output_path;               ///< -o; empty for stdout
    std::string trace_path;                ///< --trace; empty for none
    std::string trace_format_text = "perfetto";   ///< --trace-format as given
    cmd::trace_format trace_format = cmd::trace_format::perfetto;
    std::vector<std::string> evals, command_files;   ///< -e, -x (run in argv order: ordered_scripts)

    bool launched() const { return pid == 0; }
};

// The most useful command lines, at the end of --help (the manual page's
// EXAMPLES has each of them).
constexpr const char* help_examples =
    "Examples:\n"
    "  tdctl -- PROG ARGS                          every thread creation and death of PROG, then its exit status\n"
    "  tdctl -p PID -e 'top --count 3'             which thread burns CPU, waits for one, or is blocked (like pidstat -t)\n"
    "  tdctl -p PID -e 'watch --for 10s'           threads born and ended in 10 s, then each one's on/off-CPU split\n"
    "  tdctl -p PID -e deadlock                    threads waiting for each other's mutexes, with the locks and stacks\n"
    "  tdctl -p PID --agent -e 'locks --for 10s'   lock contention: waits, trylock failures, holders, call sites";

// The option table (CLI11); an exit status when tdctl ends here (--help,
// --version, a usage error).
std::optional<int> parse_command_line(int argc, char** argv, cli_options& opts, const early_options& early)
{
    CLI::App app{"tdctl — thread debugger controller: attach to a process (or launch one), report its thread\n"
                 "events (TD_CREATE, TD_DEATH, ...) through the thread library's reporting addresses, and\n"
                 "inspect and drive its event masks and buffers.",
                 "tdctl"};
    app.set_version_flag("--version", "tdctl 0.1.0");
    app.prefix_command();
    auto* pid_option = app.add_option("-p,--pid", opts.pid_text, "attach to the running process PID")->type_name("PID");
    app.add_flag("--json", opts.json, "one JSON object per line");
    app.add_flag("--batch", opts.batch, "never start the interactive prompt");
    app.add_flag("-i,--interactive", opts.interactive, "start the prompt after -e/-x commands, also in launch mode");
    app.add_option("-o,--output", opts.output_path, "write records to FILE instead of stdout")->type_name("FILE");
    // One value per -e/-x: a further word is the program to launch (or an error).
    app.add_option("-e,--eval", opts.evals, "run CMD (repeatable; with -x, in the order given)")
        ->type_name("CMD")
        ->allow_extra_args(false);
    app.add_option("-x,--command", opts.command_files, "run the commands in FILE (repeatable)")
        ->type_name("FILE")
        ->allow_extra_args(false);
    app.add_option("--trace", opts.trace_path,
                   "write the session's timeline to FILE when it ends (a Perfetto trace: ui.perfetto.dev)")
        ->type_name("FILE");
    app.add_option("--trace-format", opts.trace_format_text, "perfetto (protobuf, the default) or json (Chrome trace)")
        ->type_name("FORMAT");
    app.add_flag("--debug", opts.debug, "log every ptrace request and stop to stderr");
    app.add_flag("--agent", opts.agent,
                 "the full event set (lock, sleep, signal, reap...): libtdagent.so preloaded into a launch, "
                 "or, with -p, loaded into the running process (or the one it already has reused) and its "
                 "calls routed to it");
    app.add_flag("--follow-loads", opts.follow_loads,
                 "with -p PID --agent: also route the modules the process loads while attached (a trap byte "
                 "at the loader's r_brk: were tdctl SIGKILLed, the target could die at its next dlopen)");
    app.footer("Usage: tdctl [options] -p PID    attach to a running process\n"
               "       tdctl [options] -- PROG [ARGS...]   launch PROG under tdctl\n"
               "With no commands, a launched program is watched until it exits; an attached one gets an\n"
               "interactive prompt on a terminal (`help` lists the commands), or reads commands from stdin.\n"
               "Exit status: a launched program's own status; after an attach in batch mode 0, 1 when the\n"
               "last command found nothing (TD_NOMSG), 3 when it timed out (stop --for); 2 when tdctl or a\n"
               "batch command failed (the rest still ran); 64 for a usage error. With --json in launch mode\n"
               "the records go to stderr (the program keeps stdout), unless -o FILE.\n\n" +
               std::string(help_examples));
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        return usage_error(early, long_words_cut(e.what()));
    }
    opts.pid_given = pid_option->count() > 0;
    // The option parser stops at the first word it does not know: the
    // program to launch, or (before any `--`) an unknown option.
    opts.program = app.remaining();
    return std::nullopt;
}

// `tdctl -e help [-e 'help CMD']...` with no target: the help texts on
// stdout, exit 0 (a new user's first question needs no process). nullopt
// when the command line asks for anything else (then a missing target is
// the usual usage error).
std::optional<int> help_without_target(const cli_options& opts)
{
    if (opts.pid_given || !opts.program.empty() || opts.evals.empty() || !opts.command_files.empty() || opts.json)
        return std::nullopt;
    std::string texts;
    for (const auto& line : opts.evals) {
        auto w = cmd::split_words(line);
        if (!w || w->empty() || w->front() != "help" || w->size() > 2)
            return std::nullopt;
        std::string text = cmd::help_text(w->size() == 2 ? (*w)[1] : "");
        if (text.empty())
            return std::nullopt;
        texts += text + "\n";
    }
    std::fputs(texts.c_str(), stdout);
    return 0;
}

// Checks what the option parser cannot: the PID, the program, the
// combinations. A usage error's exit status, or nullopt.
std::optional<int> check_command_line(cli_options& opts, const early_options& early)
{
    if (opts.pid_given) {
        char* end = nullptr;
        errno = 0;
        long v = std::strtol(opts.pid_text.c_str(), &end, 10);
        if (errno != 0 || end == opts.pid_text.c_str() || *end != '\0' || v <= 0 || v > 0x3fffffff)
            return usage_error(early, fmt::format("-p: not a process ID: {}",
                                                  opts.pid_text.empty() ? "''" : word_excerpt(opts.pid_text)));
        opts.pid = static_cast<pid_t>(v);
    }
    auto& program = opts.program;
    if (!program.empty() && program.front() == "--")
        program.erase(program.begin());
    else if (!program.empty() && program.front().size() > 1 && program.front().starts_with("-"))
        return usage_error(early, fmt::format("unknown option {}", word_excerpt(program.front())));
    if ((opts.pid != 0) == !program.empty())
        return usage_error(early, opts.pid != 0
                                      ? fmt::format("give either -p PID or a program to launch, not both (got -p {} "
                                                    "and {})",
                                                    opts.pid, word_excerpt(program.front()))
                                      : "nothing to do: give -p PID to attach, or -- PROG [ARGS] to launch");
    auto format = cmd::parse_trace_format(opts.trace_format_text);
    if (!format)
        return usage_error(early, fmt::format("--trace-format: expected perfetto or json, not {}",
                                              quoted_word(opts.trace_format_text)));
    opts.trace_format = *format;
    if (opts.trace_path.empty() && opts.trace_format_text != "perfetto")
        return usage_error(early, "--trace-format needs --trace FILE");
    if (opts.follow_loads && (!opts.agent || opts.pid == 0))
        return usage_error(early, "--follow-loads needs -p PID --agent");
    return std::nullopt;
}

// Where records go (record_stream); nullptr (after a message) when there
// is none to write to.
std::FILE* open_output(const cli_options& opts)
{
    const std::string& output_path = opts.output_path;
    // Descriptors 0-2 stay taken, so that none of tdctl's own lands there.
    const bool stdout_closed = ::fcntl(STDOUT_FILENO, F_GETFD) < 0;
    for (int fd = 0; fd <= 2; ++fd)
        if (::fcntl(fd, F_GETFD) < 0)
            ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (stdout_closed && output_path.empty()) {
        std::fprintf(stderr, "tdctl: standard output is closed; give -o FILE\n");
        return nullptr;
    }
    std::FILE* out_file = record_stream(opts.json, opts.launched(), output_path);
    if (out_file == nullptr)
        std::fprintf(stderr, "tdctl: cannot write %s: %s\n", output_path.c_str(), std::strerror(errno));
    return out_file;
}

// Whether the interactive prompt follows the -e/-x commands: on a terminal,
// unless --batch; for a launch only with -i.
bool wants_prompt(const cli_options& opts)
{
    return !opts.batch && ::isatty(STDIN_FILENO) != 0 && (!opts.launched() || opts.interactive);
}

// The launch of `opts.program`, with libtdagent.so preloaded for --agent;
// nullopt (after an error record) when the agent cannot be found.
std::optional<ptrace::launch_options> launch_options_for(const cli_options& opts, cmd::output& out)
{
    ptrace::launch_options launch;
    launch.argv = opts.program;
    launch.prompt_takes_interrupts = wants_prompt(opts);
    if (!opts.agent)
        return launch;
    auto path = find_agent_library();
    if (!path) {
        out.error("agent", "--agent: cannot find libtdagent.so next to tdctl (../agent/ or ../lib/); "
                           "set TDCTL_AGENT=/path/to/libtdagent.so");
        return std::nullopt;
    }
    // An existing LD_PRELOAD is kept, after ours.
    const char* old = std::getenv("LD_PRELOAD");
    launch.extra_env.push_back("LD_PRELOAD=" + *path + (old && *old ? std::string(":") + old : ""));
    return launch;
}

// `-p PID --agent`: loads libtdagent.so into the attached process (or finds
// it there); false after an error record when it is refused or fails (the
// session's detach then leaves the target as it was).
bool load_agent_by_attach(core::session& session, cmd::output& out, cmd::signal_source& signals, bool follow_loads)
{
    auto path = find_agent_library();
    if (!path) {
        out.error("agent", "--agent: cannot find libtdagent.so next to tdctl (../agent/ or ../lib/); "
                           "set TDCTL_AGENT=/path/to/libtdagent.so");
        return false;
    }
    try {
        auto report = session.load_agent(core::agent_file::read(*path), signals.fd(), follow_loads);
        events::json_record rec{{"type", "agent"}, {"pid", session.target().pid()}, {"action", report.reused ? "reused" : "loaded"},
                                {"version", report.version}};
        if (report.reused) {
            out.record(rec, fmt::format("agent: {} already loaded in process {}; reused", report.version, session.target().pid()));
            return true;
        }
        rec["ms"] = report.total_ms;
        rec["hijacked_tid"] = report.hijacked.value;
        rec["hijack_ms"] = report.hijack_ms;
        rec["syscall_restarted"] = report.hijacked_in_syscall;
        rec["loader_tid"] = report.loader.value;
        rec["link_map_name"] = report.link_map_name;
        out.record(rec, fmt::format("agent: {} loaded into process {} in {:.1f} ms (thread {} ran {:.1f} ms of calls{}; "
                                    "dlopen in thread {}; named {} in its link map)",
                                    report.version, session.target().pid(), report.total_ms, report.hijacked.value,
                                    report.hijack_ms, report.hijacked_in_syscall ? ", its system call restarted" : "",
                                    report.loader.value, report.link_map_name));
        return true;
    } catch (const error& e) {
        if (e.domain() == error_domain::os && e.code() == EINTR)
            throw;
        out.error("agent", fmt::format("--agent: {}; nothing was changed in the target", e.what()));
        return false;
    }
}

// Attaches or launches; the exit status when that fails.
std::expected<std::unique_ptr<core::session>, int> start_session(const cli_options& opts, cmd::output& out,
                                                                 cmd::signal_source& signals)
{
    try {
        if (!opts.launched()) {
            auto session = core::session::attach(opts.pid, signals.fd(), opts.agent);
            if (opts.agent && !load_agent_by_attach(*session, out, signals, opts.follow_loads))
                return std::unexpected(exit_failed);
            return session;
        }
        auto launch = launch_options_for(opts, out);
        if (!launch)
            return std::unexpected(exit_failed);
        return core::session::launch(*launch);
    } catch (const error& e) {
        // A signal that ended a waiting attach ends tdctl as it would later.
        if (e.domain() == error_domain::os && e.code() == EINTR)
            if (int sig = signals.take(); sig != 0) {
                out.error("attach", fmt::format("{}; nothing was changed in the target", e.what()));
                return std::unexpected(128 + sig);
            }
        const char* what_failed = opts.launched() ? "launch" : "attach";
        // A failed exec names the program as typed.
        out.error(e.domain() == error_domain::os ? what_failed : "target", long_words_cut(e.what()));
        return std::unexpected(exit_failed);
    }
}

/// One session from its first record to its exit status.
struct session_run {
    const cli_options& opts;
    std::FILE* out_file;
    cmd::output& out;
    cmd::signal_source& signals;
    cmd::runner& run;
    cmd::batch& commands;
    bool want_repl;   ///< the interactive prompt follows the -e/-x commands
    cmd::trace_output* trace;   ///< --trace, or nullptr
};

// The -e/-x lines, then the prompt, the default watch of a launch, or stdin.
void run_commands(const session_run& s, const std::vector<script_line>& scripts, bool stdin_tty)
{
    // Every -e/-x line runs, one after a failed one too (gdb -batch -ex);
    // `quit`, a signal or the target's end stop them and what would follow.
    if (!scripts.empty() && !s.commands.run_lines(scripts, !s.want_repl))
        return;
    if (s.run.loop().must_exit())
        return;
    // The prompt, a launch's watch and stdin all wait on something else than
    // the stopped target: a stop that lingers from the attach goes first.
    auto release = [&] {
        if (s.run.has_target())
            s.run.session().release_lingering();
    };
    if (s.want_repl && s.run.has_target()) {
        release();
        cmd::run_repl(s.run, s.out, s.signals);
    } else if (scripts.empty() && s.opts.launched()) {
        release();
        s.run.watch_until_exit();
    } else if (scripts.empty() && (!stdin_tty || s.opts.batch)) {
        release();
        s.commands.run_stdin(s.signals);
    }
}

// A write that failed (a full disk, a closed pipe) fails the run; a reader
// that went away (EPIPE) needs no message.
bool output_broken(const session_run& s)
{
    int err = std::fflush(s.out_file) != 0 ? errno : 0;
    if (err == 0 && s.out.ok())
        return false;
    if (s.out.write_errno() != 0)
        err = s.out.write_errno();
    if (err != EPIPE) {
        const char* what = s.out_file == stderr          ? "standard error"
                           : s.opts.output_path.empty() ? "standard output"
                                                        : s.opts.output_path.c_str();
        std::fprintf(stderr, "tdctl: writing %s failed%s%s\n", what, err ? ": " : "", err ? std::strerror(err) : "");
    }
    return true;
}

// A launched program runs to completion, as it would alone.
int wait_for_launched_exit(const session_run& s, bool failed)
{
    for (;;) {
        if (auto st = s.run.session().target().process().wait_launched_exit(100)) {
            s.run.loop().print_exit(*st);
            if (output_broken(s) || failed)
                return exit_failed;
            return status_to_exit_code(*st);
        }
        if (!s.run.session().target().process().is_alive()) {
            s.out.error("exit", "the launched program's exit status was lost");
            return exit_failed;
        }
        if (int sig = s.signals.take(); sig != 0)
            return 128 + sig;
    }
}

// Writes the --trace file, ended now; false (after a message) when that failed.
bool finish_trace(const session_run& s)
{
    if (s.trace == nullptr)
        return true;
    s.out.remove_observer(s.trace);
    if (auto st = s.run.target_exit_status())
        s.trace->note_exit(*st, seconds_since_start());
    std::string error;
    if (s.trace->finish(seconds_since_start(), error))
        return true;
    s.out.error("trace", error);
    return false;
}

// End of the session: put the target back as it was; tdctl's exit status.
// 1 or 3 when the last batch command found nothing or timed out, else 0.
int outcome_status(const session_run& s)
{
    if (s.want_repl)
        return 0;
    switch (s.commands.last_outcome()) {
    case cmd::command_status::nothing: return exit_nothing;
    case cmd::command_status::timed_out: return exit_timed_out;
    default: return 0;
    }
}

int finish_session(const session_run& s)
{
    const bool failed = s.commands.failed() && !s.want_repl;
    // Ctrl-C at the prompt only ends the running command; elsewhere it
    // ends tdctl (128 + SIGINT), as SIGTERM and SIGHUP always do.
    int end_signal = s.commands.end_signal();
    if (end_signal == 0 && (s.run.loop().must_exit() || (!s.want_repl && s.run.loop().last_signal() == SIGINT)))
        end_signal = s.run.loop().last_signal();
    if (s.trace != nullptr && s.run.has_target())
        s.trace->observe(s.run.session());  // the names threads end with
    if (s.run.has_target()) {
        s.run.session().detach();
        s.out.print(cmd::detached_record{s.run.session().target().pid(), seconds_since_start()});
    }
    s.run.loop().poll_target();  // reports an exit taken while detaching
    const bool trace_failed = !finish_trace(s);
    if (!s.run.has_session())   // an `attach` or `run` at the prompt failed
        return end_signal != 0 ? 128 + end_signal : output_broken(s) || failed || trace_failed ? exit_failed : 0;
    // The last session's target: the prompt may have started others.
    core::session& session = s.run.session();
    const bool launched = s.run.launched();
    if (launched && !s.run.target_exit_status() && end_signal == 0 && !session.target().process().exit_status())
        return wait_for_launched_exit(s, failed);
    // A signal's status wins over a failed write: after SIGHUP the
    // terminal is gone, and writes to it fail because of that.
    const bool broken = output_broken(s);
    if (end_signal != 0)
        return 128 + end_signal;
    if (broken || failed || trace_failed)
        return exit_failed;
    if (auto st = s.run.target_exit_status(); launched && st)
        return status_to_exit_code(*st);
    if (auto st = session.target().process().exit_status(); launched && st)
        return status_to_exit_code(*st);
    return launched ? 0 : outcome_status(s);
}

// Warnings become records while the JSON records are on stderr.
cmd::output* g_warning_output = nullptr;

void warning_as_record(const std::string& line)
{
    if (g_warning_output != nullptr)
        g_warning_output->note(line);
}

int run_session(const cli_options& opts, const std::vector<script_line>& scripts, std::FILE* out_file)
{
    cmd::signal_source signals;
    cmd::output out(out_file, opts.json);
    // Created before the target is touched: a path that cannot be written
    // fails here.
    std::unique_ptr<cmd::trace_output> trace;
    if (!opts.trace_path.empty()) {
        try {
            trace = std::make_unique<cmd::trace_output>(opts.trace_path, opts.trace_format);
        } catch (const error& e) {
            out.error("trace", e.what());
            return exit_failed;
        }
    }
    if (opts.json && out_file == stderr) {
        g_warning_output = &out;
        log::set_warning_writer(&warning_as_record);
    }
    struct warnings_back {
        ~warnings_back()
        {
            log::set_warning_writer(nullptr);
            g_warning_output = nullptr;
        }
    } restore_warnings;
    auto session = start_session(opts, out, signals);
    if (!session)
        return session.error();
    // From here on the terminal never stops tdctl while it holds the
    // target (a launched program, forked above, keeps the dispositions
    // tdctl was given).
    cmd::ignore_terminal_stops();
    out.set_pid((*session)->target().pid());
    out.print(cmd::start_record_of(**session, opts.launched()));

    cmd::runner run(std::move(*session), out, signals, opts.launched());
    if (trace) {
        trace->begin(run.session(), seconds_since_start());
        out.add_observer(trace.get());
        run.set_trace(trace.get());
    }
    const bool stdin_tty = ::isatty(STDIN_FILENO) != 0;
    const bool want_repl = wants_prompt(opts);
    cmd::batch commands(run, out, want_repl);
    const session_run s{opts, out_file, out, signals, run, commands, want_repl, trace.get()};
    run_commands(s, scripts, stdin_tty);
    return finish_session(s);
}

}  // namespace

int main(int argc, char** argv)
{
    seconds_since_start();
    // A streaming drain builds and frees a batch of messages every 2-50 ms:
    // freed heap is kept (up to 64 MiB) rather than given back with brk and
    // taken again, each time with a TLB flush on every CPU. Setting the trim
    // threshold ends glibc's dynamic mmap threshold, so a batch past 128 KiB
    // was a fresh mmap each time, every page of it faulted in (70 % of
    // tdctl's CPU in a streaming `locks` at 800,000 events a second): blocks
    // up to 32 MiB (glibc's most) come from the heap instead.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
    // The signals that end tdctl wait, blocked, from the first instruction
    // to the first safe point that reads them (the guardian's, then the
    // tracer's signal fd): one that comes while tdctl starts ends it with a
    // clean detach and 128+N too, not by the default action.
    sigset_t ending;
    sigemptyset(&ending);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT})
        sigaddset(&ending, sig);
    pthread_sigmask(SIG_BLOCK, &ending, nullptr);
    cli_options opts;
    const auto early = early_options::scan(argc, argv);
    if (auto code = parse_command_line(argc, argv, opts, early))
        return *code;
    if (opts.debug)
        log::set_debug(true);
    if (auto code = help_without_target(opts))
        return *code;
    if (auto code = check_command_line(opts, early))
        return *code;
    std::string script_error;
    auto scripts = ordered_scripts(argc, argv, script_error);
    if (!scripts)
        return usage_error(early, script_error);

    // From here on, the process the user started only guards the tracer.
    try {
        cmd::split_off_tracer(!opts.launched() && ::isatty(STDIN_FILENO) == 0);
    } catch (const error& e) {
        std::fprintf(stderr, "tdctl: %s\n", e.what());
        return exit_failed;
    }
    ptrace::note_controller_process(cmd::guardian_pid());

    std::FILE* out_file = open_output(opts);
    if (out_file == nullptr)
        return exit_failed;
    try {
        return run_session(opts, *scripts, out_file);
    } catch (const error& e) {
        std::fprintf(stderr, "tdctl: %s\n", e.what());
        return exit_failed;
    }
}
