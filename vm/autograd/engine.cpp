#include "vm/autograd/engine.hpp"

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <utility>

#include "vm/autograd/call.hpp"
#include "vm/autograd/grad.hpp"

namespace cr::autograd {


namespace {

struct Info {
  int deps = 0;
  bool needed = true;
  std::vector<Tensor> grads;
};
using Graph = std::unordered_map<Node*, Info>;
using Key = std::pair<Node*, int>;
struct KeyHash {
  size_t operator()(const Key& k) const { return std::hash<Node*>()(k.first) * 31 + size_t(k.second); }
};

Tensor dispatch1(const char* name, std::initializer_list<Arg> args) { return call_op(name, args).at(0); }

void add_into(Tensor& slot, const Tensor& g) {
  if (!g.defined()) return;
  slot = slot.defined() ? (Var(slot) + Var(g)).tensor() : g;
}

// Every node reachable from the roots, with how many reachable edges point at it.
Graph collect(const std::vector<Edge>& roots) {
  Graph g;
  std::vector<Node*> stack;
  for (const Edge& e : roots)
    if (g.emplace(e.fn.get(), Info{}).second) stack.push_back(e.fn.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Input& in : n->inputs) {
      if (!in.edge.fn) continue;
      auto [it, fresh] = g.emplace(in.edge.fn.get(), Info{});
      ++it->second.deps;
      if (fresh) stack.push_back(in.edge.fn.get());
    }
  }
  return g;
}

// With given inputs only the nodes that lead to one of them run.
void mark_needed(Graph& g, const std::unordered_map<Key, std::vector<int>, KeyHash>& targets) {
  for (auto& [n, info] : g) info.needed = false;
  std::unordered_map<Node*, bool> memo;
  std::vector<std::pair<Node*, size_t>> stack;
  auto is_target = [&](Node* n) {
    for (size_t k = 0; k < std::max<size_t>(n->outs.size(), 1); ++k)
      if (targets.count({n, int(k)})) return true;
    return false;
  };
  for (auto& [root, info] : g) {
    if (memo.count(root)) continue;
    stack.push_back({root, 0});
    memo[root] = is_target(root);
    while (!stack.empty()) {
      auto& [n, i] = stack.back();
      if (i < n->inputs.size()) {
        Node* c = n->inputs[i++].edge.fn.get();
        if (!c) continue;
        auto it = memo.find(c);
        if (it == memo.end()) {
          memo[c] = is_target(c);
          stack.push_back({c, 0});
        } else if (it->second) {
          memo[n] = true;
        }
        continue;
      }
      const bool need = memo[n];
      stack.pop_back();
      if (!stack.empty() && need) memo[stack.back().first] = true;
    }
  }
  for (auto& [n, info] : g) info.needed = memo[n];
}

// Hook h on gradient g: what it returned, or g (also when its VM is gone)
Tensor call_hook(const TensorHook& h, const Tensor& g) {
  cr_tensor* out = nullptr;
  if (!h.owner || !h.owner->caller) return g;
  if (h.owner->caller(h.id, g.get(), &out) != 0) throw HookRaised();
  if (!out) return g;
  Tensor r(out, false);
  if (r.sizes() != g.sizes())
    fail(cat("hook: the returned gradient has shape ", shape_str(r.sizes()), ", expected ", shape_str(g.sizes())));
  if (r.dtype() != g.dtype() || !(r.device() == g.device()))  // (PyTorch: "has changed the type of value")
    fail(cat("hook: the returned gradient has changed the type of value: expected ", dtype_name(g.dtype()), " on ",
             device_name(g.device()), ", got ", dtype_name(r.dtype()), " on ", device_name(r.device())));
  return r;
}

// The hooks registered on node n's output k (a leaf's: on its accumulator), in order: those of
// its tensor m, or those the node kept when the tensor died
Tensor run_hooks(const AutogradMeta* m, const Node* n, size_t k, Tensor g) {
  if (!g.defined()) return g;
  if (!n->kept_hooks.empty()) {
    const auto kept = n->kept_hooks;  // (a hook may add or remove hooks)
    for (const TensorHook& h : kept)
      if (size_t(h.nr) == k) g = call_hook(h, g);
  }
  if (!m || m->hooks.empty()) return g;
  const std::vector<TensorHook> hooks = m->hooks;
  for (const TensorHook& h : hooks)
    if (n->accumulates() ? h.fn.expired() : h.fn.lock().get() == n) g = call_hook(h, g);
  return g;
}

// After a leaf's .grad took this pass's gradient (torch's register_post_accumulate_grad_hook).
void run_post_hooks(const Tensor& leaf) {
  const AutogradMeta* m = meta_of(leaf.get());
  if (!m) return;
  const std::vector<TensorHook> hooks = m->post_hooks;  // (a hook may add or remove hooks)
  for (const TensorHook& h : hooks) {
    cr_tensor* out = nullptr;
    if (!h.owner || !h.owner->caller) continue;
    if (h.owner->caller(h.id, leaf.get(), &out) != 0) throw HookRaised();
    if (out) {
      Tensor(out, false);
      fail("register_post_accumulate_grad_hook: a hook returned a value, expected nothing");
    }
  }
}

void check_versions(const Node& n) {
  auto check = [&](const Saved& s) {
    if (!s.t.defined()) return;
    const uint32_t now = s.t.storage()->version.load();
    if (now == s.version) return;
    fail(cat("one of the variables needed for gradient computation has been modified by an inplace operation: [",
             dtype_name(s.t.dtype()), " ", shape_str(s.t.sizes()), "], saved by ", n.custom ? n.name() : std::string(n.def()->name), " at ",
             n.where.empty() ? "?" : n.where, ", is at version ", now, "; expected version ", s.version, " instead"));
  };
  for (const Saved& s : n.saved_in) check(s);
  for (const Saved& s : n.saved_out) check(s);
}

// The gradient of one input as the engine passes it on: broadcasting undone, input's dtype.
Tensor fit(const Node& n, const Input& in, Tensor g) {
  if (g.sizes() != in.meta.sizes) {
    g = sum_to(g, in.meta.sizes).tensor();
    if (g.sizes() != in.meta.sizes)
      fail(cat("internal: the derivative of ", n.name(), " gave argument ", in.slot + 1, " a gradient of shape ",
               shape_str(g.sizes()), ", expected ", shape_str(in.meta.sizes)));
  }
  if (g.dtype() != in.meta.dtype) g = to_dtype(g, in.meta.dtype).tensor();
  if (!(g.device() == in.meta.device)) g = dispatch1("to", {g, nullptr, nullptr, device_name(in.meta.device).c_str()});
  return g;
}

// A registry op's node: its derivative rule.
void rule(Node& n, std::vector<Tensor>& out_grads, std::vector<Tensor>& in_grads) {
  const OpDef& def = *n.def();
  if (!def.grad.fn) fail(cat(def.name, ": derivative not implemented"));
  Grad g(n, out_grads, in_grads);
  try {
    def.grad.fn(g);
  } catch (const HookRaised&) {
    throw;
  } catch (const Error& e) {
    throw Error(cat("backward of ", def.name, n.where.empty() ? "" : " (" + n.where + ")", ": ", e.what()));
  }
}

// Whether the node being applied frees its saved values once it returns (releases_saved).
thread_local bool t_releases = false;

std::vector<Tensor> apply(Node& n, std::vector<Tensor>& out_grads, const BackwardOptions& o) {
  struct Restore {
    bool was;
    ~Restore() { t_releases = was; }
  } restore{std::exchange(t_releases, !o.retain_graph)};
  std::vector<Tensor> in_grads = run_node(n, out_grads, o.create_graph);
  if (!o.retain_graph) n.release_saved();
  return in_grads;
}

// The pass whose node is being applied (sole_accumulation), and whether it accumulates.
thread_local const Graph* t_graph = nullptr;
thread_local bool t_accumulates = false;

struct Later {
  bool operator()(const Node* a, const Node* b) const { return a->seq < b->seq; }
};

}  // namespace

