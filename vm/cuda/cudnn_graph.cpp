#include "vm/cuda/cudnn_graph.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "vm/cuda/cudnn_internal.hpp"
#include "vm/cuda/driver.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/deterministic.hpp"
#include "vm/error.hpp"

namespace cr::cuda {
namespace {
using namespace cudnn_api;
using cudnn_detail::api;

constexpr int64_t kWorkspaceCap = int64_t(1) << 30;  // engine configs asking more are skipped, as PyTorch's
constexpr int64_t kUidX = 'x', kUidW = 'w', kUidY = 'y';
constexpr int kBenchmarkLimit = 10;  // engine configs benchmark mode times, as PyTorch's benchmark_limit

// One backend descriptor, owned (cuDNN keeps raw handles to those a descriptor was given: owners
// keep them as long as that one).
class Desc {
 public:
  explicit Desc(int type) { cudnn_detail::check(api().BackendCreateDescriptor(type, &d_), "BackendCreateDescriptor"); }
  ~Desc() {
    if (d_) api().BackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc& operator=(Desc&&) = delete;
  BackendDesc get() const { return d_; }

  void set(int attr, int type, int64_t n, const void* v) {
    const Status s = api().BackendSetAttribute(d_, attr, type, n, v);
    if (s != kSuccess) cudnn_detail::check(s, cat("BackendSetAttribute (attribute ", attr, ")").c_str());
  }
  void set_i64(int attr, std::initializer_list<int64_t> v) { set(attr, kTypeInt64, int64_t(v.size()), v.begin()); }
  void set_desc(int attr, const Desc& d) { set(attr, kTypeBackendDesc, 1, &d.d_); }
  bool finalize() { return api().BackendFinalize(d_) == kSuccess; }
  void finalize_or_fail(const char* what) {
    cudnn_detail::check(api().BackendFinalize(d_), cat("BackendFinalize (", what, ")").c_str());
  }
  // One element of `attr` into *out; false when cuDNN refuses.
  bool read(int attr, int type, void* out) const {
    int64_t got = 0;
    return api().BackendGetAttribute(d_, attr, type, 1, &got, out) == kSuccess && got == 1;
  }

 private:
  BackendDesc d_ = nullptr;
};

Desc tensor(int64_t uid, int dtype, const int64_t (&dims)[4], const int64_t (&strides)[4], int64_t align) {
  Desc t(kTensorDesc);
  t.set(kAttrTensorDataType, kTypeDataType, 1, &dtype);
  t.set(kAttrTensorDimensions, kTypeInt64, 4, dims);
  t.set(kAttrTensorStrides, kTypeInt64, 4, strides);
  t.set_i64(kAttrTensorUniqueId, {uid});
  t.set_i64(kAttrTensorByteAlignment, {align});
  t.finalize_or_fail("tensor");
  return t;
}

// Cross-correlation in float32 (float64 for float64: half / bfloat16 accumulate in float32, as
// PyTorch's); groups come from the tensors' dims (w's channels c / groups).
Desc convolution(const ConvShape& s) {
  Desc c(kConvolutionDesc);
  const int comp = s.dtype == DType::f64 ? kDouble : kFloat, mode = kCrossCorrelation;
  c.set(kAttrConvCompType, kTypeDataType, 1, &comp);
  c.set(kAttrConvMode, kTypeConvMode, 1, &mode);
  c.set_i64(kAttrConvSpatialDims, {2});
  c.set_i64(kAttrConvDilations, {s.dil_h, s.dil_w});
  c.set_i64(kAttrConvFilterStrides, {s.stride_h, s.stride_w});
  c.set_i64(kAttrConvPrePaddings, {s.pad_h, s.pad_w});
  c.set_i64(kAttrConvPostPaddings, {s.pad_h, s.pad_w});
  c.finalize_or_fail("convolution");
  return c;
}

// The operation descriptor of each ConvPass and the attributes naming its operands.
struct OpAttrs {
  int type, alpha, beta, conv, x, w, y;
};
constexpr OpAttrs kOps[] = {
    {kConvForwardOpDesc, kAttrConvFwdAlpha, kAttrConvFwdBeta, kAttrConvFwdConvDesc, kAttrConvFwdX, kAttrConvFwdW,
     kAttrConvFwdY},
    {kConvBwdDataOpDesc, kAttrConvBwdDataAlpha, kAttrConvBwdDataBeta, kAttrConvBwdDataConvDesc, kAttrConvBwdDataDx,
     kAttrConvBwdDataW, kAttrConvBwdDataDy},
    {kConvBwdFilterOpDesc, kAttrConvBwdFilterAlpha, kAttrConvBwdFilterBeta, kAttrConvBwdFilterConvDesc,
     kAttrConvBwdFilterX, kAttrConvBwdFilterDw, kAttrConvBwdFilterDy},
};

Desc operation(ConvPass pass, DType d, const Desc& x, const Desc& w, const Desc& y, const Desc& conv) {
  const OpAttrs& a = kOps[int(pass)];
  Desc op(a.type);
  op.set_desc(a.x, x);
  op.set_desc(a.w, w);
  op.set_desc(a.y, y);
  op.set_desc(a.conv, conv);
  const double one_d = 1, zero_d = 0;
  const float one = 1, zero = 0;
  if (d == DType::f64) {
    op.set(a.alpha, kTypeDouble, 1, &one_d);
    op.set(a.beta, kTypeDouble, 1, &zero_d);
  } else {
    op.set(a.alpha, kTypeFloat, 1, &one);
    op.set(a.beta, kTypeFloat, 1, &zero);
  }
  op.finalize_or_fail("convolution operation");
  return op;
}

// The engine configs heuristics `mode` ranks for `graph`, best first (none when it refuses).
std::vector<Desc> engine_configs(const Desc& graph, int mode) {
  Desc heur(kEngineHeurDesc);
  heur.set_desc(kAttrHeurOperationGraph, graph);
  heur.set(kAttrHeurMode, kTypeHeurMode, 1, &mode);
  if (!heur.finalize()) return {};
  int64_t n = 0, got = 0;
  if (api().BackendGetAttribute(heur.get(), kAttrHeurResults, kTypeBackendDesc, 0, &n, nullptr) != kSuccess) return {};
  std::vector<Desc> cfgs;
  std::vector<BackendDesc> raw;
  for (int64_t i = 0; i < n; ++i) raw.push_back(cfgs.emplace_back(kEngineCfgDesc).get());
  if (n && api().BackendGetAttribute(heur.get(), kAttrHeurResults, kTypeBackendDesc, n, &got, raw.data()) != kSuccess)
    return {};
  while (int64_t(cfgs.size()) > std::min(got, n)) cfgs.pop_back();
  return cfgs;
}

// An engine config's engine: its global index (for the logs) and whether its numerical notes
// say tensor cores (TF32 for float32), inputs rounded down or a result that varies from run to
// run; known is false when unreadable.
struct EngineInfo {
  int64_t index = -1;
  bool known = false, tensor_core = false, down_convert = false, nondeterministic = false;
};
EngineInfo engine_info(const Desc& cfg) {
  EngineInfo e;
  Desc engine(kEngineDesc);
  BackendDesc raw = engine.get();
  if (!cfg.read(kAttrEngineCfgEngine, kTypeBackendDesc, &raw)) return e;
  engine.read(kAttrEngineGlobalIndex, kTypeInt64, &e.index);
  int notes[32] = {};
  int64_t n = 0;
  if (api().BackendGetAttribute(engine.get(), kAttrEngineNumericalNote, kTypeNumericalNote, 32, &n, notes) != kSuccess)
    return e;
  e.known = true;
  for (int64_t i = 0; i < n && i < 32; ++i) {
    e.tensor_core |= notes[i] == kNoteTensorCore;
    e.down_convert |= notes[i] == kNoteDownConvertInputs;
    e.nondeterministic |= notes[i] == kNoteNondeterministic;
  }
  return e;
}

bool can_allocate(int64_t bytes, int index) {
  if (bytes == 0) return true;
  try {
    device_free(device_alloc(size_t(bytes), index), size_t(bytes), index);
    return true;
  } catch (const Error&) {
    return false;  // (out of memory: a later config may need less)
  }
}

// One runnable choice: an engine config, its finalized plan and what it needs; the variant pack
// of its last run, kept while the pointers stay (a loop over the same tensors builds none).
struct Candidate {
  Desc cfg, plan;
  int64_t workspace = 0;
  EngineInfo engine;
  int mode = 0;  // the heuristics that ranked it
  std::optional<Desc> pack;
  void* packed[4] = {};  // x, w, y and the workspace of `pack`
};

// The finalized execution plan of an engine config (none when cuDNN refuses it).
std::optional<Desc> execution_plan(Handle h, const Desc& cfg) {
  try {
    Desc plan(kExecutionPlanDesc);
    plan.set(kAttrPlanHandle, kTypeHandle, 1, &h);
    plan.set_desc(kAttrPlanEngineConfig, cfg);
    if (plan.finalize()) return plan;
  } catch (const Error&) {  // (an attribute refused: as a plan that does not finalize)
  }
  return std::nullopt;
}

// The engine configs of heuristics mode INSTANT (PyTorch's), then A's and FALLBACK's, each engine
// once (its first ranking), whose plan finalizes within the workspace cap, in their order, each
// given to `take` until it returns true. As PyTorch's, none that rounds its inputs down; under
// `strict` (float32 without TF32) no tensor-core engine, and under
// T.use_deterministic_algorithms none that is not deterministic.
template <class Take> void candidates(Handle h, int index, const Desc& graph, bool strict, Take&& take) {
  const bool same = deterministic();
  std::vector<int64_t> seen;  // (engine indices already offered)
  for (int mode : {kHeurModeInstant, kHeurModeA, kHeurModeFallback}) {
    for (Desc& cfg : engine_configs(graph, mode)) {
      const EngineInfo e = engine_info(cfg);
      if (e.down_convert || ((strict || same) && !e.known) || (strict && e.tensor_core) || (same && e.nondeterministic))
        continue;
      if (e.index >= 0 && std::find(seen.begin(), seen.end(), e.index) != seen.end()) continue;
      std::optional<Desc> plan = execution_plan(h, cfg);
      int64_t ws = 0;
      if (!plan || !plan->read(kAttrPlanWorkspaceSize, kTypeInt64, &ws)) continue;
      if (ws > kWorkspaceCap || !can_allocate(ws, index)) continue;
      if (e.index >= 0) seen.push_back(e.index);
      if (take(Candidate{std::move(cfg), std::move(*plan), ws, e, mode})) return;
    }
  }
}

struct Operands {
  void *x, *w, *y;
};

Desc variant_pack(const Operands& o, void* ws) {
  Desc pack(kVariantPackDesc);
  const int64_t uids[3] = {kUidX, kUidW, kUidY};
  void* ptrs[3] = {o.x, o.w, o.y};
  pack.set(kAttrVariantPackUniqueIds, kTypeInt64, 3, uids);
  pack.set(kAttrVariantPackDataPointers, kTypeVoidPtr, 3, ptrs);
  pack.set(kAttrVariantPackWorkspace, kTypeVoidPtr, 1, &ws);
  pack.finalize_or_fail("variant pack");
  return pack;
}

void execute(Handle h, const Desc& plan, const Desc& pack) {
  cudnn_detail::check(api().BackendExecute(h, plan.get(), pack.get()), "BackendExecute");
}

// Queues `c` on the operands, with a workspace from the caching allocator.
void run(Handle h, int index, Candidate& c, const Operands& o) {
  const size_t bytes = size_t(c.workspace);
  void* ws = bytes ? device_alloc(bytes, index) : nullptr;
  try {
    void* const ptrs[4] = {o.x, o.w, o.y, ws};
    if (!c.pack || !std::equal(ptrs, ptrs + 4, c.packed)) {
      c.pack.reset();
      c.pack.emplace(variant_pack(o, ws));
      std::copy(ptrs, ptrs + 4, c.packed);
    }
    execute(h, c.plan, *c.pack);
  } catch (const Error&) {
    if (ws) device_free(ws, bytes, index);
    throw;
  }
  // stream-ordered: the block is handed out again only on this stream, after the convolution
  if (ws) device_free(ws, bytes, index);
}

// The milliseconds of one run of `c` on the call's operands (the least of 3 after a warm-up, on
// the current stream); negative when it cannot run.
float time_candidate(Handle h, int index, const Candidate& c, const Operands& o) {
  const Driver* d = driver();
  void* ws = nullptr;
  CUevent ev[2] = {nullptr, nullptr};
  float best = -1;
  try {
    if (c.workspace) ws = device_alloc(size_t(c.workspace), index);
    for (CUevent& e : ev)
      if (d->cuEventCreate(&e, 0) != 0) fail("cuEventCreate failed");
    const CUstream stream = current_stream(index);
    const Desc pack = variant_pack(o, ws);
    execute(h, c.plan, pack);
    for (int i = 0; i < 3; ++i) {
      float ms = 0;
      d->cuEventRecord(ev[0], stream);
      execute(h, c.plan, pack);
      d->cuEventRecord(ev[1], stream);
      if (d->cuEventSynchronize(ev[1]) != 0 || d->cuEventElapsedTime(&ms, ev[0], ev[1]) != 0) fail("timing failed");
      best = best < 0 ? ms : std::min(best, ms);
    }
  } catch (const Error&) {
    best = -1;  // (out of memory, or cuDNN refused to run it: another candidate may)
  }
  for (CUevent e : ev)
    if (e) d->cuEventDestroy(e);
  if (ws) device_free(ws, size_t(c.workspace), index);
  return best;
}

// A key's graph (the descriptors it was built from) and the candidate it runs; forward's legacy
// descriptors for the bias (cudnnAddTensor on an NCHW y).
struct GraphPlan {
  std::vector<Desc> parts;
  std::optional<Candidate> run;
  float ms = -1;  // its time, when timed
  TensorDesc y = nullptr, bias = nullptr;
  ~GraphPlan() {
    for (TensorDesc t : {y, bias})
      if (t) api().DestroyTensorDescriptor(t);
  }
};

void bias_descriptors(GraphPlan& p, const ConvShape& s) {
  const Api& F = api();
  const int t = cudnn_detail::data_type(s.dtype);
  cudnn_detail::check(F.CreateTensorDescriptor(&p.y), "CreateTensorDescriptor");
  cudnn_detail::check(F.CreateTensorDescriptor(&p.bias), "CreateTensorDescriptor");
  cudnn_detail::check(F.SetTensor4dDescriptor(p.y, kNchw, t, s.n, s.k, s.oh, s.ow), "SetTensor4dDescriptor");
  cudnn_detail::check(F.SetTensor4dDescriptor(p.bias, kNchw, t, 1, s.k, 1, 1), "SetTensor4dDescriptor");
}

// The operation graph of one pass (its descriptors in p.parts).
const Desc& op_graph(GraphPlan& p, Handle h, ConvPass pass, const ConvShape& s, const ConvStrides& st,
                     const int64_t (&align)[3]) {
  const int dt = cudnn_detail::data_type(s.dtype);
  const int64_t xd[4] = {s.n, s.c, s.h, s.w}, wd[4] = {s.k, s.c / s.groups, s.r, s.s}, yd[4] = {s.n, s.k, s.oh, s.ow};
  p.parts.reserve(6);  // (references below stay valid)
  const Desc& x = p.parts.emplace_back(tensor(kUidX, dt, xd, st.x, align[0]));
  const Desc& w = p.parts.emplace_back(tensor(kUidW, dt, wd, st.w, align[1]));
  const Desc& y = p.parts.emplace_back(tensor(kUidY, dt, yd, st.y, align[2]));
  const Desc& conv = p.parts.emplace_back(convolution(s));
  const Desc& op = p.parts.emplace_back(operation(pass, s.dtype, x, w, y, conv));
  Desc& graph = p.parts.emplace_back(kOperationGraphDesc);
  graph.set_desc(kAttrGraphOps, op);
  graph.set(kAttrGraphHandle, kTypeHandle, 1, &h);
  graph.finalize_or_fail("operation graph");
  return graph;
}

// The plan of one key: the first candidate that runs on the call's operands (*ran: the call is
// done), or with `timing` (benchmark mode) the fastest of the first kBenchmarkLimit that run
// there. Null when there is none.
std::unique_ptr<GraphPlan> build(Handle h, int index, ConvPass pass, const ConvShape& s, const ConvStrides& st,
                                 const int64_t (&align)[3], const Operands& o, bool timing, bool* ran,
                                 std::string* chosen) {
  auto p = std::make_unique<GraphPlan>();
  const char* name = cudnn_detail::pass_name(pass);
  const Desc* graph = nullptr;
  try {
    graph = &op_graph(*p, h, pass, s, st, align);
  } catch (const Error& e) {  // (cuDNN has no such graph: a dtype or layout of its own, say)
    if (chosen) *chosen = cat(name, ": the graph API refuses it (", e.what(), "), the legacy API runs");
    return nullptr;
  }
  const bool strict = s.dtype == DType::f32 && !cudnn_flag(CudnnFlag::allow_tf32);
  int timed = 0;
  auto consider = [&](Candidate&& c) {
    float ms = 0;
    if (timing) {
      ms = time_candidate(h, index, c, o);
      timed += ms >= 0;
    } else {
      try {
        run(h, index, c, o);
        *ran = true;
      } catch (const Error&) {
        ms = -1;  // (as PyTorch's: a plan cuDNN refuses to run passes to the next)
      }
    }
    if (ms >= 0 && (!p->run || ms < p->ms)) {
      p->run.reset();
      p->run.emplace(std::move(c));
      p->ms = ms;
    }
    return p->run && (!timing || timed >= kBenchmarkLimit);
  };
  std::string refused;
  try {
    candidates(h, index, *graph, strict, consider);
  } catch (const Error& e) {  // (cuDNN refused its heuristics or an engine: the legacy API runs)
    refused = cat(" (", e.what(), ")");
  }
  if (!p->run) {
    if (chosen)
      *chosen = cat(name, ": no graph API engine config finalizes and runs", refused, ", the legacy API runs");
    return nullptr;
  }
  if (pass == ConvPass::forward) bias_descriptors(*p, s);
  const Candidate& c = *p->run;
  if (chosen)
    *chosen = cat(name, ": graph API engine ", c.engine.index, c.engine.tensor_core ? " (tensor cores)" : "",
                  ", heuristics ", c.mode == kHeurModeInstant ? "INSTANT" : c.mode == kHeurModeA ? "mode A" : "fallback",
                  timing ? cat(", timed ", p->ms * 1000, " us") : std::string(), ", workspace ", c.workspace, " B");
  return p;
}

// The largest power of two up to 16 dividing p's address (cuDNN's vectorized engines need it).
int64_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int64_t b = 16;
  while (b > 1 && a % uintptr_t(b) != 0) b /= 2;
  return b;
}

std::vector<int64_t> key_of(int index, ConvPass pass, const ConvShape& s, const ConvStrides& st,
                            const int64_t (&align)[3], bool timed) {
  const int64_t flags = cudnn_flag(CudnnFlag::allow_tf32) * 4 + deterministic() * 2 + timed;
  std::vector<int64_t> k = {index,      int(pass),  int(s.dtype), flags,
                            s.n,        s.c,        s.h,          s.w,
                            s.k,        s.r,        s.s,          s.pad_h,
                            s.pad_w,    s.stride_h, s.stride_w,   s.dil_h,
                            s.dil_w,    s.groups,   align[0],     align[1],
                            align[2]};
  for (const int64_t* v : {st.x, st.w, st.y}) k.insert(k.end(), v, v + 4);
  return k;
}

// A key's plan and its lock: execution plans are not thread safe on every engine (cuDNN's
// release notes; PyTorch keeps them per thread), so one build or run of a plan at a time, while
// other keys' plans run on other streams' handles.
struct PlanSlot {
  std::mutex m;
  bool built = false;
  std::unique_ptr<GraphPlan> plan;  // (null once built: no engine config finalized, remembered)
};

// The slot of a key (created empty on its first call; never freed: cuDNN may be unloaded before
// static destructors run).
PlanSlot& slot_for(const std::vector<int64_t>& key) {
  static std::mutex m;
  static auto* slots = new std::map<std::vector<int64_t>, std::unique_ptr<PlanSlot>>();
  std::lock_guard<std::mutex> g(m);
  std::unique_ptr<PlanSlot>& s = (*slots)[key];
  if (!s) s = std::make_unique<PlanSlot>();
  return *s;
}

// A handle's lock: cuDNN's calls may not share a handle at the same time (a handle is one
// stream's, whose work runs in order anyway).
std::mutex& handle_mutex(Handle h) {
  static std::mutex m;
  static auto* locks = new std::map<Handle, std::unique_ptr<std::mutex>>();  // (never freed, as the slots)
  std::lock_guard<std::mutex> g(m);
  std::unique_ptr<std::mutex>& l = (*locks)[h];
  if (!l) l = std::make_unique<std::mutex>();
  return *l;
}

}  // namespace

ConvStrides contiguous_strides(const ConvShape& s) {
  auto dense = [](int64_t (&st)[4], int64_t b, int64_t c, int64_t d) {
    st[3] = 1, st[2] = d, st[1] = c * d, st[0] = b * c * d;
  };
  ConvStrides st{};
  dense(st.x, s.c, s.h, s.w);
  dense(st.w, s.c / s.groups, s.r, s.s);
  dense(st.y, s.k, s.oh, s.ow);
  return st;
}

bool cudnn_graph_conv(int index, ConvPass pass, const ConvShape& s, const ConvStrides& st, void* x, void* w, void* y,
                      const void* bias, std::string* chosen) {
  Handle h = cudnn_detail::handle(index);
  const int64_t align[3] = {alignment(x), alignment(w), alignment(y)};
  const Operands o{x, w, y};
  // benchmark mode times the candidates, except while a CUDA graph records (heuristics there:
  // the plans of the warm-up before a capture are the timed ones)
  const bool timed = cudnn_flag(CudnnFlag::benchmark);
  PlanSlot& slot = slot_for(key_of(index, pass, s, st, align, timed));
  if (chosen) chosen->clear();
  std::lock_guard<std::mutex> g(slot.m);
  std::lock_guard<std::mutex> on_handle(handle_mutex(h));  // (always after the plan's: no cycle)
  bool ran = false;
  if (!slot.built) {
    slot.plan = build(h, index, pass, s, st, align, o, timed && !capturing(index), &ran, chosen);
    slot.built = true;
  }
  GraphPlan* p = slot.plan.get();
  if (!p) return false;
  if (!ran) run(h, index, *p->run, o);
  if (!bias || pass != ConvPass::forward) return true;
  const ConvStrides nchw = contiguous_strides(s);
  if (!std::equal(st.y, st.y + 4, nchw.y)) fail("conv2d through cuDNN: a bias needs an NCHW contiguous output");
  const float one = 1;
  const double one_d = 1;
  const void* alpha = s.dtype == DType::f64 ? static_cast<const void*>(&one_d) : &one;
  cudnn_detail::check(api().AddTensor(h, alpha, p->bias, bias, alpha, p->y, y), "AddTensor");
  return true;
}

}  // namespace cr::cuda
