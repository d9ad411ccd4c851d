/* The Lua <-> C++ boundary (DESIGN.md "The Lua boundary").
 *
 * This file is read twice: by the C++ compiler, and - with its '#' lines stripped - by LuaJIT's
 * ffi.cdef, so it must stay plain C declarations. The C++ side fills one `cr_api` table of
 * function pointers per process and hands its address, plus the VM's `cr_ctx`, to the Lua
 * module; Lua calls through the pointers, which LuaJIT compiles into direct calls. The types
 * they take (tensor headers, op arguments, cr_ctx) are the runtime's: vm/abi.h.
 */
#ifndef CRESCENT_FFI_API_H
#define CRESCENT_FFI_API_H
#include "vm/abi.h"
#ifdef __cplusplus
extern "C" {
#endif

/* Autograd (vm/lua/autograd_api.cpp, stdlib/autograd.lua). Functions returning int32_t give -1 on an
 * error (last_error) and -2 when a hook raised (the Lua side keeps its error). */
/* mode's `what`; an autocast state is bit 0 on, bits 4-7 the dtype; BOTH is CUDA's | CPU's << 8 */
enum cr_ag_mode { CR_AG_GRAD_MODE, CR_AG_INFERENCE_MODE, CR_AG_AUTOCAST_CUDA, CR_AG_AUTOCAST_CPU, CR_AG_AUTOCAST_BOTH };
enum cr_ag_query { CR_AG_REQUIRES_GRAD, CR_AG_IS_LEAF, CR_AG_RETAINS_GRAD, CR_AG_IS_INFERENCE };
/* backward's flags: CR_AG_RETURN_GRADS returns the inputs' gradients in outs (T.autograd.grad)
   instead of accumulating into .grad */
enum cr_ag_backward_flag { CR_AG_RETAIN_GRAPH = 1, CR_AG_CREATE_GRAPH = 2, CR_AG_ALLOW_UNUSED = 4, CR_AG_RETURN_GRADS = 8 };
/* status: an op's derivative (CR_AG_NO_RULE raises when backward reaches it) */
enum cr_ag_status { CR_AG_NO_RULE, CR_AG_HAS_RULE, CR_AG_NOT_DIFFERENTIABLE };
typedef struct cr_autograd_api {
  int32_t (*mode)(int32_t what, int32_t value); /* what: enum cr_ag_mode (BOTH read only); value -1
                                                   reads; returns the previous value */
  int32_t (*query)(cr_ctx* ctx, cr_tensor* t, int32_t what); /* what: enum cr_ag_query; -1: error */
  int32_t (*set_requires_grad)(cr_ctx* ctx, cr_tensor* t, int32_t b);
  cr_tensor* (*get_grad)(cr_ctx* ctx, cr_tensor* t);           /* NULL: none */
  int32_t (*set_grad)(cr_ctx* ctx, cr_tensor* t, cr_tensor* g); /* g NULL clears */
  const char* (*grad_fn)(cr_ctx* ctx, cr_tensor* t, double* id); /* NULL: a leaf (*id = -1: an error) */
  int32_t (*retain_grad)(cr_ctx* ctx, cr_tensor* t);
  int32_t (*add_hook)(cr_ctx* ctx, cr_tensor* t, int32_t id);
  int32_t (*dead_hooks)(cr_ctx* ctx, int32_t* out, int32_t cap);  /* the VM's hook ids of dead tensors */
  /* the Lua function running hook `id` on grad: 0 and *out = a new reference or NULL (keep
     grad), or -1 when the hook raised */
  void (*set_hook_caller)(cr_ctx* ctx, int32_t (*fn)(int32_t id, cr_tensor* grad, cr_tensor** out));
  /* backward from n roots (grads[i] NULL: ones for a one-element root) to the leaves, or to
     `inputs` only; flags: enum cr_ag_backward_flag (outs NULL without CR_AG_RETURN_GRADS) */
  int32_t (*backward)(cr_ctx* ctx, cr_tensor** roots, cr_tensor** grads, int32_t n, cr_tensor** inputs,
                      int32_t ninputs, int32_t flags, cr_tensor** outs);
  void (*where)(cr_ctx* ctx, const char* where); /* the Lua position of the last recorded op */
  int32_t (*status)(int32_t op); /* op's derivative: enum cr_ag_status */
  /* a hook called (by the hook caller, with the leaf itself) after backward accumulated into the
     leaf's .grad */
  int32_t (*add_post_hook)(cr_ctx* ctx, cr_tensor* t, int32_t id);
  /* backward() from root inside a capture, traced into the graph being captured: 1, or 0 with
     *why saying why not (backward() is then a graph break); -1 on an error */
  int32_t (*capture_backward)(cr_ctx* ctx, cr_tensor* root, const char* where, const char** why);
  void (*remove_hook)(cr_ctx* ctx, cr_tensor* t, int32_t id); /* a hook's handle:remove() (either kind) */
  int32_t (*detach_)(cr_ctx* ctx, cr_tensor* t);  /* t leaves its graph: a leaf not requiring grad */
  /* leaf `to` takes leaf `from`'s hooks (both kinds): Module:to's converted parameters, which
     PyTorch converts in place (p.data = q) */
  int32_t (*move_hooks)(cr_ctx* ctx, cr_tensor* from, cr_tensor* to);
} cr_autograd_api;

/* T.distributed (vm/lua/dist_api.cpp, stdlib/distributed.lua): the process's NCCL communicator,
 * or the simulated process group of CPU tensors (vm/sim_group.hpp: files in folder dir).
 * Functions returning int32_t give -1 on an error (last_error). */
typedef struct cr_dist_api {
  const char* (*unavailable)(void);             /* NULL when NCCL loads, else why not */
  int32_t (*unique_id)(cr_ctx* ctx, char* out); /* ncclGetUniqueId: 128 bytes */
  int32_t (*init)(cr_ctx* ctx, const char* id, int32_t rank, int32_t world, int32_t device, double timeout_s);
  int32_t (*init_simulated)(cr_ctx* ctx, const char* dir, const char* run, int32_t rank, int32_t world,
                            double timeout_s);
  /* coll 0 all_reduce, 1 broadcast (root), 2 all_gather, 3 reduce_scatter (op: ncclRedOp_t) from
     send into recv (the same tensor: in place) on stream id `stream` (-1: the current one) */
  int32_t (*collective)(cr_ctx* ctx, int32_t coll, cr_tensor* send, cr_tensor* recv, int32_t op, int32_t root,
                        int64_t stream);
  /* waits on the host for stream `stream`'s work so far (-1: the current one); a timeout aborts
     the communicator and raises, naming `what` */
  int32_t (*wait)(cr_ctx* ctx, const char* what, int64_t stream);
  int32_t (*destroy)(cr_ctx* ctx, int32_t abort, double timeout_s);
  /* DDP's buckets for compiled backward graphs (vm/graph/buckets.hpp): n buckets of sizes[b]
     leaves each, one after another in leaves; returns the set's id (-1: an error) */
  int32_t (*buckets_register)(cr_ctx* ctx, cr_tensor* const* leaves, const int32_t* sizes, int32_t n);
  void (*buckets_set_sync)(int32_t id, int32_t sync);
  int32_t (*buckets_take_reduced)(int32_t id, cr_tensor* leaf); /* 1: reduced in a graph (clears) */
  void (*buckets_release)(int32_t id);
} cr_dist_api;

/* Constants the Lua side reads as ffi.C.<NAME> (never copies of the numbers). */

/* api.cap_stats's numbers (T.compiler.stats()), at these indices of a double[CR_CAP_STATS] */
enum cr_cap_stat {
  CR_STAT_GRAPHS_COMPILED, CR_STAT_RECOMPILES, CR_STAT_GRAPH_BREAKS, CR_STAT_KERNELS_COMPILED,
  CR_STAT_DISK_CACHE_HITS, CR_STAT_EAGER_FALLBACKS, CR_STAT_GRAPH_RUN_US, CR_STAT_REPLAYS,
  CR_STAT_COMPILES_PENDING, CR_STAT_COMPILE_MS, CR_STAT_KERNELS_LOADED, CR_STAT_BACKWARD_GRAPHS_COMPILED,
  CR_STAT_GRAD_FALLBACKS, CR_STAT_SAVED_VALUES, CR_STAT_SAVED_BYTES, CR_STAT_RECOMPUTED_OPS,
  CR_STAT_CUDAGRAPHS_RECORDED, CR_STAT_CUDAGRAPH_REPLAYS,
  CR_STAT_AUTOTUNE_GRAPHS, CR_STAT_AUTOTUNE_KERNELS, CR_STAT_AUTOTUNE_CANDIDATES, CR_STAT_AUTOTUNE_CACHED,
  CR_STAT_AUTOTUNE_REJECTED, CR_STAT_AUTOTUNE_MS,
  CR_CAP_STATS
};

/* api.cap_function's mode (T.compile's option mode) */
enum cr_compile_mode { CR_MODE_DEFAULT, CR_MODE_REDUCE_OVERHEAD, CR_MODE_MAX_AUTOTUNE };
/* api.cuda_stats's numbers (T.cuda.memory_stats()), at these indices of a double[CR_CUDA_STATS] */
enum cr_cuda_stat {
  CR_CUDA_DRIVER_ALLOCS, CR_CUDA_DRIVER_FREES, CR_CUDA_CACHE_HITS, CR_CUDA_IN_USE, CR_CUDA_RESERVED,
  CR_CUDA_HOST_OPS, CR_CUDA_MODULES_COMPILED, CR_CUDA_KERNEL_LAUNCHES, CR_CUDA_BLAS_CALLS,
  CR_CUDA_GRAPH_LAUNCHES, CR_CUDA_GRAPH_NODES, CR_CUDA_PEAK_IN_USE, CR_CUDA_PEAK_RESERVED,
  CR_CUDA_STATS
};
/* Streams, events and CUDA graphs (vm/cuda/streams.hpp, vm/cuda/graphs.hpp, stdlib/cuda.lua): one
 * entry per call; each returns 0, or -1 with last_error, and leaves its result (a new id, a query's
 * 1 when the work is done, an event's milliseconds, a graph's node count; else 0) in out[0]. Stream
 * and event ids are numbers. */
typedef struct cr_stream_api {
  int32_t (*stream_new)(cr_ctx* ctx, double* out, int64_t dev);       /* from device dev's pool */
  int32_t (*stream_current)(cr_ctx* ctx, double* out, int64_t dev);
  int32_t (*stream_set)(cr_ctx* ctx, double* out, int64_t stream);    /* make it current */
  int32_t (*stream_sync)(cr_ctx* ctx, double* out, int64_t stream);
  int32_t (*stream_query)(cr_ctx* ctx, double* out, int64_t stream);
  int32_t (*stream_wait_stream)(cr_ctx* ctx, double* out, int64_t stream, int64_t other); /* other's work so far */
  int32_t (*stream_wait_event)(cr_ctx* ctx, double* out, int64_t stream, int64_t event);
  int32_t (*event_new)(cr_ctx* ctx, double* out, int64_t dev, int64_t timing);
  int32_t (*event_free)(cr_ctx* ctx, double* out, int64_t event);
  int32_t (*event_record)(cr_ctx* ctx, double* out, int64_t event, int64_t stream);
  int32_t (*event_query)(cr_ctx* ctx, double* out, int64_t event);
  int32_t (*event_sync)(cr_ctx* ctx, double* out, int64_t event);
  int32_t (*event_elapsed)(cr_ctx* ctx, double* out, int64_t event, int64_t end); /* ms from event to end */
  int32_t (*graph_new)(cr_ctx* ctx, double* out, int64_t dev);
  int32_t (*graph_begin)(cr_ctx* ctx, double* out, int64_t graph, int64_t pool); /* pool > 0: share graph pool's memory */
  int32_t (*graph_end)(cr_ctx* ctx, double* out, int64_t graph);
  int32_t (*graph_replay)(cr_ctx* ctx, double* out, int64_t graph);
  int32_t (*graph_reset)(cr_ctx* ctx, double* out, int64_t graph);
  int32_t (*graph_delete)(cr_ctx* ctx, double* out, int64_t graph);
  int32_t (*graph_abort)(cr_ctx* ctx, double* out, int64_t graph);
  int32_t (*matmul_tf32)(cr_ctx* ctx, double* out, int64_t on); /* T.backends.cuda.matmul.allow_tf32; no device needed */
} cr_stream_api;
/* a stream id is device * CR_STREAM_SLOTS + slot (vm/cuda/streams.hpp kSlots) */
enum { CR_STREAM_SLOTS = 64 };

typedef struct cr_api {
  int32_t version;
  int32_t op_count;
  const cr_op_info* (*op_info)(int32_t op);
  /* Runs op `op` on `args`; writes up to `cap` results to `outs` and returns how many there are
   * (if more than cap, call take_outputs with a bigger buffer), or -1 on error. */
  int32_t (*call)(cr_ctx* ctx, int32_t op, const cr_value* args, int32_t nargs,
                  cr_tensor** outs, int32_t cap);
  int32_t (*take_outputs)(cr_ctx* ctx, cr_tensor** outs, int32_t cap);
  const char* (*last_error)(cr_ctx* ctx);
  void (*retain)(cr_tensor* t);
  void (*release)(cr_tensor* t);
  int32_t (*item)(cr_ctx* ctx, cr_tensor* t, double* out);
  /* Reads element `i` (row-major over the view) as a double; for totable. */
  int32_t (*read_all)(cr_ctx* ctx, cr_tensor* t, double* out, int64_t n);
  const char* (*format)(cr_ctx* ctx, cr_tensor* t);       /* tostring; NULL on error */
  void* (*data_ptr)(cr_ctx* ctx, cr_tensor* t); /* counts as a write (lazy values read first) */
  int32_t (*is_contiguous)(cr_tensor* t);
  void (*manual_seed)(cr_ctx* ctx, uint64_t seed);
  /* the generator's {seed, offset}: read into state, or (set) written from it */
  void (*rng_state)(cr_ctx* ctx, uint64_t* state, int32_t set);
  int32_t (*num_threads)(cr_ctx* ctx);                     /* -1: a bad CRESCENT_NUM_THREADS */
  int32_t (*set_num_threads)(cr_ctx* ctx, int32_t n);
  /* T.set_printoptions (vm/print.hpp); sci_mode -1 is automatic */
  void (*set_printoptions)(int32_t precision, double threshold, double edgeitems, int32_t linewidth, int32_t sci_mode);
  double (*now_us)(void);
  void (*gc_done)(cr_ctx* ctx, double lua_heap_kb);  /* after a collection Lua ran for service bit 1 or 4 */
  /* IO: safetensors / npy. save_* take n tensors and names; load_* return the count or -1.
   * Names go with their byte lengths: a name may hold NUL bytes (JSON's \u0000). */
  int32_t (*save_safetensors)(cr_ctx* ctx, const char* path, const char** names,
                              const size_t* name_lens, cr_tensor** ts, int32_t n);
  int32_t (*load_safetensors)(cr_ctx* ctx, const char* path, cr_tensor** outs, int32_t cap);
  const char* (*loaded_name)(cr_ctx* ctx, int32_t i, size_t* len);
  int32_t (*save_npy)(cr_ctx* ctx, const char* path, cr_tensor* t);
  cr_tensor* (*load_npy)(cr_ctx* ctx, const char* path);
  /* Graph capture (vm/graph/recorder.hpp). Functions returning int32_t give -1 on an error
   * (last_error, to be located at the caller) and -2 on an error whose message already starts
   * with its Lua position. */
  int32_t (*cap_function)(cr_ctx* ctx, const char* name, int32_t hot, int32_t fullgraph,
                          int32_t mode /* enum cr_compile_mode */, const char* backend,
                          int32_t dynamic); /* -1: automatic (nil), 0: false, 1: true */
  int32_t (*cap_begin)(cr_ctx* ctx, int32_t fn, int32_t cache_size_limit, int32_t train); /* 0: already active; train: Recorder::begin */
  int32_t (*cap_need)(cr_ctx* ctx, cr_tensor* t, const char* reason, const char* where);
  /* an op whose result sizes come from the values (`op`) is called: Recorder::data_size */
  int32_t (*cap_data_size)(cr_ctx* ctx, const char* op, const char* where);
  int32_t (*cap_grad_on)(cr_ctx* ctx, const char* where); /* grad mode turns on: Recorder::grad_turned_on */
  int32_t (*cap_finish)(cr_ctx* ctx, cr_tensor** rets, int32_t n, const char* where);
  int32_t (*cap_suspend)(cr_ctx* ctx, cr_tensor** rets, int32_t n, const char* where); /* coroutine.yield: Recorder::suspend */
  int32_t (*cap_collect_pays)(cr_ctx* ctx, cr_tensor** rets, int32_t n); /* 1: collect before cap_finish */
  int32_t (*cap_abort)(cr_ctx* ctx);  /* < 0: an op recorded before the error failed (last_error) */
  void (*cap_where)(cr_ctx* ctx, const char* where);
  void (*cap_reset)(cr_ctx* ctx);
  void (*cap_stats)(cr_ctx* ctx, double* out); /* out[CR_CAP_STATS] (enum cr_cap_stat) */
  const char* (*cap_report)(cr_ctx* ctx);      /* segments of the last call:
                                                  "ops\treason\twhere\tsymbolic dims\top names\tbackward graph
                                                  (0/1)\twhy eager autograd differentiates it\n" */
  int32_t (*cap_set_logs)(cr_ctx* ctx, const char* list);
  cr_tensor* (*cap_unnamed)(cr_ctx* ctx);  /* service 16: the tensor to name (then cap_name) */
  void (*cap_name)(cr_ctx* ctx, const char* name);
  void (*cap_drop)(cr_ctx* ctx, int32_t fn);  /* the compiled function was collected: free its traces */
  int32_t (*cap_set_option)(cr_ctx* ctx, const char* name, const char* value);  /* T.config: debug_dir, cache_dir, sync_compile */
  int32_t (*cap_active)(cr_ctx* ctx);
  /* reduce-overhead (stdlib/replay.lua): cap_plan returns 1 (planned), 0 (not yet), -1 (never:
   * last_error says why); cap_replay returns the number of tensors written to outs, -3 when a
   * guard failed (nothing ran), -4 when the plan is gone (T.compiler.reset), or an error code. */
  int32_t (*cap_plan)(cr_ctx* ctx, int32_t fn, cr_tensor** cands, int32_t n, int32_t nargs);
  int32_t (*cap_replay)(cr_ctx* ctx, int32_t fn, cr_tensor** cands, int32_t n, cr_tensor** outs, int32_t cap);
  /* CUDA (T.cuda): the device count (0 without a driver) and why there is none; synchronize;
   * empty_cache; stats of device dev into out[CR_CUDA_STATS] (enum cr_cuda_stat: in_use and
   * reserved in bytes, host_ops the ops run on host copies); reset_peak: the peaks of in_use and
   * reserved start again from now; time: phase 0 starts the device timer, phase 1 stops it and
   * writes the milliseconds to *ms. */
  int32_t (*cuda_device_count)(void);
  const char* (*cuda_unavailable)(void);
  int32_t (*cuda_synchronize)(cr_ctx* ctx, int32_t dev);
  void (*cuda_empty_cache)(void);
  void (*cuda_stats)(int32_t dev, double* out);
  void (*cuda_reset_peak)(int32_t dev);
  int32_t (*cuda_time)(cr_ctx* ctx, int32_t dev, int32_t phase, double* ms);
  /* record_stream: tensor t's memory is also used by stream s's work (api.stream: the other
   * stream, event and graph calls) */
  int32_t (*record_stream)(cr_ctx* ctx, cr_tensor* t, int64_t s);
  /* whether native code can be generated for the CPU (cuda = 0) or CUDA devices (1); NULL when
   * it can, else why not */
  const char* (*native_unavailable)(int32_t cuda);
  /* whether attention of this dtype (name), query rows, head sizes and scale runs as a fused CUDA
   * kernel (vm/kernels/cuda/attention.hpp attention_takes): F.scaled_dot_product_attention's choice */
  int32_t (*attention_fused)(const char* dtype, int64_t l, int64_t e, int64_t ev, double scale);
  /* whether `mask` is a mask the attention op takes for q and k (vm/ops/attention.hpp: bool or q's
   * dtype, q's device, broadcasting to the scores): F.scaled_dot_product_attention's choice */
  int32_t (*attention_mask_fits)(cr_tensor* mask, cr_tensor* q, cr_tensor* k);
  /* cuDNN (vm/cuda/cudnn.hpp, T.backends.cudnn): NULL when it can be used, else why not;
   * cudnn_state what 0 (enabled) / 1 (allow_tf32) / 4 (benchmark): value 0 or 1 sets, -1 reads,
   * returns the previous value; 2: cudnnGetVersion's code (0 when it does not load); 3: whether the
   * convolutions of CUDA tensors take cuDNN (logged under CRESCENT_LOGS=perf when it changes);
   * 6: the API (cuda::CudnnApi: 0 graph, 1 legacy): value sets, -1 reads, returns the previous one;
   * 7 (sdp: 16-bit attention through cuDNN) as 0; 8: whether device `value` and the cuDNN loaded can
   * run cuDNN's attention (vm/cuda/cudnn_sdpa.hpp) */
  const char* (*cudnn_unavailable)(void);
  int32_t (*cudnn_state)(cr_ctx* ctx, int32_t what, int32_t value);
  /* T.use_deterministic_algorithms (vm/deterministic.hpp): mode 0 off, 1 on, 2 on with warn_only
   * sets, -1 reads; returns the previous mode */
  int32_t (*deterministic)(int32_t mode);
  /* T.set_flush_denormal (vm/denormal.hpp): mode 0 off, 1 on; returns 1 where the CPU has the mode */
  int32_t (*flush_denormal)(int32_t mode);
  /* returns once no compile is queued or running on the background thread */
  void (*wait_compiles)(void);
  /* os.exit calls it: drops every compile queued on the background thread, waits for the one in
   * progress, and starts no other */
  void (*cancel_compiles)(cr_ctx* ctx);
  /* the environment setting `variable` (a CRESCENT_* variable declared in vm/config.hpp) into
   * *value (NULL when unset); -1 for a variable that is no setting (last_error) */
  int32_t (*env_setting)(cr_ctx* ctx, const char* variable, const char** value);
  const char* (*default_cache_dir)(void);  /* CRESCENT_CACHE_DIR, else ~/.cache/crescent */
  /* CPU tensor storage (vm/host_memory.hpp): out[0] bytes in use, out[1] the peak since the last
   * reset; reset_peak 1 then starts a new peak at the bytes in use */
  void (*host_memory)(int32_t reset_peak, double* out);
  /* the host CPU as crescent uses it: what 0, the capability of its kernels ("AVX512", "AVX2",
   * "DEFAULT"); 1, the BLAS ("OpenBLAS, core SkylakeX (named by crescent)", or why it is not
   * there) */
  const char* (*cpu_info)(int32_t what);
  const cr_autograd_api* autograd;
  const cr_stream_api* stream;
  const cr_dist_api* dist;
} cr_api;

#ifdef __cplusplus
}
#endif
#endif
