// The trace recorder (DESIGN.md, execution model steps 2-5). While a compiled function runs,
// every op call comes here instead of running:
//  - replaying: the call is matched against the trace tree; on a match its outputs are lazy
//    tensors (headers with the recorded metadata and no storage) and nothing runs yet;
//  - recording: a call the tree has not seen (a guard failure, or the first call) runs eagerly
//    and is appended to the tree.
// A segment ends at a graph break (Lua needs a value) or at the function's return: its graph
// runs (raw while cold, optimised once hot), the lazy tensors get their storage, and recording
// resumes in a new segment whose site is the break.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "vm/context.hpp"
#include "vm/guards/trace.hpp"

namespace cr::graph {

struct Stats {
  int64_t graphs_compiled = 0, recompiles = 0, graph_breaks = 0, kernels_compiled = 0, disk_cache_hits = 0,
          eager_fallbacks = 0;
  double graph_run_us = 0;  // time spent running graphs (kernels included), for overhead figures
  int64_t replays = 0;      // reduce-overhead calls that ran without Lua
  double compile_ms = 0;    // the native compiles whose outcome the graphs have taken up
  int64_t kernels_loaded = 0;  // kernels their graphs took from the kernel cache (memory or disk)
  // compiled autograd (joint.hpp): backward graphs compiled, and segments / backwards that run
  // on eager autograd instead (CRESCENT_LOGS=aot says why)
  int64_t backward_graphs_compiled = 0, grad_fallbacks = 0;
  // the partitioner's choices (partition.hpp): forward values the training segments' plans save
  // and their bytes, and forward ops their backward graphs recompute (CRESCENT_LOGS=partition)
  int64_t saved_values = 0, saved_bytes = 0, recomputed_ops = 0;
  int64_t cudagraphs_recorded = 0, cudagraph_replays = 0;  // reduce-overhead on CUDA (cudagraph.hpp)
};

// What one segment of the last call did (for T.explain).
struct SegmentReport {
  int ops;
  std::string reason, where;  // how it ended
  std::string symbolic;       // its inputs' symbolic dims: "1:1=7 2:0=12u0" (0-based dims; u0: unbacked)
  std::string op_names;       // its ops in call order, space-separated
  bool backward_graph = false;  // a training segment differentiated as a graph (joint.hpp)
  char end = 'R';               // how it ended: 'R' return, 'B' graph break, 'S' sync point
  std::string grad_fallback;    // a training segment eager autograd differentiates: why
};

struct Segment;
struct ExecRecord;
struct Joint;
struct JointOptions;
struct GradPlan;
struct StepBackward;

class Recorder {
 public:
  explicit Recorder(Context& ctx);
  ~Recorder();

  int32_t new_function(const guards::Options& opts);
  // Starts a call of function `fn`; false when a capture is already active (a nested compiled
  // function is inlined into its caller's trace). `train` 1: grad mode is on and some argument
  // or parameter requires grad; 2: grad mode is on, and the call trains if a tensor requiring grad
  // reached an earlier capture of fn (an upvalue). A training call's segments are differentiated
  // as graphs (joint.hpp) and have their own trace trees, whose keys also hold grad mode.
  bool begin(int32_t fn, int cache_size_limit, int train = 0);
  bool active() const { return fn_ != nullptr; }
  // backward() inside a capture (the segment before it ended at a graph break): the engine's op
  // calls run eagerly, not recorded, until the scope ends (issue 35)
  struct Pause {
    Recorder& r;
    Context& ctx;
    int32_t capturing;
    explicit Pause(Recorder& rec, Context& c) : r(rec), ctx(c), capturing(c.ffi.capturing) {
      r.paused_ = true;
      ctx.ffi.capturing = 0;
    }
    ~Pause() {
      r.paused_ = false;
      ctx.ffi.capturing = capturing;
    }
  };
  bool paused() const { return paused_; }
  // backward() from `root` (one-element, no options) inside a capture (step.cpp): traced into the
  // segment being captured - gradients and their accumulation into .grad as graph values - when
  // root is a value of it; else returns why not ("": traced), and backward() is a graph break.
  std::string capture_backward(cr_tensor* root, const std::string& where);
  // Whether t is a lazy value of a segment that a backward() was traced into (step.cpp): no
  // autograd history can be given to it.
  bool stepped_value(const cr_tensor* t) const;
  // One op call inside the capture: `outs` gets the tensors to hand to Lua.
  void call(int op, const cr_value* args, int nargs, std::vector<Tensor>& outs);
  // Lua needs the value of `t` (a lazy tensor of the current segment): a graph break.
  void graph_break(const std::string& reason, const std::string& where, cr_tensor* needed);
  // An op whose result sizes come from the values (nonzero) is called: with dynamic = true a
  // sync point (the ops so far run, the segment ends without a graph break, and the result's
  // data-dependent dims are unbacked symbols of the next one), else a graph break.
  void data_size(const std::string& op, const std::string& where);
  // Lua turns grad mode on inside an inference capture (enable_grad, set_grad_enabled): a graph
  // break, after which the capture records training segments (their ops are differentiated).
  void grad_turned_on(const std::string& where);
  // The function returned `rets`: the last segment ends and the capture stops.
  void finish(const std::vector<cr_tensor*>& rets, const std::string& where);
  // The call yields `rets` (coroutine.yield; stdlib/compile.lua): its capture ends there as at a
  // return, and the function is never planned for reduce-overhead (a replay would not suspend).
  void suspend(const std::vector<cr_tensor*>& rets, const std::string& where);
  // Before finish: whether Lua should collect garbage first (ffi.collect: 1 always; 2 when the
  // replayed values it does not return still pass the collector's budget).
  bool collect_pays(cr_tensor* const* rets, int32_t n) const;
  // An error unwound the call: runs what was recorded (its side effects are due) and stops.
  // Runs the ops recorded before a Lua error unwound the call, then ends the capture; rethrows the
  // error of one of them (eager would have raised it first).
  void abort();
  void set_where(const std::string& where);  // position of the op recorded last
  cr_tensor* unnamed() const { return unnamed_; }  // the tensor ask_name wants named (or null)
  void name_arg(const std::string& name);     // its Lua name ("": none found)

