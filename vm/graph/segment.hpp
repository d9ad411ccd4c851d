// The segment being captured, and helpers shared by the recorder's files (recorder.cpp,
// keys.cpp, lazy.cpp, replay.cpp). Internal to vm/graph/.
#pragma once
#include <algorithm>

#include "vm/context.hpp"  // (now_us)
#include "vm/graph/recorder.hpp"

namespace cr::graph {

struct Segment {
  uint64_t gen = 0;
  guards::Site* site = nullptr;
  guards::TraceNode* pos = nullptr;  // the last event matched or recorded
  bool recording = false;            // new events run eagerly and are appended
  bool passthrough = false;          // the site is over cache_size_limit: ops just run
  bool pending = false;              // replayed events that have not run yet
  int ops = 0;
  std::vector<int32_t> op_ids;       // the ops counted in `ops`, in call order (T.explain's lists)
  std::vector<char> op_grad;         // by op ordinal: grad mode was on (step.cpp)
  // a backward() was traced into the segment (step.cpp): it is no training segment any more
  bool stepped = false;
  // bytes of the lazy values replayed so far: past the collector's budget, Lua collects before
  // the call returns (Recorder::note_lazy), as eager allocations of as many bytes would make it
  size_t lazy_bytes = 0;
  bool lazy_on_device = false;       // some of them on a device: the device budget applies
  bool train = false;                // a training capture's segment (joint.hpp)
  int grad_ops = 0, no_grad_ops = 0;  // training: op calls made with grad mode on / off
  int32_t next_vid = 0;
  std::vector<Tensor> vals;          // by vid: inputs, outputs (lazy while replaying)
  // the vids of values that ran (recorded, or a replayed prefix's) which the segment lets go once
  // nothing else holds them (let_go_unreached): not inputs, not random draws; ran's size after the
  // last scan, and the end of the Lua collection it saw (Context::gc_end_us)
  std::vector<int32_t> ran;
  size_t ran_scanned = 0;
  double gc_seen = 0;
  std::vector<int32_t> alias;        // by vid: for inputs, an earlier input sharing the storage
  std::vector<char> is_input;        // by vid
  guards::Key key;                   // scratch: the key of the current call
  guards::TraceNode* last_recorded = nullptr;
  // recording after learn_dynamic found a change: the earlier path's event at this position
  const guards::TraceNode* shadow = nullptr;
  // Dynamic shapes. mode: the function's `dynamic` option (-1 automatic, 0, 1). dynamic: an input
  // of this segment has symbolic sizes, so replayed events derive their outputs' shapes
  // (shapes.cpp) instead of taking the recorded ones. symbolic: by vid, the input's symbolic dims.
  // spans: where the current key holds each new tensor's sizes (to see which ones changed).
  int mode = -1;
  bool dynamic = false;
  std::vector<uint32_t> symbolic;
  // the call's data-dependent results (sync points; not held) with their op call's ordinal k, for
  // later segments (reset keeps them, Recorder::stop drops them); by vid, an input's unbacked
  // symbol k + 1 (its dim 0 is that call's count: uk), or 0
  struct DataSized {
    const cr_tensor* t;
    const void* storage;
    int k;
  };
  std::vector<DataSized> data_sized;
  int data_calls = 0;
  std::vector<int> unbacked;
  struct Span {
    int32_t vid;
    size_t at;  // key position of its first size; its strides follow the sizes
    int ndim;
  };
  std::vector<Span> spans;
  // dynamic: the arguments of each event since the segment became dynamic, by op ordinal (its
  // keys no longer hold their integers: the graph's instance takes them from here)
  // Only events with such integers (kInts arguments; a view's or join's numbers) are kept: the
  // others' arguments are those recorded.
  std::vector<std::pair<int, std::vector<Arg>>> event_args;
  // the raw instance of the graph for this call's layouts (Recorder::instance): what a value
  // the run did not keep is recomputed from
  std::shared_ptr<Graph> instance_raw;
  Generator rng;  // the generator as the segment's graph started to run: its draws, recomputed
  // Automatic dynamic numbers (keys.cpp): the values of this call's numbers that vary, in event
  // order (graph::Arg::varying indexes them); where the current key holds each number that may
  // vary; by argument of the current call, its index in `numbers` or -1.
  std::vector<double> numbers;
  size_t numbers_before = 0;  // numbers.size() before the current call
  struct NumberSpan {
    size_t at;  // key position of its value
    int arg;
  };
  std::vector<NumberSpan> number_spans;
  // where the current key holds the integers of a view, join or creation op that are not yet
  // symbolic (a number, or n of a kInts argument): one that changes makes the segment dynamic
  struct SizeSpan {
    size_t at, n;
    int arg;
  };
  std::vector<SizeSpan> size_spans;
  std::vector<int32_t> arg_number;
  const double* numbers_or_null() const { return numbers.empty() ? nullptr : numbers.data(); }

  void reset() {
    recording = passthrough = pending = dynamic = false;
    symbolic.clear();
    unbacked.clear();
    event_args.clear();
    instance_raw.reset();
    numbers.clear();
    ops = grad_ops = no_grad_ops = 0;
    op_ids.clear();
    op_grad.clear();
    stepped = false;
    lazy_bytes = 0;
    lazy_on_device = false;
    next_vid = 0;
    vals.clear();
    ran.clear();
    ran_scanned = 0;
    gc_seen = 0;
    alias.clear();
    is_input.clear();
    last_recorded = nullptr;
    shadow = nullptr;
  }

