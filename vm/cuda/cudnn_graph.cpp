#include "vm/cuda/cudnn_graph.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "vm/cuda/cudnn_backend.hpp"
#include "vm/deterministic.hpp"
#include "vm/error.hpp"

namespace cr::cuda {
namespace {
using namespace cudnn_api;
using namespace cudnn_backend;
using cudnn_detail::api;

constexpr int64_t kUidX = 'x', kUidW = 'w', kUidY = 'y';
constexpr int kBenchmarkLimit = 10;  // engine configs benchmark mode times, as PyTorch's benchmark_limit

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

struct Operands {
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
};

// The operation graph of one pass (its descriptors in p.parts).
const Desc& op_graph(GraphPlan& p, Handle h, ConvPass pass, const ConvShape& s, const ConvStrides& st,
                     const int64_t (&align)[3]) {
  const int dt = cudnn_detail::data_type(s.dtype);
  const int64_t xd[4] = {s.n, s.c, s.h, s.w}, wd[4] = {s.k, s.c / s.groups, s.r, s.s}, yd[4] = {s.n, s.k, s.oh, s.ow};
  p.parts.reserve(6);  // (references below stay valid)
  auto spec = [dt](int64_t uid, const int64_t(&dims)[4], const int64_t(&strides)[4], int64_t a) {
    return TensorSpec{uid, dt, {dims, dims + 4}, {strides, strides + 4}, a};
  };
  const Desc& x = p.parts.emplace_back(tensor(spec(kUidX, xd, st.x, align[0])));
  const Desc& w = p.parts.emplace_back(tensor(spec(kUidW, wd, st.w, align[1])));
  const Desc& y = p.parts.emplace_back(tensor(spec(kUidY, yd, st.y, align[2])));
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
      ms = time_candidate(h, index, c, o.uids, o.ptrs);
      timed += ms >= 0;
    } else {
      try {
        run(h, index, c, o.uids, o.ptrs);
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
    // as PyTorch's, no engine that rounds its inputs down; under `strict` (float32 without TF32)
    // no tensor-core engine, and under T.use_deterministic_algorithms none that is not deterministic
    const bool same = deterministic();
    candidates(h, index, *graph, [&](const EngineInfo& e) {
      return !e.down_convert && !((strict || same) && !e.known) && !(strict && e.tensor_core) &&
             !(same && e.nondeterministic);
    }, consider);
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
                  ", heuristics ", mode_name(c.mode),
                  timing ? cat(", timed ", p->ms * 1000, " us") : std::string(), ", workspace ", c.workspace, " B");
  return p;
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
  const Operands o{{kUidX, kUidW, kUidY}, {x, w, y}};
  // benchmark mode times the candidates, except while a CUDA graph records (heuristics there:
  // the plans of the warm-up before a capture are the timed ones)
  const bool timed = cudnn_flag(CudnnFlag::benchmark);
  PlanSlot<GraphPlan>& slot = slot_for<GraphPlan>(key_of(index, pass, s, st, align, timed));
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
  if (!ran) run(h, index, *p->run, o.uids, o.ptrs);
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