std::vector<Tensor> run_node(Node& n, std::vector<Tensor>& out_grads, bool create_graph) {
  if (n.released)
    fail("Trying to backward through the graph a second time (or directly access saved tensors after they have "
         "already been freed). Saved intermediate values of the graph are freed when you call backward() or "
         "T.autograd.grad(). Specify retain_graph = true if you need to backward through the graph a second time or "
         "if you need to access saved tensors after calling backward.");
  check_versions(n);
  std::vector<Tensor> in_grads;
  if (n.custom) {
    in_grads = n.custom->apply(n, out_grads, create_graph);
  } else {
    in_grads.resize(n.inputs.size());
    rule(n, out_grads, in_grads);
  }
  for (size_t i = 0; i < in_grads.size(); ++i)
    if (in_grads[i].defined()) in_grads[i] = fit(n, n.inputs[i], in_grads[i]);
  return in_grads;
}

bool releases_saved() { return t_releases; }

bool sole_accumulation(const Node& acc) {
  if (!t_graph || !t_accumulates || !acc.accumulates()) return false;
  const auto it = t_graph->find(const_cast<Node*>(&acc));
  if (it == t_graph->end() || it->second.deps != 1) return false;
  for (const Tensor& g : it->second.grads)
    if (g.defined()) return false;
  const AutogradMeta* m = meta_of(acc.leaf.get());
  return m && m->hooks.empty();
}

void accumulate_grad(const Tensor& t, const Tensor& g, bool create_graph) { accumulate_into(ensure_meta(t.get()), g, create_graph); }

void accumulate_into(AutogradMeta& m, const Tensor& g, bool create_graph) {
  if (!m.grad.defined()) {
    const bool ours = !create_graph && !g.get()->_autograd && g.is_contiguous() && tensor_refs(g.get()) == 1 &&
                      g.storage()->refs.load() == 1;
    m.grad = create_graph || ours ? g : dispatch1("clone", {g});
  } else if (create_graph) {
    m.grad = (Var(m.grad) + Var(g)).tensor();
  } else {
    call_op("add_", {m.grad, g});
  }
}

