// Tracing a compiled segment's backward (joint_trace.hpp).
#include "vm/graph/joint_trace.hpp"

#include <functional>
#include <unordered_map>

#include "vm/autograd/call.hpp"
#include "vm/autograd/engine.hpp"
#include "vm/autograd/var.hpp"
#include "vm/kernels/loop.hpp"

namespace cr::graph {

namespace {

bool same_layout(const Tensor& a, const Tensor& b) {
  return a.storage() == b.storage() && a.offset() == b.offset() && a.dtype() == b.dtype() && a.sizes() == b.sizes() &&
         a.strides() == b.strides();
}

// Records every op call into `g` while it is installed (autograd::op_observer).
class Tracer : public autograd::OpObserver {
 public:
  Graph g;
  std::vector<Tensor> held;     // by value id: the tensor it was (kept alive for identity)
  std::vector<int32_t> fwd;     // by value id: the forward graph's value it is, or -1
  std::string broken;

  int32_t input(const Tensor& t, int32_t fwd_value) {
    Node n;
    n.kind = NodeKind::Input;
    n.input_index = int32_t(g.inputs.size());
    g.nodes.push_back(std::move(n));
    const int32_t v = fresh(int32_t(g.nodes.size() - 1), t, -1);
    g.nodes.back().outs.push_back(v);
    g.inputs.push_back(v);
    fwd[size_t(v)] = fwd_value;
    return v;
  }

  // A tensor of an earlier call: the same header, or another header on the same layout (the
  // latest value: an in-place op makes a new one).
  int32_t value_of(cr_tensor* p) {
    if (auto it = ids_.find(p); it != ids_.end()) return it->second;
    Tensor t(p, true);
    for (size_t v = held.size(); v-- > 0;)
      if (held[v].defined() && same_layout(held[v], t)) return int32_t(v);
    if (broken.empty()) broken = cat("a derivative read ", t.describe(), ", which no traced op made");
    return -1;
  }

  void on_call(int op, const cr_value* args, int nargs, const std::vector<Tensor>& outs) override {
    if (!broken.empty()) return;
    release_unreferenced();
    const OpDef& def = Registry::get().ops()[size_t(op)];
    if ((def.flags & kReturnsSelf) && !writable(static_cast<cr_tensor*>(args[0].ptr))) {
      broken = cat("in-place op ", def.name, " on a value the traced backward did not make");
      return;
    }
    Node n;
    n.op = op;
    std::vector<int32_t> tensors;
    for (int i = 0; i < nargs; ++i) n.args.push_back(arg(args[i], tensors));
    if (!broken.empty()) return;
    g.nodes.push_back(std::move(n));
    const int32_t index = int32_t(g.nodes.size() - 1);
    if (def.flags & kReturnsSelf) {  // (as recorded graphs: a new value of self, on its storage)
      Tensor self(static_cast<cr_tensor*>(args[0].ptr), true);
      g.nodes[size_t(index)].outs.push_back(fresh(index, self, tensors.at(0)));
      return;
    }
    for (const Tensor& o : outs) {
      int32_t v = -1, views = -1;
      for (int32_t a : tensors) {
        if (held[size_t(a)].get() == o.get()) v = a;
        if (views < 0 && held[size_t(a)].storage() == o.storage()) views = a;
      }
      if (v < 0) v = fresh(index, o, views);
      g.nodes[size_t(index)].outs.push_back(v);
    }
  }

  int32_t id(const Tensor& t) const { return ids_.at(t.get()); }
  bool knows(const Tensor& t) const { return ids_.count(t.get()) > 0; }

  // A value only `held` references (its header and its storage) can reach no later call: its
  // memory goes now, as eager autograd's temporaries do, and its header's address may be reused.
  void release_unreferenced() {
    size_t kept = 0;
    for (int32_t v : live_) {
      Tensor& t = held[size_t(v)];
      if (tensor_refs(t.get()) == 1 && (!t.storage() || t.storage()->refs.load() == 1)) {
        ids_.erase(t.get());
        t = Tensor();
      } else {
        live_[kept++] = v;
      }
    }
    live_.resize(kept);
  }

  // An in-place write the backward graph can hold: to a value a rule made whole (a buffer it
  // fills, e.g. index_add_ into zeros), not to a forward value, an input or a view.
  bool writable(cr_tensor* p) {
    auto it = ids_.find(p);
    if (it == ids_.end()) return false;
    for (int32_t id = it->second;;) {  // (through earlier writes to the same buffer)
      const Value& v = g.values[size_t(id)];
      if (fwd[size_t(id)] >= 0 || v.node < 0 || g.nodes[size_t(v.node)].kind != NodeKind::Op) return false;
      if (v.views < 0) return true;
      if (!g.nodes[size_t(v.node)].inplace()) return false;
      id = v.views;
    }
  }

