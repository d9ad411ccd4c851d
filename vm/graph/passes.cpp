// Graph passes. They keep value ids (lazy tensors know theirs) and record every value they remove
// in favour of an equal one in Graph::aliases. Mutation makes them careful: a value whose storage
// is written in place is never folded or merged, and common subexpressions are only merged
// between two in-place ops, never across one.
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "vm/graph/graph.hpp"

namespace cr::graph {

int32_t storage_root(const Graph& g, int32_t v) {
  for (;;) {  // through views, and from an input to the first input sharing its storage
    const Value& x = g.values[size_t(v)];
    if (x.views >= 0) v = x.views;
    else if (x.alias_of >= 0) v = x.alias_of;
    else return v;
  }
}

std::vector<char> written_roots(const Graph& g) {
  std::vector<char> w(g.values.size());
  for (const Node& n : g.nodes) {
    each_written_root(g, n, [&](int32_t r) { w[size_t(r)] = 1; });
    if (n.inplace()) w[size_t(storage_root(g, n.outs[0]))] = 1;
  }
  return w;
}

void substitute(Graph& g, int32_t from, int32_t to, bool copy) {
  for (Node& n : g.nodes)
    for (Arg& a : n.args) {
      if (a.tag == kTensor && a.value == from) a.value = to;
      for (int32_t& v : a.values)
        if (v == from) v = to;
    }
  for (int32_t& o : g.outputs)
    if (o == from) o = to;
  for (Value& v : g.values)  // views of the removed value are views of the kept one
    if (v.views == from) v.views = to;
  g.aliases.push_back(Graph::Alias{from, to, copy});
}

bool is_view_node(const Graph& g, const Node& n) {
  if (n.kind != NodeKind::Op || n.inplace() || n.def().kind != OpKind::View || n.outs.size() != 1) return false;
  const Value& out = g.values[size_t(n.outs[0])];
  return out.node >= 0 && &g.nodes[size_t(out.node)] == &n && !n.args.empty() && n.args[0].tag == kTensor &&
         out.views == n.args[0].value;
}

namespace {

// A node's identity for common-subexpression elimination: op, mutation epoch and arguments.
std::string cse_key(const Node& n, int epoch) {
  std::string k = cat(n.op, ":", epoch);
  auto word = [&k](uint64_t w) { k.append(reinterpret_cast<const char*>(&w), 8); };
  for (const Arg& a : n.args) {
    word(uint64_t(a.tag));
    word(uint64_t(int64_t(a.value)));
    word(uint64_t(int64_t(a.varying)));  // (two numbers that vary are two values, whatever they were)
    uint64_t b;
    std::memcpy(&b, &a.num, 8);
    word(b);
    word(a.values.size());
    for (int32_t v : a.values) word(uint64_t(int64_t(v)));
    word(a.ints.size());
    for (int64_t v : a.ints) word(uint64_t(v));
    word(a.doubles.size());
    for (double d : a.doubles) {
      std::memcpy(&b, &d, 8);
      word(b);
    }
    word(a.str.size());
    k += a.str;
  }
  return k;
}

Arg ints_arg(const Shape& s) {
  Arg a;
  a.tag = kInts;
  a.ints.assign(s.begin(), s.end());
  return a;
}

}  // namespace

// A view of a view becomes one as_strided of the first view's input (sizes are guarded, so the
// layout is known); then a view whose result has its input's layout is its input.
int canonicalize_views(Graph& g) {
  const int as_strided = Registry::get().ids().as_strided;
  int changed = 0;
  for (Node& n : g.nodes) {
    if (!is_view_node(g, n)) continue;
    int32_t out = n.outs[0];
    const ValueMeta& mo = g.values[size_t(out)].meta;
    const Node& producer = g.nodes[size_t(g.values[size_t(n.args[0].value)].node)];
    if (is_view_node(g, producer)) {
      const Arg offset = Arg::number(double(mo.offset)), self = Arg::tensor(producer.args[0].value);
      n.op = as_strided;
      n.args = {self, ints_arg(concrete(mo.sizes)), ints_arg(mo.strides), offset};
      g.values[size_t(out)].views = self.value;
      ++changed;
    }
    int32_t in = n.args[0].value;
    const ValueMeta& mi = g.values[size_t(in)].meta;
    if (mi.sizes == mo.sizes && mi.strides == mo.strides && mi.offset == mo.offset) {
      substitute(g, out, in, false);
      n.outs.clear();  // dead now; eliminate_dead_code drops it
      ++changed;
    }
  }
  return changed;
}

// Ops whose tensor inputs are all constants (creation ops have none) run now; their results
// become constants. Random ops and values written in place are left alone; big results too,
// so that a graph never pins much memory.
int fold_constants(Graph& g, Context& ctx) {
  constexpr size_t kMaxBytes = size_t(1) << 20;
  std::vector<char> written = written_roots(g);
  std::vector<Tensor> consts(g.values.size());
  int folded = 0;
  for (Node& n : g.nodes) {
    if (n.kind == NodeKind::Const) consts[size_t(n.outs[0])] = n.constant;
    if (n.kind != NodeKind::Op || n.inplace() || n.writes() || n.random() || n.outs.size() != 1) continue;
    int32_t out = n.outs[0];
    const Value& v = g.values[size_t(out)];
    // a view stays a view of its constant (they share storage); values written in place are not
    // constant
    if (&g.nodes[size_t(v.node)] != &n || v.views >= 0 || written[size_t(storage_root(g, out))]) continue;
    bool all_const = true;
    std::vector<cr_value> args(n.args.size());
    std::vector<std::vector<cr_tensor*>> lists;
    lists.reserve(n.args.size());
    for (size_t i = 0; i < n.args.size() && all_const; ++i) {
      const Arg& a = n.args[i];
      args[i] = cr_value{a.tag, 0, a.num, nullptr, nullptr};
      all_const = a.varying < 0;  // a number that varies between calls is not a constant
      if (a.tag == kTensor) {
        all_const = consts[size_t(a.value)].defined();
        if (all_const) args[i].ptr = consts[size_t(a.value)].get();
      } else if (a.tag == kTensors) {
        auto& l = lists.emplace_back();
        for (int32_t x : a.values) {
          all_const = all_const && consts[size_t(x)].defined();
          if (all_const) l.push_back(consts[size_t(x)].get());
        }
        args[i].n = int32_t(l.size());
        args[i].ptr = l.data();
      } else if (a.tag == kInts) {
        args[i].n = int32_t(a.ints.size());
        args[i].ptr = const_cast<int64_t*>(a.ints.data());
      } else if (a.tag == kDoubles) {
        args[i].n = int32_t(a.doubles.size());
        args[i].ptr = const_cast<double*>(a.doubles.data());
      } else if (a.tag == kString) {
        args[i].str = a.str.c_str();
      }
    }
    size_t bytes = size_t(shape_numel(concrete(v.meta.sizes))) * dtype_size(v.meta.dtype);
    if (!all_const || bytes > kMaxBytes || !v.meta.device.is_cpu()) continue;
    std::vector<Tensor> r = dispatch(ctx, n.op, args.data(), int(args.size()));
    n.kind = NodeKind::Const;
    n.constant = r[0];
    n.args.clear();
    consts[size_t(out)] = r[0];
    ++folded;
  }
  return folded;
}

int eliminate_common_subexpressions(Graph& g) {
  std::vector<char> written = written_roots(g);
  std::unordered_map<std::string, int32_t> seen;  // cse_key -> node
  int epoch = 0, merged = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.inplace() || n.writes()) ++epoch;
    if (n.kind != NodeKind::Op || n.inplace() || n.random() || n.outs.empty()) continue;
    bool skip = false;  // values written in place, and ops that hand back an argument unchanged
    for (int32_t o : n.outs)
      skip = skip || written[size_t(storage_root(g, o))] || g.values[size_t(o)].node != int32_t(i);
    if (skip) continue;
    auto [it, fresh] = seen.try_emplace(cse_key(n, epoch), int32_t(i));
    if (fresh) continue;
    const Node& first = g.nodes[size_t(it->second)];
    bool escapes = false;  // two results Lua gets must stay two tensors
    for (int32_t o : n.outs) escapes = escapes || std::find(g.outputs.begin(), g.outputs.end(), o) != g.outputs.end();
    if (first.outs.size() != n.outs.size() || escapes) continue;
    // two equal views are two headers over the same storage: sharing it is exact; two equal
    // computed values are two tensors in eager mode, so Lua gets a copy
    bool view = is_view_node(g, n);
    for (size_t k = 0; k < n.outs.size(); ++k) substitute(g, n.outs[k], first.outs[k], !view);
    n.outs.clear();
    ++merged;
  }
  return merged;
}