std::vector<Tensor> backward(Context& ctx, const std::vector<Tensor>& roots, std::vector<Tensor> grads,
                             const std::vector<Tensor>& inputs, const BackwardOptions& o) {
  ContextScope scope(ctx);
  GradModeGuard mode(o.create_graph && !inference_mode);  // (inference mode records nothing)
  AutocastOff no_autocast;  // PyTorch: backward ops run in the dtypes the forward chose
  std::vector<Edge> edges;
  for (size_t i = 0; i < roots.size(); ++i) {
    Edge e = gradient_edge(roots[i]);
    if (!e.fn) fail(cat("element ", i + 1, " of tensors does not require grad and does not have a grad_fn"));
    const Tensor& r = roots[i];
    if (!grads[i].defined()) {
      if (r.numel() != 1) fail("grad can be implicitly created only for scalar outputs");
      grads[i] = dispatch1("ones_like", {r});
    } else if (grads[i].sizes() != r.sizes()) {
      fail(cat("Mismatch in shape: grad_output[", i + 1, "] has a shape of ", shape_str(grads[i].sizes()),
               " and output[", i + 1, "] has a shape of ", shape_str(r.sizes())));
    } else if (!is_floating(grads[i].dtype()) || !(grads[i].device() == r.device())) {
      fail(cat("grad_output[", i + 1, "] expected a floating tensor on ", device_name(r.device()), ", got ",
               grads[i].describe(), " on ", device_name(grads[i].device())));
    }
    edges.push_back(e);
  }
  std::unordered_map<Key, std::vector<int>, KeyHash> targets;
  for (size_t j = 0; j < inputs.size(); ++j) {
    Edge e = gradient_edge(inputs[j]);
    if (!e.fn) fail(cat("input ", j + 1, " does not require grad"));
    targets[{e.fn.get(), e.nr}].push_back(int(j));
  }
  Graph g = collect(edges);
  if (!inputs.empty()) mark_needed(g, targets);
  for (size_t i = 0; i < edges.size(); ++i) {
    Info& info = g[edges[i].fn.get()];
    info.grads.resize(std::max<size_t>(edges[i].fn->outs.size(), 1));
    add_into(info.grads[size_t(edges[i].nr)], to_dtype(grads[i], roots[i].dtype()).tensor());
  }
  std::priority_queue<Node*, std::vector<Node*>, Later> ready;
  for (auto& [n, info] : g)
    if (info.deps == 0) ready.push(n);
  std::vector<Tensor> captured(inputs.size());
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    std::vector<Tensor> out_grads = std::move(g[n].grads);
    out_grads.resize(std::max<size_t>(n->outs.size(), 1));
    const bool needed = g[n].needed;
    for (size_t k = 0; needed && k < out_grads.size(); ++k) {  // tensor hooks, retain_grad, captures
      AutogradMeta* m = n->accumulates() ? meta_of(n->leaf.get()) : k < n->out_meta.size() ? n->out_meta[k] : nullptr;
      out_grads[k] = run_hooks(m, n, k, out_grads[k]);
      // (retain_grad: the gradient of the tensor's latest value, its grad_fn now)
      if (!n->accumulates() && m && m->retains_grad && m->grad_fn.get() == n && m->output_nr == int(k) && out_grads[k].defined())
        accumulate_into(*m, out_grads[k], o.create_graph);
      auto it = targets.find({n, int(k)});
      if (it != targets.end())
        for (int j : it->second) captured[size_t(j)] = out_grads[k];
    }
    std::vector<Tensor> in_grads;
    const bool any = std::any_of(out_grads.begin(), out_grads.end(), [](const Tensor& t) { return t.defined(); });
    if (n->accumulates()) {
      if (!o.capture && inputs.empty() && any) {
        accumulate_grad(n->leaf, out_grads[0], o.create_graph);
        run_post_hooks(n->leaf);
      }
    } else if (needed && any) {
      const Graph* outer = std::exchange(t_graph, &g);
      const bool outer_acc = std::exchange(t_accumulates, !o.capture && inputs.empty());
      struct Restore {
        const Graph* g;
        bool acc;
        ~Restore() { t_graph = g, t_accumulates = acc; }
      } restore{outer, outer_acc};
      in_grads = apply(*n, out_grads, o);
    }
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      Node* c = n->inputs[i].edge.fn.get();
      if (!c) continue;
      Info& ci = g[c];
      if (i < in_grads.size() && in_grads[i].defined()) {
        ci.grads.resize(std::max<size_t>(c->outs.size(), 1));
        add_into(ci.grads[size_t(n->inputs[i].edge.nr)], in_grads[i]);
      }
      if (--ci.deps == 0) ready.push(c);
    }
  }
  for (size_t j = 0; j < inputs.size(); ++j) {
    if (!captured[j].defined() && !o.allow_unused)
      fail("One of the differentiated Tensors appears to not have been used in the graph. Set allow_unused = true if "
           "this is the desired behavior.");
    if (!o.capture && captured[j].defined()) accumulate_grad(inputs[j], captured[j], o.create_graph);
  }
  return captured;
}

}  // namespace cr::autograd
