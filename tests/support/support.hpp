// Everything a tdctl test needs from tests/support, in one include.
#pragma once

#include "tests/support/child_process.hpp"
#include "tests/support/fixtures.hpp"
#include "tests/support/json_lines.hpp"
#include "tests/support/proc.hpp"
#include "tests/support/record.hpp"
#include "tests/support/skip.hpp"
#include "tests/support/temp_file.hpp"
#include "tests/support/wait_until.hpp"
