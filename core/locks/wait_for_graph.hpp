// The wait-for graph of a held target: one edge per thread blocked on a
// mutex, from the waiter's TID to the owner's. A thread waits on one lock at
// a time, so each node has at most one edge out, and each cycle is a
// deadlock: no member can go on until another does.
#pragma once

#include <vector>

#include "base/types.hpp"

namespace tdctl::core {

/// `waiter` is blocked on a lock that `owner` holds.
struct wait_edge {
    tid_t waiter;
    tid_t owner;
};

/// Every cycle of the graph, each as indices into `edges` in the order the
/// waits follow each other (edges[c[i]].owner == edges[c[i+1]].waiter, the
/// last back to the first), starting at its lowest waiter TID; cycles in the
/// order of those TIDs. A waiter with several edges keeps its first.
std::vector<std::vector<std::size_t>> find_cycles(const std::vector<wait_edge>& edges);

}  // namespace tdctl::core
