// Helpers shared by the symbols tests: ground truth from binutils, the test
// process's own memory as a target_memory, and an owned fixture child.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/target_memory.hpp"

extern char** environ;

namespace tdctl::symbols::test {

/// Output of a shell command, or nullopt if it could not run or failed.
inline std::optional<std::string> run_command(const std::string& command)
{
    FILE* p = ::popen((command + " 2>/dev/null").c_str(), "r");
    if (p == nullptr)
        return std::nullopt;
    std::string out;
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
        out.append(buf, n);
    int status = ::pclose(p);
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return std::nullopt;
    return out;
}

struct nm_symbol {
    std::uint64_t value = 0;
    char kind = 0;
    std::string name;   ///< as nm prints it, with "@VER" / "@@VER"
};

/// Defined symbols of a file as `nm` lists them; `dynamic` adds -D.
inline std::vector<nm_symbol> nm_symbols(const std::string& file, bool dynamic)
{
    std::vector<nm_symbol> out;
    auto text = run_command(std::string("nm --defined-only ") + (dynamic ? "-D " : "") + "'" + file + "'");
    if (!text)
        return out;
    std::istringstream in(*text);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream fields(line);
        std::string value, kind, name;
        if (!(fields >> value >> kind >> name) || kind.size() != 1)
            continue;
        out.push_back({std::strtoull(value.c_str(), nullptr, 16), kind[0], name});
    }
    return out;
}

/// st_value of `name` (spelled as nm prints it), or nullopt.
inline std::optional<std::uint64_t> nm_value(const std::string& file, const std::string& name, bool dynamic)
{
    for (const nm_symbol& s : nm_symbols(file, dynamic)) {
        if (s.name == name)
            return s.value;
    }
    return std::nullopt;
}

/// The "Build ID:" line of `readelf -n`, or "" if none.
inline std::string readelf_build_id(const std::string& file)
{
    auto text = run_command("readelf -n '" + file + "'");
    if (!text)
        return {};
    std::size_t at = text->find("Build ID: ");
    if (at == std::string::npos)
        return {};
    at += 10;
    std::size_t end = text->find_first_of(" \n", at);
    return text->substr(at, end - at);
}

/// The test process itself as a target: process_vm_readv on our own pid, so
/// an unmapped address yields a short read instead of a crash.
class self_memory : public target_memory {
public:
    std::size_t read(target_addr addr, std::span<std::byte> out) override
    {
        std::size_t done = 0;
        while (done < out.size()) {
            iovec local{out.data() + done, out.size() - done};
            iovec remote{reinterpret_cast<void*>(addr.value + done), out.size() - done};
            ssize_t n = ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0);
            if (n <= 0)
                break;
            done += static_cast<std::size_t>(n);
        }
        return done;
    }
    bool write(target_addr, std::span<const std::byte>) override { return false; }
};

/// A fixture child with its stdin and stdout on pipes. The destructor kills
/// and reaps it whatever the test did.
class fixture_process {
public:
    fixture_process(const std::string& exe, const std::vector<std::string>& args)
    {
        int in[2], out[2];
        if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0)
            throw std::runtime_error("pipe2 failed");
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_adddup2(&actions, in[0], 0);
        posix_spawn_file_actions_adddup2(&actions, out[1], 1);

        std::vector<char*> argv;
        argv.push_back(const_cast<char*>(exe.c_str()));
        for (const std::string& a : args)
            argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        int rc = ::posix_spawn(&pid_, exe.c_str(), &actions, nullptr, argv.data(), environ);
        posix_spawn_file_actions_destroy(&actions);
        ::close(in[0]);
        ::close(out[1]);
        stdin_fd_ = in[1];
        stdout_fd_ = out[0];
        if (rc != 0) {
            pid_ = -1;
            throw std::runtime_error("posix_spawn " + exe + " failed");
        }
    }

    ~fixture_process()
    {
        if (stdin_fd_ >= 0)
            ::close(stdin_fd_);
        if (stdout_fd_ >= 0)
            ::close(stdout_fd_);
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            int status;
            while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
            }
        }
    }

    fixture_process(const fixture_process&) = delete;
    fixture_process& operator=(const fixture_process&) = delete;

    pid_t pid() const { return pid_; }

    /// Lines the child printed before "ready"; throws after 10 s or at EOF.
    std::vector<std::string> read_until_ready()
    {
        using clock = std::chrono::steady_clock;
        const auto deadline = clock::now() + std::chrono::seconds(10);
        std::vector<std::string> lines;
        std::string pending;
        for (;;) {
            std::size_t nl;
            while ((nl = pending.find('\n')) != std::string::npos) {
                std::string line = pending.substr(0, nl);
                pending.erase(0, nl + 1);
                if (line == "ready")
                    return lines;
                lines.push_back(line);
            }
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
            if (left <= 0)
                throw std::runtime_error("fixture did not print \"ready\" within 10 s");
            pollfd p{stdout_fd_, POLLIN, 0};
            if (::poll(&p, 1, static_cast<int>(left)) < 0 && errno != EINTR)
                throw std::runtime_error("poll failed");
            if (p.revents == 0)
                continue;
            char buf[1024];
            ssize_t n = ::read(stdout_fd_, buf, sizeof buf);
            if (n <= 0)
                throw std::runtime_error("fixture exited before \"ready\"; it printed: " + pending);
            pending.append(buf, static_cast<std::size_t>(n));
        }
    }

private:
    pid_t pid_ = -1;
    int stdin_fd_ = -1;
    int stdout_fd_ = -1;
};

/// The address after `prefix` in lines like "function 0x401136".
inline std::optional<std::uint64_t> printed_address(const std::vector<std::string>& lines, const std::string& prefix)
{
    for (const std::string& l : lines) {
        if (l.starts_with(prefix + " "))
            return std::strtoull(l.c_str() + prefix.size() + 1, nullptr, 16);
    }
    return std::nullopt;
}

}  // namespace tdctl::symbols::test
