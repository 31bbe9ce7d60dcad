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

}  // namespace tdctl::test
