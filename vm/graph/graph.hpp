// The graph IR: SSA values over tensor metadata, nodes that are registry ops, graph inputs or
// folded constants. A graph is one captured segment of a compiled Lua function; it is built from
// the trace tree (vm/guards/trace.hpp), optimised by the passes below and run by a backend
// (today the eager interpreter, vm/graph/interp.cpp).
//
// Sizes are SymInts: a constant, or a symbol with the value it had when recorded. Every size is
// a constant until dynamic shapes make some symbolic; the type is here so that the passes and the
// printer already speak in expressions.
#pragma once
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "vm/registry.hpp"
#include "vm/tensor.hpp"

namespace cr::graph {

struct SymInt {
  int64_t value = 0;  // the constant, or the value the symbol had when recorded
  int32_t sym = -1;   // -1: a constant
  bool operator==(const SymInt&) const = default;
  std::string str() const { return sym < 0 ? std::to_string(value) : cat("s", sym); }
};
using SymShape = std::vector<SymInt>;
SymShape constant_shape(const Shape& s);
Shape concrete(const SymShape& s);

// What a value looks like: enough to create its tensor header before it is computed.
struct ValueMeta {
  SymShape sizes;
  Shape strides;
  int64_t offset = 0;
  DType dtype = DType::f32;
  Device device;
  bool operator==(const ValueMeta&) const = default;
  std::string str() const;  // "float32{2,3}" (+ strides when not contiguous)
};
ValueMeta meta_of(const Tensor& t);

// One argument of an op node: a mirror of cr_value that owns its data.
struct Arg {
  int32_t tag = kNone;          // cr::ValueTag
  int32_t value = -1;           // kTensor: the value id
  std::vector<int32_t> values;  // kTensors: value ids
  double num = 0;               // kNumber, kBool; kDoubles: 1 when the data was all booleans
  std::vector<int64_t> ints;    // kInts
  std::vector<double> doubles;  // kDoubles
  std::string str;              // kString
  // kNumber: a number that varies between calls (automatic dynamic numbers, keys.cpp): its index
  // in the call's numbers, which every run is given (run_graph); `num` is the recorded value.
  // -1: a constant of the graph.
  int32_t varying = -1;
  bool operator==(const Arg&) const = default;
  // a number, or a boolean where a number goes (0 / 1, as OpCall::number reads it)
  bool is_number() const { return tag == kNumber || tag == kBool; }
  static Arg tensor(int32_t v) { return Arg{kTensor, v}; }
  static Arg number(double x) { return Arg{kNumber, -1, {}, x}; }
  static Arg boolean(bool b) { return Arg{kBool, -1, {}, b ? 1.0 : 0.0}; }
};

enum class NodeKind : uint8_t { Input, Op, Const };

// A native backend's compiled form of a graph (jit/): runs it with the same contract as
// run_eager below.
struct Executable {
  virtual ~Executable() = default;
  virtual void run(Context& ctx, std::vector<Tensor>& vals, const double* numbers = nullptr,
                   const std::vector<char>* unheld = nullptr) const = 0;
  // By graph value: those a run gives storage (the others are fused away); null: every value.
  virtual const std::vector<char>* stores() const { return nullptr; }
};

// Derived from a graph on first use, then kept; a copy starts without it (a copy is made to be
// changed, and would otherwise keep the original's).
template <class T> class Derived {
 public:
  Derived() = default;
  Derived(const Derived&) {}
  Derived& operator=(const Derived&) {
    std::lock_guard<std::mutex> lock(mutex_);
    value_.reset();
    return *this;
  }
  template <class Make> const T& get(Make make) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!value_) value_ = std::make_unique<T>(make());
    return *value_;
  }

 private:
  mutable std::mutex mutex_;
  mutable std::unique_ptr<T> value_;
};
using DeadLists = std::vector<std::vector<int32_t>>;  // per step: the values dead after it

// How to compile a graph to native code (jit/jit.hpp compile_native, reached through
// Hooks::compile_native).
struct NativeOptions {
  std::string cache_dir;   // "" or "0": no disk cache
  std::string debug_dir;   // per graph: loop IR, fusion groups, kernels, timings ("" = none)
  bool sync = true;        // compile in line (T.config.sync_compile)
  // only a graph that lowers whole (no externs, no lowering error): otherwise the slot is left
  // without code and with `unlowered` set (eager CUDA ops then take their host path)
  bool whole_graph = false;
  bool log_fusion = false, log_code = false;
  bool log_progress = false;  // the note of a long compile (jit/progress.hpp)
  bool log_perf = false;      // a line after each compile phase (jit/driver.cpp)
  int threads = 1;
  // mode = "max-autotune" / T.config.autotune: candidate configurations of every kernel are
  // timed in the background within the budget, the fastest kept (jit/autotune.hpp)
  bool autotune = false;
  double autotune_budget_ms = 2000;
  bool log_autotune = false;  // CRESCENT_LOGS=autotune: candidates, times, winner per kernel
  Device device;           // where the graph's tensors live (CUDA: jit/cuda, else jit/cpu)
  // a background compile that only speeds up code that already runs natively (an eager kernel's
  // specialisation): queued behind every other compile (jit/background.hpp)
  bool deferrable = false;
  const void* owner = nullptr;  // the VM compiling (its end drops its queued background compiles)
};