  // reduce-overhead (stdlib/replay.lua). plan: after a call of `fn`, maps the inputs of its one
  // compiled segment to `cands` (the call's arguments and tensors reachable from its upvalues);
  // returns 1 when a plan exists, 0 when the call cannot be planned yet (not compiled yet), and
  // throws with the reason when it never can. replay: checks the guards of the plan's inputs
  // against `cands` and runs the graph; false on a guard failure (nothing ran).
  int plan(int32_t fn, cr_tensor* const* cands, int n, int nargs);
  bool replay(int32_t fn, cr_tensor* const* cands, int n, std::vector<Tensor>& rets);
  bool has_plan(int32_t fn);
  void before_write(Storage* s);
  void reset();                              // T.compiler.reset()
  // Compiled autograd's backward graphs (joint.cpp): optimised and handed to the native backend
  // (none for backend "eager" / "aot_eager"), then run as forward graphs are.
  std::shared_ptr<Graph> compile_backward(const std::shared_ptr<Graph>& traced, const JointOptions& o,
                                          std::vector<double>& numbers);
  void execute_backward(const Graph& g, std::vector<Tensor>& vals, const double* numbers) { execute(g, vals, numbers); }
  void note_plan(const std::string& name, const GradPlan& p);  // stats and logs of a partition
  void drop(int32_t fn);                     // its Lua function was collected

  Stats stats;
  Logs& logs;  // the VM's (Context::logs)
  static void log(const std::string& what, const std::string& text) { log_line(what, text); }
  std::string debug_dir;  // CRESCENT_DEBUG_DIR / T.config.debug_dir: graph dumps ("" = none)
  std::string cache_dir;  // T.config.cache_dir: compiled kernels on disk ("" or "0" = none)
  bool sync_compile = false;  // T.config.sync_compile: native code compiled in line
  bool cudagraphs = true;     // T.config.cudagraphs: reduce-overhead records CUDA graphs
  bool autotune = false;      // T.config.autotune: every compile tunes (as mode = "max-autotune")
  double autotune_budget_ms = 2000;  // T.config.autotune_budget_ms: tuning time per graph
  std::vector<SegmentReport> report;  // segments of the current / last call

