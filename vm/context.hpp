// Per-VM state: the FFI-visible cr_ctx, the last error, results too many for the caller's
// buffer, and the random generator. Each VM (lua_State) has one; one thread uses it at a time.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "vm/abi.h"
#include "vm/autograd/grad_mode.hpp"
#include "vm/log.hpp"
#include "vm/tensor.hpp"

namespace cr {

namespace graph {
class Recorder;
}
namespace autograd {
struct HookOwner;
}

struct Generator {
  uint64_t seed = 0x853c49e6748fea9bULL;
  uint64_t offset = 0;  // Philox counter: advanced by the number of values each call draws
  // While a CUDA graph records (vm/graph/cudagraph.cpp): compiled kernels read the seed and the
  // base offset from these two device words, which each replay sets, and take offsets relative
  // to it; `captured` counts the values drawn so far. Null otherwise.
  const int64_t* capture_words = nullptr;
  uint64_t captured = 0;
};

struct Context {
  cr_ctx ffi{};
  std::string error;
  std::vector<Tensor> pending;  // outputs that did not fit the caller's buffer
  // References handed to Lua, which core.wrap claims in order (counting them in ffi.claimed).
  // A Lua error may come first (a stack overflow in an op's wrapper): what is not claimed by the
  // next handing, an aborted capture or the end of the VM is released then (drop_unclaimed).
  std::vector<cr_tensor*> handed;
  void handing(cr_tensor* const* ts, size_t n);
  void drop_unclaimed();
  std::vector<Tensor> call_outs;  // scratch: the outputs of the op call in flight
  Generator gen;
  // see note_allocations (vm/lua/api.cpp): host and device bytes allocated at the last collection,
  // and how many more of each ask for the next one
  size_t bytes_at_last_gc = 0, large_bytes_at_last_gc = 0, device_bytes_at_last_gc = 0, driver_bytes_at_last_gc = 0;
  size_t gc_every_bytes = size_t(8) << 20, gc_every_device_bytes = size_t(64) << 20;
  size_t lua_heap_bytes = 0;  // after the last full collection
  size_t handles_since_gc = 0, gc_every_handles = 4096;  // tensors handed to Lua since then
  // microseconds (api_now_us): when a collection was asked for, when the last one ended, its cost
  double gc_asked_us = 0, gc_end_us = 0, gc_cost_us = 0;
  // Whether `bytes` of host garbage ask for a full collection: past `budget`, once kGcTimeFactor
  // times the last collection's cost has passed since it ended; past the hard bound at once.
  bool host_garbage_due(size_t bytes, size_t budget) const;  // (times: now_us)
  std::vector<std::string> loaded_names;  // names of the last safetensors load
  std::string scratch;                    // backing store of strings returned to Lua
  Logs logs;  // CRESCENT_LOGS, and T.config's changes to it
  // graph capture (vm/graph/recorder.hpp): the capture layer makes it (Hooks::start_capture) and
  // gives the deleter, so that the runtime needs none of its code
  std::unique_ptr<graph::Recorder, void (*)(graph::Recorder*)> recorder{nullptr, nullptr};
  // A training capture (grad mode on, tensors requiring grad): the recorder's compiled segments
  // carry their own autograd node (vm/graph/joint.hpp), so autograd records none for an op call
  // the recorder replayed lazily (capture_lazy, set per call); recorded calls ran eagerly.
  bool capture_training = false, capture_lazy = false;
  // an inference capture met a tensor requiring grad: the function's next calls train
  bool capture_wants_training = false;
  // Set by a compiled plan around an extern step on a device after one of its own kernels
  // (jit/program.cpp): the storages of its inputs that no node of it writes. No kernel in flight
  // writes them, so they may be read before the programmatic-launch wait (cuda::gemv).
  const std::vector<const Storage*>* plan_settled = nullptr;
  // this VM's hooks (vm/autograd/meta.hpp), and its grad mode and autocast while it does not run
  std::shared_ptr<autograd::HookOwner> hook_owner;
  autograd::Modes modes;
  int entries = 0;  // the embedding API's entries into the VM in progress (ModesIn)

  Context();
  ~Context();
  static Context& of(cr_ctx* c) { return *static_cast<Context*>(c->impl); }
};

// The VM's modes in the thread's for the scope of an entry into it from the host; an entry made
// while one is in progress (a host callback calling back in) keeps them.
struct ModesIn {
  Context& c;
  explicit ModesIn(Context& ctx) : c(ctx) { if (c.entries++ == 0) c.modes.swap_with_thread(); }
  ~ModesIn() { if (--c.entries == 0) c.modes.swap_with_thread(); }
  ModesIn(const ModesIn&) = delete;
  ModesIn& operator=(const ModesIn&) = delete;
};

// The steady clock in microseconds: the collector's times (Context) and the graphs' timings.
double now_us();

}  // namespace cr
