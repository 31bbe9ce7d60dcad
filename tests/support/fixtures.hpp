// Where the fixture programs and the tdctl binary are: absolute paths fixed
// at configure time (fixture_paths.hpp), never the working directory.
#pragma once

#include <string>
#include <string_view>

namespace tdctl::test {

/// The absolute path of fixture `name` (e.g. "churn") in the build's fixture
/// directory. Does not check that it exists.
std::string fixture_path(std::string_view name);

/// Whether fixture `name` was built (churn_musl only is when musl-gcc exists).
bool has_fixture(std::string_view name);

/// The absolute path of the tdctl executable in this build.
std::string tdctl_path();

}  // namespace tdctl::test
