#include "vm/cuda/cudnn.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "vm/config.hpp"
#include "vm/cuda/cudnn_api.hpp"
#include "vm/cuda/cudnn_internal.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/error.hpp"
#include "vm/env.hpp"

namespace cr::cuda {
namespace {
using namespace cudnn_api;

struct Library {
  Api fn{};
  bool loaded = false;
  std::string why;
  // per device and stream slot, created on first use (cuDNN's handle is bound to one stream)
  std::vector<std::array<Handle, kPoolStreams + 1>> handles;
};

// The sub-libraries of cuDNN 9 (libcudnn.so.9 is a shim that opens them by name): loaded first
// from the shim's folder, so that they are found whatever the loader path holds.
constexpr const char* kParts[] = {"libcudnn_graph.so.9", "libcudnn_engines_precompiled.so.9",
                                  "libcudnn_engines_runtime_compiled.so.9", "libcudnn_heuristic.so.9",
                                  "libcudnn_ops.so.9", "libcudnn_cnn.so.9"};

void* open_in(const std::string& folder, const std::string& file = "libcudnn.so.9") {
  for (const char* part : kParts) dlopen((folder + "/" + part).c_str(), RTLD_NOW | RTLD_LOCAL);
  return dlopen((folder + "/" + file).c_str(), RTLD_NOW | RTLD_LOCAL);
}

void* open_library(std::string* tried) {
  auto attempt = [&](void* lib, const std::string& name) {
    if (!lib) *tried += (tried->empty() ? "" : ", ") + name;
    return lib;
  };
  if (const char* e = env_setting(Setting::CudnnLib); e && *e) {
    const std::string p = e;
    const size_t slash = p.rfind('/');
    void* lib = p.find(".so") == std::string::npos ? open_in(p)  // a folder, else the file (the parts beside it)
                : open_in(slash == std::string::npos ? "." : p.substr(0, slash), p.substr(slash + 1));
    if (attempt(lib, p)) return lib;
  }
  if (void* lib = attempt(dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL), "libcudnn.so.9")) return lib;
  std::vector<std::string> homes;
  if (const char* h = std::getenv("CUDA_HOME"); h && *h) homes.push_back(h);
  homes.push_back("/usr/local/cuda");
  for (const std::string& h : homes)
    for (const char* sub : {"/lib", "/lib64"})
      if (void* lib = attempt(open_in(h + sub), h + sub + "/libcudnn.so.9")) return lib;
  return nullptr;
}

Library& library() {
  static Library L;
  static std::once_flag once;
  std::call_once(once, [] {
    std::string tried;
    void* lib = open_library(&tried);
    if (!lib) {
      L.why = "libcudnn.so.9 could not be loaded (tried " + tried + "; set CRESCENT_CUDNN_LIB to its path)";
      return;
    }
    std::string missing;
#define CR_RESOLVE(name)                                                               \
  L.fn.name = reinterpret_cast<decltype(L.fn.name)>(dlsym(lib, "cudnn" #name));        \
  if (!L.fn.name) missing += std::string(missing.empty() ? "" : ", ") + "cudnn" #name;
    CR_CUDNN_FUNCTIONS(CR_RESOLVE)
#undef CR_RESOLVE
    if (!missing.empty()) {
      L.why = "the loaded libcudnn.so.9 lacks " + missing;
      return;
    }
    if (L.fn.GetVersion() < 90000) {
      L.why = cat("the loaded libcudnn is version ", L.fn.GetVersion(), "; crescent needs cuDNN 9");
      return;
    }
    L.loaded = true;
  });
  return L;
}

void check_cudnn(Status s, const char* what) {
  if (s != kSuccess) fail(cat("cuDNN error in cudnn", what, ": ", library().fn.GetErrorString(s), " (", s, ")"));
}

std::atomic<bool>& flag_ref(CudnnFlag f) {
  static std::atomic<bool> enabled{env_word(kEnvCudnn) == 1};
  static std::atomic<bool> sdp{env_word(kEnvCudnnSdp) == 1};
  static std::atomic<bool> tf32{true}, benchmark{false};
  return f == CudnnFlag::enabled ? enabled : f == CudnnFlag::allow_tf32 ? tf32 : f == CudnnFlag::sdp ? sdp : benchmark;
}

Library& usable_library(int index) {
  Library& L = library();
  std::string why;
  if (!cudnn_available(&why)) fail("convolutions through cuDNN need cuDNN: " + why);
  use_device(index);
  return L;
}

Handle handle(int index) {
  Library& L = usable_library(index);
  static std::mutex m;
  std::lock_guard<std::mutex> g(m);
  if (L.handles.empty()) L.handles.assign(size_t(device_count()), {});
  Handle& h = L.handles[size_t(index)][size_t(current_slot(index))];
  if (!h) {
    check_cudnn(L.fn.Create(&h), "Create");
    check_cudnn(L.fn.SetStream(h, current_stream(index)), "SetStream");  // (for good: one handle per stream)
  }
  return h;
}

int data_type(DType d) {
  switch (d) {
    case DType::f32: return kFloat;
    case DType::f64: return kDouble;
    case DType::f16: return kHalf;
    case DType::bf16: return kBfloat16;
    default: fail(cat("convolutions through cuDNN take floating tensors, got ", dtype_name(d)));
  }
}

// The descriptors of one convolution (and of a bias {1, k, 1, 1}), kept with its algorithm.
struct Descriptors {
  TensorDesc x = nullptr, y = nullptr, bias = nullptr;
  FilterDesc w = nullptr;
  ConvDesc conv = nullptr;
  void init(const ConvShape& s, int math) {
    const Api& F = library().fn;
    const int t = data_type(s.dtype);
    check_cudnn(F.CreateTensorDescriptor(&x), "CreateTensorDescriptor");
    check_cudnn(F.CreateTensorDescriptor(&y), "CreateTensorDescriptor");
    check_cudnn(F.CreateTensorDescriptor(&bias), "CreateTensorDescriptor");
    check_cudnn(F.CreateFilterDescriptor(&w), "CreateFilterDescriptor");
    check_cudnn(F.CreateConvolutionDescriptor(&conv), "CreateConvolutionDescriptor");
    check_cudnn(F.SetTensor4dDescriptor(x, kNchw, t, s.n, s.c, s.h, s.w), "SetTensor4dDescriptor");
    check_cudnn(F.SetTensor4dDescriptor(y, kNchw, t, s.n, s.k, s.oh, s.ow), "SetTensor4dDescriptor");
    check_cudnn(F.SetTensor4dDescriptor(bias, kNchw, t, 1, s.k, 1, 1), "SetTensor4dDescriptor");
    check_cudnn(F.SetFilter4dDescriptor(w, t, kNchw, s.k, s.c / s.groups, s.r, s.s), "SetFilter4dDescriptor");
    // half / bfloat16 accumulate in float32, as PyTorch's cuDNN convolutions
    const int compute = s.dtype == DType::f64 ? kDouble : kFloat;
    check_cudnn(F.SetConvolution2dDescriptor(conv, s.pad_h, s.pad_w, s.stride_h, s.stride_w, s.dil_h, s.dil_w,
                                             kCrossCorrelation, compute),
                "SetConvolution2dDescriptor");
    check_cudnn(F.SetConvolutionGroupCount(conv, s.groups), "SetConvolutionGroupCount");
    check_cudnn(F.SetConvolutionMathType(conv, math), "SetConvolutionMathType");
  }
  Descriptors() = default;
  ~Descriptors() {
    const Api& F = library().fn;
    if (conv) F.DestroyConvolutionDescriptor(conv);
    if (w) F.DestroyFilterDescriptor(w);
    for (TensorDesc t : {x, y, bias})
      if (t) F.DestroyTensorDescriptor(t);
  }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;
};

// float32 without TF32 keeps to FMA kernels; half / bfloat16 may use tensor cores (PyTorch's rule)
int math_type(DType d) {
  if (d == DType::f16 || d == DType::bf16) return kTensorOpMath;
  if (d == DType::f32 && !cudnn_flag(CudnnFlag::allow_tf32)) return kFmaMath;
  return kDefaultMath;
}

struct Choice {
  int algo = 0, math = 0;
  size_t workspace = 0;
};
using Key =
    std::tuple<int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int, int>;
Key key_of(int index, ConvPass pass, const ConvShape& s, int math, bool timed) {
  return {index,   int(pass), int(s.dtype), math,       timed,      s.n,     s.c,     s.h,      s.w, s.k,
          s.r,     s.s,       s.pad_h,      s.pad_w,    s.stride_h, s.stride_w, s.dil_h, s.dil_w, s.groups,
          s.oh * 65536 + s.ow};
}

constexpr int kMaxAlgos = 16;

// The heuristics' ranked algorithms for `pass`.
int ranked(Handle h, ConvPass pass, const Descriptors& d, AlgoPerf* perf) {
  const Api& F = library().fn;
  int n = 0;
  switch (pass) {
    case ConvPass::forward:
      check_cudnn(F.GetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, kMaxAlgos, &n, perf),
                  "GetConvolutionForwardAlgorithm_v7");
      break;
    case ConvPass::backward_data:
      check_cudnn(F.GetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, kMaxAlgos, &n, perf),
                  "GetConvolutionBackwardDataAlgorithm_v7");
      break;
    case ConvPass::backward_filter:
      check_cudnn(F.GetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, kMaxAlgos, &n, perf),
                  "GetConvolutionBackwardFilterAlgorithm_v7");
      break;
  }
  return n;
}

