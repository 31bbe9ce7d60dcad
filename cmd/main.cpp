// tdctl: a thread debugger controller. Attaches to a process (-p PID) or
// launches one (-- PROG ARGS), then runs commands from -e/-x, stdin or an
// interactive prompt.
//
// Exit status: a launched target's own status (128+N when killed by signal
// N); 0 after a clean attach session; 2 when the attach or launch fails or a
// batch command fails (after a clean detach); 64 for a usage error; 128+N
// when tdctl itself was ended by signal N.
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
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
#include "cmd/batch.hpp"
#include "cmd/guardian.hpp"
#include "cmd/output.hpp"
#include "cmd/repl.hpp"
#include "cmd/runner.hpp"
#include "cmd/signal_source.hpp"
#include "cmd/terminal.hpp"
#include "core/session.hpp"
#include "events/event_names.hpp"
#include "ptrace/attach_diagnosis.hpp"
#include "ptrace/procfs.hpp"

namespace {

using namespace tdctl;
using tdctl::events::json_record;

constexpr int exit_usage = 64;
constexpr int exit_failed = 2;

using cmd::script_line;

// -e and -x run in the order given, so they are collected from argv directly
// (the option parser has already validated them).
std::optional<std::vector<script_line>> ordered_scripts(int argc, char** argv, std::string& error)
{
    std::vector<script_line> lines;
    int eval_no = 0;
    auto add_file = [&](const std::string& path) {
        std::ifstream in(path);
        if (!in) {
            error = fmt::format("cannot read command file {}: {}", path, std::strerror(errno));
            return false;
        }
        struct stat st {};
        if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
            error = fmt::format("cannot read command file {}: {}", path, std::strerror(EISDIR));
            return false;
        }
        std::string line;
        int n = 0;
        while (std::getline(in, line))
            lines.push_back({line, fmt::format("{}:{}", path, ++n)});
        return true;
    };
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
        else if (a == "-p" || a == "--pid" || a == "-o" || a == "--output")
            ++i;
        if (eval)
            lines.push_back({*eval, fmt::format("-e {}", ++eval_no)});
        if (file && !add_file(*file))
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

}  // namespace

