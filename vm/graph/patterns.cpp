// Rewrites of recorded patterns into fused registry ops (Inductor's pattern matcher, for the few
// patterns a kernel of its own beats the loops): today attention,
//   matmul(softmax(matmul(q, kt) / c [+ mask], -1), v)   (or * c, or no scale, or matmul(q * c, kt);
//                                                        the mask added, or masked_fill(scores, m, -inf))
// becomes attention(q, transpose(kt), v, scale[, false, mask]) where a fused CUDA kernel takes it
// (float16 / bfloat16 on tensor cores, float32 on the FMA pipes: vm/kernels/cuda/attention.hpp). The
// scores never reach memory.
// The rewrite keeps value ids: the first matmul's node becomes the transpose (a view, no work),
// a masked_fill's node the logical_not of its mask (attention's bool masks keep true keys), the
// second matmul's the attention; the scale, add and softmax nodes are left dead for
// eliminate_dead_code.
// And GEMM epilogues: matmul(x, w) + bias (or linear(x, w[, bias])) -> [relu | gelu tanh] ->
// [+ residual] becomes _addmm_epilogue (vm/ops/epilogue.cpp) where its kernel takes it: one
// cuBLASLt call on CUDA (a residual only without an activation: cuBLASLt adds it before), one
// pass per output tile in cache on the CPU; the last node of the chain becomes the fused op.
// An int8 weight-only product's activation joins it (_int8_weight_mm's activation argument).
#include <algorithm>
#include <cmath>

#include "vm/cuda/blaslt.hpp"
#include "vm/kernels/cuda/attention.hpp"
#include "vm/kernels/cuda/gemv.hpp"
#include "vm/graph/graph.hpp"
#include "vm/ops/attention.hpp"

namespace cr::graph {
namespace {

using Ops = OpIds;  // (vm/registry.hpp CR_NAMED_OPS)

// Uses of every value by nodes' arguments and by the outputs (a use each), and the last node with
// it among its tensor arguments: counted once per pass, then kept exact as rewrites change nodes'
// arguments (dead nodes keep theirs until eliminate_dead_code, so they still count).
class Uses {
 public:
  explicit Uses(const Graph& g) : count_(g.values.size()), user_(g.values.size(), -1) {
    for (size_t i = 0; i < g.nodes.size(); ++i) track(g.nodes[i].args, int32_t(i), +1);
    for (int32_t o : g.outputs) ++count_[size_t(o)];
  }
  int operator[](int32_t v) const { return count_[size_t(v)]; }
  int32_t user(int32_t v) const { return user_[size_t(v)]; }
  // Node `at`'s arguments become `args` (which may name values added since the count).
  void set_args(Graph& g, int32_t at, std::vector<Arg> args) {
    count_.resize(g.values.size());
    user_.resize(g.values.size(), -1);
    std::vector<Arg> old = std::move(g.nodes[size_t(at)].args);
    g.nodes[size_t(at)].args = std::move(args);
    track(old, at, -1);
    track(g.nodes[size_t(at)].args, at, +1);
    for (const Arg& a : old)
      if (a.tag == kTensor && user_[size_t(a.value)] == at && !uses_tensor(g.nodes[size_t(at)], a.value))
        user_[size_t(a.value)] = last_user(g, a.value);
  }

