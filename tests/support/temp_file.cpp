#include "tests/support/temp_file.hpp"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <utility>

#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

namespace tdctl::test {

namespace {
std::atomic<unsigned> next_serial{0};
}

temp_file::temp_file(std::string_view stem)
{
    const char* dir = std::getenv("TMPDIR");
    path_ = fmt::format("{}/{}-{}-{}", dir && *dir ? dir : "/tmp", stem, ::getpid(), next_serial++);
    ::unlink(path_.c_str());  // a stale file from an earlier run with the same pid
}

temp_file::temp_file(temp_file&& other) noexcept : path_(std::move(other.path_)), keep_(other.keep_)
{
    other.keep_ = true;  // the moved-from owner removes nothing
}

temp_file::~temp_file()
{
    if (!keep_ && !path_.empty())
        ::unlink(path_.c_str());
}

temp_directory::temp_directory(std::string_view stem)
{
    std::string pattern = (std::filesystem::temp_directory_path() / fmt::format("{}-XXXXXX", stem)).string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
}

temp_directory::~temp_directory()
{
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
}

}  // namespace tdctl::test
