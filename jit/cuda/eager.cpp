// Eager ops on CUDA tensors as single-op kernels from the code generator (DESIGN.md: no separate
// kernel zoo). The op call becomes a one-node graph - inputs, the op, its outputs - which is
// lowered, scheduled, emitted and compiled like a captured graph (jit/driver.cpp, so the CUBIN
// lands in the same caches), and the program is kept under a key of the op, its tensors'
// metadata and its other arguments. Numbers the lowering reads as operands (x + 2.5, x * s) are
// kernel arguments (marked as varying, graph::Arg::varying): one program serves every value of
// them, so a loop whose scalar changes at each step compiles once. Other numbers (pow's exponent,
// add's alpha) pick among the op's programs by value. Sizes are kernel arguments too (the graph
// is a dynamic one's template): a tensor of a new size makes a new program of the cached CUBIN
// (lowering and emission, no NVRTC), and a size called kSpecialiseAfter times gets kernels
// specialised to it, compiled in the background. Ops the lowering leaves to the eager kernels
// (matmul, cat, random, in-place, float16, ...) report false, and the caller runs them on host
// copies (vm/devices.hpp).
#include "jit/cuda/eager.hpp"

#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>

#include "jit/disk_cache.hpp"
#include "jit/jit.hpp"
#include "jit/program.hpp"
#include "vm/devices.hpp"
#include "vm/graph/graph.hpp"
#include "vm/graph/recorder.hpp"
#include "vm/kernels/loop.hpp"
#include "vm/ops/operands.hpp"