// Where a graph's native code arrives: set by the compile driver (possibly on a background
// thread); the graph runs eagerly until `ready`.
struct NativeSlot {
  std::mutex mutex;
  bool done = false;        // compiled or failed
  bool seen = false;        // the recorder has counted the outcome (stats, logs)
  std::shared_ptr<const Executable> exe;  // null after a failure, or when eager is as good
  std::string error;        // why it failed
  bool unlowered = false;   // Options::whole_graph and the graph does not lower whole
  int kernels = 0;          // compiled
  int kernels_loaded = 0;   // taken from the kernel cache (memory or disk) instead
  bool disk_hit = false;
  double compile_ms = 0;
  std::string phases;       // where compile_ms went (CRESCENT_LOGS=perf)
  std::vector<std::string> log;  // lines for CRESCENT_LOGS, printed by the recorder
};

struct Node {
  NodeKind kind = NodeKind::Op;
  int32_t op = -1;             // registry index (Op)
  std::vector<Arg> args;       // Op
  std::vector<int32_t> outs;   // value ids; an output that IS an argument (an op returning its
                               // input unchanged) names the argument's value
  int32_t input_index = -1;    // Input: position in Graph::inputs
  Tensor constant;             // Const
  std::string where;           // the Lua "file:line" that made it
  const OpDef& def() const { return Registry::get().ops()[size_t(op)]; }
  bool inplace() const { return kind == NodeKind::Op && (def().flags & kReturnsSelf); }
  // writes arguments in place with no value of its own for them (OpDef::writes: an optimizer's
  // update): later reads name the same values, so passes treat it as a write to their storage
  bool writes() const { return kind == NodeKind::Op && def().writes != 0; }
  // random or a collective: an effect the graph passes never fold, merge, drop or recompute
  bool random() const { return kind == NodeKind::Op && (def().flags & (kRandom | kCollective)); }
};

struct Value {
  int32_t node = -1;       // defining node
  ValueMeta meta;
  int32_t alias_of = -1;   // input value id whose storage this input shares (inputs only)
  int32_t views = -1;      // op outputs: the argument value whose storage this one shares
};

struct Graph {
  std::vector<Node> nodes;     // in execution order
  std::vector<Value> values;
  std::vector<int32_t> inputs;   // value ids, in the order the backend receives tensors
  std::vector<int32_t> outputs;  // value ids the graph must produce
  // Values a pass removed because they equal another: the backend hands the kept value to lazy
  // tensors of the removed one - the same storage for an identity view, a copy for a common
  // subexpression (in eager mode they are two tensors: writing one must not change the other).
  struct Alias {
    int32_t removed, kept;
    bool copy;
    bool operator==(const Alias&) const = default;
  };
  std::vector<Alias> aliases;
  std::string name;              // "f.lua:3 #1" for logs
  // Sizes are symbolic (dynamic shapes): the metadata is one instance's, and native code is
  // compiled size-generic (jit/loop_ir.hpp, parametrize) so other instances reuse it.
  bool dynamic = false;
  bool reinstance = false;  // a dynamic graph's later instance: counted as compiled only when
                            // its native code needed new kernels
  // No Lua tensor waits on a value that is not an output (a traced backward graph): the
  // backends free each such value after its last reader, as eager autograd frees its temporaries.
  bool transient = false;
  Derived<DeadLists> dead;  // run_eager's, per node (dead_after)
  std::shared_ptr<NativeSlot> native;  // set when a native backend compiles this graph

  int32_t add_value(int32_t node, const ValueMeta& m);
  int op_count() const;
  std::string str() const;       // one node a line (CRESCENT_LOGS=graph)
  std::string node_str(size_t i) const;  // "%2 = mul(%0, 2) : float32{3}"
};