 private:
  guards::Function& function(int32_t id);
  void end_segment(guards::EndKind kind, const std::string& reason, const std::string& where,
                   const std::vector<cr_tensor*>& needed);
  void start_segment(guards::Site& site);
  bool replay(int op, const cr_value* args, int nargs, std::vector<Tensor>& outs);
  void record(int op, const cr_value* args, int nargs, int32_t first_new, std::vector<Tensor>& outs);
  std::shared_ptr<Graph> instance(guards::Leaf& leaf);
  std::string symbolic_dims(const Segment& s) const;
  void run_pending();  // a replayed prefix runs before recording goes on
  void note_lazy(const std::vector<Tensor>& outs);  // replayed outputs: asks for a collection
  // `unheld`: values left out (unheld_values), whose storage is the run's to free
  std::vector<Tensor> values_for(const Graph& g, const std::vector<char>* unheld = nullptr);
  std::vector<char> unheld_values(const Graph& g, const Joint* joint, const std::vector<cr_tensor*>& needed);
  // collected: Lua collected garbage just before (the tensors it holds are the ones it reaches)
  void settle(guards::Leaf* leaf, std::vector<Tensor>& computed, bool learn, const Graph* g = nullptr,
              bool collected = false);
  // p, value vid of g that Lua holds, views an input or another value Lua holds: autograd's view
  void note_view(const Graph& g, int32_t vid, cr_tensor* p);
  std::shared_ptr<graph::Graph> compile(guards::Leaf& leaf, const Graph& raw);
  guards::Leaf& leaf_for(guards::EndKind kind, const std::string& reason, const std::string& where);
  void stop();
  std::shared_ptr<Graph> build(const guards::Leaf& leaf, const std::shared_ptr<Graph>& g, const guards::Options& o,
                               bool counted);
  // optimize(g); false when it threw, counted in `fallbacks` and logged on `channel` (g then runs
  // as it was recorded or traced: `as`)
  bool optimized(Graph& g, int64_t& fallbacks, const char* channel, const char* as);
  std::shared_ptr<Graph> plan_graph(guards::Leaf& leaf, const guards::Options& o, const std::vector<int32_t>& rets);
  void dump(const guards::Leaf& leaf, const Graph& g, const std::string& fname, double us);
  void remember_call(guards::Leaf& leaf, const std::vector<cr_tensor*>& rets);
  // native code (vm/graph/native.cpp): starts compiling an optimised graph for its backend, and
  // runs a graph - natively once its code is ready, counting the compile's outcome once.
  // `autotune`: the function's mode is "max-autotune" (T.config.autotune tunes every graph).
  void start_native(const std::shared_ptr<Graph>& g, const std::string& backend, bool autotune = false);
  // Training segments (joint.hpp): the segment's plan, its node for Lua's tensors after a run.
  void check_training(guards::Leaf& leaf);
  std::shared_ptr<Joint> joint_of(guards::Leaf& leaf);  // of this call's instance when dynamic
  void attach_node(const std::shared_ptr<Joint>& joint, const Graph& ran, std::vector<Tensor>& vals,
                   const std::vector<cr_tensor*>& needed);
  void run_with_autograd(const Graph& g, std::vector<Tensor>& vals);  // a prefix no graph differentiates
  void execute(const Graph& g, std::vector<Tensor>& vals, const double* numbers,
               const std::vector<char>* unheld = nullptr);
  std::shared_ptr<StepBackward> trace_step(int32_t root);  // step.cpp
  void run_step(const StepBackward& b, cr_tensor* root, const std::string& where);
  // reduce-overhead on CUDA (cudagraph.cpp): false when the call is left to the host replay
  bool replay_on_graph(guards::Plan& p, std::vector<Tensor>& vals, std::vector<Tensor>& rets);
  void record_on_graph(guards::Plan& p, std::vector<Tensor>& vals);

  Context& ctx_;
  std::vector<std::unique_ptr<guards::Function>> functions_;
  guards::Function* fn_ = nullptr;
  int cache_size_limit_ = 8;
  bool train_ = false;
  bool paused_ = false;
  // collect_pays said yes for stored values: the run that follows is that collection's (finish)
  mutable bool collected_for_stores_ = false;
  std::unique_ptr<Segment> seg_;
  std::string pending_reason_;  // the guard failure that started the current recording
  void ask_name(cr_tensor* t);
  cr_tensor* unnamed_ = nullptr;  // the argument of pending_reason_ to name, at name_at_
  size_t name_at_ = 0;
  std::vector<std::weak_ptr<ExecRecord>> records_;  // ways to recompute values not kept
  size_t records_live_ = 0;                           // records_'s size after its last pruning
  std::vector<std::pair<cr_tensor*, int32_t>> waiting_;  // settle's scratch list
};

// Outside a capture: a lazy tensor whose segment already ran without producing it is computed
// now; a tensor that carries an escape tracker tells its segment it was used.
void ensure_real(Context& ctx, cr_tensor* t);
// Before an in-place write to `s`: lazy values that would be recomputed from it are computed now.
void before_write(Context& ctx, Storage* s);
// A tensor with a cr_tensor::_lazy is released (Hooks::release_lazy).
void release_lazy(cr_tensor* t);

}  // namespace cr::graph
