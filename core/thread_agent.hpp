// The thread agent of one target: the td_ta_* functions of the seed pages,
// served by whichever thread-library backend the target carries (SPEC §2–3).
// Its methods are implemented one td_* function per file (core/td_ta_*.cpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <thread_db.h>

#include "base/types.hpp"
#include "core/protocol/event_protocol.hpp"
#include "core/target_access.hpp"
#include "core/td_result.hpp"

namespace tdctl::core {

class thread_backend;
class thread_handle;

/// One consumed event message (td_event_msg_t with the handle by value).
struct td_message {
    td_event_e event = TD_EVENT_NONE;
    target_addr handle;          ///< the thread whose buffer held it
    std::uint64_t data = 0;      ///< msg.data
};

class thread_agent {
public:
    /// td_ta_new: finds a backend in the target's modules. On failure the
    /// error is TD_NOLIBTHREAD (no thread library publishing the protocol, e.g.
    /// a static binary without the symbols, or musl) or TD_VERSION/TD_DBERR,
    /// and `why` receives one line saying what was missing. With
    /// `consider_tdagent` false, a loaded libtdagent.so is passed by (nptl
    /// serves: the agent does not see the target's calls).
    static td_result<std::unique_ptr<thread_agent>> create(target_access& target, std::string* why = nullptr,
                                                           bool consider_tdagent = true);

    /// An agent for `layout`, with the backend of its library (seam()).
    thread_agent(target_access& target, protocol_layout layout);
    ~thread_agent();
    thread_agent(const thread_agent&) = delete;
    thread_agent& operator=(const thread_agent&) = delete;

    /// "nptl" or "tdagent".
    const std::string& backend() const { return protocol_.layout().backend; }
    const protocol_layout& layout() const { return protocol_.layout(); }
    event_protocol& protocol() { return protocol_; }
    target_access& target() { return protocol_.target(); }
    /// What this thread library does its own way (core/protocol/thread_backend.hpp);
    /// lives as long as the agent.
    thread_backend& seam() { return *backend_; }

    /// Events with a reporting address in this backend, in numeric order.
    std::vector<td_event_e> supported_events() const;

    /// td_ta_event_addr: NOTIFY_BPT at the backend's reporting address for e.
    /// TD_NOEVENT for events the backend does not report.
    td_result<td_notify_t> event_addr(td_event_e e) const;
    /// The same with the function size and symbol name.
    td_result<reporting_address> reporting_address_of(td_event_e e) const;

    /// td_ta_set_event / td_ta_clear_event: OR / AND-NOT into the global mask.
    td_status set_event(const td_thr_events_t& events);
    td_status clear_event(const td_thr_events_t& events);
    /// The global mask (the seed has no call for it; used for restore and display).
    td_result<td_thr_events_t> global_mask();

    /// td_ta_event_getmsg: consumes one message from some thread that has one
    /// buffered (head of the list first); TD_NOMSG when none.
    td_result<td_message> event_getmsg();

    /// td_ta_thr_iter: every live thread. Before the library has set up its
    /// lists (a static program at its entry point) the single LWP is returned
    /// with a null handle.
    td_result<std::vector<thread_handle>> thr_iter();

    /// td_ta_map_lwp2thr: the handle of an LWP — its thread pointer, checked
    /// against the record's tid field; TD_NOTHR when no thread has that LWP.
    td_result<thread_handle> map_lwp2thr(tid_t lwp);

private:
    event_protocol protocol_;
    std::unique_ptr<thread_backend> backend_;   // after protocol_: made from it
};

/// A target with the thread library found in it: what the parts that work
/// on thread records ask (core/session/live_target.hpp is one; unit tests fake one
/// over a memory image).
class library_access : public target_access {
public:
    /// The thread agent, or nullptr when no thread library publishes the protocol.
    virtual thread_agent* agent() = 0;
    /// What differs between the thread libraries (thread_agent::seam); nullptr without an agent.
    thread_backend* backend()
    {
        thread_agent* a = agent();
        return a != nullptr ? &a->seam() : nullptr;
    }
};

/// Builds the tdagent layout from libtdagent.so's exported symbols (SPEC §5).
std::optional<protocol_layout> probe_tdagent(target_access& target, std::string& why);

/// Builds the nptl layout from glibc's exported symbols (SPEC §2.1).
/// std::nullopt with `why` set when the target has no usable nptl.
std::optional<protocol_layout> probe_nptl(target_access& target, std::string& why);

}  // namespace tdctl::core
