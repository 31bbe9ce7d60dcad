#include "tests/support/fixtures.hpp"

#include <unistd.h>

#include "tdctl_test/fixture_paths.hpp"

namespace tdctl::test {

std::string fixture_path(std::string_view name)
{
    std::string path(fixture_dir);
    path += '/';
    path += name;
    return path;
}

bool has_fixture(std::string_view name)
{
    return ::access(fixture_path(name).c_str(), X_OK) == 0;
}

std::string tdctl_path() { return tdctl_binary; }

}  // namespace tdctl::test