 private:
  void track(const std::vector<Arg>& args, int32_t at, int step) {
    for (const Arg& a : args) {
      if (a.tag == kTensor) {
        count_[size_t(a.value)] += step;
        if (step > 0) user_[size_t(a.value)] = std::max(user_[size_t(a.value)], at);
      }
      for (int32_t v : a.values) count_[size_t(v)] += step;
    }
  }
  static bool uses_tensor(const Node& n, int32_t v) {
    for (const Arg& a : n.args)
      if (a.tag == kTensor && a.value == v) return true;
    return false;
  }
  static int32_t last_user(const Graph& g, int32_t v) {
    for (size_t i = g.nodes.size(); i-- > 0;)
      if (uses_tensor(g.nodes[i], v)) return int32_t(i);
    return -1;
  }
  std::vector<int> count_;
  std::vector<int32_t> user_;
};

// The op node that defines value v, if it is an op of `op` whose only output v is and whose
// only use is the one being matched.
Node* producer(Graph& g, int32_t v, int op, const Uses& uses) {
  const int32_t i = g.values[size_t(v)].node;
  if (i < 0 || uses[v] != 1) return nullptr;
  Node& n = g.nodes[size_t(i)];
  if (n.kind != NodeKind::Op || n.op != op || n.outs.size() != 1 || n.outs[0] != v) return nullptr;
  return &n;
}

bool is_tensor(const Node& n, size_t i) { return i < n.args.size() && n.args[i].tag == kTensor; }
// (a number that varies between calls is not one the rewrite can take)
bool is_number(const Node& n, size_t i) { return i < n.args.size() && n.args[i].tag == kNumber && n.args[i].varying < 0; }
bool absent(const Node& n, size_t i) { return i >= n.args.size() || n.args[i].tag == kNone; }
const ValueMeta& meta(const Graph& g, const Arg& a) { return g.values[size_t(a.value)].meta; }

// softmax(x, -1) (its last dim, no dtype option) -> x's value, else -1.
int32_t softmax_input(const Graph& g, const Node& n) {
  if (!is_tensor(n, 0) || !is_number(n, 1) || !absent(n, 2)) return -1;
  const int rank = int(meta(g, n.args[0]).sizes.size());
  const double d = n.args[1].num;
  return d == -1 || d == rank ? n.args[0].value : -1;
}

// The graph's in-place writes between two node positions would see q / k / v at another time.
bool writes_between(const Graph& g, int32_t from, int32_t to) {
  for (int32_t i = from + 1; i < to; ++i)
    if (g.nodes[size_t(i)].inplace() || g.nodes[size_t(i)].writes()) return true;
  return false;
}

// A mask between the scale and the softmax: add(scores, m) with m of the scores' dtype, or
// masked_fill(scores, m, -inf) with m bool (true: the key is not attended).
struct MaskMatch {
  Node* node = nullptr;  // the add or masked_fill
  int32_t mask = -1;     // m's value
  bool blocks = false;   // masked_fill: m's true keys are the ones left out
};
MaskMatch mask_of(Graph& g, int32_t x, const Ops& ops, const Uses& uses) {
  MaskMatch m;
  if (Node* a = producer(g, x, ops.add, uses); a && is_tensor(*a, 0) && is_tensor(*a, 1) && absent(*a, 2)) {
    m.node = a;
  } else if (Node* f = producer(g, x, ops.masked_fill, uses);
             f && is_tensor(*f, 0) && is_tensor(*f, 1) && is_number(*f, 2) && f->args[2].num == -INFINITY) {
    m.node = f;
    m.blocks = true;
  }
  if (m.node) m.mask = m.node->args[1].value;
  return m;
}

// Whether mask value `m` can be attention's mask for scores {batch..., L, S} of dtype d: the op's
// rule (vm/ops/attention.hpp) on constant sizes, and bool exactly when it came from masked_fill
// (an added bool mask adds 0 / 1, not attention's bool meaning).
bool mask_fits(const Graph& g, int32_t m, const MaskMatch& mm, const SymShape& scores, DType d, Device dev) {
  const ValueMeta& mt = g.values[size_t(m)].meta;
  if (mt.dtype != (mm.blocks ? DType::b8 : d)) return false;
  for (const SymInt& s : mt.sizes)
    if (s.sym >= 0) return false;
  for (const SymInt& s : scores)
    if (s.sym >= 0) return false;
  return attention_mask_problem(mt.dtype, mt.device, concrete(mt.sizes), d, dev, concrete(scores)).empty();
}

// Tries the pattern ending at node `at` (the second matmul).
bool rewrite_attention(Graph& g, int32_t at, const Ops& ops, Uses& uses) {
  Node& last = g.nodes[size_t(at)];
  if (last.op != ops.matmul || !is_tensor(last, 0) || !is_tensor(last, 1) || last.outs.size() != 1) return false;
  Node* sm = producer(g, last.args[0].value, ops.softmax, uses);
  if (!sm) return false;
  const int32_t x = softmax_input(g, *sm);
  if (x < 0) return false;
  const MaskMatch mm = mask_of(g, x, ops, uses);
  double scale = 1;
  int32_t scores = mm.node ? mm.node->args[0].value : x;
  if (Node* sc = producer(g, scores, ops.mul, uses); sc && is_tensor(*sc, 0) && is_number(*sc, 1) && absent(*sc, 2)) {
    scale = sc->args[1].num;
    scores = sc->args[0].value;
  } else if (Node* dv = producer(g, scores, ops.div, uses); dv && is_tensor(*dv, 0) && is_number(*dv, 1) && absent(*dv, 2)) {
    scale = 1 / dv->args[1].num;
    scores = dv->args[0].value;
  }
  Node* first = producer(g, scores, ops.matmul, uses);
  if (!first || !is_tensor(*first, 0) || !is_tensor(*first, 1)) return false;
  int32_t q_value = first->args[0].value, read_at = g.values[size_t(scores)].node;
  if (Node* qs = producer(g, q_value, ops.mul, uses); qs && is_tensor(*qs, 0) && is_number(*qs, 1) && absent(*qs, 2)) {
    scale *= qs->args[1].num;  // (q * c) k^T: the scale applied to q first, as decoders often do
    read_at = g.values[size_t(q_value)].node;
    q_value = qs->args[0].value;
  }
  if (!std::isfinite(scale)) return false;
  const ValueMeta &q = g.values[size_t(q_value)].meta, &kt = meta(g, first->args[1]), &v = meta(g, last.args[1]);
  const size_t r = q.sizes.size();
  if (r < 2 || kt.sizes.size() != r || v.sizes.size() != r || q.dtype != kt.dtype || q.dtype != v.dtype) return false;
  if (q.device.is_cpu() || kt.device != q.device || v.device != q.device) return false;
  for (size_t d = 0; d + 2 < r; ++d)  // one batch shape (matmul would broadcast)
    if (kt.sizes[d] != q.sizes[d] || v.sizes[d] != q.sizes[d]) return false;
  const SymInt L = q.sizes[r - 2], E = q.sizes[r - 1];
  if (kt.sizes[r - 2] != E || v.sizes[r - 2] != kt.sizes[r - 1] || L.sym >= 0 || E.sym >= 0 || v.sizes[r - 1].sym >= 0)
    return false;
  if (!cuda::attention_takes(q.dtype, L.value, E.value, v.sizes[r - 1].value, scale)) return false;
  if (mm.node) {
    SymShape shape(q.sizes.begin(), q.sizes.end() - 1);
    shape.push_back(kt.sizes[r - 1]);
    if (!mask_fits(g, mm.mask, mm, shape, q.dtype, q.device)) return false;
  }
  const int32_t first_at = g.values[size_t(scores)].node;
  if (writes_between(g, read_at, at)) return false;

  // the first matmul becomes k = transpose(kt): a view of kt's storage
  ValueMeta km = kt;
  std::swap(km.sizes[r - 2], km.sizes[r - 1]);
  std::swap(km.strides[r - 2], km.strides[r - 1]);
  const int32_t kt_value = first->args[1].value;
  first->op = ops.transpose;
  uses.set_args(g, first_at, {Arg::tensor(kt_value), Arg::number(-2), Arg::number(-1)});
  const int32_t k = g.add_value(first_at, km);
  g.values[size_t(k)].views = kt_value;
  g.nodes[size_t(first_at)].outs = {k};
  g.values[size_t(scores)].node = -1;  // (as eliminate_dead_code leaves a removed node's value)
  int32_t mask = mm.mask;
  if (mm.blocks) {  // the masked_fill becomes not(m): attention keeps a bool mask's true keys
    const int32_t fill_at = g.values[size_t(mm.node->outs[0])].node;
    ValueMeta nm = g.values[size_t(mm.mask)].meta;
    nm.strides = contiguous_strides(concrete(nm.sizes));
    nm.offset = 0;
    g.values[size_t(mm.node->outs[0])].node = -1;
    mm.node->op = ops.logical_not;
    uses.set_args(g, fill_at, {Arg::tensor(mm.mask)});
    mask = g.add_value(fill_at, nm);
    g.nodes[size_t(fill_at)].outs = {mask};
  }
  Node& fused = g.nodes[size_t(at)];
  std::vector<Arg> args = {Arg::tensor(q_value), Arg::tensor(k), fused.args[1], Arg::number(scale), Arg::boolean(false)};
  if (mask >= 0) args.push_back(Arg::tensor(mask));
  uses.set_args(g, at, std::move(args));
  fused.op = ops.attention;
  return true;
}

// ---- GEMM epilogues ----------------------------------------------------------------------

bool constant_sizes(const ValueMeta& m) {
  for (const SymInt& s : m.sizes)
    if (s.sym >= 0) return false;
  return true;
}
bool dense_meta(const ValueMeta& m) { return m.strides == contiguous_strides(concrete(m.sizes)); }

// The dtypes and devices whose fused kernel is one call (the rest keep their ops).
bool epilogue_takes(const ValueMeta& m) {
  if (m.device.is_cpu()) return m.dtype == DType::f32 || m.dtype == DType::f64;
  return (m.dtype == DType::f32 || m.dtype == DType::f16 || m.dtype == DType::bf16) && cuda::blaslt_available();
}

// The node that uses v, when v's only use is one node's argument (not an output).
Node* single_user(Graph& g, int32_t v, const Uses& uses) {
  if (uses[v] != 1 || uses.user(v) < 0) return nullptr;
  Node& n = g.nodes[size_t(uses.user(v))];
  return n.kind == NodeKind::Op && n.outs.size() == 1 ? &n : nullptr;
}

// add(v, t) or add(t, v) without alpha: t's value, else -1.
int32_t other_addend(const Node& n, int32_t v, int add) {
  if (n.op != add || !is_tensor(n, 0) || !is_tensor(n, 1) || !absent(n, 2)) return -1;
  if (n.args[0].value == v && n.args[1].value != v) return n.args[1].value;
  return n.args[1].value == v && n.args[0].value != v ? n.args[0].value : -1;
}

struct Chain {
  int32_t x = -1, w = -1, bias = -1, residual = -1;
  bool transposed = false;
  const char* act = "none";
  Node* last = nullptr;
};

// The head: matmul(x {.., K} dense, w {K, N}) or linear(x, w {N, K}[, bias]), w read in place by BLAS.
bool head_of(const Graph& g, const Node& n, const Ops& ops, Chain* c) {
  if ((n.op != ops.matmul && n.op != ops.linear) || !is_tensor(n, 0) || !is_tensor(n, 1) || n.outs.size() != 1) return false;
  const ValueMeta &x = meta(g, n.args[0]), &w = meta(g, n.args[1]), &out = g.values[size_t(n.outs[0])].meta;
  if (x.sizes.size() < 2 || w.sizes.size() != 2 || !constant_sizes(x) || !constant_sizes(w) || !dense_meta(x)) return false;
  if (w.strides[0] != 1 && w.strides[1] != 1) return false;
  if (w.dtype != x.dtype || !(w.device == x.device) || !epilogue_takes(out)) return false;
  c->x = n.args[0].value;
  c->w = n.args[1].value;
  c->transposed = n.op == ops.linear;
  if (n.op == ops.linear && !absent(n, 2)) {
    if (!is_tensor(n, 2)) return false;
    c->bias = n.args[2].value;
  }
  return true;
}

// A bias for output `out`: {N}, contiguous, of its dtype and device.
bool bias_fits(const ValueMeta& b, const ValueMeta& out) {
  return b.sizes.size() == 1 && constant_sizes(b) && b.sizes[0] == out.sizes.back() && (b.strides[0] == 1 || b.sizes[0].value == 1) &&
         b.dtype == out.dtype && b.device == out.device;
}

// Whether CUDA runs a product with this output as a GEMV (cuda::gemv_takes its rows).
bool gemv_sized(const ValueMeta& out) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < out.sizes.size(); ++i) {
    if (out.sizes[i].sym >= 0) return false;
    rows *= out.sizes[i].value;
  }
  return cuda::gemv_takes(out.dtype, rows);
}