namespace cr::jit::cuda {
namespace {

// Programs that compiled kernels, per op, before further ones go to the host path: numbers that
// stay literal (pow's exponent...) and change at every call must not compile a module per call.
// A program of a new size whose CUBIN the cache has is not counted.
constexpr int kVariantsPerOp = 64;
// Programs kept: past this many, the cache starts again (the CUBINs and loaded modules stay
// cached, so the programs come back in a millisecond each).
constexpr size_t kMaxPrograms = 4096;
// A key's first program is size-generic; at its kSpecialiseAfter-th call the kernel specialised to
// its sizes (about 10 % faster: bench/RESULTS.md H35) compiles in the background and replaces it
// between two calls.
constexpr int kSpecialiseAfter = 16;

// One program of a key: it serves a call whose numbers that are not kernel arguments equal its
// own (compared bit for bit).
struct Entry {
  std::shared_ptr<graph::Graph> g;
  std::shared_ptr<const graph::Executable> exe;  // null: not lowerable (host path)
  const PlanProgram* program = nullptr;           // exe as a plan's program (what CUDA makes)
  uint64_t arguments = 0;  // bit i: op argument i is a number the kernels take at run time
  int uses = 0;
  std::shared_ptr<graph::Graph> special;  // the specialised graph, compiling in the background
  bool specialised = false;               // (tried: done, failed or not needed)
  bool serves(const cr_value* args, int nargs) const {
    const graph::Node& n = g->nodes[size_t(op_node())];
    for (int i = 0; i < nargs; ++i)
      if (args[i].tag == kNumber && !(i < 64 && (arguments >> i & 1)) &&
          std::memcmp(&args[i].num, &n.args[size_t(i)].num, sizeof(double)) != 0)
        return false;
    return true;
  }
  int32_t op_node() const { return int32_t(g->nodes.size()) - 1; }  // (after the inputs)
};

std::mutex g_mutex;
std::map<std::string, std::vector<Entry>> g_cache;
std::map<int, int> g_variants;
size_t g_programs = 0;

graph::Arg mirror(const cr_value& v, const std::function<int32_t(cr_tensor*)>& tensor) {
  graph::Arg a;
  a.tag = v.tag;
  a.num = v.num;
  if (v.tag == kTensor) a.value = tensor(static_cast<cr_tensor*>(v.ptr));
  if (v.tag == kTensors)
    for (int j = 0; j < v.n; ++j) a.values.push_back(tensor(static_cast<cr_tensor* const*>(v.ptr)[j]));
  if (v.tag == kInts) a.ints.assign(static_cast<const int64_t*>(v.ptr), static_cast<const int64_t*>(v.ptr) + v.n);
  if (v.tag == kDoubles) a.doubles.assign(static_cast<const double*>(v.ptr), static_cast<const double*>(v.ptr) + v.n);
  if (v.tag == kString && v.str) a.str = v.str;
  return a;
}

// The op call as a graph; `inputs` receives the tensors in graph input order.
std::shared_ptr<graph::Graph> one_node_graph(Context& ctx, int op, const cr_value* args, int nargs,
                                             std::vector<Tensor>& inputs) {
  auto g = std::make_shared<graph::Graph>();
  const OpDef& def = Registry::get().ops()[size_t(op)];
  g->name = cat("eager ", def.name);
  // Size-generic kernels (as a dynamic graph's): a tensor of a new size makes a new program of
  // the same CUBIN (lowering and emission, a fraction of a millisecond), not an NVRTC compile per
  // shape (tens of milliseconds) - a REPL's shapes change from one line to the next.
  g->dynamic = true;
  auto add_input = [&](cr_tensor* p) {
    Tensor t(p, true);
    graph::Node in;
    in.kind = graph::NodeKind::Input;
    in.input_index = int32_t(g->inputs.size());
    g->nodes.push_back(std::move(in));
    int32_t v = g->add_value(int32_t(g->nodes.size() - 1), graph::meta_of(t));
    g->nodes.back().outs.push_back(v);
    g->inputs.push_back(v);
    inputs.push_back(t);
    return v;
  };
  graph::Node n;
  n.op = op;
  for (int i = 0; i < nargs; ++i) {
    n.args.push_back(mirror(args[i], add_input));
    if (args[i].tag == kNumber) n.args.back().varying = i;  // (the call's numbers are its arguments')
  }
  OpCall c{ctx, def, args, nargs, {}, {}};
  std::vector<Meta> metas = def.infer(c);
  g->nodes.push_back(std::move(n));
  for (const Meta& m : metas) {
    graph::ValueMeta vm{graph::constant_shape(m.sizes), contiguous_strides(m.sizes), 0, m.dtype, m.device};
    int32_t v = g->add_value(int32_t(g->nodes.size() - 1), vm);
    g->nodes.back().outs.push_back(v);
    g->outputs.push_back(v);
  }
  return g;
}

std::string key_of(int op, const cr_value* args, int nargs) {
  std::string k = cat(op);
  for (int i = 0; i < nargs; ++i) {
    const cr_value& v = args[i];
    k += cat("|", v.tag, ":");
    if (v.tag == kTensor) {
      Tensor t(static_cast<cr_tensor*>(v.ptr), true);
      k += cat(graph::meta_of(t).str(), "@", t.offset(), device_name(t.device()));
    }
    else if (v.tag == kTensors) k += "list";  // cat / stack: not lowered
    else if (v.tag == kInts) for (int j = 0; j < v.n; ++j) k += cat(static_cast<const int64_t*>(v.ptr)[j], ",");
    else if (v.tag == kString) k += v.str ? v.str : "";
    else if (v.tag == kDoubles) k += cat("doubles", v.n);
    else if (v.tag == kNumber) k += scalar_is_integral(v.num) ? "int" : "float";  // (result_type's class; Entry::serves the value)
    else if (v.tag == kBool) k += cat(v.num);
    // (kNone: the tag says it all; its num is whatever the caller's slot held before)
  }
  return k;
}

// e's program becomes exe (which numbers are kernel arguments follows from its plan).
void set_program(Entry& e, std::shared_ptr<const graph::Executable> exe) {
  e.exe = std::move(exe);
  e.arguments = 0;
  if ((e.program = dynamic_cast<const PlanProgram*>(e.exe.get())))
    for (const LoopGraph::NumberArg& a : e.program->plan().lg.numbers)
      if (a.arg < 64) e.arguments |= uint64_t(1) << a.arg;
}

Options eager_options(Context& ctx, const graph::Graph& g, bool sync) {
  Options o;
  o.sync = sync;
  o.device = g.values[size_t(g.outputs.at(0))].meta.device;
  o.cache_dir = compile_cache_dir(ctx);
  o.whole_graph = true;  // a graph that needs externs takes the host path (one lowering)
  return o;
}

// Counts a call of e's size-generic program: starts the specialised compile at the
// kSpecialiseAfter-th, takes its program once it is done. (Under g_mutex.)
void specialise(Context& ctx, Entry& e, const std::function<std::shared_ptr<graph::Graph>()>& build) {
  if (e.specialised || !e.program || !e.g->dynamic) return;
  if (!e.special) {
    if (++e.uses < kSpecialiseAfter) return;
    e.special = build();
    e.special->dynamic = false;
    Options o = eager_options(ctx, *e.special, false);
    o.deferrable = true;
    compile_native(e.special, o);
    return;
  }
  graph::NativeSlot& slot = *e.special->native;
  std::shared_ptr<const graph::Executable> exe;
  {
    std::lock_guard<std::mutex> lock(slot.mutex);
    if (!slot.done) return;
    exe = slot.exe;
  }
  e.specialised = true;
  if (exe) {  // (a failure keeps the size-generic program, which works)
    e.g = std::move(e.special);
    set_program(e, std::move(exe));
  }
  e.special.reset();
}

// The compiled program of `key` for the numbers in args, built from `build()` on first use; its
// exe is null when the graph has no loop lowering or `family` already has `limit` variants (the
// caller takes the host path).
Entry program_for(Context& ctx, const std::string& key, const cr_value* args, int nargs, int family, int limit,
                  const std::function<std::shared_ptr<graph::Graph>()>& build) {
  Entry e;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    for (Entry& have : g_cache[key])
      if (have.serves(args, nargs)) {
        specialise(ctx, have, build);
        return have;
      }
    if (g_variants[family] >= limit) return e;
  }
  e.g = build();
  compile_native(e.g, eager_options(ctx, *e.g, true));
  graph::NativeSlot& slot = *e.g->native;
  if (!slot.unlowered) {
    if (!slot.exe) throw Error(cat("compiling its CUDA kernel failed: ", slot.error));
    set_program(e, slot.exe);
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  if (slot.kernels > 0) ++g_variants[family];  // (NVRTC ran: not a new size of a known kernel)
  if (++g_programs > kMaxPrograms) {
    g_cache.clear();
    g_programs = 1;
  }
  g_cache[key].push_back(e);
  return e;
}

// Copies have no Context of their own (copy_into has none); their programs are plain kernels,
// so none of its state is used.
Context& copy_context() {
  static Context ctx;
  return ctx;
}

constexpr int kCopyFamily = -1;   // copies' variants, counted apart from the ops'
constexpr int kCopyVariants = 256;

}  // namespace

bool run_op(Context& ctx, int op, const cr_value* args, int nargs, std::vector<Tensor>* outs) {
  const OpDef& def = Registry::get().ops()[size_t(op)];
  if (!def.infer || (def.flags & (kReturnsSelf | kListOut))) return false;
  // 0-d CPU tensors (scalars, allowed beside CUDA tensors) are copied to the device first
  Device first{};
  std::vector<cr_value> moved;
  std::vector<Tensor> keep;
  for (int i = 0; i < nargs; ++i) {
    if (args[i].tag == kTensors || args[i].tag == kDoubles) return false;
    if (args[i].tag != kTensor) continue;
    const Device d = Tensor(static_cast<cr_tensor*>(args[i].ptr), true).device();
    if (d.is_cpu() || d == first) continue;
    if (!first.is_cpu()) return false;  // two CUDA devices: the host path reports it
    first = d;
  }
  for (int i = 0; i < nargs; ++i) {
    if (args[i].tag != kTensor) continue;
    Tensor t(static_cast<cr_tensor*>(args[i].ptr), true);
    if (!t.device().is_cpu()) continue;
    if (t.dim() > 0) return false;  // a CPU tensor with dims: the host path reports the mix
    if (moved.empty()) moved.assign(args, args + nargs);
    keep.push_back(to_device(t, first));
    moved[size_t(i)].ptr = keep.back().get();
  }
  if (!moved.empty()) args = moved.data();
  const Entry e = program_for(ctx, key_of(op, args, nargs), args, nargs, op, kVariantsPerOp, [&] {
    std::vector<Tensor> inputs;
    return one_node_graph(ctx, op, args, nargs, inputs);
  });
  if (!e.exe) return false;
  const graph::Graph& g = *e.g;
  std::vector<Tensor> vals(g.values.size());
  size_t k = 0;
  for (int i = 0; i < nargs; ++i)
    if (args[i].tag == kTensor) vals[size_t(g.inputs[k++])] = Tensor(static_cast<cr_tensor*>(args[i].ptr), true);
  if (!e.program) {
    e.exe->run(ctx, vals);
  } else {  // with this call's numbers (by argument: one_node_graph)
    double numbers[16];
    if (size_t(nargs) > std::size(numbers)) throw Error(cat("internal: ", nargs, " arguments of one eager op"));
    for (int i = 0; i < nargs; ++i) numbers[i] = args[i].num;
    e.program->run(ctx, vals, numbers);
  }
  outs->clear();
  for (int32_t v : g.outputs) outs->push_back(vals[size_t(v)]);
  return true;
}

// dst = src as one generated kernel: a graph `clone(src)` whose output has dst's layout and dtype
// (the program writes into a defined output tensor as it is, jit/program.cpp), so strided
// destinations, broadcast sources (a view with stride 0) and conversions need no host copy.
std::string compile_cache_dir(Context& ctx) {
  if (!ctx.recorder->cache_dir.empty()) return ctx.recorder->cache_dir;
  return default_cache_dir();
}

bool copy_on_device(const Tensor& dst, const Tensor& source) {
  if (!(dst.device() == source.device()) || dst.device().is_cpu()) return false;
  const Tensor src = source.sizes() == dst.sizes()
                         ? source
                         : Tensor::view_of(source, dst.sizes(), broadcast_strides(source, dst.sizes()), source.offset());
  if (dst.storage() == src.storage()) return false;  // written buffers must not alias (__restrict__)
  for (int d = 0; d < dst.dim(); ++d)
    if (dst.stride(d) == 0 && dst.size(d) > 1) return false;  // one element written twice
  const std::string key = cat("copy|", graph::meta_of(src).str(), "@", src.offset(), "|", graph::meta_of(dst).str(), "@",
                              dst.offset(), device_name(dst.device()));
  Context& ctx = copy_context();
  const Entry e = program_for(ctx, key, nullptr, 0, kCopyFamily, kCopyVariants, [&] {
    cr_value arg{kTensor, 0, 0, src.get(), nullptr};
    std::vector<Tensor> inputs;
    auto g = one_node_graph(ctx, Registry::get().ids().clone, &arg, 1, inputs);
    g->name = "eager copy";
    g->values[size_t(g->outputs[0])].meta = graph::meta_of(dst);  // written in dst's layout and dtype
    return g;
  });
  if (!e.exe) return false;
  std::vector<Tensor> vals(e.g->values.size());
  vals[size_t(e.g->inputs[0])] = src;
  vals[size_t(e.g->outputs[0])] = dst;
  e.exe->run(ctx, vals);
  return true;
}

void clear_eager_cache() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_cache.clear();
  g_variants.clear();
  g_programs = 0;
}

}  // namespace cr::jit::cuda
