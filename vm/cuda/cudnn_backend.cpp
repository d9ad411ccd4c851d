#include "vm/cuda/cudnn_backend.hpp"

#include <algorithm>
#include <map>
#include <memory>

#include "vm/cuda/driver.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/error.hpp"

namespace cr::cuda::cudnn_backend {
using namespace cudnn_api;
using cudnn_detail::api;

namespace {
constexpr int64_t kWorkspaceCap = int64_t(1) << 30;  // engine configs asking more are skipped, as PyTorch's

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

bool can_allocate(int64_t bytes, int index) {
  if (bytes == 0) return true;
  try {
    device_free(device_alloc(size_t(bytes), index), size_t(bytes), index);
    return true;
  } catch (const Error&) {
    return false;  // (out of memory: a later config may need less)
  }
}

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

Desc variant_pack(const std::vector<int64_t>& uids, const std::vector<void*>& ptrs, void* ws) {
  Desc pack(kVariantPackDesc);
  pack.set(kAttrVariantPackUniqueIds, kTypeInt64, int64_t(uids.size()), uids.data());
  pack.set(kAttrVariantPackDataPointers, kTypeVoidPtr, int64_t(ptrs.size()), ptrs.data());
  pack.set(kAttrVariantPackWorkspace, kTypeVoidPtr, 1, &ws);
  pack.finalize_or_fail("variant pack");
  return pack;
}

void execute(Handle h, const Desc& plan, const Desc& pack) {
  cudnn_detail::check(api().BackendExecute(h, plan.get(), pack.get()), "BackendExecute");
}

}  // namespace

Desc::Desc(int type) { cudnn_detail::check(api().BackendCreateDescriptor(type, &d_), "BackendCreateDescriptor"); }
Desc::~Desc() {
  if (d_) api().BackendDestroyDescriptor(d_);
}
void Desc::set(int attr, int type, int64_t n, const void* v) {
  const Status s = api().BackendSetAttribute(d_, attr, type, n, v);
  if (s != kSuccess) cudnn_detail::check(s, cat("BackendSetAttribute (attribute ", attr, ")").c_str());
}
bool Desc::finalize() { return api().BackendFinalize(d_) == kSuccess; }
void Desc::finalize_or_fail(const char* what) {
  cudnn_detail::check(api().BackendFinalize(d_), cat("BackendFinalize (", what, ")").c_str());
}
bool Desc::read(int attr, int type, void* out) const {
  int64_t got = 0;
  return api().BackendGetAttribute(d_, attr, type, 1, &got, out) == kSuccess && got == 1;
}

Desc tensor(const TensorSpec& s) {
  Desc t(kTensorDesc);
  t.set(kAttrTensorDataType, kTypeDataType, 1, &s.dtype);
  t.set(kAttrTensorDimensions, kTypeInt64, int64_t(s.dims.size()), s.dims.data());
  t.set(kAttrTensorStrides, kTypeInt64, int64_t(s.strides.size()), s.strides.data());
  t.set_i64(kAttrTensorUniqueId, {s.uid});
  t.set_i64(kAttrTensorByteAlignment, {s.align});
  if (s.is_virtual) {
    const bool on = true;
    t.set(kAttrTensorIsVirtual, kTypeBoolean, 1, &on);
  }
  if (s.by_value) {
    const bool on = true;
    t.set(kAttrTensorIsByValue, kTypeBoolean, 1, &on);
  }
  t.finalize_or_fail("tensor");
  return t;
}

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

const char* mode_name(int m) { return m == kHeurModeInstant ? "INSTANT" : m == kHeurModeA ? "mode A" : "fallback"; }

void candidates(Handle h, int index, const Desc& graph, const std::function<bool(const EngineInfo&)>& accept,
                const std::function<bool(Candidate&&)>& take) {
  std::vector<int64_t> seen;  // (engine indices already offered)
  for (int mode : {kHeurModeInstant, kHeurModeA, kHeurModeFallback}) {
    for (Desc& cfg : engine_configs(graph, mode)) {
      const EngineInfo e = engine_info(cfg);
      if (!accept(e)) continue;
      if (e.index >= 0 && std::find(seen.begin(), seen.end(), e.index) != seen.end()) continue;
      std::optional<Desc> plan = execution_plan(h, cfg);
      int64_t ws = 0;
      if (!plan || !plan->read(kAttrPlanWorkspaceSize, kTypeInt64, &ws)) continue;
      if (ws > kWorkspaceCap || !can_allocate(ws, index)) continue;
      if (e.index >= 0) seen.push_back(e.index);
      if (take(Candidate{std::move(cfg), std::move(*plan), ws, e, mode, std::nullopt, {}})) return;
    }
  }
}

void run(Handle h, int index, Candidate& c, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs) {
  const size_t bytes = size_t(c.workspace);
  void* ws = bytes ? device_alloc(bytes, index) : nullptr;
  try {
    std::vector<void*> key = ptrs;
    key.push_back(ws);
    if (!c.pack || key != c.packed) {
      c.pack.reset();
      c.pack.emplace(variant_pack(uids, ptrs, ws));
      c.packed = std::move(key);
    }
    execute(h, c.plan, *c.pack);
    launch_counts().blas.fetch_add(1, std::memory_order_relaxed);
  } catch (const Error&) {
    if (ws) device_free(ws, bytes, index);
    throw;
  }
  // stream-ordered: the block is handed out again only on this stream, after the plan's work
  if (ws) device_free(ws, bytes, index);
}

float time_candidate(Handle h, int index, const Candidate& c, const std::vector<int64_t>& uids,
                     const std::vector<void*>& ptrs) {
  const Driver* d = driver();
  void* ws = nullptr;
  CUevent ev[2] = {nullptr, nullptr};
  float best = -1;
  try {
    if (c.workspace) ws = device_alloc(size_t(c.workspace), index);
    for (CUevent& e : ev)
      if (d->cuEventCreate(&e, 0) != 0) fail("cuEventCreate failed");
    const CUstream stream = current_stream(index);
    const Desc pack = variant_pack(uids, ptrs, ws);
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

int64_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int64_t b = 16;
  while (b > 1 && a % uintptr_t(b) != 0) b /= 2;
  return b;
}

std::mutex& handle_mutex(Handle h) {
  static std::mutex m;
  static auto* locks = new std::map<Handle, std::unique_ptr<std::mutex>>();  // (never freed: cuDNN may go first)
  std::lock_guard<std::mutex> g(m);
  std::unique_ptr<std::mutex>& l = (*locks)[h];
  if (!l) l = std::make_unique<std::mutex>();
  return *l;
}

}  // namespace cr::cuda::cudnn_backend
