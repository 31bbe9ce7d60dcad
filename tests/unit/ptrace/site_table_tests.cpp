// The site table: one physical site per address however many reasons it
// serves, withdrawn bytes written again, a new process's copy given the
// saved bytes, and an exec forgetting the image's sites and report signal.
#include <doctest/doctest.h>

#include "base/change_journal.hpp"
#include "ptrace/site_table.hpp"
#include "tests/support/image_memory.hpp"

using namespace tdctl;
using namespace tdctl::ptrace;
using test::image_memory;

namespace {

constexpr target_addr ret_site{0x100100};     // a lone `ret` followed by code: emulated return
constexpr target_addr push_site{0x100200};    // `push %rbp`: single-step
constexpr target_addr flag_byte{0x100300};

image_memory code_image()
{
    image_memory mem;
    mem.at(ret_site.value) = std::byte{0xc3};
    mem.at(ret_site.value + 1) = std::byte{0x55};
    mem.at(push_site.value) = std::byte{0x55};
    mem.at(push_site.value + 1) = std::byte{0x48};
    return mem;
}

}  // namespace

TEST_CASE("one site per address: reasons are counted, the last one lets it go")
{
    image_memory mem = code_image();
    change_journal journal(mem, 0);
    site_table sites;
    const breakpoint_site& first = sites.add_breakpoint(ret_site, 0, mem, journal);
    const breakpoint_site& second = sites.add_breakpoint(ret_site, 0, mem, journal);
    CHECK(&first == &second);
    CHECK(mem.at(ret_site.value) == std::byte{0xcc});
    CHECK(sites.all().size() == 1);

    CHECK(sites.drop_reason(ret_site) == nullptr);  // one reason left
    breakpoint_site* last = sites.drop_reason(ret_site);
    REQUIRE(last != nullptr);
    CHECK(sites.find(ret_site) == last);  // still there until erased
    last->remove(journal);
    sites.erase(ret_site);
    CHECK(sites.find(ret_site) == nullptr);
    CHECK(mem.at(ret_site.value) == std::byte{0xc3});
    CHECK(sites.drop_reason(ret_site) == nullptr);  // no such site
}

TEST_CASE("a withdrawn site is not inserted until written again")
{
    image_memory mem = code_image();
    change_journal journal(mem, 0);
    site_table sites;
    sites.add_breakpoint(ret_site, 0, mem, journal);
    sites.add_breakpoint(push_site, 30, mem, journal);
    REQUIRE(sites.inserted_at(push_site) != nullptr);
    CHECK(sites.inserted_at(push_site)->kind() == step_over_kind::single_step);

    sites.inserted_at(push_site)->remove(journal);
    sites.mark_withdrawn(push_site);
    CHECK(sites.inserted_at(push_site) == nullptr);
    CHECK(sites.find(push_site) != nullptr);
    CHECK(mem.at(push_site.value) == std::byte{0x55});

    sites.reinsert_withdrawn(mem, journal, true);
    CHECK(sites.inserted_at(push_site) != nullptr);
    CHECK(mem.at(push_site.value) == std::byte{0xcc});
    CHECK(sites.inserted_at(ret_site) != nullptr);  // never withdrawn, untouched

    sites.remove_all(journal);
    CHECK(sites.empty());
    CHECK(mem.at(push_site.value) == std::byte{0x55});
    CHECK(mem.at(ret_site.value) == std::byte{0xc3});
}

TEST_CASE("a process's copy of the image gets each inserted site's saved bytes")
{
    image_memory mem = code_image();
    change_journal journal(mem, 0);
    site_table sites;
    sites.add_breakpoint(ret_site, 0, mem, journal);
    sites.add_breakpoint(push_site, 30, mem, journal);
    image_memory copy;
    copy.bytes = mem.bytes;  // as a fork child sees it: patched
    sites.write_saved_bytes(copy);
    CHECK(copy.at(ret_site.value) == std::byte{0xc3});
    CHECK(copy.at(push_site.value) == std::byte{0x55});
    CHECK(mem.at(push_site.value) == std::byte{0xcc});  // ours stays patched
}

TEST_CASE("a process's copy of a signal-stop site gets the flag's byte back, its code untouched")
{
    image_memory mem = code_image();
    change_journal journal(mem, 0);
    site_table sites;
    sites.add_signal_site(push_site, stop_flag{flag_byte, 34}, mem, journal);
    image_memory copy;
    copy.bytes = mem.bytes;  // as a fork child sees it: the flag set
    sites.write_saved_bytes(copy);
    CHECK(copy.at(flag_byte.value) == std::byte{0});
    CHECK(copy.at(push_site.value) == std::byte{0x55});
    CHECK(mem.at(flag_byte.value) == std::byte{34});  // ours stays set
}

TEST_CASE("an exec forgets the sites and the report signal; a gone process only the sites")
{
    image_memory mem = code_image();
    change_journal journal(mem, 0);
    site_table sites;
    sites.add_signal_site(push_site, stop_flag{flag_byte, 34}, mem, journal);
    CHECK(mem.at(flag_byte.value) == std::byte{34});
    CHECK(mem.at(push_site.value) == std::byte{0x55});  // the code is never touched
    sites.set_report_signal({34, target_addr{0x100400}, target_addr{0x1234}});

    sites.clear();
    CHECK(sites.empty());
    CHECK(sites.report_signal().signo == 34);

    sites.add_breakpoint(ret_site, 0, mem, journal);
    sites.forget_image();
    CHECK(sites.empty());
    CHECK(sites.report_signal().signo == 0);
    CHECK(sites.report_signal().stopped_pc.is_null());
}