// relu(v) or gelu(v, "tanh"): the fused kernels' name of that activation, else null.
const char* activation_of(const Node& n, const Ops& ops) {
  if (n.op == ops.relu && n.args.size() == 1) return "relu";
  if (n.op == ops.gelu && n.args.size() > 1 && n.args[1].tag == kString && n.args[1].str == "tanh") return "gelu_tanh";
  return nullptr;
}

// Follows the single-use chain from head node `at` to the last node it fuses (c->last).
bool match_epilogue(Graph& g, int32_t at, const Ops& ops, const Uses& uses, Chain* c) {
  Node& head = g.nodes[size_t(at)];
  if (!head_of(g, head, ops, c)) return false;
  int32_t v = head.outs[0];
  const ValueMeta out = g.values[size_t(v)].meta;
  Node* n = single_user(g, v, uses);
  if (c->bias >= 0) {  // linear's own bias: the linear alone is worth one call
    if (!bias_fits(g.values[size_t(c->bias)].meta, out)) return false;
    c->last = &head;
  } else {  // matmul (or linear without one), then the add of a bias
    const int32_t b = n ? other_addend(*n, v, ops.add) : -1;
    if (b < 0 || !bias_fits(g.values[size_t(b)].meta, out) || g.values[size_t(n->outs[0])].meta.sizes != out.sizes)
      return false;
    c->bias = b;
    c->last = n;
    v = n->outs[0];
    n = single_user(g, v, uses);
  }
  if (const char* act = n ? activation_of(*n, ops) : nullptr) {
    c->act = act;
    c->last = n;
    v = n->outs[0];
    n = single_user(g, v, uses);
  }
  // (cuBLASLt adds it before its activation; the GEMV's add of it lengthened the decode step,
  // whose next kernel, a layer norm, reads both addends anyway)
  const bool residual_ok = out.device.is_cpu() || (std::string(c->act) == "none" && !gemv_sized(out));
  if (n && residual_ok) {
    const int32_t r = other_addend(*n, v, ops.add);
    const ValueMeta* rm = r >= 0 ? &g.values[size_t(r)].meta : nullptr;
    if (rm && rm->sizes == out.sizes && rm->dtype == out.dtype && rm->device == out.device && dense_meta(*rm) &&
        g.values[size_t(n->outs[0])].meta.sizes == out.sizes) {
      c->residual = r;
      c->last = n;
    }
  }
  return true;
}

