// td_ta_get_stats: the live counters (nthreads, r_concurrency) and the
// averages gathered since td_ta_enable_stats, reduced to td_ta_stats_t's ints.
#include "core/accounting/lwp_accounting.hpp"
#include "ptrace/procfs.hpp"

namespace tdctl::core {

td_result<thread_stats> lwp_accounting::get_stats()
{
    thread_stats st;
    st.enabled = stats_.is_enabled();
    auto now = target_.lwps();
    st.averages = stats_.averages(now);

    // nthreads: the thread library's own counter when there is one.
    st.td.nthreads = static_cast<int>(procfs::list_tasks(target_.pid()).size());
    st.nthreads_source = "/proc";
    thread_agent* agent = target_.agent();
    const thread_backend* backend = target_.backend();
    if (agent) {
        if (auto n = agent->protocol().read_nthreads(); n && *n > 0) {
            st.td.nthreads = *n;
            st.nthreads_source = backend->traits().nthreads_symbol;
        }
    }
    // r_concurrency: tdagent keeps its own; glibc keeps pthread_setconcurrency's
    // level in a local symbol, visible only through libc's separate debug file.
    target_addr level_addr = agent ? agent->layout().concurrency_level : target_addr{};
    std::string level_source(backend ? backend->traits().concurrency_symbol : "__concurrency_level");
    if (level_addr.is_null())
        if (auto sym = target_.lookup_symbol("libc.so.6", "__concurrency_level"))
            level_addr = sym->address;
    if (!level_addr.is_null()) {
        std::int32_t level = 0;
        if (target_.memory().read_value(level_addr, level)) {
            st.td.r_concurrency = level;
            st.r_concurrency_source = level_source;
        }
    }
    reduce_to_int(st.averages.nrunnable.num, st.averages.nrunnable.den, st.td.nrunnable_num, st.td.nrunnable_den);
    reduce_to_int(st.averages.a_concurrency.num, st.averages.a_concurrency.den, st.td.a_concurrency_num,
                  st.td.a_concurrency_den);
    reduce_to_int(st.averages.nlwps.num, st.averages.nlwps.den, st.td.nlwps_num, st.td.nlwps_den);
    reduce_to_int(st.averages.nidle.num, st.averages.nidle.den, st.td.nidle_num, st.td.nidle_den);
    return st;
}

}  // namespace tdctl::core
