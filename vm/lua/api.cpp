// The cr_api function table: the C entry points the Lua side calls through the FFI. Every
// entry catches cr::Error and leaves the message in the VM's context: a C++ exception must never
// cross into LuaJIT.
#include "vm/lua/api.hpp"

#include "vm/kernels/cuda/attention.hpp"
#include "vm/cuda/blas.hpp"
#include "vm/cuda/cudnn.hpp"
#include "vm/cuda/cudnn_sdpa.hpp"
#include "vm/cuda/driver.hpp"
#include "vm/cuda/graphs.hpp"
#include "jit/jit.hpp"
#include "jit/autotune.hpp"
#include "jit/cuda/eager.hpp"
#include "jit/disk_cache.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/autograd/call.hpp"
#include "vm/lua/autograd_api.hpp"
#include "vm/config.hpp"
#include "vm/lua/dist_api.hpp"
#include "vm/cpu_blas.hpp"
#include "vm/cpu_march.hpp"
#include "vm/kernels/wide.hpp"
#include "vm/denormal.hpp"
#include "vm/deterministic.hpp"
#include "vm/devices.hpp"
#include "vm/host_memory.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "vm/graph/recorder.hpp"
#include "vm/io/io.hpp"
#include "vm/kernels/loop.hpp"
#include "vm/ops/attention.hpp"
#include "vm/print.hpp"
#include "vm/registry.hpp"
#include "vm/threads.hpp"

