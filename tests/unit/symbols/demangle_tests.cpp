// demangled(): C++ names as people read them, every other name untouched.
#include <doctest/doctest.h>

#include <string>

#include "symbols/demangle.hpp"

using tdctl::symbols::demangled;

TEST_CASE("demangled reads Itanium C++ names, with or without an offset")
{
    CHECK(demangled("_ZN2ns1fEi") == "ns::f(int)");
    CHECK(demangled("_ZN2ns1fEi+0x1a") == "ns::f(int)+0x1a");
    CHECK(demangled("_ZN10bt_fixture13parked_workerEPv") == "bt_fixture::parked_worker(void*)");
}

// The demangler also reads bare type encodings: a C start routine `f` was
// shown as "float", a lock in `static pthread_mutex_t m[2]` as
// "unsigned long" and "unsigned long+0x28".
TEST_CASE("demangled leaves C names alone, even those that spell a type code")
{
    for (std::string name : {"f", "i", "v", "m", "d", "Pv", "St", "worker", "pthread_create", "__nptl_create_event"}) {
        CAPTURE(name);
        CHECK(demangled(name) == name);
        CHECK(demangled(name + "+0x28") == name + "+0x28");
    }
}

TEST_CASE("demangled leaves a _Z name that does not demangle as it is")
{
    CHECK(demangled("_Z") == "_Z");
    CHECK(demangled("_Zfoo+0x8") == "_Zfoo+0x8");
    CHECK(demangled("") == "");
}