bool rewrite_epilogue(Graph& g, int32_t at, const Ops& ops, Uses& uses) {
  Chain c;
  if (!match_epilogue(g, at, ops, uses, &c)) return false;
  const int32_t last_at = int32_t(c.last - g.nodes.data());
  if (writes_between(g, at, last_at)) return false;
  auto opt = [](int32_t v) { return v >= 0 ? Arg::tensor(v) : Arg{}; };
  Arg act;
  act.tag = kString;
  act.str = c.act;
  c.last->op = ops._addmm_epilogue;
  uses.set_args(g, last_at, {Arg::tensor(c.x), Arg::tensor(c.w), opt(c.bias), opt(c.residual), act, Arg::boolean(c.transposed)});
  return true;  // (the head and the nodes between are left dead)
}

// _int8_weight_mm(x, q, s[, bias]) -> relu | gelu tanh becomes the product with that activation,
// which its GEMV's epilogue applies (int8 decoding: one kernel fewer a layer); the activation's
// node becomes the product, the head is left dead.
bool rewrite_int8_activation(Graph& g, int32_t at, const Ops& ops, Uses& uses) {
  const Node& head = g.nodes[size_t(at)];
  if (head.outs.size() != 1 || !absent(head, 4)) return false;
  const int32_t v = head.outs[0];
  Node* n = single_user(g, v, uses);
  const char* act = n ? activation_of(*n, ops) : nullptr;
  const ValueMeta &out = g.values[size_t(v)].meta, *got = n ? &g.values[size_t(n->outs[0])].meta : nullptr;
  if (!act || got->sizes != out.sizes || got->dtype != out.dtype || !dense_meta(*got)) return false;
  const int32_t last_at = int32_t(n - g.nodes.data());
  if (writes_between(g, at, last_at)) return false;
  std::vector<Arg> args(head.args.begin(), head.args.begin() + std::min<size_t>(4, head.args.size()));
  args.resize(4);
  Arg a;
  a.tag = kString;
  a.str = act;
  args.push_back(a);
  n->op = ops._int8_weight_mm;
  uses.set_args(g, last_at, std::move(args));
  return true;
}

