#include "jit/dot.hpp"

#include <spawn.h>
#include <cerrno>
#include <sys/wait.h>

#include <fstream>
#include <set>

extern char** environ;

namespace cr::jit {

namespace {

std::string quoted(const std::string& s) {
  std::string q = "\"";
  for (char c : s) q += c == '"' || c == '\\' ? std::string("\\") + c : c == '\n' ? std::string("\\n") : std::string(1, c);
  return q + "\"";
}

// The graph nodes kernel k computes (those of its loop values).
std::set<int32_t> kernel_nodes(const Plan& plan, const Kernel& k) {
  std::set<int32_t> nodes;
  for (int32_t v : k.values)
    if (v >= 0 && size_t(v) < plan.lg.values.size() && plan.lg.values[size_t(v)].graph_node >= 0)
      nodes.insert(plan.lg.values[size_t(v)].graph_node);
  return nodes;
}

}  // namespace

std::string plan_dot(const graph::Graph& g, const Plan& plan) {
  std::string s = cat("digraph ", quoted(g.name), " {\n  node [shape=box, fontname=monospace];\n");
  for (size_t k = 0; k < plan.kernels.size(); ++k) {
    s += cat("  subgraph cluster_", k, " {\n    label=", quoted(cat("kernel ", k + 1, ": ", plan.kernels[k].name)),
             ";\n    style=filled; color=lightgrey;\n");
    for (int32_t n : kernel_nodes(plan, plan.kernels[k])) s += cat("    n", n, ";\n");
    s += "  }\n";
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const graph::Node& n = g.nodes[i];
    s += cat("  n", i, " [label=", quoted(g.node_str(i) + (n.where.empty() ? "" : "\n" + n.where)),
             n.kind == graph::NodeKind::Op ? "" : ", shape=ellipse", "];\n");
    for (const graph::Arg& a : n.args) {
      std::vector<int32_t> read = a.values;
      if (a.tag == kTensor) read.push_back(a.value);
      for (int32_t v : read)
        if (v >= 0 && size_t(v) < g.values.size() && g.values[size_t(v)].node >= 0)
          s += cat("  n", g.values[size_t(v)].node, " -> n", i, ";\n");
    }
  }
  return s + "}\n";
}

void write_dot(const std::string& base, const std::string& dot) {
  std::ofstream(base + ".dot") << dot;
  const std::string in = base + ".dot", out = base + ".svg";
  const char* argv[] = {"dot", "-Tsvg", in.c_str(), "-o", out.c_str(), nullptr};
  pid_t pid;
  if (posix_spawnp(&pid, "dot", nullptr, nullptr, const_cast<char* const*>(argv), environ) != 0) return;  // no Graphviz
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace cr::jit
