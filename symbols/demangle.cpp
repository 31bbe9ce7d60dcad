#include "symbols/demangle.hpp"

#include <cstdlib>
#include <cxxabi.h>
#include <memory>

namespace tdctl::symbols {

std::string demangled(const std::string& symbol)
{
    const auto plus = symbol.find('+');
    const std::string name = symbol.substr(0, plus);
    // __cxa_demangle also takes bare type encodings ("f" is float), which
    // plain C names often are.
    if (!name.starts_with("_Z"))
        return symbol;
    int status = 0;
    std::unique_ptr<char, decltype(&std::free)> plain(abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status),
                                                      &std::free);
    if (status != 0 || !plain)
        return symbol;
    return std::string(plain.get()) + (plus == std::string::npos ? std::string() : symbol.substr(plus));
}

}  // namespace tdctl::symbols
