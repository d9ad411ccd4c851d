#include "vm/cuda/cudnn_sdpa.hpp"

#include <array>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "vm/cuda/cudnn_backend.hpp"
#include "vm/cuda/driver.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/deterministic.hpp"
#include "vm/error.hpp"
#include "vm/log.hpp"

namespace cr::cuda {
namespace {
using namespace cudnn_api;
using namespace cudnn_backend;

// Tensor ids: the operands, then the by-value scalars, then the graph's virtual tensors.
enum : int64_t {
  kQ = 1, kK, kV, kO, kStats, kDout, kDq, kDk, kDv, kSoftmaxSum, kDqAccum, kScale, kNegInf, kOne, kFirstVirtual = 100
};
enum class Pass { forward, backward };

// A graph being built: its descriptors (kept while cuDNN holds their handles) and operations.
// Virtual tensors are float32 unless told (cuDNN's frontend: intermediates and compute in float).
struct Builder {
  std::deque<Desc> parts;
  std::vector<BackendDesc> ops;
  std::vector<int64_t> scalars;  // the by-value ones the graph reads
  int64_t next = kFirstVirtual;
  int64_t b, h, sq, skv;

  const Desc& keep(Desc&& d) { return parts.emplace_back(std::move(d)); }
  const Desc& real(int64_t uid, int dtype, std::vector<int64_t> dims, const int64_t (&st)[4], int64_t align) {
    return keep(tensor({uid, dtype, std::move(dims), {st, st + 4}, align}));
  }
  const Desc& scalar(int64_t uid) {
    scalars.push_back(uid);
    return keep(tensor({uid, kFloat, {1, 1, 1, 1}, {1, 1, 1, 1}, 4, false, true}));
  }
  // {b, h, sq, skv} scores or {b, h, sq, 1} row values, dense
  const Desc& scores(int dtype = kFloat) {
    return keep(tensor({next++, dtype, {b, h, sq, skv}, {h * sq * skv, sq * skv, skv, 1}, 16, true}));
  }
  const Desc& rows(int dtype = kFloat) {
    return keep(tensor({next++, dtype, {b, h, sq, 1}, {h * sq, sq, 1, 1}, 16, true}));
  }
  const Desc& op(Desc&& d) {
    d.finalize_or_fail("operation");
    const Desc& o = keep(std::move(d));
    ops.push_back(o.get());
    return o;
  }

  // a finalized descriptor kept with the graph
  const Desc& kept(Desc&& d, const char* what) {
    d.finalize_or_fail(what);
    return keep(std::move(d));
  }
  // an operation of `type` whose attributes name the descriptors given; returns `out`
  const Desc& operation(Desc&& o, std::initializer_list<std::pair<int, const Desc*>> descs, const Desc& out) {
    for (const auto& [attr, d] : descs)
      if (d) o.set_desc(attr, *d);
    op(std::move(o));
    return out;
  }

