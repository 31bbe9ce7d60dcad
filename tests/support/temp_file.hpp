// A unique file name for a test (a fixture's record file, tdctl's -o output),
// removed again when the owner goes away.
#pragma once

#include <string>
#include <string_view>

namespace tdctl::test {

class temp_file {
public:
    /// A fresh name under $TMPDIR (or /tmp) containing stem; the file itself
    /// is not created.
    explicit temp_file(std::string_view stem = "tdctl-test");
    ~temp_file();

    temp_file(const temp_file&) = delete;
    temp_file& operator=(const temp_file&) = delete;
    temp_file(temp_file&& other) noexcept;
    temp_file& operator=(temp_file&&) = delete;

    const std::string& path() const { return path_; }
    /// Keep the file after the test (to look at it after a failure).
    void keep() { keep_ = true; }

private:
    std::string path_;
    bool keep_ = false;
};

/// A fresh directory under the system's temporary directory (mkdtemp),
/// removed with everything in it at the end (a HOME for a test's tdctl, an
/// install prefix). Fails the test (REQUIRE) when it cannot be made.
class temp_directory {
public:
    explicit temp_directory(std::string_view stem = "tdctl-dir");
    ~temp_directory();
    temp_directory(const temp_directory&) = delete;
    temp_directory& operator=(const temp_directory&) = delete;

    const std::string& path() const { return path_; }

private:
    std::string path_;
};

}  // namespace tdctl::test
