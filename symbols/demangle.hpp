// C++ symbol names as people read them.
#pragma once

#include <string>

namespace tdctl::symbols {

/// "ns::f(int)+0x1a" from "_ZN2ns1fEi+0x1a" (abi::__cxa_demangle); a name
/// that is not a mangled C++ name, with or without its "+0x…" offset, comes
/// back as it is.
std::string demangled(const std::string& symbol);

}  // namespace tdctl::symbols
