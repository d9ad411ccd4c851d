// The trace tree: per compiled function, the segments it has recorded, cached as a tree of op
// events. The tree is the guard structure (DESIGN.md, execution model step 4): an event's key
// holds the op, its scalar arguments and, for each tensor it sees for the first time, that
// tensor's dtype, device, sizes, strides, offset and aliasing. Replaying a call walks the tree by
// comparing keys; a key with no matching child is a guard failure and starts a new variant.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "vm/graph/graph.hpp"

namespace cr::graph {
struct Joint;
struct CudaReplay;
struct StepBackward;
}  // namespace cr::graph

namespace cr::guards {

using Key = std::vector<uint64_t>;

// Key layout: op, nargs, then per argument its tag and payload. Numbers are their bits; lists
// their length then items; strings their length then bytes, 8 a word. A tensor is either
// `vid` (a value this segment already has) or `kNewTensor | vid` followed by its guards:
// dtype | device type << 8 | device index << 16 | ndim << 24, offset, sizes, strides, alias + 1.
constexpr uint64_t kNewTensor = uint64_t(1) << 63;
// Dynamic shapes: a symbolic size in a new tensor's guards (any size matches), and the strides of
// a contiguous tensor with symbolic sizes (any contiguous layout matches).
constexpr uint64_t kSymbolicSize = ~uint64_t(0);
constexpr uint64_t kContiguousStride = ~uint64_t(1);
// Automatic dynamic numbers: a varying operand number matches any number of its class (integral
// or not, where the result dtype depends on it) whose range mask is the same (graph/keys.cpp
// fit_mask): NaN payloads no Lua number has.
enum class Varying { Number, Integer, Fraction };
constexpr int kFitMasks = 32;
constexpr uint64_t varying_word(Varying kind, int fits) { return ~uint64_t(2 + int(kind) + 3 * fits); }
constexpr bool is_varying_word(uint64_t w) { return w <= ~uint64_t(2) && w >= ~uint64_t(1 + 3 * kFitMasks); }
constexpr Varying varying_kind(uint64_t w) { return Varying((~w - 2) % 3); }

// A tensor seen for the first time by an event: it becomes a graph input.
struct NewInput {
  int32_t vid;
  graph::ValueMeta meta;
  int32_t alias_of;  // vid of an earlier input sharing its storage, or -1
  uint32_t symbolic = 0;  // dims whose size is symbolic (bit d: dim d, 0-based)
};

// What an event produced: one entry per tensor handed back to Lua (or, for an in-place op, the
// new SSA value of its first argument).
struct OutInfo {
  int32_t vid;
  bool fresh;        // false: the op returned one of its arguments unchanged
  graph::ValueMeta meta;
  int32_t views;     // vid of the argument whose storage it shares, or -1
  Shape sizes;       // meta.sizes as numbers: replays make lazy tensors from it
};

struct Leaf;

struct TraceNode {
  Key key;
  graph::Node node;                // op, arguments as value ids, outs, where
  std::vector<NewInput> new_inputs;
  std::vector<OutInfo> outs;
  // The op raised this error when recorded (a caller caught it with pcall): replaying the event
  // raises it again and adds nothing to the graph. Only errors that depend on nothing but the
  // key are kept (not those of ops flagged kValueErrors, which read index values).
  std::string error;
  TraceNode* parent = nullptr;
  std::vector<std::unique_ptr<TraceNode>> children;
  std::vector<std::shared_ptr<Leaf>> ends;  // segments that end here
  // backward() on value `vid` right after this event, traced into the segment (graph/step.cpp):
  // by {vid}, or in a dynamic segment {vid, the call's layouts and integers} (one trace a shape)
  std::map<std::vector<int64_t>, std::shared_ptr<graph::StepBackward>> step_backwards;
};

// Sync: a data-dependent size (nonzero under dynamic = true) ends the segment without a graph
// break; the next one starts at the op, its result's data-dependent dims unbacked symbols.
enum class EndKind : uint8_t { Break, Return, Sync };

// One variant of one segment: the path from its site's root to here.
struct Leaf {
  EndKind kind;
  std::string reason;  // break reason ("item()", "tostring()"...) or "return"
  std::string where;   // file:line of the break or of the return
  TraceNode* last;     // the last event of the segment (the site root when it has no ops)
  int variant = 0;     // 1-based among its site's variants
  int hits = 0;        // executions so far
  std::vector<char> escaping;                // by vid: needed after the segment ended
  // by vid: Lua still reached the value after a full collection at the segment's return (known
  // once reach_learned); lost: impure values the compiled graph does not keep (1; 2 or 3 once
  // known whether they can be computed from the state a run leaves: lazy.cpp replayable)
  std::vector<char> reachable, lost;
  bool reach_learned = false;
  std::vector<char> written_inputs;  // by vid: inputs whose storage the graph writes (lazy.cpp)
  std::shared_ptr<graph::Graph> raw;         // the recorded graph (built on first need)
  std::shared_ptr<graph::Graph> compiled;    // optimised, once hot
  // Dynamic shapes: some inputs have symbolic sizes (their keys say "any size"). `raw` has the
  // sizes of the recording; each call runs an instance of it with the call's sizes, optimised
  // and compiled per shape - from size-generic kernels that one compile serves (jit/loop_ir.hpp).
  bool dynamic = false;
  struct Instance {
    std::shared_ptr<graph::Graph> raw;       // `raw` with these layouts and integers
    std::shared_ptr<graph::Graph> compiled;  // raw, optimised and compiled
    std::shared_ptr<graph::Joint> joint;     // a training segment's: backward graphs of this shape
  };
  std::map<std::vector<int64_t>, Instance> instances;  // by input layouts and event integers
  std::vector<std::vector<int64_t>> instance_order;   // oldest first
  std::string recompile_reason;              // why the compiled graph must be rebuilt
  // a training segment (graph/joint.hpp): its gradient plan and backward graphs
  std::shared_ptr<graph::Joint> joint;
  bool stepped = false;  // a backward() was traced into it (graph/step.cpp): it sets .grad
  // reduce-overhead: `compiled` with only the returned values (`plan_rets`) as outputs - a
  // replay runs no Lua, so no other value can be used after it.
  std::shared_ptr<graph::Graph> plan_graph;
  std::vector<int32_t> plan_rets;
};

// Where segments start: the entry of the function, or just after a given break.
struct Site {
  std::string name;  // "entry" or "after item() at f.lua:3"
  TraceNode root;
  int variants = 0;
  bool eager = false;  // over cache_size_limit: runs eagerly from here on
  // Dims made symbolic by automatic dynamic shapes: by input vid, a mask of dims whose size
  // changed once between two calls that were otherwise the same (keys.cpp).
  std::map<int32_t, uint32_t> dynamic_dims;
  // Operand numbers made to vary (keys.cpp): (op ordinal in the segment) << 8 | argument.
  std::set<uint64_t> varying_numbers;
  // Integers of views, joins and creation ops (arange's end, zeros' sizes) that changed once,
  // symbolic from then on (keys.cpp): slots as varying_numbers'.
  std::set<uint64_t> size_numbers;
  // Inputs (by vid) whose strides changed with their symbolic sizes: any layout without overlap
  // matches them from then on.
  std::set<int32_t> dynamic_strides;
};

struct Options {
  int hot = 2;
  bool fullgraph = false;
  bool reduce_overhead = false;
  bool autotune = false;  // mode = "max-autotune"
  std::string backend = "auto";
  int dynamic = -1;  // API.md section 5: -1 automatic (nil), 0 always specialise, 1 symbolic sizes
                     // and varying operand numbers from the start
  std::string name;  // "f.lua:12" where the function was defined
};

// reduce-overhead: a whole call replayed without running Lua (Recorder::plan / replay).
struct Plan {
  std::shared_ptr<Leaf> leaf;            // keeps the compiled graph alive
  std::shared_ptr<graph::Graph> graph;
  std::vector<int32_t> source;           // per graph input: index into the caller's candidates
  // The candidates' identities as planned, both ways (Lua may have compared them: a == b): a
  // candidate that was the same tensor as an earlier one must be so again, and the candidates
  // that were distinct tensors (`distinct`; `planned`: their tensors then, by identity only)
  // must stay distinct; with each its autograd state as Lua reads it (replay.cpp, grad_state).
  std::vector<std::pair<int32_t, int32_t>> same;  // (candidate, the earlier one it must equal)
  std::vector<int32_t> distinct;
  std::vector<const cr_tensor*> planned;
  std::vector<uint8_t> grad;
  // every candidate that is no graph input keeps its metadata (Lua may have read its sizes)
  struct Other {
    int32_t cand;
    graph::ValueMeta meta;               // concrete sizes and strides; offset, dtype, device
  };
  std::vector<Other> others;
  int32_t ncands = 0;                    // a replay must bring exactly as many
  std::vector<int32_t> rets;             // per returned tensor: its vid
  std::vector<double> numbers;           // the numbers that vary, as in the planned call (a
                                         // replay's arguments are the same, so are they)
  int32_t nargs = 0;                     // candidates below it are the call's arguments, the
                                         // others tensors of its Lua state
  uint32_t modes = 0;                    // grad mode, inference mode and autocast, as planned
  std::shared_ptr<graph::CudaReplay> cuda;  // its CUDA graph (vm/graph/cudagraph.hpp)
};

struct Function {
  int32_t id;
  Options opts;
  std::map<std::string, std::unique_ptr<Site>> sites;
  // `train`: the sites of training captures (grad mode on), a tree of their own
  Site& site(const std::string& name, bool train = false);
  bool trains = false;  // a tensor requiring grad reached its capture: grad mode on means training
  bool yields = false;  // a call yielded out of its capture (Recorder::suspend): never planned
  // the last call when it was one segment (for reduce-overhead plans): its inputs, by identity
  // only (never dereferenced), and the vids of the tensors it returned
  std::shared_ptr<Leaf> last_leaf;
  std::vector<cr_tensor*> last_inputs;
  std::vector<int32_t> last_rets;
  std::vector<double> last_numbers;
  std::unique_ptr<Plan> plan;
};

// Builds the graph of a segment: the events from `leaf->last` up to the site root.
std::shared_ptr<graph::Graph> build_graph(const Leaf& leaf);
// The events of a segment in execution order.
std::vector<const TraceNode*> path_of(const TraceNode* last);

// Why `key` matched none of `at`'s children (for CRESCENT_LOGS=recompiles): names the op, the
// argument and the guard that failed, e.g. "add at f.lua:4: argument 2 (other): sizes {4} -> {5}".
// *arg: the 0-based argument that differs, or -1.
std::string describe_mismatch(const TraceNode& at, const Key& key, int op, int* arg);
// The guards of a segment, one a line (CRESCENT_LOGS=guards).
std::string describe_guards(const Leaf& leaf);

}  // namespace cr::guards
