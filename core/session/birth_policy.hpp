// When a new thread's reporting is switched on while tdctl watches (nptl:
// threads start with reporting off, SPEC §2.1). At the creator's clone stop
// the new record exists and the child has not run: it is enabled there with
// one write — or, cheaper, in the write of its creator's TD_CREATE report,
// when that creator is known to report its creates (two system calls fewer
// per thread). A creator is known to report from its second clone stop in an
// epoch of report_changes, or from birth when it was enabled before it ran:
// its first clone may come from a pthread_create that decided before the
// last change. While a detach lets late reports settle, nothing is enabled.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>

#include "base/types.hpp"
#include "core/thread_agent.hpp"
#include "core/session/report_changes.hpp"

namespace tdctl::core {

/// What the watch is doing, as the enabling of new threads needs it.
struct watch_mode {
    bool armed = false;             ///< events are watched (event_watch::arm)
    bool stops = false;             ///< `stop` breakpoints wait for a hit
    bool creates_reported = false;  ///< TD_CREATE is armed or followed
    /// New threads are enabled at all.
    bool enables() const { return armed || stops; }
};

class birth_policy {
public:
    /// Both must outlive this.
    birth_policy(library_access& target, report_changes& changes) : target_(target), changes_(changes) {}

    /// A clone stop: `creator` made `child`, both stopped. Journals the
    /// child's inherited mask, and, as `mode` asks, enables the child now or
    /// leaves it to the creator's report.
    void on_clone(tid_t creator, tid_t child, const watch_mode& mode);
    /// Whether the TD_CREATE report about `child` is to switch its flag on
    /// in the consume's own write (consume_extras::flag_change::enable).
    bool enables_at_report(tid_t child) const
    {
        return !settling_ && births_at_report_.contains(child);
    }
    /// The TD_CREATE report about `child` was consumed; `flag_changed`:
    /// its write enabled the child. A child left to it is enabled now if not.
    void after_create_report(tid_t child, bool flag_changed, const watch_mode& mode);
    /// Enables, the clone stop's way, every new thread left to a report that
    /// will not come (`creator`'s, or any when invalid): the creator goes on
    /// without the site (withdrawn, removed, not watched).
    void enable_pending(const watch_mode& mode, tid_t creator = tid_t{});
    /// `lwp` is at its exit stop: a creator that ends between its clone and
    /// its report reports no more.
    void on_exit(tid_t lwp, const watch_mode& mode);
    /// `lwp` is gone.
    void forget(tid_t lwp)
    {
        reporting_since_.erase(lwp);
        births_at_report_.erase(lwp);
    }
    /// No thread waits for its creator's report any more (disarm, the settling, the end).
    void drop_pending() { births_at_report_.clear(); }
    /// A new image: nothing known about any thread.
    void forget_all()
    {
        births_at_report_.clear();
        reporting_since_.clear();
    }

    /// While a detach lets late reports settle, no thread is newly enabled.
    void set_settling(bool on) { settling_ = on; }
    bool is_settling() const { return settling_; }

private:
    /// Whether the watch enables new threads at their creator's report.
    bool enables_at_report(const watch_mode& mode) const;
    /// Whether every pthread_create `creator` starts from now on reports
    /// TD_CREATE (see the file comment).
    bool creates_are_reported_by(tid_t creator) const;
    /// The creator's own reporting is on (a `stop` then enables what it creates).
    bool creator_reports(tid_t creator);
    /// A new thread of the library, born at a clone stop, is enabled; false
    /// when its record was not found (not a thread of the library).
    bool enable_born_at_clone(tid_t child, const watch_mode& mode);
    /// glibc copies the creator's event buffer into the child: a mask we
    /// changed on the creator reaches the child.
    void inherit_mask(tid_t parent, tid_t child);

    library_access& target_;
    report_changes& changes_;
    bool settling_ = false;
    // Each creator's epoch since which it is known to report TD_CREATE.
    std::unordered_map<tid_t, std::uint64_t> reporting_since_;
    // New threads (LWP -> creator) whose enabling rides on their creator's
    // TD_CREATE report.
    std::unordered_map<tid_t, tid_t> births_at_report_;
};

}  // namespace tdctl::core
