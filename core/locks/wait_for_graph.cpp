#include "core/locks/wait_for_graph.hpp"

#include <algorithm>
#include <map>

namespace tdctl::core {

namespace {

/// The cycle through `start` as edge indices, rotated to its lowest waiter.
std::vector<std::size_t> rotated_to_lowest(std::vector<std::size_t> cycle, const std::vector<wait_edge>& edges)
{
    auto lowest = std::ranges::min_element(
        cycle, [&](std::size_t a, std::size_t b) { return edges[a].waiter.value < edges[b].waiter.value; });
    std::ranges::rotate(cycle, lowest);
    return cycle;
}

}  // namespace

std::vector<std::vector<std::size_t>> find_cycles(const std::vector<wait_edge>& edges)
{
    std::map<pid_t, std::size_t> edge_of;   // waiter -> its edge
    for (std::size_t i = 0; i < edges.size(); ++i)
        edge_of.try_emplace(edges[i].waiter.value, i);

    // Walk from each waiter along the single out-edges; a walk that meets a
    // node of its own path closes a cycle, one that meets an earlier walk's
    // node ends there (that node's fate is known).
    enum class mark { unvisited, on_path, done };
    std::map<pid_t, mark> marks;
    std::vector<std::vector<std::size_t>> cycles;
    for (const auto& [start, first_edge] : edge_of) {
        std::vector<std::size_t> path;
        pid_t node = start;
        while (marks[node] == mark::unvisited) {
            auto it = edge_of.find(node);
            if (it == edge_of.end())
                break;
            marks[node] = mark::on_path;
            path.push_back(it->second);
            node = edges[it->second].owner.value;
        }
        if (marks[node] == mark::on_path) {
            auto from = std::ranges::find_if(path, [&](std::size_t e) { return edges[e].waiter.value == node; });
            cycles.push_back(rotated_to_lowest({from, path.end()}, edges));
        }
        for (std::size_t e : path)
            marks[edges[e].waiter.value] = mark::done;
    }
    std::ranges::sort(cycles, [&](const auto& a, const auto& b) {
        return edges[a.front()].waiter.value < edges[b.front()].waiter.value;
    });
    return cycles;
}

}  // namespace tdctl::core
