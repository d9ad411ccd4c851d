// The eager backend: a graph run node by node through the registry's eager kernels. It is the
// reference every native backend is compared with, and what "compiled" means with
// backend = "eager".
#include "vm/graph/graph.hpp"

#include <algorithm>

#include "vm/kernels/loop.hpp"

namespace cr::graph {

namespace {

Tensor copy_of(const Tensor& t) {
  Tensor r = Tensor::empty(t.sizes(), t.dtype(), t.device());
  copy_into(r, t);
  return r;
}

}  // namespace

CallArgs::CallArgs(const Node& n, const std::vector<Tensor>& vals, const double* numbers) {
  if (n.args.size() > kInline) more.resize(n.args.size());
  args = n.args.size() > kInline ? more.data() : inline_args;
  for (size_t i = 0; i < n.args.size(); ++i) {
    const Arg& a = n.args[i];
    cr_value& v = args[i];
    v = cr_value{a.tag, 0, a.varying >= 0 && numbers ? numbers[a.varying] : a.num, nullptr, nullptr};
    switch (a.tag) {
      case kTensor: v.ptr = vals[size_t(a.value)].get(); break;
      case kTensors: {
        if (lists.capacity() == 0) lists.reserve(n.args.size());
        auto& l = lists.emplace_back();
        for (int32_t id : a.values) l.push_back(vals[size_t(id)].get());
        v.n = int32_t(l.size());
        v.ptr = l.data();
        break;
      }
      case kInts: v.n = int32_t(a.ints.size()); v.ptr = const_cast<int64_t*>(a.ints.data()); break;
      case kDoubles: v.n = int32_t(a.doubles.size()); v.ptr = const_cast<double*>(a.doubles.data()); break;
      case kString: v.str = a.str.c_str(); break;
      default: break;
    }
  }
}

void run_node(const Graph& g, size_t index, Context& ctx, std::vector<Tensor>& vals, const double* numbers) {
  const Node& n = g.nodes[index];
  CallArgs call(n, vals, numbers);
  // lazy tensors waiting for this node's outputs (set by the recorder) receive them directly
  Tensor into[4];
  size_t ninto = 0;
  for (; ninto < n.outs.size() && ninto < 4; ++ninto) {
    const Tensor& v = vals[size_t(n.outs[ninto])];
    if (v.defined() && v.is_lazy() && g.values[size_t(n.outs[ninto])].node == int32_t(index)) into[ninto] = v;
  }
  std::vector<Tensor> outs;
  try {
    outs = dispatch(ctx, n.op, call.args, int(n.args.size()), into, ninto);
  } catch (const Error& e) {
    for (size_t i = 0; i < ninto; ++i)  // (a partial result: Lua's tensor has no value)
      if (into[i].defined() && !into[i].is_lazy()) Tensor::unattach(into[i].get());
    // the error of the op at the line that recorded it, as eager execution reports it
    if (n.where.empty()) throw;
    throw LocatedError(cat(n.where, ": ", e.what()));
  }
  if (n.inplace()) {  // the result is the mutated first argument
    vals[size_t(n.outs[0])] = vals[size_t(n.args[0].value)];
    return;
  }
  for (size_t i = 0; i < n.outs.size() && i < outs.size(); ++i)
    if (g.values[size_t(n.outs[i])].node == int32_t(index)) vals[size_t(n.outs[i])] = std::move(outs[i]);
}

std::shared_ptr<const Executable> executable_of(const Graph& g) {
  if (!g.native) return nullptr;
  std::lock_guard<std::mutex> lock(g.native->mutex);
  return g.native->exe;
}

void run_graph(const Graph& g, Context& ctx, std::vector<Tensor>& vals, const double* numbers,
               const std::vector<char>* unheld) {
  if (std::shared_ptr<const Executable> exe = executable_of(g)) exe->run(ctx, vals, numbers, unheld);
  else run_eager(g, ctx, vals, numbers, unheld);
}

// Each run gets its own copy (folded constants are small): whatever reaches Lua - the value,
// views of it, a removed alias - may be written, and the constant must stay.
void set_constants(const Graph& g, std::vector<Tensor>& vals) {
  vals.resize(g.values.size());
  for (const Node& n : g.nodes)
    if (n.kind == NodeKind::Const) vals[size_t(n.outs[0])] = copy_of(n.constant);
}

DeadLists dead_after(size_t steps, const std::vector<char>& keep,
                     const std::function<void(size_t, const ValueVisit&)>& uses) {
  std::vector<int> last(keep.size(), -1);
  for (size_t i = 0; i < steps; ++i) uses(i, [&](int32_t v) { last[size_t(v)] = int(i); });
  DeadLists dead(steps);
  for (size_t v = 0; v < keep.size(); ++v)
    if (!keep[v] && last[v] >= 0) dead[size_t(last[v])].push_back(int32_t(v));
  return dead;
}

std::vector<char> kept_values(const Graph& g) {
  std::vector<char> keep(g.values.size(), 0);
  // (a transient graph's caller reads only its outputs: its inputs - the saved forward values
  // of a backward graph - go after their last reader too)
  if (!g.transient)
    for (int32_t v : g.inputs) keep[size_t(v)] = 1;
  for (int32_t v : g.outputs) keep[size_t(v)] = 1;
  if (!g.transient) {
    for (const Graph::Alias& a : g.aliases) keep[size_t(a.removed)] = keep[size_t(a.kept)] = 1;
    return keep;
  }
  // (a transient graph's removed values matter only as outputs: the kept value of an alias of
  // an output, through chains of aliases, outlives the run; the others die after their readers)
  for (bool more = true; more;) {
    more = false;
    for (const Graph::Alias& a : g.aliases)
      if (keep[size_t(a.removed)] && !keep[size_t(a.kept)]) keep[size_t(a.kept)] = 1, more = true;
  }
  return keep;
}

DeadLists dead_after(const Graph& g) { return dead_after(g, kept_values(g)); }

DeadLists dead_after(const Graph& g, const std::vector<char>& keep) {
  return dead_after(g.nodes.size(), keep, [&](size_t i, const ValueVisit& use) {
    for (const Arg& a : g.nodes[i].args) {
      if (a.tag == kTensor) use(a.value);
      for (int32_t v : a.values) use(v);
    }
    for (int32_t v : g.nodes[i].outs) use(v);
  });
}

void run_eager(const Graph& g, Context& ctx, std::vector<Tensor>& vals, const double* numbers,
               const std::vector<char>* unheld) {
  set_constants(g, vals);
  const bool frees = g.transient || unheld;
  const DeadLists* dead = frees ? &g.dead.get([&] { return dead_after(g); }) : nullptr;
  for (size_t index = 0; index < g.nodes.size(); ++index) {
    if (g.nodes[index].kind == NodeKind::Op) run_node(g, index, ctx, vals, numbers);
    if (dead)
      for (int32_t v : (*dead)[index])
        if (g.transient || (*unheld)[size_t(v)]) vals[size_t(v)] = Tensor();
  }
  // removed values share the kept one's tensor; the recorder copies a common subexpression
  // before a lazy tensor of Lua's gets it (Recorder::settle)
  for (const Graph::Alias& a : g.aliases) {
    Tensor& r = vals[size_t(a.removed)];
    if (!r.defined() || r.is_lazy()) r = vals[size_t(a.kept)];
  }
}

}  // namespace cr::graph