  // y = mode(x[, b[, t]]) in `prec`; axis for GEN_INDEX
  const Desc& pw(int mode, const Desc& x, const Desc* bb, const Desc* t, const Desc& y, int prec = kFloat,
                 int64_t axis = -1) {
    Desc d(kPointwiseDesc);
    d.set(kAttrPointwiseMode, kTypePointwiseMode, 1, &mode);
    d.set(kAttrPointwiseMathPrec, kTypeDataType, 1, &prec);
    if (axis >= 0) d.set_i64(kAttrPointwiseAxis, {axis});
    Desc o(kPointwiseOpDesc);
    const float one = 1;
    o.set(kAttrPointwiseOpAlpha1, kTypeFloat, 1, &one);
    o.set(kAttrPointwiseOpAlpha2, kTypeFloat, 1, &one);
    return operation(std::move(o),
                     {{kAttrPointwiseOpDesc, &kept(std::move(d), "pointwise")}, {kAttrPointwiseOpX, &x},
                      {kAttrPointwiseOpB, bb}, {kAttrPointwiseOpT, t}, {kAttrPointwiseOpY, &y}},
                     y);
  }
  const Desc& matmul(const Desc& a, const Desc& bm, const Desc& c) {
    Desc d(kMatmulDesc);
    const int comp = kFloat;
    d.set(kAttrMatmulCompType, kTypeDataType, 1, &comp);
    return operation(Desc(kMatmulOpDesc),
                     {{kAttrMatmulOpA, &a}, {kAttrMatmulOpB, &bm}, {kAttrMatmulOpC, &c},
                      {kAttrMatmulOpDesc, &kept(std::move(d), "matmul")}},
                     c);
  }
  const Desc& reduce(int mode, const Desc& x, const Desc& y) {
    Desc d(kReductionDesc);
    const int comp = kFloat;
    d.set(kAttrReductionOperator, kTypeReductionOperator, 1, &mode);
    d.set(kAttrReductionCompType, kTypeDataType, 1, &comp);
    if (cudnn_version() >= 91100) {  // (as the frontend: the attribute is 9.11's)
      const bool no = false;
      d.set(kAttrReductionIsDeterministic, kTypeBoolean, 1, &no);
    }
    return operation(Desc(kReductionOpDesc),
                     {{kAttrReductionOpX, &x}, {kAttrReductionOpY, &y},
                      {kAttrReductionOpDesc, &kept(std::move(d), "reduction")}},
                     y);
  }
  // y = x read with y's dims and strides (a transposed view), in y's dtype
  const Desc& reshape(const Desc& x, const Desc& y) {
    return operation(Desc(kReshapeOpDesc), {{kAttrReshapeOpX, &x}, {kAttrReshapeOpY, &y}}, y);
  }
  // {b, h, skv, sq}: the scores transposed, in dtype
  const Desc& scores_t(int dtype) {
    return keep(tensor({next++, dtype, {b, h, skv, sq}, {h * sq * skv, sq * skv, 1, skv}, 16, true}));
  }
  // query i keeps keys 0..i, the others' scores become -inf (the frontend's top-left causal mask)
  const Desc& causal(const Desc& s, const Desc& neg_inf) {
    const Desc& row = pw(kPwGenIndex, s, nullptr, nullptr, scores(kInt32), kFloat, 2);
    const Desc& col = pw(kPwGenIndex, s, nullptr, nullptr, scores(kInt32), kFloat, 3);
    const Desc& keep_it = pw(kPwCmpGe, row, &col, nullptr, scores(kBoolean), kBoolean);
    return pw(kPwBinarySelect, s, &neg_inf, &keep_it, scores());
  }
  Desc& graph(Handle handle) {
    Desc g(kOperationGraphDesc);
    g.set(kAttrGraphOps, kTypeBackendDesc, int64_t(ops.size()), ops.data());
    if (handle) g.set(kAttrGraphHandle, kTypeHandle, 1, &handle);
    g.finalize_or_fail("operation graph");
    return parts.emplace_back(std::move(g));
  }
};

// k {b, h, s, d} as the matmuls read it: {b, h, d, s}
void transposed(const int64_t (&st)[4], int64_t (&out)[4]) {
  out[0] = st[0], out[1] = st[1], out[2] = st[3], out[3] = st[2];
}

// softmax(scale q k^T [causal]) v into out, and the rows' logsumexp into stats when wanted
void forward_graph(Builder& g, const SdpaCall& c, int io, const int64_t (&align)[9]) {
  int64_t kt[4];
  transposed(c.k.stride, kt);
  const Desc& q = g.real(kQ, io, {c.b, c.h, c.s_q, c.d}, c.q.stride, align[0]);
  const Desc& k = g.real(kK, io, {c.b, c.h, c.d, c.s_kv}, kt, align[1]);
  const Desc& v = g.real(kV, io, {c.b, c.h, c.s_kv, c.d}, c.v.stride, align[2]);
  const Desc& o = g.real(kO, io, {c.b, c.h, c.s_q, c.d}, c.out.stride, align[3]);
  const Desc& scale = g.scalar(kScale);
  const Desc* s = &g.pw(kPwMul, g.matmul(q, k, g.scores()), &scale, nullptr, g.scores());
  if (c.causal) s = &g.causal(*s, g.scalar(kNegInf));
  const Desc& max = g.reduce(kReduceMax, *s, g.rows());
  const Desc& e = g.pw(kPwExp, g.pw(kPwSub, *s, &max, nullptr, g.scores()), nullptr, nullptr, g.scores());
  const Desc& sum = g.reduce(kReduceAdd, e, g.rows());
  // (without stats the frontend still emits their two operations, into a tensor nothing reads)
  const int64_t st[4] = {c.h * c.s_q, c.s_q, 1, 1};
  const Desc& stats = c.stats ? g.real(kStats, kFloat, {c.b, c.h, c.s_q, 1}, st, 16) : g.rows();
  g.pw(kPwAdd, max, &g.pw(kPwLog, sum, nullptr, nullptr, g.rows()), nullptr, stats);
  g.matmul(g.pw(kPwDiv, e, &sum, nullptr, g.scores(io)), v, o);
}

// The gradients of softmax(scale q k^T [causal]) v from out, dout and stats (p recomputed from
// them), as cuDNN's frontend builds them: dq summed in float32 (dq_accum, then cast), and
// rowsum(dout * out) in softmax_sum, both non-virtual tensors in the workspace we give.
void backward_graph(Builder& g, const SdpaCall& c, int io, const int64_t (&align)[9]) {
  int64_t kt[4], vt[4];
  transposed(c.k.stride, kt);
  transposed(c.v.stride, vt);
  const int64_t b = c.b, h = c.h, sq = c.s_q, skv = c.s_kv, d = c.d;
  const Desc& q = g.real(kQ, io, {b, h, sq, d}, c.q.stride, align[0]);
  const Desc& k = g.real(kK, io, {b, h, d, skv}, kt, align[1]);
  const Desc& v = g.real(kV, io, {b, h, d, skv}, vt, align[2]);
  const Desc& o = g.real(kO, io, {b, h, sq, d}, c.out.stride, align[3]);
  const Desc& dout = g.real(kDout, io, {b, h, sq, d}, c.dout.stride, align[4]);
  const Desc& dq = g.real(kDq, io, {b, h, sq, d}, c.dq.stride, align[5]);
  const Desc& dk = g.real(kDk, io, {b, h, skv, d}, c.dk.stride, align[6]);
  const Desc& dv = g.real(kDv, io, {b, h, skv, d}, c.dv.stride, align[7]);
  const int64_t row_st[4] = {h * sq, sq, 1, 1}, dense[4] = {h * sq * d, sq * d, d, 1};
  const Desc& stats = g.real(kStats, kFloat, {b, h, sq, 1}, row_st, 16);
  const Desc& softmax_sum = g.real(kSoftmaxSum, kFloat, {b, h, sq, 1}, row_st, 16);
  const Desc& dq_accum = g.real(kDqAccum, kFloat, {b, h, sq, d}, dense, 16);
  const Desc &scale = g.scalar(kScale), &one = g.scalar(kOne);
  const Desc& prod = g.keep(tensor({g.next++, kFloat, {b, h, sq, d}, {dense, dense + 4}, 16, true}));
  g.pw(kPwMul, g.reduce(kReduceAdd, g.pw(kPwMul, dout, &o, nullptr, prod), g.rows()), &one, nullptr, softmax_sum);
  const Desc* s = &g.pw(kPwSub, g.pw(kPwMul, g.matmul(q, k, g.scores()), &scale, nullptr, g.scores()), &stats,
                        nullptr, g.scores());
  if (c.causal) s = &g.causal(*s, g.scalar(kNegInf));
  const Desc& p = g.pw(kPwExp, *s, nullptr, nullptr, g.scores());
  g.matmul(g.reshape(p, g.scores_t(io)), dout, dv);
  const Desc& dp = g.matmul(dout, v, g.scores());
  const Desc& ds = g.pw(kPwMul, g.pw(kPwMul, g.pw(kPwSub, dp, &softmax_sum, nullptr, g.scores()), &p, nullptr,
                                     g.scores()), &scale, nullptr, g.scores());
  g.matmul(g.reshape(ds, g.scores_t(io)), q, dk);
  const Desc& k_rows = g.keep(tensor({g.next++, kFloat, {b, h, skv, d}, {c.k.stride, c.k.stride + 4}, 16, true}));
  g.matmul(ds, g.reshape(k, k_rows), dq_accum);
  g.pw(kPwIdentity, dq_accum, nullptr, nullptr, dq);
}

// A key's graph, the plan it runs and the host values its by-value scalars point at.
struct SdpaPlan {
  Builder graph;
  std::optional<Candidate> run;
  float scale = 1, neg_inf = -std::numeric_limits<float>::infinity(), one = 1;
};

// The call's operands in kOperandUids' order: the forward's first four, the backward's eight.
constexpr int64_t kOperandUids[] = {kQ, kK, kV, kO, kDout, kDq, kDk, kDv};
std::array<SdpaOperand, 8> operands(Pass pass, const SdpaCall& c, int* n) {
  *n = pass == Pass::forward ? 4 : 8;
  return {c.q, c.k, c.v, c.out, c.dout, c.dq, c.dk, c.dv};
}

// The call's graph with its tensors and operations finalized (a handle is optional from cuDNN
// 9.8: tests build graphs without a device).
std::unique_ptr<SdpaPlan> plan_graph(Pass pass, const SdpaCall& c, Handle h) {
  int64_t align[9] = {};
  int n = 0;
  const std::array<SdpaOperand, 8> ops = operands(pass, c, &n);
  for (int i = 0; i < n; ++i) align[i] = alignment(ops[i].p);
  auto p = std::make_unique<SdpaPlan>();
  p->graph.b = c.b, p->graph.h = c.h, p->graph.sq = c.s_q, p->graph.skv = c.s_kv;
  const int io = cudnn_detail::data_type(c.dtype);
  if (pass == Pass::forward) forward_graph(p->graph, c, io, align);
  else backward_graph(p->graph, c, io, align);
  p->graph.graph(h);
  return p;
}

// The backward's float32 dq sums and rowsum(dout * out), which the graph leaves to us to give:
// one block from the caching allocator, stream-ordered.
struct Scratch {
  int index = 0;
  size_t accum = 0, bytes = 0;
  char* p = nullptr;
  Scratch(Pass pass, const SdpaCall& c, int i) : index(i) {
    if (pass != Pass::backward) return;
    accum = size_t((c.b * c.h * c.s_q * c.d * 4 + 255) / 256 * 256);
    bytes = accum + size_t(c.b * c.h * c.s_q * 4);
    p = static_cast<char*>(device_alloc(bytes, index));
  }
  ~Scratch() {
    if (p) device_free(p, bytes, index);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

constexpr int kBenchmarkLimit = 10;  // engine configs benchmark mode times (as the convolutions')

bool execute_sdpa(int index, Pass pass, const SdpaCall& c, std::string* chosen) {
  if (chosen) chosen->clear();
  // (cuDNN's backward sums dq by atomics: under T.use_deterministic_algorithms crescent's two passes run)
  if (pass == Pass::backward && deterministic()) return false;
  int n = 0;
  const std::array<SdpaOperand, 8> ops = operands(pass, c, &n);
  const bool timing = cudnn_flag(CudnnFlag::benchmark) && !capturing(index);
  std::vector<int64_t> key = {index, int(pass), int(c.dtype), c.b, c.h, c.s_q, c.s_kv, c.d, c.causal,
                              c.stats != nullptr, timing};
  std::vector<int64_t> ids;
  std::vector<void*> ptrs;
  for (int i = 0; i < n; ++i) {
    key.insert(key.end(), ops[i].stride, ops[i].stride + 4);
    key.push_back(alignment(ops[i].p));
    ids.push_back(kOperandUids[i]), ptrs.push_back(ops[i].p);
  }
  if (c.stats) ids.push_back(kStats), ptrs.push_back(c.stats);
  // the by-value scalars point at host values the plan keeps (cuDNN reads them at each execution)
  auto bind = [&](SdpaPlan& p) {
    p.scale = float(c.scale);
    for (int64_t uid : p.graph.scalars)
      ids.push_back(uid), ptrs.push_back(uid == kScale ? &p.scale : uid == kNegInf ? &p.neg_inf : &p.one);
  };

  Handle h = cudnn_detail::handle(index);
  PlanSlot<SdpaPlan>& slot = slot_for<SdpaPlan>(key);
  std::lock_guard<std::mutex> g(slot.m);
  std::lock_guard<std::mutex> on_handle(handle_mutex(h));  // (always after the plan's: no cycle)
  if (slot.built && !slot.plan) return false;  // (refused before: nothing to allocate)
  const Scratch scratch(pass, c, index);
  if (scratch.p) {
    ids.insert(ids.end(), {kDqAccum, kSoftmaxSum});
    ptrs.insert(ptrs.end(), {scratch.p, scratch.p + scratch.accum});
  }
  if (slot.built) {
    bind(*slot.plan);
    run(h, index, *slot.plan->run, ids, ptrs);
    return true;
  }
  slot.built = true;
  const char* name = pass == Pass::forward ? "attention forward" : "attention backward";
  std::unique_ptr<SdpaPlan> p;
  std::string times;
  float best = -1;
  try {
    p = plan_graph(pass, c, h);
    bind(*p);
    int timed = 0;
    candidates(h, index, p->graph.parts.back(), [](const EngineInfo& e) { return !e.down_convert; },
               [&](Candidate&& cand) {
                 const float ms = timing ? time_candidate(h, index, cand, ids, ptrs) : 0;
                 if (timing && ms >= 0)
                   times += cat(timed++ ? ", " : " (timed: ", cand.engine.index, " ", ms * 1000, " us");
                 if (ms >= 0 && (!p->run || ms < best)) {
                   p->run.reset();
                   p->run.emplace(std::move(cand));
                   best = ms;
                 }
                 return p->run && (!timing || timed >= kBenchmarkLimit);
               });
  } catch (const Error& e) {  // (cuDNN has no such graph: our kernels run)
    if (chosen) *chosen = cat(name, ": cuDNN refuses the graph (", e.what(), "), crescent's kernels run");
    return false;
  }
  if (!p->run) {
    if (chosen) *chosen = cat(name, ": no cuDNN engine config finalizes, crescent's kernels run");
    return false;
  }
  try {
    run(h, index, *p->run, ids, ptrs);
  } catch (const Error& e) {  // (as the convolutions': a plan cuDNN refuses to run leaves the call to ours)
    if (chosen) *chosen = cat(name, ": cuDNN's plan does not run (", e.what(), "), crescent's kernels run");
    return false;
  }
  if (chosen)
    *chosen = cat(name, ": ", cudnn_version_name(), " engine ", p->run->engine.index, ", heuristics ",
                  mode_name(p->run->mode), ", workspace ", p->run->workspace, " B", times.empty() ? "" : times + ")");
  slot.plan = std::move(p);
  return true;
}

bool execute_logged(int index, Pass pass, const SdpaCall& c, bool log) {
  std::string chosen;
  const bool ran = execute_sdpa(index, pass, c, log ? &chosen : nullptr);
  if (!chosen.empty())
    log_line("perf", cat("attention ", dtype_name(c.dtype), " {", c.b, ",", c.h, ",", c.s_q, ",", c.d, "} keys ",
                         c.s_kv, c.causal ? " causal" : "", ": ", chosen));
  return ran;
}

}  // namespace

bool cudnn_sdpa_takes(int index, DType d, int64_t e, int64_t ev) {
  if (!(d == DType::f16 || d == DType::bf16) || e != ev || e % 8 != 0 || e > 128 || e <= 0) return false;
  return cudnn_flag(CudnnFlag::sdp) && cudnn_flag(CudnnFlag::enabled) && cudnn_sdpa_available(index);
}

bool cudnn_sdpa_available(int index) {
  // asked by every attention call: once per device (9.15: PyTorch's threshold, below it cuDNN's
  // attention had known wrong results)
  static std::vector<char> on;
  static std::once_flag once;
  std::call_once(once, [] {
    const bool library = cudnn_available() && cudnn_version() >= 91500;
    for (int i = 0; i < device_count(); ++i) on.push_back(library && device_info(i).sm_major >= 9);
  });
  return index >= 0 && size_t(index) < on.size() && on[size_t(index)];
}

void cudnn_sdpa_check_graph(const SdpaCall& c, bool backward) {
  if (cudnn_version() == 0) fail("cuDNN's attention graphs need cuDNN, which does not load");
  plan_graph(backward ? Pass::backward : Pass::forward, c, nullptr);
}

bool cudnn_sdpa_forward(int index, const SdpaCall& c, bool log) { return execute_logged(index, Pass::forward, c, log); }
bool cudnn_sdpa_backward(int index, const SdpaCall& c, bool log) {
  return execute_logged(index, Pass::backward, c, log);
}

}  // namespace cr::cuda
