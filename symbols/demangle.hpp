// C++ symbol names as people read them.
#pragma once

#include <string>

namespace tdctl::symbols {

/// "ns::f(int)+0x1a" from "_ZN2ns1fEi+0x1a" (abi::__cxa_demangle). Only a
/// name in the Itanium C++ ABI's mangling ("_Z...") is demangled: any other
/// (a C function `f`, a C variable `m`, which the demangler would read as the
/// type codes `float` and `unsigned long`), or a "_Z" name that does not
/// demangle, comes back as it is, with or without its "+0x…" offset.
std::string demangled(const std::string& symbol);

}  // namespace tdctl::symbols
