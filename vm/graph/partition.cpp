// The min-cut partitioner (partition.hpp): a max-flow (Dinic) over the forward graph, each value
// split into an in and an out vertex joined by an edge of its byte size.
#include "vm/graph/partition.hpp"

#include <algorithm>
#include <limits>
#include <queue>

namespace cr::graph {

namespace {

constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;

class MaxFlow {
 public:
  explicit MaxFlow(int n) : adj_(size_t(n)), level_(size_t(n)), next_(size_t(n)) {}

  void edge(int a, int b, int64_t cap) {
    adj_[size_t(a)].push_back(int(e_.size()));
    e_.push_back({b, cap});
    adj_[size_t(b)].push_back(int(e_.size()));
    e_.push_back({a, 0});
  }

  void run(int s, int t) {
    while (levels(s, t)) {
      std::fill(next_.begin(), next_.end(), 0);
      while (push(s, t, kInf) > 0) {
      }
    }
  }

  // After run: whether `v` is on the source's side of the minimum cut.
  bool source_side(int v) const { return level_[size_t(v)] >= 0; }

 private:
  struct E {
    int to;
    int64_t cap;
  };
  std::vector<E> e_;
  std::vector<std::vector<int>> adj_;
  std::vector<int> level_;
  std::vector<size_t> next_;

  bool levels(int s, int t) {
    std::fill(level_.begin(), level_.end(), -1);
    std::queue<int> q;
    level_[size_t(s)] = 0;
    q.push(s);
    while (!q.empty()) {
      const int v = q.front();
      q.pop();
      for (int i : adj_[size_t(v)])
        if (e_[size_t(i)].cap > 0 && level_[size_t(e_[size_t(i)].to)] < 0) {
          level_[size_t(e_[size_t(i)].to)] = level_[size_t(v)] + 1;
          q.push(e_[size_t(i)].to);
        }
    }
    return level_[size_t(t)] >= 0;
  }

  int64_t push(int v, int t, int64_t f) {
    if (v == t) return f;
    for (size_t& k = next_[size_t(v)]; k < adj_[size_t(v)].size(); ++k) {
      E& e = e_[size_t(adj_[size_t(v)][k])];
      if (e.cap <= 0 || level_[size_t(e.to)] != level_[size_t(v)] + 1) continue;
      const int64_t got = push(e.to, t, std::min(f, e.cap));
      if (got > 0) {
        e.cap -= got;
        e_[size_t(adj_[size_t(v)][k] ^ 1)].cap += got;
        return got;
      }
    }
    return 0;
  }
};

int64_t bytes(const Graph& g, int32_t v) {
  int64_t n = int64_t(dtype_size(g.values[size_t(v)].meta.dtype));
  for (const SymInt& d : g.values[size_t(v)].meta.sizes) n *= d.value;
  return n;
}

// What keeping `v` costs: a view keeps its storage's bytes alive; inputs are kept anyway.
int64_t weight(const Graph& g, int32_t v) {
  int32_t root = v;
  while (g.values[size_t(root)].views >= 0) root = g.values[size_t(root)].views;
  const Value& r = g.values[size_t(root)];
  if (r.node >= 0 && g.nodes[size_t(r.node)].kind == NodeKind::Input) return 0;
  return std::max(bytes(g, root), bytes(g, v));
}

template <class F> void each_tensor_arg(const Node& n, F&& f) {
  for (const Arg& a : n.args) {
    if (a.tag == kTensor) f(a.value);
    for (int32_t v : a.values) f(v);
  }
}

// Ops the backward may recompute: pointwise, views, conversions, non-random creation, and
// reductions whose output is not much smaller than their inputs (saving a small result beats
// recomputing a normalisation).
bool recomputable(const Graph& g, const Node& n) {
  if (n.kind != NodeKind::Op || n.random() || n.inplace() || n.writes()) return false;
  switch (n.def().kind) {
    case OpKind::Unary: case OpKind::Binary: case OpKind::Ternary: case OpKind::View: case OpKind::Convert:
    case OpKind::Creation:
      return true;
    case OpKind::Reduction: {
      int64_t in = 0, out = 0;
      each_tensor_arg(n, [&](int32_t v) { in += bytes(g, v); });
      for (int32_t o : n.outs) out += bytes(g, o);
      return out * 4 >= in;
    }
    default:
      return false;
  }
}

}  // namespace

Partition min_cut_partition(const Graph& g, const std::vector<char>& required) {
  const int nv = int(g.values.size()), source = 2 * nv, sink = source + 1;
  auto in = [](int32_t v) { return 2 * int(v); };
  auto out = [](int32_t v) { return 2 * int(v) + 1; };
  MaxFlow f(2 * nv + 2);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const bool banned = !recomputable(g, n);
    for (int32_t o : n.outs) {
      if (g.values[size_t(o)].node != int32_t(i)) continue;  // (an argument handed back)
      if (banned) f.edge(source, in(o), kInf);
      f.edge(in(o), out(o), weight(g, o));
      each_tensor_arg(n, [&](int32_t a) { f.edge(out(a), in(o), kInf); });
    }
  }
  Partition p;
  for (int32_t v = 0; v < nv; ++v)
    if (size_t(v) < required.size() && required[size_t(v)]) {
      f.edge(out(v), sink, kInf);
      ++p.required_count;
      p.required_bytes += weight(g, v);
    }
  f.run(source, sink);
  // The cut's values that some required value is recomputed from (a free edge may lie in the
  // cut without anything reading past it).
  std::vector<char> seen(g.values.size());
  std::vector<int32_t> todo;
  for (int32_t v = 0; v < nv; ++v)
    if (size_t(v) < required.size() && required[size_t(v)]) todo.push_back(v);
  while (!todo.empty()) {
    const int32_t v = todo.back();
    todo.pop_back();
    if (seen[size_t(v)]) continue;
    seen[size_t(v)] = 1;
    const Value& val = g.values[size_t(v)];
    if (val.node < 0 || g.nodes[size_t(val.node)].kind == NodeKind::Input) continue;  // (kept anyway)
    if (f.source_side(in(v))) {
      p.saved.push_back(v);
      p.saved_bytes += weight(g, v);
    } else {
      each_tensor_arg(g.nodes[size_t(val.node)], [&](int32_t a) { todo.push_back(a); });
    }
  }
  std::sort(p.saved.begin(), p.saved.end());
  return p;
}

}  // namespace cr::graph