// An op that may fail on tensor values (an index out of range, an integer division by zero):
// eager raises there even when the result is unused, so the graph must run (and check) it too.
// fmod / remainder / pow fail only in their integer forms. (A node CSE merged away has no outs.)
bool fails_on_values(const Graph& g, const Node& n) {
  if (n.kind != NodeKind::Op || !(n.def().flags & kValueErrors) || n.outs.empty()) return false;
  return n.def().kind != OpKind::Binary || !is_floating(g.values[size_t(n.outs[0])].meta.dtype);
}

// Keeps what the outputs need, every in-place op (its write is the point), every random op (it
// advances the generator that later random ops read) and every op that may fail on values,
// unless `keep_effects` is false (the recorder's recomputation of one pure value).
int eliminate_dead_code(Graph& g, bool keep_effects) {
  std::vector<char> keep(g.nodes.size());
  // Without effects kept (recomputation), an in-place op still stays when it writes the storage
  // of a live value: found by iterating until no more writes join.
  for (bool grew = true; grew;) {
    grew = false;
    std::vector<char> live(g.values.size()), live_root(g.values.size());
    for (int32_t o : g.outputs) live[size_t(o)] = 1;
    for (size_t i = g.nodes.size(); i-- > 0;) {
      const Node& n = g.nodes[i];
      bool k = keep[i] || n.kind == NodeKind::Input ||
               (keep_effects && (n.inplace() || n.writes() || n.random() || fails_on_values(g, n)));
      for (int32_t o : n.outs) k = k || live[size_t(o)];
      if (!k) continue;
      keep[i] = 1;
      for (const Arg& a : n.args) {
        if (a.tag == kTensor) live[size_t(a.value)] = 1;
        for (int32_t v : a.values) live[size_t(v)] = 1;
      }
    }
    if (keep_effects) break;
    for (size_t v = 0; v < g.values.size(); ++v)
      if (live[v] && g.values[v].node >= 0) live_root[size_t(storage_root(g, int32_t(v)))] = 1;
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      bool writes_live = false;
      each_written_root(g, n, [&](int32_t r) { writes_live = writes_live || live_root[size_t(r)]; });
      if (!keep[i] && writes_live) {
        keep[i] = 1;
        grew = true;
      }
    }
  }
  return keep_nodes(g, keep);
}

int keep_nodes(Graph& g, const std::vector<char>& keep) {
  std::vector<Node> kept;
  std::vector<int32_t> index(g.nodes.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (keep[i]) {
      index[i] = int32_t(kept.size());
      kept.push_back(std::move(g.nodes[i]));
    }
  int removed = int(g.nodes.size() - kept.size());
  g.nodes = std::move(kept);
  for (Value& v : g.values)
    if (v.node >= 0) v.node = index[size_t(v.node)];
  return removed;
}

void optimize(Graph& g, Context& ctx) {
  canonicalize_views(g);
  fold_constants(g, ctx);
  eliminate_common_subexpressions(g);
  fuse_patterns(g);
  eliminate_dead_code(g);
}

}  // namespace cr::graph