// The operands of one call (the output is written by the timing runs, then by the real one).
struct Operands {
  void *x, *w, *y;
};

// The algorithms for `pass` timed on the call's operands, fastest first, with a workspace as
// large as the heuristics' largest (at most 1 GiB) that the allocator gives (halved until it does).
int timed(int index, Handle h, ConvPass pass, const Descriptors& d, const Operands& o, AlgoPerf* perf) {
  AlgoPerf hint[kMaxAlgos] = {};
  size_t bytes = 0;
  for (int i = 0, n = ranked(h, pass, d, hint); i < n; ++i)
    if (hint[i].status == kSuccess) bytes = std::max(bytes, std::min(hint[i].memory, size_t(1) << 30));
  void* ws = nullptr;
  while (bytes && !ws) try {
      ws = device_alloc(bytes, index);
    } catch (const Error&) {
      bytes /= 2;
    }
  const Api& F = library().fn;
  int n = 0;
  Status st = kSuccess;
  switch (pass) {
    case ConvPass::forward:
      st = F.FindConvolutionForwardAlgorithmEx(h, d.x, o.x, d.w, o.w, d.conv, d.y, o.y, kMaxAlgos, &n, perf, ws, bytes);
      break;
    case ConvPass::backward_data:
      st = F.FindConvolutionBackwardDataAlgorithmEx(h, d.w, o.w, d.y, o.y, d.conv, d.x, o.x, kMaxAlgos, &n, perf, ws, bytes);
      break;
    case ConvPass::backward_filter:
      st = F.FindConvolutionBackwardFilterAlgorithmEx(h, d.x, o.x, d.y, o.y, d.conv, d.w, o.w, kMaxAlgos, &n, perf, ws,
                                                      bytes);
      break;
  }
  if (ws) device_free(ws, bytes, index);
  check_cudnn(st, "FindConvolution*AlgorithmEx");
  return n;
}