 private:
  std::unordered_map<cr_tensor*, int32_t> ids_;
  std::vector<int32_t> live_;  // the values whose `held` tensor is still there

  int32_t fresh(int32_t node, const Tensor& t, int32_t views) {
    const int32_t v = g.add_value(node, meta_of(t));
    g.values[size_t(v)].views = views;
    held.push_back(t);
    live_.push_back(v);
    fwd.push_back(-1);
    ids_[t.get()] = v;
    return v;
  }

  Arg arg(const cr_value& a, std::vector<int32_t>& tensors) {
    Arg r;
    r.tag = a.tag;
    r.num = a.num;
    if (a.tag == kTensor) {
      r.value = value_of(static_cast<cr_tensor*>(a.ptr));
      tensors.push_back(r.value);
    } else if (a.tag == kTensors) {
      for (int k = 0; k < a.n; ++k) r.values.push_back(value_of(static_cast<cr_tensor* const*>(a.ptr)[k]));
      tensors.insert(tensors.end(), r.values.begin(), r.values.end());
    } else if (a.tag == kInts) {
      const auto* p = static_cast<const int64_t*>(a.ptr);
      r.ints.assign(p, p + a.n);
    } else if (a.tag == kDoubles) {
      const auto* p = static_cast<const double*>(a.ptr);
      r.doubles.assign(p, p + a.n);
    } else if (a.tag == kString) {
      r.str = a.str;
    }
    return r;
  }
};

struct ObserverScope {
  autograd::OpObserver* prev;
  explicit ObserverScope(autograd::OpObserver* o) : prev(autograd::op_observer) { autograd::op_observer = o; }
  ~ObserverScope() { autograd::op_observer = prev; }
};

Tensor laid_out(const Tensor& t) {
  if (t.is_contiguous() && t.offset() == 0) return Tensor::view_of(t, t.sizes(), t.strides(), t.offset());
  Tensor r = Tensor::empty(t.sizes(), t.dtype(), t.device());
  copy_into(r, t);
  return r;
}

// The backward graph: the engine's calls (from node `first` of the joint graph on), with the
// gradients and the kept forward values as inputs and the forward nodes of any other forward
// value they read copied in (recomputed).
void cut(Tracer& tr, size_t first, const TraceInput& in, const std::vector<int32_t>& grad_ids,
         const std::vector<int32_t>& result_ids, Traced& r) {
  const Graph& j = tr.g;
  auto g = std::make_shared<Graph>();
  g->transient = true;
  std::vector<int32_t> map(j.values.size(), -1);
  std::vector<char> kept(in.forward.values.size());
  for (int32_t v : in.kept) kept[size_t(v)] = 1;
  for (int32_t v : in.forward.inputs) kept[size_t(v)] = 1;
  auto add_input = [&](int32_t jv) {
    Node n;
    n.kind = NodeKind::Input;
    n.input_index = int32_t(g->inputs.size());
    g->nodes.push_back(std::move(n));
    const int32_t v = g->add_value(int32_t(g->nodes.size() - 1), j.values[size_t(jv)].meta);
    g->nodes.back().outs.push_back(v);
    g->inputs.push_back(v);
    return map[size_t(jv)] = v;
  };
  for (int32_t jv : grad_ids) r.grad_in.push_back(add_input(jv));
  std::function<void(size_t)> copy_node;
  auto bring = [&](int32_t jv) -> int32_t {
    if (map[size_t(jv)] >= 0) return map[size_t(jv)];
    const int32_t f = tr.fwd[size_t(jv)];
    if (f >= 0 && kept[size_t(f)]) {
      r.reads.emplace_back(add_input(jv), f);
      return map[size_t(jv)];
    }
    const int32_t node = j.values[size_t(jv)].node;  // a forward value not kept: recomputed
    if (node < 0 || size_t(node) >= first || j.nodes[size_t(node)].kind != NodeKind::Op)
      fail(cat("internal: the traced backward reads joint value %", jv, ", which it cannot reach"));
    copy_node(size_t(node));
    const int32_t fn = f >= 0 ? in.forward.values[size_t(f)].node : -1;
    r.recomputed.push_back(cat(j.nodes[size_t(node)].def().name, fn >= 0 ? cat(" (", in.forward.nodes[size_t(fn)].where, ")") : ""));
    return map[size_t(jv)];
  };
  copy_node = [&](size_t i) {
    Node n = j.nodes[i];
    for (Arg& a : n.args) {
      if (a.tag == kTensor) a.value = bring(a.value);
      for (int32_t& v : a.values) v = bring(v);
    }
    g->nodes.push_back(n);
    const int32_t index = int32_t(g->nodes.size() - 1);
    for (int32_t& o : g->nodes.back().outs) {
      if (map[size_t(o)] < 0 && j.values[size_t(o)].node == int32_t(i)) {
        const int32_t views = j.values[size_t(o)].views;
        map[size_t(o)] = g->add_value(index, j.values[size_t(o)].meta);
        g->values[size_t(map[size_t(o)])].views = views >= 0 ? map[size_t(views)] : -1;
      }
      o = map[size_t(o)];
    }
  };
  for (size_t i = first; i < j.nodes.size(); ++i)
    if (j.nodes[i].kind == NodeKind::Op) copy_node(i);
  for (int32_t jv : result_ids) {
    r.grad_out.push_back(jv < 0 ? -1 : bring(jv));
    if (jv >= 0) g->outputs.push_back(r.grad_out.back());
  }
  r.graph = g;
}

// An in-place op whose memory is an input's: the trace must not write the input again.
bool writes_input(const Graph& g, const Node& n) {
  if (!n.inplace()) return false;
  const int32_t root = storage_root(g, n.args[0].value);
  return g.values[size_t(root)].node >= 0 && g.nodes[size_t(g.values[size_t(root)].node)].kind == NodeKind::Input;
}

}  // namespace

Traced trace_backward(Context& ctx, const TraceInput& in, const std::vector<int32_t>& roots,
                      const std::vector<Tensor>& grads, bool record) {
  const Graph& fg = in.forward;
  Tracer tr;
  ObserverScope observe(record ? &tr : nullptr);
  autograd::ContextScope scope(ctx);
  autograd::AutocastOff no_autocast;  // (the graph holds the casts autocast made)
  std::vector<Tensor> vals(fg.values.size());
  std::vector<char> wanted(fg.values.size());
  for (int32_t v : in.ins) wanted[size_t(v)] = 1;
  std::vector<Tensor> leaves;
  for (int32_t v : fg.inputs) {
    const Tensor& t = in.inputs[size_t(v)];
    vals[size_t(v)] = Tensor::view_of(t, t.sizes(), t.strides(), t.offset());  // a leaf of the trace's own
    if (wanted[size_t(v)]) autograd::ensure_meta(vals[size_t(v)].get()).requires_grad = true;
    if (record) tr.input(vals[size_t(v)], v);
  }
  for (int32_t v : in.ins) leaves.push_back(vals[size_t(v)]);
  {
    autograd::GradModeGuard grad_on(true);
    // (each forward value is dropped after its last reader: what the backward needs, autograd saved)
    std::vector<char> keep = kept_values(fg);
    for (int32_t r : roots) keep[size_t(r)] = 1;
    const DeadLists dead = dead_after(fg, keep);
    for (size_t i = 0; i < fg.nodes.size(); ++i) {
      const Node& n = fg.nodes[i];
      if (n.kind == NodeKind::Op && !writes_input(fg, n)) {
        CallArgs call(n, vals, nullptr);
        std::vector<Tensor> outs;
        autograd::call(ctx, n.op, call.args, int(n.args.size()), outs);
        for (size_t k = 0; k < n.outs.size() && k < outs.size() && !n.inplace(); ++k)
          if (fg.values[size_t(n.outs[k])].node == int32_t(i)) {
            vals[size_t(n.outs[k])] = outs[k];
            if (record && tr.broken.empty()) tr.fwd[size_t(tr.id(outs[k]))] = n.outs[k];
          }
      }
      if (n.inplace()) {  // its result is the argument it wrote (an input's memory: the forward wrote it)
        const Tensor& w = vals[size_t(n.outs[0])] = vals[size_t(n.args[0].value)];
        if (record && tr.broken.empty() && tr.knows(w)) tr.fwd[size_t(tr.id(w))] = n.outs[0];  // (read after it)
      }
      for (int32_t v : dead[i]) vals[size_t(v)] = Tensor();
    }
  }
  const size_t first = tr.g.nodes.size();
  std::vector<Tensor> rs, gs;
  std::vector<int32_t> grad_ids;
  for (size_t k = 0; k < roots.size(); ++k) {
    rs.push_back(vals[size_t(roots[k])]);
    gs.push_back(laid_out(grads[k]));  // (the graph's gradients are laid out so: run_backward copies others)
    if (record) grad_ids.push_back(tr.input(gs.back(), -1));
  }
  autograd::BackwardOptions o;
  o.capture = o.allow_unused = true;
  Traced r;
  r.grads = autograd::backward(ctx, rs, gs, leaves, o);
  if (!record) return r;
  r.broken = tr.broken;
  if (!r.broken.empty()) return r;
  std::vector<int32_t> result_ids;
  for (const Tensor& t : r.grads) result_ids.push_back(t.defined() ? tr.value_of(t.get()) : -1);
  if (!tr.broken.empty()) {
    r.broken = tr.broken;
    return r;
  }
  cut(tr, first, in, grad_ids, result_ids, r);
  return r;
}

}  // namespace cr::graph
