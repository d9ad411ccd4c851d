// The recorder's compilation: a leaf's graph (or a dynamic leaf's instance for this call's
// layouts) gets its outputs chosen, is optimised and goes to a native backend once hot.
#include <cctype>
#include <cstdio>
#include <filesystem>

#include "vm/graph/joint.hpp"
#include "vm/graph/segment.hpp"
#include "vm/fixed.hpp"

namespace cr::graph {

using guards::Leaf;

// A graph of a dynamic segment takes the integers of this call's events (its keys left them out).
void take_event_args(Graph& g, const Segment& s) {
  size_t e = 0;
  int ordinal = 0;
  for (Node& n : g.nodes) {
    if (n.kind != NodeKind::Op) continue;
    if (e < s.event_args.size() && s.event_args[e].first == ordinal) n.args = s.event_args[e++].second;
    ++ordinal;
  }
}

std::shared_ptr<Graph> instance_of(const Graph& raw, const Segment& s) {
  auto g = std::make_shared<Graph>(raw);
  g->dynamic = true;
  for (size_t v = 0; v < g->values.size() && v < s.vals.size(); ++v)
    if (s.vals[v].defined() && g->values[v].node >= 0) g->values[v].meta = meta_of(s.vals[v]);
  take_event_args(*g, s);
  return g;
}

// A dynamic leaf runs an instance of its graph per shape: the recorded graph with this call's
// layouts, optimised and compiled once hot - from size-generic kernels, so a new shape of a known
// structure costs lowering and a kernel-cache hit, not a compile. Instances are kept by the
// layouts of the inputs (which determine all others), the most recent kMaxInstances.
constexpr size_t kMaxInstances = 16;

std::vector<int64_t> instance_key(const std::vector<int32_t>& ins, const Segment& s, bool varying) {
  std::vector<int64_t> layouts;
  for (int32_t in : ins) {
    const Tensor& t = s.vals[size_t(in)];
    layouts.insert(layouts.end(), {t.dim(), t.offset()});
    for (int d = 0; d < t.dim(); ++d) layouts.insert(layouts.end(), {t.size(d), t.stride(d)});
  }
  for (const auto& [ordinal, args] : s.event_args)  // the integers the keys left out
    for (const Arg& a : args) {
      layouts.push_back(ordinal);
      if (a.tag == kNumber && (varying || a.varying < 0)) layouts.push_back(int64_t(a.num));  // (else run arguments)
      layouts.insert(layouts.end(), a.ints.begin(), a.ints.end());
    }
  return layouts;
}

std::shared_ptr<Graph> Recorder::instance(Leaf& leaf) {
  Segment& s = *seg_;
  const Graph& raw = *leaf.raw;
  const std::vector<int64_t> layouts = instance_key(raw.inputs, s);
  const bool hot = leaf.hits > fn_->opts.hot;
  if (!leaf.recompile_reason.empty()) {
    leaf.instances.clear();
    leaf.instance_order.clear();
  }
  if (hot)
    if (auto it = leaf.instances.find(layouts); it != leaf.instances.end()) {
      s.instance_raw = it->second.raw;
      return it->second.compiled;
    }
  std::shared_ptr<Graph> g = instance_of(raw, s);
  s.instance_raw = g;
  if (!hot) return g;  // cold: runs on the eager kernels with this call's sizes
  const bool first = leaf.instances.empty() && !leaf.compiled;
  std::shared_ptr<Graph> compiled = compile(leaf, *g);
  compiled->reinstance = !first;
  leaf.instances[layouts] = guards::Leaf::Instance{g, compiled};
  leaf.instance_order.push_back(layouts);
  if (leaf.instance_order.size() > kMaxInstances) {
    leaf.instances.erase(leaf.instance_order.front());
    leaf.instance_order.erase(leaf.instance_order.begin());
  }
  return compiled;
}

// The symbolic dims of the segment's inputs, for T.explain: "1:1=7" (input, 0-based dim, size).
std::string Recorder::symbolic_dims(const Segment& s) const {
  std::string r;
  if (!s.dynamic) return r;  // (every call ends segments here: static ones pay nothing)
  for (size_t v = 0; v < s.symbolic.size() && v < s.vals.size(); ++v)
    for (int d = 0; d < 32 && s.symbolic[v] >> d; ++d)
      if (s.symbolic[v] >> d & 1 && s.vals[v].defined())
        r += cat(r.empty() ? "" : " ", input_ordinal(s, int32_t(v)), ":", d, "=", s.vals[v].size(d),
                 d == 0 && s.unbacked[v] ? cat("u", s.unbacked[v] - 1) : "");
  return r;
}

std::shared_ptr<Graph> Recorder::compile(Leaf& leaf, const Graph& raw) {
  auto g = std::make_shared<Graph>(raw);
  g->name = cat(fn_->opts.name, " segment ending at ", leaf.where, " #", leaf.variant);
  // Outputs: values used after the segment, and every value that could not be recomputed later
  // from the inputs: those depending on a random op, on an in-place op, or on any storage an
  // in-place op of the graph writes (through any view) - including reads made before the write.
  std::vector<char> written = written_roots(*g);
  std::vector<char> impure(g->values.size());
  for (size_t i = 0; i < g->nodes.size(); ++i) {
    const Node& n = g->nodes[i];
    bool dirty = n.inplace() || n.writes() || n.random();
    auto taint = [&](int32_t v) { dirty = dirty || impure[size_t(v)] || written[size_t(storage_root(*g, v))]; };
    for (const Arg& a : n.args) {
      if (a.tag == kTensor) taint(a.value);
      for (int32_t v : a.values) taint(v);
    }
    for (int32_t o : n.outs)
      if (g->values[size_t(o)].node == int32_t(i) && (dirty || written[size_t(storage_root(*g, o))])) impure[size_t(o)] = 1;
  }
  // Views and the values they view share storage: recomputed later they would not (a write to
  // one would miss the other), so both are kept - unless the storage is an input's, which a
  // recomputation reuses.
  for (size_t v = 0; v < g->values.size(); ++v) {
    const Value& val = g->values[v];
    if (val.node < 0 || val.views < 0) continue;
    int32_t root = storage_root(*g, int32_t(v));
    if (g->nodes[size_t(g->values[size_t(root)].node)].kind == NodeKind::Input) continue;
    for (int32_t w = int32_t(v); w >= 0; w = g->values[size_t(w)].views) impure[size_t(w)] = 1;
  }
  // Once the values Lua reached after a first run are known (reach_learned), an impure value
  // is kept only when Lua reached or used it; the others are lost (reading one raises, and the
  // function recompiles to keep it).
  g->outputs.clear();
  std::vector<char> saved(g->values.size());  // a training segment's values its backward reads
  if (leaf.joint)
    for (int32_t v : plan_of(*leaf.joint).saved) saved[size_t(v)] = 1;
  leaf.lost.assign(g->values.size(), 0);
  for (size_t v = 0; v < g->values.size(); ++v) {
    if (g->values[v].node < 0 || g->nodes[size_t(g->values[v].node)].kind == NodeKind::Input) continue;
    const bool esc = (v < leaf.escaping.size() && leaf.escaping[v]) || saved[v];
    const bool reached = !leaf.reach_learned || (v < leaf.reachable.size() && leaf.reachable[v]);
    if (esc || (impure[v] && reached)) g->outputs.push_back(int32_t(v));
    else if (impure[v]) leaf.lost[v] = 1;
  }
  if (!leaf.recompile_reason.empty()) {
    ++stats.recompiles;
    if (logs.recompiles) log("recompiles", cat(fn_->opts.name, ": ", leaf.recompile_reason));
    leaf.recompile_reason.clear();
  }
  const bool counted = !g->dynamic || (leaf.instances.empty() && !leaf.compiled);
  std::shared_ptr<Graph> built = build(leaf, g, fn_->opts, counted);
  leaf.compiled = built ? built : leaf.raw;
  return leaf.compiled;
}

// Optimises `g` (its outputs chosen) and starts its native compile; nullptr when optimising
// failed (the caller runs the graph as recorded). `counted`: a new graph for the stats.
std::shared_ptr<Graph> Recorder::build(const Leaf& leaf, const std::shared_ptr<Graph>& g, const guards::Options& o,
                                       bool counted) {
  double t0 = now_us();
  if (!optimized(*g, stats.eager_fallbacks, "graph", "recorded")) return nullptr;
  double us = now_us() - t0;
  if (counted) ++stats.graphs_compiled;
  if (logs.graph) log("graph", g->str());
  if (logs.perf)
    log("perf", cat(g->name, ": compiled in ", fixed(us), " us (", leaf.raw->op_count(), " ops -> ", g->op_count(), ")"));
  dump(leaf, *g, o.name, us);
  start_native(g, o.backend, o.autotune);
  return g;
}

bool Recorder::optimized(Graph& g, int64_t& fallbacks, const char* channel, const char* as) {
  try {
    optimize(g, ctx_);
    return true;
  } catch (const std::exception& e) {
    ++fallbacks;
    log(channel, cat("optimising ", g.name, " failed (", e.what(), "): it runs as ", as));
    return false;
  }
}

// CRESCENT_DEBUG_DIR: per compiled graph, one text file with its guards, the graph as recorded,
// the optimised graph and the compile time.
void Recorder::dump(const Leaf& leaf, const Graph& g, const std::string& fname, double us) {
  const std::string& dir = debug_dir;
  if (dir.empty()) return;
  std::string name = cat(fname, "-", leaf.where, "-", leaf.variant, "-", stats.graphs_compiled);
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  std::string path = cat(dir, "/", name, ".graph.txt");
  std::error_code ec;  // the directory need not exist yet: the user only named it
  std::filesystem::create_directories(dir, ec);
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    log("graph", cat("CRESCENT_DEBUG_DIR: cannot write ", path));
    return;
  }
  std::string text = cat(guards::describe_guards(leaf), "\n-- recorded\n", leaf.raw->str(), "\n-- optimised\n", g.str(),
                         "\n-- compile time: ", us, " us\n");
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

}  // namespace cr::graph
