// td_ta_get_stats: the live counters (nthreads, r_concurrency) and the
// averages gathered since td_ta_enable_stats, reduced to td_ta_stats_t's ints.
#include "core/session.hpp"
#include "ptrace/procfs.hpp"

namespace tdctl::core {

td_result<thread_stats> session::get_stats()
{
    thread_stats st;
    st.enabled = stats_.is_enabled();
    auto now = lwps();
    st.averages = stats_.averages(now);

    // nthreads: the thread library's own counter when there is one.
    st.td.nthreads = static_cast<int>(procfs::list_tasks(pid()).size());
    st.nthreads_source = "/proc";
    if (agent_) {
        if (auto n = agent_->protocol().read_nthreads(); n && *n > 0) {
            st.td.nthreads = *n;
            st.nthreads_source = backend_->traits().nthreads_symbol;
        }
    }
    // r_concurrency: tdagent keeps its own; glibc keeps pthread_setconcurrency's
    // level in a local symbol, visible only through libc's separate debug file.
    target_addr level_addr = agent_ ? agent_->layout().concurrency_level : target_addr{};
    std::string level_source(backend_ ? backend_->traits().concurrency_symbol : "__concurrency_level");
    if (level_addr.is_null())
        if (auto sym = lookup_symbol("libc.so.6", "__concurrency_level"))
            level_addr = sym->address;
    if (!level_addr.is_null()) {
        std::int32_t level = 0;
        if (memory().read_value(level_addr, level)) {
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