// ---- a static KV cache's write and the attention that reads it -----------------------------

// Whether node n reads or writes storage `root` (a view node only makes metadata: it does not).
bool touches(const Graph& g, const Node& n, int32_t root) {
  if (n.kind != NodeKind::Op || is_view_node(g, n)) return false;
  for (const Arg& a : n.args) {
    if (a.tag == kTensor && storage_root(g, a.value) == root) return true;
    for (int32_t v : a.values)
      if (storage_root(g, v) == root) return true;
  }
  return false;
}

// index_put_(c, {pos}, new) ... attention(q, k, v, ...) of one query row, k and v views of c's
// storage, and no node between that touches it: _attention_cache at the attention's place (the
// write moves to it; CUDA runs both as one kernel where it can). The index_put_'s node dies and
// its result, c itself, is c's value to the nodes and outputs that used it.
bool rewrite_attention_cache(Graph& g, int32_t at, const Ops& ops, Uses& uses) {
  const Node& a = g.nodes[size_t(at)];
  if (a.op != ops.attention || a.outs.size() != 1 || !is_tensor(a, 0) || !is_tensor(a, 1) || !is_tensor(a, 2))
    return false;
  const int32_t root = storage_root(g, a.args[1].value);
  const ValueMeta& q = meta(g, a.args[0]);
  if (storage_root(g, a.args[2].value) != root || storage_root(g, a.args[0].value) == root || q.device.is_cpu())
    return false;
  if (q.sizes.size() < 2 || !(q.sizes[q.sizes.size() - 2] == SymInt{1})) return false;
  if (is_tensor(a, 5) && storage_root(g, a.args[5].value) == root) return false;
  int32_t p_at = at - 1;
  while (p_at >= 0 && !touches(g, g.nodes[size_t(p_at)], root)) --p_at;
  if (p_at < 0) return false;
  Node& p = g.nodes[size_t(p_at)];
  if (p.op != ops.index_put_ || !is_tensor(p, 0) || p.args[1].tag != kTensors || p.args[1].values.size() != 1 ||
      !is_tensor(p, 2) || p.outs.size() != 1 || storage_root(g, p.args[0].value) != root)
    return false;
  const bool adds = !absent(p, 3) && !(p.args[3].is_number() && p.args[3].num == 0 && p.args[3].varying < 0);
  if (adds) return false;  // (accumulate = true: the kernel only writes)
  const int32_t index = p.args[1].values[0], self = p.args[0].value, result = p.outs[0];
  const ValueMeta &im = g.values[size_t(index)].meta, &vm = meta(g, p.args[2]);
  if (im.dtype != DType::i64 || im.sizes.size() != 1 || !(im.sizes[0] == SymInt{1}) || !(im.device == q.device))
    return false;
  if (vm.dtype != q.dtype || storage_root(g, index) == root || storage_root(g, p.args[2].value) == root) return false;
  std::vector<Arg> args = {p.args[0], p.args[1], p.args[2]};
  args.insert(args.end(), a.args.begin(), a.args.end());
  Node& fused = g.nodes[size_t(at)];
  fused.args = std::move(args);
  fused.op = ops._attention_cache;
  fused.where = p.where;  // (the errors it may raise on values are the write's)
  p.args.clear();
  p.op = ops.clone;  // (no arguments, no outputs: eliminate_dead_code drops it)
  p.outs.clear();
  g.values[size_t(result)].node = -1;
  // the index_put_'s result is `self` (the op returns it): later nodes, outputs and views take it
  substitute(g, result, self, false);
  uses = Uses(g);  // (recounted: the substitution reaches every node)
  return true;
}

}  // namespace

int fuse_patterns(Graph& g) {
  const Ops& ops = Registry::get().ids();
  // A dynamic graph's code serves every instance of its sizes; the rewrite checks one instance's
  // (the head size, the batch shapes), so those graphs keep their ops.
  if (g.dynamic) return 0;
  int changed = 0;
  Uses uses(g);  // (each rewrite keeps it exact)
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind == NodeKind::Op && n.op == ops.matmul && rewrite_attention(g, int32_t(i), ops, uses)) ++changed;
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.kind != NodeKind::Op || (n.op != ops.matmul && n.op != ops.linear)) continue;
    if (rewrite_epilogue(g, int32_t(i), ops, uses)) ++changed;
  }
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].kind == NodeKind::Op && g.nodes[i].op == ops._int8_weight_mm &&
        rewrite_int8_activation(g, int32_t(i), ops, uses))
      ++changed;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].kind == NodeKind::Op && rewrite_attention_cache(g, int32_t(i), ops, uses)) ++changed;
  return changed;
}

}  // namespace cr::graph