// ---- passes (vm/graph/passes.cpp) ----------------------------------------------------------
// The value whose storage `v` uses (following views, and inputs sharing a storage), and the
// values whose storage some in-place op writes (by storage root).
int32_t storage_root(const Graph& g, int32_t v);
std::vector<char> written_roots(const Graph& g);
// f(root) for each storage root op node n writes: an in-place op's first argument's, and those
// of the arguments its OpDef::writes names (lists included).
template <class F> void each_written_root(const Graph& g, const Node& n, F&& f) {
  if (n.kind != NodeKind::Op) return;
  if (n.inplace()) f(storage_root(g, n.args[0].value));
  for (size_t i = 0; n.writes() && i < n.args.size() && i < 32; ++i) {
    if (!(n.def().writes >> i & 1)) continue;
    if (n.args[i].tag == kTensor) f(storage_root(g, n.args[i].value));
    for (int32_t v : n.args[i].values) f(storage_root(g, v));
  }
}
// Whether op node n may fail on tensor values (registry flag kValueErrors): kept when unused.
bool fails_on_values(const Graph& g, const Node& n);
// Whether n is a view op whose output shares its first argument's storage (no data read).
bool is_view_node(const Graph& g, const Node& n);
// Value `from` replaced by `to` in every argument, output and view, and recorded in g.aliases
// (copy: lazy tensors of `from` get a copy of `to`, else `to` itself).
void substitute(Graph& g, int32_t from, int32_t to, bool copy);

// Each returns the number of nodes it changed or removed. `optimize` runs them in order and
// renumbers nothing: value ids stay those of the recording so lazy tensors can find theirs.
int canonicalize_views(Graph& g);
int fold_constants(Graph& g, Context& ctx);
int eliminate_common_subexpressions(Graph& g);
int eliminate_dead_code(Graph& g, bool keep_effects = true);
// Drops the nodes whose keep[i] is 0 (their values lose their node); the number dropped.
int keep_nodes(Graph& g, const std::vector<char>& keep);
// Recorded patterns that a fused registry op computes better (vm/graph/patterns.cpp: attention).
int fuse_patterns(Graph& g);
void optimize(Graph& g, Context& ctx);

// ---- the eager backend (vm/graph/interp.cpp) ------------------------------------------------
// The cr_value array of one op node, pointing into `vals` and into the node's own storage.
struct CallArgs {
  static constexpr size_t kInline = 8;
  cr_value inline_args[kInline];
  std::vector<cr_value> more;
  std::vector<std::vector<cr_tensor*>> lists;  // only for tensor-list arguments (cat, stack)
  cr_value* args;
  CallArgs(const Node& n, const std::vector<Tensor>& vals, const double* numbers);
};

// `numbers` (every run function): the call's numbers, by Arg::varying (null: none vary).
// `unheld` (every run function): per value id, 1 when nothing outside the run holds the value
// (no Lua tensor, no output, not saved for a backward): it is dropped after its last reader, as
// every such value of a transient graph is (null: none, unless the graph is transient).
// Runs g's nodes with the eager kernels. `vals` is indexed by value id; inputs must be set on
// entry; on return every value of a kept node is set. A value that holds a lazy tensor on entry
// may receive its output storage directly (then it is that same tensor on return). An op failure is rethrown as
// "file:line: op: message" with the position of the node that failed.
void run_eager(const Graph& g, Context& ctx, std::vector<Tensor>& vals, const double* numbers = nullptr,
               const std::vector<char>* unheld = nullptr);
// Gives every Const node's value its own copy of the constant (each run: Lua may write it).
void set_constants(const Graph& g, std::vector<Tensor>& vals);
// Liveness, one walk for both backends: a run of `steps` steps, where uses(i, f) calls f(v) for
// each value step i reads or writes; per step, the values no later step uses, except those
// with keep[v] (what outlives the run).
using ValueVisit = std::function<void(int32_t)>;
DeadLists dead_after(size_t steps, const std::vector<char>& keep,
                     const std::function<void(size_t, const ValueVisit&)>& uses);
// What outlives any run of g: its inputs, outputs and the values of its aliases (of a transient
// graph: its outputs and the values their aliases keep).
std::vector<char> kept_values(const Graph& g);
// Per node of g, the values dead after it (dead_after over g's nodes); g.dead caches it.
DeadLists dead_after(const Graph& g);
// The same with the values `keep` marks kept (kept_values(g) and more).
DeadLists dead_after(const Graph& g, const std::vector<char>& keep);
// Runs op node `index` of g as run_eager does (the native backends run their Extern nodes so).
void run_node(const Graph& g, size_t index, Context& ctx, std::vector<Tensor>& vals, const double* numbers = nullptr);
// The native code that has landed for g (null: none yet, failed, or eager is as good).
std::shared_ptr<const Executable> executable_of(const Graph& g);
// The graph's native code when it is ready, else run_eager.
void run_graph(const Graph& g, Context& ctx, std::vector<Tensor>& vals, const double* numbers = nullptr,
               const std::vector<char>* unheld = nullptr);

}  // namespace cr::graph