// Picks the first ranked (or timed: `timing`) algorithm that succeeds and whose workspace the
// allocator can give; under FMA math (float32 without TF32) those ranked for FMA first, then any
// run with FMA math.
Choice choose(int index, Handle h, ConvPass pass, const ConvShape& s, const Descriptors& d, int math,
              const Operands* timing) {
  AlgoPerf perf[kMaxAlgos] = {};
  const int n = timing ? timed(index, h, pass, d, *timing, perf) : ranked(h, pass, d, perf);
  for (bool strict : {true, false}) {
    for (int i = 0; i < n; ++i) {
      const AlgoPerf& p = perf[i];
      if (p.status != kSuccess || (math == kFmaMath && strict && p.math_type != kFmaMath)) continue;
      try {
        if (p.memory) device_free(device_alloc(p.memory, index), p.memory, index);
      } catch (const Error&) {
        continue;  // (out of memory: a later algorithm may need less)
      }
      return {p.algo, math == kFmaMath ? kFmaMath : p.math_type, p.memory};
    }
    if (math != kFmaMath) break;
  }
  fail(cat("cuDNN has no ", cudnn_detail::pass_name(pass), " algorithm for this convolution (", dtype_name(s.dtype),
           ", input {", s.n, ",", s.c, ",", s.h, ",", s.w, "}, weight {", s.k, ",", s.c / s.groups, ",", s.r, ",", s.s,
           "}, groups ", s.groups, ")"));
}

void run_pass(Handle h, ConvPass pass, const Descriptors& d, const Choice& c, DType dt, void* x, void* w, void* y,
              void* ws) {
  const Api& F = library().fn;
  const float one = 1, zero = 0;
  const double one_d = 1, zero_d = 0;
  const void* alpha = dt == DType::f64 ? static_cast<const void*>(&one_d) : &one;
  const void* beta = dt == DType::f64 ? static_cast<const void*>(&zero_d) : &zero;
  switch (pass) {
    case ConvPass::forward:
      return check_cudnn(F.ConvolutionForward(h, alpha, d.x, x, d.w, w, d.conv, c.algo, ws, c.workspace, beta, d.y, y),
                   "ConvolutionForward");
    case ConvPass::backward_data:
      return check_cudnn(F.ConvolutionBackwardData(h, alpha, d.w, w, d.y, y, d.conv, c.algo, ws, c.workspace, beta, d.x, x),
                   "ConvolutionBackwardData");
    case ConvPass::backward_filter:
      return check_cudnn(F.ConvolutionBackwardFilter(h, alpha, d.x, x, d.y, y, d.conv, c.algo, ws, c.workspace, beta, d.w, w),
                   "ConvolutionBackwardFilter");
  }
}