namespace cr {
namespace {


template <class F> int32_t guarded(cr_ctx* c, F&& f) {
  try {
    return f();
  } catch (const LocatedError& e) {
    Context::of(c).error = e.what();
    return -2;
  } catch (const std::exception& e) {
    Context::of(c).error = e.what();
    return -1;
  }
}

// Lua's collector does not see tensor memory: after enough tensor allocation (eager ops or a
// compiled graph's outputs) ask Lua for a full collection, so that dropped tensors go back to the
// allocators' caches (PyTorch frees them at once, by reference counts).
// Host: after 8 MB or 8x the Lua heap, whichever is larger - the collector's time grows with the
// heap, and the next output reuses a block still in the CPU caches. Blocks too large for the
// caches gain nothing from that reuse: they count apart, kGcLargeBlocks of them.
// Device: a full collection costs several memory-bound kernels and GPU caches do not favour
// recent blocks, so dropped device tensors may pile up to cuda::garbage_budget (a quarter of what
// the device could still hand out, at most 4 GiB, re-measured at each collection); the collector
// also runs after every 64 MiB taken from the driver, so freed blocks serve the next outputs
// instead of fresh cuMemAllocs. (The costs behind these rules: bench/RESULTS.md, H35.)
constexpr size_t kGcMinBytes = size_t(8) << 20, kGcDriverBytes = size_t(64) << 20;
constexpr double kGcHeapFactor = 8;
// Handles: each tensor handed to Lua holds a header and storage on the C++ side, which the
// collector releases long after the handle died, from cold cache lines. Small tensors barely
// count in bytes, so handles count too: after max(4096, 4 x the Lua heap in KiB) of them the
// collector completes its cycle (service bit 4): not a full collection, which would discard the
// marking of a cycle in progress and run a whole new one. Completing the cycle frees every handle
// dead when it began; the rest go in the next one.
constexpr size_t kGcMinHandles = 4096;
constexpr double kGcHandlesPerHeapKb = 4;
constexpr int64_t kGcLargeBlocks = 8;
// The host bytes' rule also waits for the collector's last cost (Context::host_garbage_due).
double api_now_us();
void ask_gc(cr_ctx* c, uint32_t bit) {
  Context& ctx = Context::of(c);
  if (!(c->service & (CR_SERVICE_GC_FULL | CR_SERVICE_GC_STEP))) ctx.gc_asked_us = api_now_us();
  c->service |= bit;
}
bool host_bytes_due(const Context& ctx) {
  return ctx.host_garbage_due(bytes_allocated_total() - ctx.bytes_at_last_gc, ctx.gc_every_bytes);
}
void note_allocations(cr_ctx* c) {
  const Context& ctx = Context::of(c);
  if (host_bytes_due(ctx) ||
      large_bytes_allocated_total() - ctx.large_bytes_at_last_gc > size_t(kGcLargeBlocks * cpu_large_block_bytes()) ||
      device_bytes_allocated_total() - ctx.device_bytes_at_last_gc > ctx.gc_every_device_bytes ||
      device_driver_bytes() - ctx.driver_bytes_at_last_gc > kGcDriverBytes)
    ask_gc(c, CR_SERVICE_GC_FULL);
}

int32_t hand_out(Context& ctx, std::vector<Tensor>& outs, cr_tensor** buf, int32_t cap) {
  int32_t n = int32_t(outs.size());
  ctx.handles_since_gc += size_t(n);
  if (ctx.handles_since_gc > ctx.gc_every_handles) ask_gc(&ctx.ffi, CR_SERVICE_GC_STEP);
  if (n > cap) {
    ctx.pending = std::move(outs);
    return n;
  }
  for (int32_t i = 0; i < n; ++i) buf[i] = outs[size_t(i)].release();
  ctx.handing(buf, size_t(n));
  return n;
}

const cr_op_info* api_op_info(int32_t op) {
  const auto& infos = Registry::get().infos();
  return op >= 0 && size_t(op) < infos.size() ? &infos[size_t(op)] : nullptr;
}

int32_t api_call(cr_ctx* c, int32_t op, const cr_value* args, int32_t nargs, cr_tensor** outs, int32_t cap) {
  return guarded(c, [&] {
    Context& ctx = Context::of(c);
    std::vector<Tensor>& r = ctx.call_outs;
    autograd::call(ctx, op, args, nargs, r);
    note_allocations(c);
    int32_t n = hand_out(ctx, r, outs, cap);
    r.clear();
    return n;
  });
}

int32_t api_take_outputs(cr_ctx* c, cr_tensor** outs, int32_t cap) {
  Context& ctx = Context::of(c);
  std::vector<Tensor> r = std::move(ctx.pending);
  ctx.pending.clear();
  return hand_out(ctx, r, outs, cap);
}

const char* api_last_error(cr_ctx* c) { return Context::of(c).error.c_str(); }
void api_retain(cr_tensor* t) { tensor_retain(t); }
void api_release(cr_tensor* t) { tensor_release(t); }

// LuaJIT keeps type tags in the payload bits of NaNs: a double that Lua reads through the FFI must
// be a canonical NaN, or Lua sees another type (the float32 NaN 0xffffffff that torch.log1p(-2)
// makes came back from totable() as a nil).
static void canonical_nans(double* v, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (std::isnan(v[i])) v[i] = std::numeric_limits<double>::quiet_NaN();
}

int32_t api_item(cr_ctx* c, cr_tensor* t, double* out) {
  return guarded(c, [&] {
    graph::ensure_real(Context::of(c), t);
    Tensor x(t, true);
    if (x.numel() != 1) fail(cat("item: expected a tensor with one element, got ", x.describe()));
    Tensor d = Tensor::empty({}, DType::f64);
    copy_into(d, x.dim() ? Tensor::view_of(x, {}, {}, x.offset()) : x);
    *out = *d.data<double>();
    canonical_nans(out, 1);
    return 0;
  });
}

int32_t api_read_all(cr_ctx* c, cr_tensor* t, double* out, int64_t n) {
  return guarded(c, [&] {
    graph::ensure_real(Context::of(c), t);
    Tensor x(t, true);
    if (x.numel() != n) fail("totable: buffer size mismatch");
    Storage* s = storage_wrap(out, size_t(n) * 8, Device{}, [](void*, void*) {}, nullptr);
    Tensor d = Tensor::from_storage(s, x.sizes(), contiguous_strides(x.sizes()), 0, DType::f64);
    copy_into(d, x);
    canonical_nans(out, n);
    return 0;
  });
}

const char* api_format(cr_ctx* c, cr_tensor* t) {
  Context& ctx = Context::of(c);
  try {
    graph::ensure_real(ctx, t);
    ctx.scratch = format_tensor(Tensor(t, true));
    return ctx.scratch.c_str();
  } catch (const std::exception& e) {
    ctx.error = e.what();
    return nullptr;
  }
}

// Whoever holds the pointer may write through it: lazy values that would be recomputed from this
// storage are computed first, and its version moves on.
void* api_data_ptr(cr_ctx* c, cr_tensor* t) {
  if (!t->_storage) return nullptr;
  auto* s = static_cast<Storage*>(t->_storage);
  try {
    graph::before_write(Context::of(c), s);
  } catch (const std::exception& e) {
    Context::of(c).error = e.what();
    return nullptr;
  }
  s->version.fetch_add(1);
  return Tensor(t, true).data_bytes();
}
int32_t api_is_contiguous(cr_tensor* t) { return Tensor(t, true).is_contiguous(); }
void api_manual_seed(cr_ctx* c, uint64_t seed) { Context::of(c).gen = Generator{seed, 0}; }
void api_rng_state(cr_ctx* c, uint64_t* state, int32_t set) {
  Generator& g = Context::of(c).gen;
  if (set) g = Generator{state[0], state[1]};
  else state[0] = g.seed, state[1] = g.offset;
}
int32_t api_num_threads(cr_ctx* c) {
  return guarded(c, [] { return num_threads(); });
}
int32_t api_set_num_threads(cr_ctx* c, int32_t n) {
  return guarded(c, [n] { return set_num_threads(n), 0; });
}
void api_set_printoptions(int32_t precision, double threshold, double edgeitems, int32_t linewidth, int32_t sci_mode) {
  set_print_options({precision, int64_t(std::min(threshold, 9e18)), int64_t(std::min(edgeitems, 9e18)), linewidth, sci_mode});
}
double api_now_us() { return now_us(); }
void api_gc_done(cr_ctx* c, double lua_heap_kb) {
  c->service &= ~(CR_SERVICE_GC_FULL | CR_SERVICE_GC_STEP);
  Context& ctx = Context::of(c);
  ctx.gc_end_us = api_now_us();
  if (ctx.gc_asked_us > 0) ctx.gc_cost_us = ctx.gc_end_us - ctx.gc_asked_us;
  ctx.gc_asked_us = 0;
  ctx.bytes_at_last_gc = bytes_allocated_total();
  ctx.handles_since_gc = 0;
  ctx.gc_every_handles = std::max(kGcMinHandles, size_t(kGcHandlesPerHeapKb * lua_heap_kb));
  ctx.large_bytes_at_last_gc = large_bytes_allocated_total();
  ctx.gc_every_bytes = std::max(kGcMinBytes, size_t(kGcHeapFactor * lua_heap_kb * 1024));
  ctx.lua_heap_bytes = size_t(lua_heap_kb * 1024);
  ctx.device_bytes_at_last_gc = device_bytes_allocated_total();
  ctx.driver_bytes_at_last_gc = device_driver_bytes();
  if (ctx.device_bytes_at_last_gc) ctx.gc_every_device_bytes = device_garbage_budget();
}

int32_t api_save_safetensors(cr_ctx* c, const char* path, const char** names, const size_t* name_lens, cr_tensor** ts,
                             int32_t n) {
  return guarded(c, [&] {
    std::vector<std::pair<std::string, Tensor>> items;
    for (int32_t i = 0; i < n; ++i) {
      graph::ensure_real(Context::of(c), ts[i]);
      items.emplace_back(std::string(names[i], name_lens[i]), Tensor(ts[i], true));
    }
    save_safetensors(path, items);
    return 0;
  });
}

int32_t api_load_safetensors(cr_ctx* c, const char* path, cr_tensor** outs, int32_t cap) {
  return guarded(c, [&] {
    Context& ctx = Context::of(c);
    auto items = load_safetensors(path);
    ctx.loaded_names.clear();
    std::vector<Tensor> ts;
    for (auto& [name, t] : items) {
      ctx.loaded_names.push_back(name);
      ts.push_back(t);
    }
    note_allocations(c);  // (a loop that only loads must collect its garbage too)
    return hand_out(ctx, ts, outs, cap);
  });
}

const char* api_loaded_name(cr_ctx* c, int32_t i, size_t* len) {
  Context& ctx = Context::of(c);
  if (i < 0 || size_t(i) >= ctx.loaded_names.size()) return nullptr;
  *len = ctx.loaded_names[size_t(i)].size();
  return ctx.loaded_names[size_t(i)].data();
}

int32_t api_save_npy(cr_ctx* c, const char* path, cr_tensor* t) {
  return guarded(c, [&] {
    graph::ensure_real(Context::of(c), t);
    save_npy(path, Tensor(t, true));
    return 0;
  });
}

cr_tensor* api_load_npy(cr_ctx* c, const char* path) {
  cr_tensor* r = nullptr;
  guarded(c, [&] {
    r = load_npy(path).release();
    Context::of(c).handing(&r, 1);
    note_allocations(c);
    return 0;
  });
  return r;
}

// ---- graph capture ---------------------------------------------------------------------------

graph::Recorder& rec(cr_ctx* c) { return *Context::of(c).recorder; }

int32_t api_cap_function(cr_ctx* c, const char* name, int32_t hot, int32_t fullgraph, int32_t mode,
                         const char* backend, int32_t dynamic) {
  return guarded(c, [&] {
    guards::Options o;
    o.dynamic = dynamic;
    o.name = name;
    o.hot = hot;
    o.fullgraph = fullgraph != 0;
    o.reduce_overhead = mode == CR_MODE_REDUCE_OVERHEAD;
    o.autotune = mode == CR_MODE_MAX_AUTOTUNE;
    o.backend = backend;
    return rec(c).new_function(o);
  });
}

int32_t api_cap_begin(cr_ctx* c, int32_t fn, int32_t limit, int32_t train) {
  return guarded(c, [&] { return int32_t(rec(c).begin(fn, limit, train)); });
}

int32_t api_cap_need(cr_ctx* c, cr_tensor* t, const char* reason, const char* where) {
  return guarded(c, [&] {
    graph::Recorder& r = rec(c);
    if (r.active()) r.graph_break(reason, where, t);
    if (t) graph::ensure_real(Context::of(c), t);
    note_allocations(c);
    return 0;
  });
}

int32_t api_cap_data_size(cr_ctx* c, const char* op, const char* where) {
  return guarded(c, [&] {
    if (rec(c).active()) rec(c).data_size(op, where);
    note_allocations(c);
    return 0;
  });
}

int32_t api_cap_grad_on(cr_ctx* c, const char* where) {
  return guarded(c, [&] {
    if (rec(c).active()) rec(c).grad_turned_on(where);
    note_allocations(c);
    return 0;
  });
}

int32_t api_cap_finish(cr_ctx* c, cr_tensor** rets, int32_t n, const char* where) {
  return guarded(c, [&] {
    // not active: T.compiler.reset() inside the function stopped the capture (its ops ran)
    if (rec(c).active()) rec(c).finish(std::vector<cr_tensor*>(rets, rets + n), where);
    note_allocations(c);
    return 0;
  });
}

int32_t api_cap_suspend(cr_ctx* c, cr_tensor** rets, int32_t n, const char* where) {
  return guarded(c, [&] {
    if (rec(c).active()) rec(c).suspend(std::vector<cr_tensor*>(rets, rets + n), where);
    note_allocations(c);
    return 0;
  });
}

int32_t api_cap_collect_pays(cr_ctx* c, cr_tensor** rets, int32_t n) {
  const bool pays = rec(c).active() ? rec(c).collect_pays(rets, n) : c->collect != 0;
  Context& ctx = Context::of(c);
  if (pays && ctx.gc_asked_us <= 0) ctx.gc_asked_us = api_now_us();  // (the collection's time: api_gc_done)
  return int32_t(pays);
}

int32_t api_cap_abort(cr_ctx* c) {
  Context::of(c).drop_unclaimed();  // (an error unwound the call: perhaps before a wrap)
  return guarded(c, [&] {
    rec(c).abort();
    return 0;
  });
}
void api_cap_where(cr_ctx* c, const char* where) {
  c->service &= ~CR_SERVICE_WHERE;
  rec(c).set_where(where);
}
// T.compiler.reset(): also gives cached device memory back (blocks in use stay with their tensors)
void api_cap_reset(cr_ctx* c) {
  rec(c).reset();
  jit::cuda::clear_eager_cache();
  cuda::empty_cache();
}

// out[0 .. n): the numbers at their indices (enum cr_cap_stat, cr_cuda_stat), 0 for any other
void put_stats(double* out, int n, std::initializer_list<std::pair<int, double>> v) {
  std::fill(out, out + n, 0.0);
  for (const auto& [i, x] : v) out[i] = x;
}

void api_cap_stats(cr_ctx* c, double* out) {
  const graph::Stats& s = rec(c).stats;
  const jit::QueueStats q = jit::background_stats();
  const jit::AutotuneStats a = jit::autotune_stats();
  put_stats(out, CR_CAP_STATS,
            {{CR_STAT_GRAPHS_COMPILED, double(s.graphs_compiled)}, {CR_STAT_RECOMPILES, double(s.recompiles)},
             {CR_STAT_GRAPH_BREAKS, double(s.graph_breaks)}, {CR_STAT_KERNELS_COMPILED, double(s.kernels_compiled)},
             {CR_STAT_DISK_CACHE_HITS, double(s.disk_cache_hits)}, {CR_STAT_EAGER_FALLBACKS, double(s.eager_fallbacks)},
             {CR_STAT_GRAPH_RUN_US, s.graph_run_us}, {CR_STAT_REPLAYS, double(s.replays)},
             {CR_STAT_COMPILES_PENDING, double(q.queued + q.running)}, {CR_STAT_COMPILE_MS, s.compile_ms},
             {CR_STAT_KERNELS_LOADED, double(s.kernels_loaded)},
             {CR_STAT_BACKWARD_GRAPHS_COMPILED, double(s.backward_graphs_compiled)},
             {CR_STAT_GRAD_FALLBACKS, double(s.grad_fallbacks)}, {CR_STAT_SAVED_VALUES, double(s.saved_values)},
             {CR_STAT_SAVED_BYTES, double(s.saved_bytes)}, {CR_STAT_RECOMPUTED_OPS, double(s.recomputed_ops)},
             {CR_STAT_CUDAGRAPHS_RECORDED, double(s.cudagraphs_recorded)},
             {CR_STAT_CUDAGRAPH_REPLAYS, double(s.cudagraph_replays)}, {CR_STAT_AUTOTUNE_GRAPHS, double(a.graphs)},
             {CR_STAT_AUTOTUNE_KERNELS, double(a.kernels)}, {CR_STAT_AUTOTUNE_CANDIDATES, double(a.candidates)},
             {CR_STAT_AUTOTUNE_CACHED, double(a.cached)}, {CR_STAT_AUTOTUNE_REJECTED, double(a.rejected)},
             {CR_STAT_AUTOTUNE_MS, a.ms}});
}

const char* api_cap_report(cr_ctx* c) {
  Context& ctx = Context::of(c);
  ctx.scratch.clear();
  for (const graph::SegmentReport& r : rec(c).report)
    ctx.scratch += cat(r.ops, "\t", std::string(1, r.end), "\t", r.reason, "\t", r.where, "\t", r.symbolic, "\t", r.op_names, "\t",
                       int(r.backward_graph), "\t", r.grad_fallback, "\n");
  return ctx.scratch.c_str();
}

int32_t api_cap_set_logs(cr_ctx* c, const char* list) {
  return guarded(c, [&] { return rec(c).logs.parse(list), 0; });
}
cr_tensor* api_cap_unnamed(cr_ctx* c) { return rec(c).unnamed(); }
void api_cap_name(cr_ctx* c, const char* name) { rec(c).name_arg(name); }
void api_cap_drop(cr_ctx* c, int32_t fn) { rec(c).drop(fn); }
// T.config entries the recorder needs ("" for nil)
int32_t api_cap_set_option(cr_ctx* c, const char* name, const char* value) {
  return guarded(c, [&] {
    std::string n = name;
    graph::Recorder& r = rec(c);
    if (n == "debug_dir") r.debug_dir = value;
    else if (n == "cache_dir") r.cache_dir = value;
    else if (n == "sync_compile") r.sync_compile = std::string(value) == "true";
    else if (n == "cudagraphs") r.cudagraphs = std::string(value) == "true";
    else if (n == "autotune") r.autotune = std::string(value) == "true";
    else if (n == "autotune_budget_ms") r.autotune_budget_ms = std::strtod(value, nullptr);
    else if (n == "cache_max_mb") jit::set_cache_max_mb(std::strtod(value, nullptr));
    else fail(cat("config: unknown option ", n));
    return 0;
  });
}
int32_t api_cap_active(cr_ctx* c) { return rec(c).active(); }
// os.exit: the process ends, so every compile stops - the one in progress finishes (whoever
// owns it: NVRTC's statics die before the compile thread's atexit wait), the queued ones drop.
void api_cancel_compiles(cr_ctx* c) {
  jit::cancel_background_compiles(&rec(c));
  jit::stop_background_compiles();
}
int32_t api_env_setting(cr_ctx* c, const char* variable, const char** value) {
  return guarded(c, [&] {
    Setting s;
    if (!find_setting(variable, &s)) fail(cat("no setting ", variable, " (vm/config.hpp declares them)"));
    *value = env_setting(s);
    return 0;
  });
}
const char* api_default_cache_dir() {
  static thread_local std::string dir;
  dir = jit::default_cache_dir();
  return dir.c_str();
}

int32_t api_cap_plan(cr_ctx* c, int32_t fn, cr_tensor** cands, int32_t n, int32_t nargs) {
  return guarded(c, [&] { return rec(c).plan(fn, cands, n, nargs); });
}

int32_t api_cap_replay(cr_ctx* c, int32_t fn, cr_tensor** cands, int32_t n, cr_tensor** outs, int32_t cap) {
  return guarded(c, [&] {
    std::vector<Tensor> rets;
    if (!rec(c).has_plan(fn)) return -4;
    if (!rec(c).replay(fn, cands, n, rets)) return -3;
    if (autograd::inference_mode) [[unlikely]]  // (a plan made under it: its new values are inference tensors)
      for (Tensor& r : rets) {
        bool fresh = true;
        for (int i = 0; i < n; ++i) fresh = fresh && !(cands[i] && cands[i]->_storage == r.get()->_storage);
        if (fresh) r.get()->_flags |= autograd::kInferenceTensor;
      }
    note_allocations(c);
    return hand_out(Context::of(c), rets, outs, cap);
  });
}

int32_t api_cuda_device_count() { return cuda::device_count(); }
const char* api_cuda_unavailable() {
  static thread_local std::string why;
  cuda::driver(&why);
  return why.c_str();
}
int32_t api_cuda_synchronize(cr_ctx* c, int32_t dev) {
  return guarded(c, [&] {
    cuda::synchronize(dev);
    return 0;
  });
}
void api_cuda_empty_cache() { cuda::empty_cache(); }
void api_host_memory(int32_t reset_peak, double* out) {
  out[0] = double(host_storage_in_use());
  out[1] = double(host_storage_peak());
  if (reset_peak) host_storage_reset_peak();
}
const char* api_cpu_info(int32_t what) {
  // (the level crescent's kernels run at under CRESCENT_CPU_MARCH's cap, which names OpenBLAS's core)
  static const std::string capability = [] {
    const int cap = march_vector_bytes(cpu_march_override());
    const char* core = openblas_core_for(use_avx512_loops(), cpu_has_avx2_fma(), cap);
    return std::string(!core ? "DEFAULT" : std::string_view(core) == "SkylakeX" ? "AVX512" : "AVX2");
  }();
  static const std::string blas = [] {
    try {
      const Cblas& b = cblas("T.__config__");
      const char* by = b.user_core ? " (OPENBLAS_CORETYPE)" : b.named ? " (named by crescent)" : " (OpenBLAS's choice)";
      return cat("OpenBLAS, core ", b.core.empty() ? "unknown" : b.core, by);
    } catch (const Error& e) {
      return std::string(e.what());
    }
  }();
  return what == 0 ? capability.c_str() : blas.c_str();
}
void api_cuda_stats(int32_t dev, double* out) {
  const cuda::MemoryStats m = cuda::memory_stats(dev);
  const cuda::LaunchCounts& l = cuda::launch_counts();
  put_stats(out, CR_CUDA_STATS,
            {{CR_CUDA_DRIVER_ALLOCS, double(m.driver_allocs)}, {CR_CUDA_DRIVER_FREES, double(m.driver_frees)},
             {CR_CUDA_CACHE_HITS, double(m.cache_hits)}, {CR_CUDA_IN_USE, double(m.in_use)},
             {CR_CUDA_RESERVED, double(m.reserved)}, {CR_CUDA_HOST_OPS, double(host_op_count())},
             {CR_CUDA_MODULES_COMPILED, double(jit::cache_stats().cuda_compiled)},
             {CR_CUDA_KERNEL_LAUNCHES, double(l.kernels.load())}, {CR_CUDA_BLAS_CALLS, double(l.blas.load())},
             {CR_CUDA_GRAPH_LAUNCHES, double(l.graphs.load())}, {CR_CUDA_GRAPH_NODES, double(l.graph_nodes.load())},
             {CR_CUDA_PEAK_IN_USE, double(m.peak_in_use)}, {CR_CUDA_PEAK_RESERVED, double(m.peak_reserved)}});
}
void api_cuda_reset_peak(int32_t dev) { cuda::reset_peak_memory(dev); }
int32_t api_cuda_time(cr_ctx* c, int32_t dev, int32_t phase, double* ms) {
  return guarded(c, [&] {
    *ms = cuda::time_events(dev, phase);
    return 0;
  });
}

static_assert(CR_STREAM_SLOTS == cuda::kSlots);
// One entry of cr_stream_api: `f` computes out[0] (streams, events and graphs need a device).
template <class F> int32_t stream_call(cr_ctx* c, double* out, F&& f) {
  return guarded(c, [&] {
    if (cuda::device_count() == 0) {
      std::string why;
      cuda::driver(&why);
      fail(cat("cuda: streams and events need a CUDA device: ", why));
    }
    *out = f();
    return 0;
  });
}
// An entry whose call returns nothing: out[0] = 0.
#define CR_STREAM_VOID(name, ...) [](cr_ctx* c, double* out, __VA_ARGS__) { return stream_call(c, out, [&] { name; return 0.0; }); }

const cr_stream_api* stream_api_table() {
  static const cr_stream_api t = {
      [](cr_ctx* c, double* out, int64_t dev) { return stream_call(c, out, [&] { return double(cuda::pool_stream(int(dev))); }); },
      [](cr_ctx* c, double* out, int64_t dev) {
        return stream_call(c, out, [&] {
          if (dev < 0 || dev >= cuda::device_count()) fail(cat("cuda: no device cuda:", dev));
          return double(dev * cuda::kSlots + cuda::current_slot(int(dev)));
        });
      },
      CR_STREAM_VOID(cuda::set_current_stream(s), int64_t s),
      CR_STREAM_VOID(cuda::stream_synchronize(s), int64_t s),
      [](cr_ctx* c, double* out, int64_t s) { return stream_call(c, out, [&] { return double(cuda::stream_query(s)); }); },
      CR_STREAM_VOID(cuda::stream_wait_stream(s, other), int64_t s, int64_t other),
      CR_STREAM_VOID(cuda::stream_wait_event(s, e), int64_t s, int64_t e),
      [](cr_ctx* c, double* out, int64_t dev, int64_t timing) {
        return stream_call(c, out, [&] { return double(cuda::event_create(int(dev), timing != 0)); });
      },
      CR_STREAM_VOID(cuda::event_destroy(e), int64_t e),
      CR_STREAM_VOID(cuda::event_record(e, s), int64_t e, int64_t s),
      [](cr_ctx* c, double* out, int64_t e) { return stream_call(c, out, [&] { return double(cuda::event_query(e)); }); },
      CR_STREAM_VOID(cuda::event_synchronize(e), int64_t e),
      [](cr_ctx* c, double* out, int64_t e, int64_t end) { return stream_call(c, out, [&] { return double(cuda::event_elapsed_ms(e, end)); }); },
      [](cr_ctx* c, double* out, int64_t dev) { return stream_call(c, out, [&] { return double(cuda::graph_new(int(dev))); }); },
      [](cr_ctx* c, double* out, int64_t g, int64_t pool) {
        return stream_call(c, out, [&] {
          if (pool > 0) cuda::graph_at(g).share_pool(cuda::graph_at(pool));
          cuda::graph_at(g).begin();
          return 0.0;
        });
      },
      [](cr_ctx* c, double* out, int64_t g) {
        return stream_call(c, out, [&] {
          cuda::graph_at(g).end();
          return double(cuda::graph_at(g).nodes());
        });
      },
      CR_STREAM_VOID(cuda::graph_at(g).launch(), int64_t g),
      CR_STREAM_VOID(cuda::graph_at(g).reset(), int64_t g),
      CR_STREAM_VOID(cuda::graph_delete(g), int64_t g),
      CR_STREAM_VOID(cuda::graph_at(g).abort(), int64_t g),
      [](cr_ctx* c, double* out, int64_t on) {  // (a setting: needs no device)
        return guarded(c, [&] {
          cuda::set_allow_tf32(on != 0);
          return int32_t(*out = 0);
        });
      },
  };
  return &t;
}
#undef CR_STREAM_VOID

int32_t api_record_stream(cr_ctx* c, cr_tensor* t, int64_t s) {
  return guarded(c, [&] {
    graph::ensure_real(Context::of(c), t);
    Tensor x(t, true);
    if (x.device().is_cpu()) fail("record_stream: expected a CUDA tensor, got one on cpu");
    auto* st = static_cast<Storage*>(t->_storage);
    if (st && !st->free_fn) cuda::record_stream(st->data, x.device().index, s);  // (memory we did not allocate: its owner frees it)
    return 0;
  });
}

const char* api_native_unavailable(int32_t cuda) {
  static thread_local std::string why;
  const bool ok = cuda ? jit::cuda_backend_available(&why) : jit::cpu_backend_available(&why);
  return ok ? nullptr : why.c_str();
}

int32_t api_attention_fused(const char* dtype, int64_t l, int64_t e, int64_t ev, double scale) {
  DType d;
  return parse_dtype(dtype, &d) && cuda::attention_takes(d, l, e, ev, scale) ? 1 : 0;
}

int32_t api_attention_mask_fits(cr_tensor* mask, cr_tensor* q, cr_tensor* k) {
  const Tensor m(mask, true), qt(q, true), kt(k, true);
  if (qt.dim() < 2 || kt.dim() < 2) return 0;
  return attention_mask_problem(m.dtype(), m.device(), m.sizes(), qt.dtype(), qt.device(), attention_scores_shape(qt, kt)).empty();
}

const char* api_cudnn_unavailable() {
  static thread_local std::string why;
  return cuda::cudnn_available(&why) ? nullptr : why.c_str();
}

// Which library the convolutions of CUDA tensors take, logged when it changes.
int32_t cudnn_takes(cr_ctx* c) {
  static std::atomic<int> logged{-1};
  std::string why;
  const bool on = cuda::cudnn_flag(cuda::CudnnFlag::enabled), ok = cuda::cudnn_available(&why);
  if (Context::of(c).logs.perf && logged.exchange(int(on) * 2 + int(ok)) != int(on) * 2 + int(ok))
    log_line("perf", on && ok ? "convolutions on CUDA: " + cuda::cudnn_version_name()
                              : cat("convolutions on CUDA: im2col gather + cuBLAS (",
                                    on ? "cuDNN unavailable: " + why : "T.backends.cudnn.enabled is false", ")"));
  return on && ok;
}

int32_t api_deterministic(int32_t mode) {
  return mode < 0 ? deterministic_algorithms.load() : deterministic_algorithms.exchange(mode);
}
int32_t api_flush_denormal(int32_t mode) { return set_flush_denormal(mode != 0); }
int32_t api_cudnn_state(cr_ctx* c, int32_t what, int32_t value) {
  if (what == 2) return cuda::cudnn_version();
  if (what == 3) return cudnn_takes(c);
  if (what == 8) return cuda::cudnn_sdpa_available(value);
  if (what == 6)
    return int(value < 0 ? cuda::cudnn_api_setting() : cuda::set_cudnn_api_setting(cuda::CudnnApi(value != 0)));
  const auto f = what == 0   ? cuda::CudnnFlag::enabled
                 : what == 1 ? cuda::CudnnFlag::allow_tf32
                 : what == 7 ? cuda::CudnnFlag::sdp
                             : cuda::CudnnFlag::benchmark;
  return value < 0 ? cuda::cudnn_flag(f) : cuda::set_cudnn_flag(f, value != 0);
}

}  // namespace

const cr_api* api_table() {
  static const cr_api api = {
      1,
      int32_t(Registry::get().ops().size()),
      api_op_info,
      api_call,
      api_take_outputs,
      api_last_error,
      api_retain,
      api_release,
      api_item,
      api_read_all,
      api_format,
      api_data_ptr,
      api_is_contiguous,
      api_manual_seed,
      api_rng_state,
      api_num_threads,
      api_set_num_threads,
      api_set_printoptions,
      api_now_us,
      api_gc_done,
      api_save_safetensors,
      api_load_safetensors,
      api_loaded_name,
      api_save_npy,
      api_load_npy,
      api_cap_function,
      api_cap_begin,
      api_cap_need,
      api_cap_data_size,
      api_cap_grad_on,
      api_cap_finish,
      api_cap_suspend,
      api_cap_collect_pays,
      api_cap_abort,
      api_cap_where,
      api_cap_reset,
      api_cap_stats,
      api_cap_report,
      api_cap_set_logs,
      api_cap_unnamed,
      api_cap_name,
      api_cap_drop,
      api_cap_set_option,
      api_cap_active,
      api_cap_plan,
      api_cap_replay,
      api_cuda_device_count,
      api_cuda_unavailable,
      api_cuda_synchronize,
      api_cuda_empty_cache,
      api_cuda_stats,
      api_cuda_reset_peak,
      api_cuda_time,
      api_record_stream,
      api_native_unavailable,
      api_attention_fused,
      api_attention_mask_fits,
      api_cudnn_unavailable,
      api_cudnn_state,
      api_deterministic,
      api_flush_denormal,
      jit::wait_background_compiles,
      api_cancel_compiles,
      api_env_setting,
      api_default_cache_dir,
      api_host_memory,
      api_cpu_info,
      autograd::api_table(),
      stream_api_table(),
      dist_api_table(),
  };
  return &api;
}

}  // namespace cr