  void set(int32_t vid, Tensor t) {
    if (vals.size() <= size_t(vid)) {
      vals.resize(size_t(vid) + 1);
      alias.resize(size_t(vid) + 1, -1);
      is_input.resize(size_t(vid) + 1);
      symbolic.resize(size_t(vid) + 1);
      unbacked.resize(size_t(vid) + 1);
    }
    vals[size_t(vid)] = std::move(t);
  }
};

// Lets go of the values of `s.ran` that only the segment holds: Lua collected their handles, no
// autograd node saved them, no other tensor shares their storage. No later call can read them;
// their memory goes as eager's temporaries' does (a backward traced later recomputes them).
void let_go_unreached(Segment& s);

// How an op call becomes a trace-tree key (keys.cpp): tensors the segment has not seen become
// inputs (their guards go into the key); `to_args` is the recorded form of the arguments.
void encode(Context& ctx, Segment& s, int op, const cr_value* args, int nargs);
// Automatic dynamic shapes and numbers: when `s.key` differs from a recorded event's key (same
// op) only in the sizes of new tensors, in operand numbers of pointwise ops and in the integers of
// view, join and creation ops, marks those dims and integers symbolic and those numbers varying in
// the site (a varying number's key holds its class, integral or not, which the result's dtype
// depends on), forgets the new tensors of the call
// (from vid `first_new` on) and encodes the key again. Returns what changed, as
// "dim 1 of input %0: 4 -> 7" (0-based dims) or "argument 2: 0.5 -> 0.25", or "" when nothing did.
// While recording after such a change, compares the call with the earlier path's event instead
// (Segment::shadow): whatever else changed in the segment is learnt in the same recompile.
// Value `vid`, an input of the segment, as the API counts them: "input 1" is the first met.
int input_ordinal(const Segment& s, int32_t vid);
// A dynamic segment's backward graph (train.cpp): the operand numbers of its floating ops vary
// from the start (a mean's 1 / n depends on the sizes), appended to `numbers`, so that one
// instance's size-generic native code serves the others.
void vary_numbers(Graph& g, std::vector<double>& numbers);
std::string learn_dynamic(Context& ctx, Segment& s, int op, const cr_value* args, int nargs, int32_t first_new);

// Shape rules (shapes.cpp): the layouts of an op call's fresh outputs, derived without running
// it, for replaying a segment whose sizes are symbolic. Entries for outputs that are not fresh
// stay empty. False when the op has no rule, or the call would not give what was recorded (a
// copy where a view was recorded, another number of outputs): a guard failure.
bool derive_outputs(Context& ctx, int op, const cr_value* args, int nargs, const std::vector<guards::OutInfo>& recorded,
                    std::vector<ValueMeta>& metas);
std::vector<Arg> to_args(const Segment& s, const cr_value* args, int nargs);
// Whether a dynamic segment's key leaves integers of this call out (kInts arguments, a view's
// or join's numbers): the event's arguments are then kept in Segment::event_args.
bool has_wildcard_args(const OpDef& def, const cr_value* args, int nargs);
std::vector<cr_tensor*> tensor_args(const cr_value* args, int nargs);

// Lazy-tensor bookkeeping (lazy.cpp). cr_tensor::_lazy is one of two kinds:
//  - a slot of an ExecRecord (rec set): a value the segment's run did not keep, which Lua may
//    still read; the record recomputes it. A call leaves one record for all such values (most
//    are intermediates whose handles Lua has dropped but not yet collected), so a slot costs no
//    allocation and no reference count of its own;
//  - a tracker (rec null, allocated): a value the run kept while its leaf is cold, which is
//    marked as escaping when Lua uses it.
struct ExecRecord;
struct LazyInfo {
  std::weak_ptr<guards::Leaf> leaf;  // trackers: the segment variant the value came from
  int32_t vid = -1;
  ExecRecord* rec = nullptr;  // slots: their record
  cr_tensor* t = nullptr;     // slots: the waiting tensor (null once it left)
  // a value its graph did not keep that reads storages the graph wrote or draws: trackers raise
  // when read; slots are computed from the state the run left until an input is written again
  bool lost = false;
};
// Whether value `vid` of g can be computed after g ran from the state the run left (its draws
// from the generator as the run began; not after a collective, nor when it read an input before
// the graph wrote it).
bool replayable(const Graph& g, int32_t vid);
// The value `vid` escaped its segment: the next compilation must produce it.
void note_escape(guards::Leaf& leaf, int32_t vid, const char* how);
// Makes the tensors of `waiting` (each with its value id) wait on a new record of this run of
// `leaf` (`owner` is the leaf's shared pointer, inputs from `s`). The record lives while a tensor
// waits on it.
std::shared_ptr<ExecRecord> wait_on_record(Context& ctx, guards::Leaf& leaf, const std::shared_ptr<guards::Leaf>& owner,
                                           const Segment& s, const std::vector<std::pair<cr_tensor*, int32_t>>& waiting);
// Whether an input of the record wraps host memory (Tensor::from_blob), which the host may
// write without the runtime seeing it: such values are computed at once, not later.
bool reads_host_memory(const ExecRecord& r);

void take_event_args(Graph& g, const Segment& s);
// A dynamic segment's graph for this call: `raw` with the call's layouts and integers.
std::shared_ptr<Graph> instance_of(const Graph& raw, const Segment& s);
// The key of that instance among a dynamic leaf's (Leaf::instances): the layouts of the inputs
// `ins` and the integers the keys left out; `varying`: the varying numbers too (a backward traced
// per shape reads them as constants: a mean's 1 / n).
std::vector<int64_t> instance_key(const std::vector<int32_t>& ins, const Segment& s, bool varying = false);

}  // namespace cr::graph
