// CRESCENT_DEBUG_DIR's picture of a compiled graph: Graphviz DOT with the graph's nodes, an edge
// per value a node reads, and each fused kernel a cluster (`subgraph cluster_N`) around the nodes
// it computes; with Graphviz's `dot` on the PATH, an .svg beside it.
#pragma once
#include <string>

#include "jit/fusion/schedule.hpp"

namespace cr::jit {

std::string plan_dot(const graph::Graph& g, const Plan& plan);
// Writes `base`.dot and, when `dot` runs, `base`.svg (none otherwise: Graphviz is optional).
void write_dot(const std::string& base, const std::string& dot);

}  // namespace cr::jit