int main(int argc, char** argv)
{
    seconds_since_start();

    CLI::App app{"tdctl — thread debugger controller: attach to a process (or launch one), report its thread\n"
                 "events (TD_CREATE, TD_DEATH, ...) through the thread library's reporting addresses, and\n"
                 "inspect and drive its event masks and buffers.",
                 "tdctl"};
    app.set_version_flag("--version", "tdctl 0.1.0");
    app.prefix_command();
    pid_t pid = 0;
    std::string pid_text;
    bool json = false, batch = false, interactive = false, debug = false, agent = false;
    std::string output_path;
    std::vector<std::string> evals, command_files;
    app.add_option("-p,--pid", pid_text, "attach to the running process PID")->type_name("PID");
    app.add_flag("--json", json, "one JSON object per line");
    app.add_flag("--batch", batch, "never start the interactive prompt");
    app.add_flag("-i,--interactive", interactive, "start the prompt after -e/-x commands, also in launch mode");
    app.add_option("-o,--output", output_path, "write records to FILE instead of stdout")->type_name("FILE");
    // One value per -e/-x: a further word is the program to launch (or an error).
    app.add_option("-e,--eval", evals, "run CMD (repeatable; with -x, in the order given)")
        ->type_name("CMD")
        ->allow_extra_args(false);
    app.add_option("-x,--command", command_files, "run the commands in FILE (repeatable)")
        ->type_name("FILE")
        ->allow_extra_args(false);
    app.add_flag("--debug", debug, "log every ptrace request and stop to stderr");
    app.add_flag("--agent", agent,
                 "launch with libtdagent.so preloaded: the full event set (lock, sleep, signal, reap...)");
    app.footer("Usage: tdctl [options] -p PID    attach to a running process\n"
               "       tdctl [options] -- PROG [ARGS...]   launch PROG under tdctl\n"
               "With no commands, a launched program is watched until it exits; an attached one gets an\n"
               "interactive prompt on a terminal (`help` lists the commands), or reads commands from stdin.\n"
               "Exit status: a launched program's own status; 2 when tdctl or a batch command fails;\n"
               "64 for a usage error.");
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "tdctl: %s\nRun tdctl --help for usage.\n", e.what());
        return exit_usage;
    }
    if (debug)
        log::set_debug(true);
    auto usage_error = [](const std::string& message) {
        std::fprintf(stderr, "tdctl: %s\nRun tdctl --help for usage.\n", message.c_str());
        return exit_usage;
    };
    if (!pid_text.empty()) {
        char* end = nullptr;
        errno = 0;
        long v = std::strtol(pid_text.c_str(), &end, 10);
        if (errno != 0 || end == pid_text.c_str() || *end != '\0' || v <= 0 || v > 0x3fffffff)
            return usage_error(fmt::format("-p: not a process ID: {}", pid_text));
        pid = static_cast<pid_t>(v);
    }
    // The option parser stops at the first word it does not know: the
    // program to launch, or (before any `--`) an unknown option.
    std::vector<std::string> program = app.remaining();
    if (!program.empty() && program.front() == "--")
        program.erase(program.begin());
    else if (!program.empty() && program.front().size() > 1 && program.front().starts_with("-"))
        return usage_error(fmt::format("unknown option {}", program.front()));
    if ((pid != 0) == !program.empty())
        return usage_error(pid != 0 ? fmt::format("give either -p PID or a program to launch, not both (got -p {} "
                                                  "and {})",
                                                  pid, program.front())
                                    : "nothing to do: give -p PID to attach, or -- PROG [ARGS] to launch");
    if (agent && pid != 0)
        return usage_error("--agent preloads libtdagent.so into a launched program; it cannot be loaded into a "
                           "running process (-p)");
    std::string script_error;
    auto scripts = ordered_scripts(argc, argv, script_error);
    if (!scripts) {
        std::fprintf(stderr, "tdctl: %s\n", script_error.c_str());
        return exit_usage;
    }

    // From here on, the process the user started only guards the tracer.
    try {
        cmd::split_off_tracer(pid != 0 && ::isatty(STDIN_FILENO) == 0);
    } catch (const error& e) {
        std::fprintf(stderr, "tdctl: %s\n", e.what());
        return exit_failed;
    }
    ptrace::note_controller_process(cmd::guardian_pid());

    // Descriptors 0-2 stay taken, so that none of tdctl's own lands there.
    const bool stdout_closed = ::fcntl(STDOUT_FILENO, F_GETFD) < 0;
    for (int fd = 0; fd <= 2; ++fd)
        if (::fcntl(fd, F_GETFD) < 0)
            ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (stdout_closed && output_path.empty()) {
        std::fprintf(stderr, "tdctl: standard output is closed; give -o FILE\n");
        return exit_failed;
    }
    std::FILE* out_file = stdout;
    if (!output_path.empty()) {
        out_file = std::fopen(output_path.c_str(), "w");
        if (out_file == nullptr) {
            std::fprintf(stderr, "tdctl: cannot write %s: %s\n", output_path.c_str(), std::strerror(errno));
            return exit_failed;
        }
    }

    try {
        cmd::signal_source signals;
        cmd::output out(out_file, json);
        std::unique_ptr<core::session> session;
        try {
            if (pid != 0) {
                session = core::session::attach(pid, signals.fd());
            } else {
                ptrace::launch_options opts;
                opts.argv = program;
                if (agent) {
                    auto path = find_agent_library();
                    if (!path) {
                        out.error("agent", "--agent: cannot find libtdagent.so next to tdctl (../agent/ or ../lib/); "
                                           "set TDCTL_AGENT=/path/to/libtdagent.so");
                        return exit_failed;
                    }
                    // An existing LD_PRELOAD is kept, after ours.
                    const char* old = std::getenv("LD_PRELOAD");
                    opts.extra_env.push_back("LD_PRELOAD=" + *path + (old && *old ? std::string(":") + old : ""));
                }
                session = core::session::launch(opts);
            }
        } catch (const error& e) {
            // A signal that ended a waiting attach ends tdctl as it would later.
            if (e.domain() == error_domain::os && e.code() == EINTR)
                if (int sig = signals.take(); sig != 0) {
                    out.error("attach", fmt::format("{}; nothing was changed in the target", e.what()));
                    return 128 + sig;
                }
            out.error(e.domain() == error_domain::os ? "attach" : "target", e.what());
            return exit_failed;
        }
        // From here on the terminal never stops tdctl while it holds the
        // target (a launched program, forked above, keeps the dispositions
        // tdctl was given).
        cmd::ignore_terminal_stops();

        {
            json_record rec;
            rec["type"] = pid != 0 ? "attached" : "launched";
            rec["pid"] = session->pid();
            rec["name"] = procfs::process_name(session->pid());
            rec["threads"] = session->lwps().size();
            auto* agent = session->agent();
            rec["backend"] = agent ? agent->backend() : std::string("none");
            std::string lib;
            if (agent) {
                rec["version"] = agent->layout().version;
                std::string evs;
                auto names = events::json_record::array();
                for (td_event_e e : agent->supported_events()) {
                    evs += (evs.empty() ? "" : ", ") + events::event_short_name(e);
                    names.push_back(events::event_name(e));
                }
                rec["events"] = names;
                lib = fmt::format("thread library {} {} (events: {})", agent->backend(), agent->layout().version, evs);
            } else {
                rec["reason"] = session->no_agent_reason();
                lib = "no thread library: " + session->no_agent_reason();
            }
            rec["time"] = events::json_seconds(seconds_since_start());
            out.record(rec, fmt::format("{} process {} ({}), {} threads; {}", pid != 0 ? "attached to" : "launched",
                                        session->pid(), events::printable_name(procfs::process_name(session->pid())),
                                        session->lwps().size(), lib));
        }

        cmd::runner run(*session, out, signals);
        const bool launched = pid == 0;
        const bool stdin_tty = ::isatty(STDIN_FILENO) != 0;
        const bool want_repl = !batch && stdin_tty && (!launched || interactive);
        cmd::batch commands(run, out, !want_repl);

        bool go_on = true;
        if (!scripts->empty())
            go_on = commands.run_lines(*scripts);
        if (go_on && !commands.failed() && !run.must_exit()) {
            if (want_repl && run.has_target())
                cmd::run_repl(run, *session, out, signals);
            else if (scripts->empty() && launched)
                run.watch_until_exit();
            else if (scripts->empty() && (!stdin_tty || batch))
                commands.run_stdin(*session, signals);
        }
        const bool failed = commands.failed();

        // A write that failed (a full disk, a closed pipe) fails the run;
        // a reader that went away (EPIPE) needs no message.
        auto output_broken = [&] {
            int err = std::fflush(out_file) != 0 ? errno : 0;
            if (err == 0 && out.ok())
                return false;
            if (out.write_errno() != 0)
                err = out.write_errno();
            if (err != EPIPE)
                std::fprintf(stderr, "tdctl: writing %s failed%s%s\n",
                             output_path.empty() ? "standard output" : output_path.c_str(), err ? ": " : "",
                             err ? std::strerror(err) : "");
            return true;
        };

        // End of the session: put the target back as it was.
        // Ctrl-C at the prompt only ends the running command; elsewhere it
        // ends tdctl (128 + SIGINT), as SIGTERM and SIGHUP always do.
        int end_signal = commands.end_signal();
        if (end_signal == 0 && (run.must_exit() || (!want_repl && run.last_signal() == SIGINT)))
            end_signal = run.last_signal();
        if (run.has_target()) {
            session->detach();
            json_record rec;
            rec["type"] = "detached";
            rec["pid"] = session->pid();
            rec["time"] = events::json_seconds(seconds_since_start());
            out.record(rec, fmt::format("detached from process {}", session->pid()));
        }
        run.poll_target();  // reports an exit taken while detaching
        if (launched && !run.target_exit_status() && end_signal == 0 && !session->process().exit_status()) {
            // A launched program runs to completion, as it would alone.
            for (;;) {
                if (auto st = session->process().wait_launched_exit(100)) {
                    run.print_exit(*st);
                    if (output_broken() || failed)
                        return exit_failed;
                    return status_to_exit_code(*st);
                }
                if (!session->process().is_alive()) {
                    out.error("exit", "the launched program's exit status was lost");
                    return exit_failed;
                }
                if (int sig = signals.take(); sig != 0)
                    return 128 + sig;
            }
        }
        // A signal's status wins over a failed write: after SIGHUP the
        // terminal is gone, and writes to it fail because of that.
        const bool broken = output_broken();
        if (end_signal != 0)
            return 128 + end_signal;
        if (broken)
            return exit_failed;
        if (failed)
            return exit_failed;
        if (launched) {
            if (auto st = run.target_exit_status())
                return status_to_exit_code(*st);
            if (auto st = session->process().exit_status())
                return status_to_exit_code(*st);
        }
        return 0;
    } catch (const error& e) {
        std::fprintf(stderr, "tdctl: %s\n", e.what());
        return exit_failed;
    }
}