// CRESCENT_CUDNN_API, read once: a CudnnApi
std::atomic<int>& api_ref() {
  static std::atomic<int> which{env_word(kEnvCudnnApi) == 1 ? int(CudnnApi::legacy) : int(CudnnApi::graph)};
  return which;
}

}  // namespace

namespace cudnn_detail {
const Api& api() { return library().fn; }
void check(Status s, const char* what) { check_cudnn(s, what); }
Handle handle(int index) { return cuda::handle(index); }
int data_type(DType d) { return cuda::data_type(d); }
const char* pass_name(ConvPass p) {
  static const char* const names[] = {"forward", "backward data", "backward filter"};
  return names[int(p)];
}
}  // namespace cudnn_detail

CudnnApi cudnn_api_setting() { return CudnnApi(api_ref().load()); }
CudnnApi set_cudnn_api_setting(CudnnApi a) { return CudnnApi(api_ref().exchange(int(a))); }

bool cudnn_available(std::string* why) {
  Library& L = library();
  std::string w;
  const bool ok = L.loaded && driver(&w);
  if (why) *why = L.loaded ? w : L.why;
  return ok;
}

int cudnn_version(std::string* why) {
  Library& L = library();
  if (why) *why = L.why;
  return L.loaded ? int(L.fn.GetVersion()) : 0;
}

std::string cudnn_version_name() {
  const int v = cudnn_version();
  return cat("cuDNN ", v / 10000, ".", v / 100 % 100, ".", v % 100);
}

bool cudnn_flag(CudnnFlag f) { return flag_ref(f).load(); }
bool set_cudnn_flag(CudnnFlag f, bool on) { return flag_ref(f).exchange(on); }
bool cudnn_usable() { return cudnn_flag(CudnnFlag::enabled) && cudnn_available(); }

void cudnn_prepare(int index) {
  if (cudnn_usable()) handle(index);
}

// A shape's descriptors and algorithm, made on its first call: later calls only launch.
struct Plan {
  Descriptors d;
  Choice c;
};

Plan& plan(int index, Handle h, ConvPass pass, const ConvShape& s, const Operands& o, std::string* chosen) {
  const int math = math_type(s.dtype);
  const bool timing = cudnn_flag(CudnnFlag::benchmark) && !capturing(index);
  static std::mutex m;
  static std::map<Key, std::unique_ptr<Plan>> plans;
  const Key key = key_of(index, pass, s, math, timing);
  std::lock_guard<std::mutex> g(m);
  if (chosen) chosen->clear();
  auto it = plans.find(key);
  if (it != plans.end()) return *it->second;
  auto p = std::make_unique<Plan>();
  p->d.init(s, math);
  p->c = choose(index, h, pass, s, p->d, math, timing ? &o : nullptr);
  // the math type goes with the algorithm (cuDNN picks tensor-core kernels from both)
  check_cudnn(library().fn.SetConvolutionMathType(p->d.conv, p->c.math), "SetConvolutionMathType");
  if (chosen)
    *chosen = cat(cudnn_detail::pass_name(pass), " algorithm ", p->c.algo, timing ? " (timed)" : "", ", math ",
                  p->c.math, ", workspace ", p->c.workspace, " B (legacy API)");
  return *plans.emplace(key, std::move(p)).first->second;
}

void cudnn_conv(int index, ConvPass pass, const ConvShape& s, void* x, void* w, void* y, const void* bias,
                std::string* chosen) {
  Handle h = handle(index);
  Plan& p = plan(index, h, pass, s, {x, w, y}, chosen);
  void* ws = p.c.workspace ? device_alloc(p.c.workspace, index) : nullptr;
  try {
    run_pass(h, pass, p.d, p.c, s.dtype, x, w, y, ws);
  } catch (const Error&) {
    if (ws) device_free(ws, p.c.workspace, index);
    throw;
  }
  // stream-ordered: the block is handed out again only on this stream, after the convolution
  if (ws) device_free(ws, p.c.workspace, index);
  if (pass != ConvPass::forward || !bias) return;
  const float one = 1;
  const double one_d = 1;
  const void* alpha = s.dtype == DType::f64 ? static_cast<const void*>(&one_d) : &one;
  check_cudnn(library().fn.AddTensor(h, alpha, p.d.bias, bias, alpha, p.d.y, y), "AddTensor");
}

}  // namespace cr::cuda
