// cuDNN's backend ("graph") API as vm/cuda/cudnn_graph.cpp (convolutions) and
// vm/cuda/cudnn_sdpa.cpp (attention) build on it: owned descriptors, tensors, engine configs from
// the heuristics, execution plans and variant packs. Not for other files.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "vm/cuda/cudnn_internal.hpp"

namespace cr::cuda::cudnn_backend {
using cudnn_api::BackendDesc;
using cudnn_api::Handle;

// One backend descriptor, owned (cuDNN keeps raw handles to those a descriptor was given: owners
// keep them as long as that one).
class Desc {
 public:
  explicit Desc(int type);
  ~Desc();
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)) {}
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc& operator=(Desc&&) = delete;
  BackendDesc get() const { return d_; }

  void set(int attr, int type, int64_t n, const void* v);  // raises cuDNN's refusal
  void set_i64(int attr, std::initializer_list<int64_t> v) {
    set(attr, cudnn_api::kTypeInt64, int64_t(v.size()), v.begin());
  }
  void set_desc(int attr, const Desc& d) { set(attr, cudnn_api::kTypeBackendDesc, 1, &d.d_); }
  bool finalize();
  void finalize_or_fail(const char* what);
  // One element of `attr` into *out; false when cuDNN refuses.
  bool read(int attr, int type, void* out) const;

 private:
  BackendDesc d_ = nullptr;
};

// A finalized tensor descriptor of `dtype` (cudnnDataType_t) and n dims; a virtual one lives only
// inside a fused graph, a by-value one is a host scalar the variant pack points at.
struct TensorSpec {
  int64_t uid = 0;
  int dtype = 0;
  std::vector<int64_t> dims, strides;
  int64_t align = 16;
  bool is_virtual = false, by_value = false;
};
Desc tensor(const TensorSpec& t);

// An engine config's engine: its global index (for the logs) and whether its numerical notes
// say tensor cores (TF32 for float32), inputs rounded down or a result that varies from run to
// run; known is false when unreadable.
struct EngineInfo {
  int64_t index = -1;
  bool known = false, tensor_core = false, down_convert = false, nondeterministic = false;
};
EngineInfo engine_info(const Desc& cfg);

// One runnable choice: an engine config, its finalized plan and what it needs; the variant pack
// of its last run, kept while the pointers stay (a loop over the same tensors builds none).
struct Candidate {
  Desc cfg, plan;
  int64_t workspace = 0;
  EngineInfo engine;
  int mode = 0;  // the heuristics that ranked it
  std::optional<Desc> pack;
  std::vector<void*> packed;  // the operands' and the workspace's pointers of `pack`
};
const char* mode_name(int heuristics_mode);  // "INSTANT", "mode A", "fallback"

// The engine configs of heuristics mode INSTANT (PyTorch's), then A's and FALLBACK's, each engine
// once (its first ranking), that `accept` takes and whose plan finalizes within the workspace cap
// and can be allocated, in their order, each given to `take` (a Candidate&&) until it returns true.
void candidates(Handle h, int index, const Desc& graph, const std::function<bool(const EngineInfo&)>& accept,
                const std::function<bool(Candidate&&)>& take);

// Queues c's plan on the operands (`uids` and `ptrs` alike; by-value scalars point at host
// memory), with a workspace from the caching allocator.
void run(Handle h, int index, Candidate& c, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs);
// The milliseconds of one run of c (the least of 3 after a warm-up, on the current stream);
// negative when it cannot run.
float time_candidate(Handle h, int index, const Candidate& c, const std::vector<int64_t>& uids,
                     const std::vector<void*>& ptrs);

// A key's plan and its lock: execution plans are not thread safe on every engine (cuDNN's
// release notes; PyTorch keeps them per thread), so one build or run of a plan at a time, while
// other keys' plans run on other streams' handles.
template <class Plan> struct PlanSlot {
  std::mutex m;
  bool built = false;
  std::unique_ptr<Plan> plan;  // (null once built: no engine config finalized, remembered)
};
// The slot of a key (created empty on its first call; never freed: cuDNN may be unloaded before
// static destructors run).
template <class Plan> PlanSlot<Plan>& slot_for(const std::vector<int64_t>& key) {
  static std::mutex m;
  static auto* slots = new std::map<std::vector<int64_t>, std::unique_ptr<PlanSlot<Plan>>>();
  std::lock_guard<std::mutex> g(m);
  std::unique_ptr<PlanSlot<Plan>>& s = (*slots)[key];
  if (!s) s = std::make_unique<PlanSlot<Plan>>();
  return *s;
}

int64_t alignment(const void* p);  // the largest power of two up to 16 dividing p's address
// A handle's lock: cuDNN's calls may not share a handle at the same time (a handle is one
// stream's, whose work runs in order anyway). Take it after a plan's own lock.
std::mutex& handle_mutex(Handle h);

}  // namespace cr::cuda::cudnn_backend
