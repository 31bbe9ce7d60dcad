// What per-LWP accounting is told of each LWP's life, by the session as the
// stops come (core/session/session.cpp): the statistics (stats_collector) and a
// usage window (usage_window) read /proc counters at these moments, so that
// threads that live and die between two samples count fully.
#pragma once

#include "base/types.hpp"

namespace tdctl::core {

class lwp_lifecycle {
public:
    virtual ~lwp_lifecycle() = default;

    /// A new LWP, at its clone stop: the kernel starts its counters at 0.
    virtual void on_birth(tid_t lwp) = 0;
    /// An LWP at its exit stop, where its /proc files can still be read: its final counters.
    virtual void on_death(tid_t lwp) = 0;
    /// An LWP gone without an exit stop (or after it): nothing more to read.
    virtual void on_vanished(tid_t lwp) = 0;
    /// An exec: the exec'ing LWP (`former`) goes on as the leader, with its
    /// counters, under the leader's TID; every other LWP went with the old image.
    virtual void on_exec(tid_t former, tid_t leader) = 0;

protected:
    lwp_lifecycle() = default;
    lwp_lifecycle(const lwp_lifecycle&) = default;
    lwp_lifecycle& operator=(const lwp_lifecycle&) = default;
};

}  // namespace tdctl::core
