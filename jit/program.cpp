// Running a compiled graph: buffers, kernel launches, extern steps, views, aliases, the check word
// of gathers (vm/checks.hpp), the run values of random draws and operand numbers.
#include "jit/program.hpp"

#include <algorithm>
#include <cstring>

#include "vm/checks.hpp"
#include "vm/devices.hpp"
#include "vm/kernels/loop.hpp"

namespace cr::jit {

namespace {

// The kernels address a buffer by its compiled strides and offset: a dim of size 1 never moves
// the address, so its stride may differ (eager and compiled producers of a saved value choose
// differently), and an empty tensor is never read.
bool layout_is(const Tensor& t, const Buffer& b) {
  if (t.dtype() != b.dtype || t.sizes() != b.sizes) return false;
  if (t.numel() == 0) return true;
  if (t.offset() != b.offset) return false;
  for (size_t d = 0; d < b.sizes.size(); ++d)
    if (b.sizes[d] != 1 && t.strides()[d] != b.strides[d]) return false;
  return true;
}

// The random ops of kernel k, and those before it that have no numbers yet, take the
// generator's seed and next counters in graph order, as the eager ops would have drawn them.
// While a CUDA graph records, they take counters relative to the replay's base instead, and the
// last word points at the device's {seed, base} (prelude.cuh run_word).
void draw_numbers(Context& ctx, const Kernel& k, const std::vector<int64_t>& draws, std::vector<int64_t>& values, size_t& drawn) {
  Generator& gen = ctx.gen;
  for (; int32_t(drawn) < k.draws; ++drawn) {
    const bool captured = gen.capture_words != nullptr;
    values[2 * drawn] = captured ? 0 : int64_t(gen.seed);
    values[2 * drawn + 1] = int64_t(captured ? gen.captured : gen.offset);
    (captured ? gen.captured : gen.offset) += uint64_t(draws[drawn]);
  }
  values.back() = int64_t(reinterpret_cast<intptr_t>(gen.capture_words));
}

// Per plan step, the graph values that no later step reads, nor the run's end (inputs, outputs,
// aliases and the storages of their views); a run frees those it may (graph::run_eager's rule).
graph::DeadLists dead_values(const Plan& plan) {
  const LoopGraph& lg = plan.lg;
  const graph::Graph& g = *lg.g;
  auto root_value = [&](int32_t gv) {  // the graph value whose storage a view value uses
    int32_t lv = lg.of_graph[size_t(gv)];
    if (lv < 0 || lg.values[size_t(lv)].kind != LKind::View) return -1;
    int32_t b = plan.buffer_of[size_t(lg.values[size_t(lv)].root)];
    return b < 0 ? -1 : plan.buffers[size_t(b)].gv;
  };
  std::vector<char> keep = graph::kept_values(g);
  auto keep_root = [&](int32_t gv) {
    if (int32_t r = root_value(gv); r >= 0) keep[size_t(r)] = 1;
  };
  for (int32_t v : g.outputs) keep_root(v);
  for (const graph::Graph::Alias& a : g.aliases)
    if (!g.transient || keep[size_t(a.removed)]) keep_root(a.removed), keep_root(a.kept);
  return graph::dead_after(plan.steps.size(), keep, [&](size_t i, const graph::ValueVisit& visit) {
    auto use = [&](int32_t gv) {
      visit(gv);
      if (int32_t r = root_value(gv); r >= 0) visit(r);
    };
    const PlanStep& st = plan.steps[i];
    if (st.kernel >= 0) {
      for (int32_t b : plan.kernels[size_t(st.kernel)].buffers)
        if (plan.buffers[size_t(b)].gv >= 0) use(plan.buffers[size_t(b)].gv);
      return;
    }
    for (const graph::Arg& a : g.nodes[size_t(st.node)].args) {
      if (a.tag == kTensor) use(a.value);
      for (int32_t v : a.values) use(v);
    }
    for (int32_t v : g.nodes[size_t(st.node)].outs) use(v);
  });
}

}  // namespace

PlanProgram::PlanProgram(Plan plan, Device device)
    : plan_(std::move(plan)), device_(device), dead_(dead_values(plan_)) {
  const graph::Graph& g = *plan_.lg.g;
  stores_.assign(g.values.size(), 0);
  for (const Buffer& b : plan_.buffers)
    if (b.computed && b.gv >= 0) stores_[size_t(b.gv)] = 1;
  for (const PlanStep& st : plan_.steps)
    if (st.node >= 0)
      for (int32_t v : g.nodes[size_t(st.node)].outs) stores_[size_t(v)] = 1;
  for (const graph::Graph::Alias& a : g.aliases) stores_[size_t(a.removed)] = stores_[size_t(a.kept)];
  const std::vector<char> written = graph::written_roots(g);
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (written[v]) written_.push_back(int32_t(v));
    const int32_t n = g.values[v].node;
    if (n >= 0 && g.nodes[size_t(n)].kind == graph::NodeKind::Input) inputs_.push_back(int32_t(v));
  }
}

int64_t buffer_extent(const Buffer& b) {
  int64_t hi = b.offset;
  for (size_t d = 0; d < b.sizes.size(); ++d) {
    if (b.sizes[d] == 0) return 0;
    hi += (b.sizes[d] - 1) * b.strides[d];
  }
  return hi + 1;
}

size_t slot_bytes(const Buffer& b) { return size_t(buffer_extent(b)) * dtype_size(b.dtype); }

// The storages of the inputs that no node writes (an input sharing storage with a written one
// is out too); values the graph makes are never in it.
std::vector<const Storage*> PlanProgram::settled_inputs(const std::vector<Tensor>& vals) const {
  std::vector<const Storage*> out, written;
  auto storage = [&](int32_t v) -> const Storage* {
    const Tensor& t = vals[size_t(v)];
    return t.defined() && !t.is_lazy() ? t.storage() : nullptr;
  };
  for (int32_t v : written_) written.push_back(storage(v));
  for (int32_t v : inputs_) {
    const Storage* s = storage(v);
    if (s && std::find(written.begin(), written.end(), s) == written.end()) out.push_back(s);
  }
  return out;
}

void PlanProgram::run(Context& ctx, std::vector<Tensor>& vals, const double* numbers,
                      const std::vector<char>* unheld) const {
  const LoopGraph& lg = plan_.lg;
  const graph::Graph& g = *lg.g;
  graph::set_constants(g, vals);
  std::vector<Tensor> temps(plan_.buffers.size());
  // 1: allocated here; 2: given to a lazy tensor of Lua's, kept in temps[b] (unused for a stored
  // value) so that a run that fails can take it back: its values may be partial
  std::vector<char> mine(plan_.buffers.size(), 0);
  auto tensor_of = [&](int32_t b) -> Tensor& { return plan_.buffers[size_t(b)].gv >= 0 ? vals[size_t(plan_.buffers[size_t(b)].gv)] : temps[size_t(b)]; };
  // a stored value's tensor: a lazy tensor of Lua's gets the storage when its layout allows
  auto allocate = [&](int32_t b) {
    const Buffer& buf = plan_.buffers[size_t(b)];
    Tensor& t = tensor_of(b);
    if (t.defined() && !t.is_lazy()) return;
    if (t.defined() && t.is_lazy() && buf.offset == 0 && buf.strides == contiguous_strides(buf.sizes) &&
        Tensor::give_storage(t.get(), buf.sizes, buf.dtype, device_)) {
      temps[size_t(b)] = t;
      mine[size_t(b)] = 2;
      return;
    }
    int64_t n = buffer_extent(buf);
    Storage* s = storage_new(size_t(n) * dtype_size(buf.dtype), device_);
    t = Tensor::from_storage(s, buf.sizes, buf.strides, buf.offset, buf.dtype);  // adopts s
    mine[size_t(b)] = 1;
  };
  // views that eager code or Lua needs as tensors
  auto view_tensor = [&](int32_t gv) {
    int32_t lv = lg.of_graph[size_t(gv)];
    if (lv < 0 || lg.values[size_t(lv)].kind != LKind::View || (vals[size_t(gv)].defined() && !vals[size_t(gv)].is_lazy())) return;
    const LoopValue& v = lg.values[size_t(lv)];
    const Tensor& base = tensor_of(plan_.buffer_of[size_t(v.root)]);
    vals[size_t(gv)] = Tensor::view_of(base, v.sizes, v.strides, v.offset);
  };
  std::vector<void*> bufs;
  std::vector<Tensor> moved;  // inputs copied to the device for this run
  int64_t host_word[kCheckWords] = {0, 0, 0, 0};  // the CPU's check word (vm/checks.hpp)
  bool checked = false;
  std::vector<int64_t> run_values(2 * lg.draws.size() + 1);  // random ops' seeds and offsets, base
  size_t drawn = 0;
  std::vector<int64_t> number_words(lg.numbers.size());  // operand numbers, float64 bits
  for (size_t j = 0; j < lg.numbers.size(); ++j) {
    const graph::Arg& a = g.nodes[size_t(lg.numbers[j].node)].args[size_t(lg.numbers[j].arg)];
    const double x = numbers && a.varying >= 0 ? numbers[a.varying] : a.num;
    std::memcpy(&number_words[j], &x, sizeof x);
  }
  // Context::plan_settled: after a kernel of this run, the stream's kernel in flight is the plan's
  bool launched = false, have_settled = false;
  std::vector<const Storage*> settled;
  struct Hint {
    Context& ctx;
    ~Hint() { ctx.plan_settled = nullptr; }
  } hint{ctx};
  try {
    for (size_t step = 0; step < plan_.steps.size(); ++step) {
      const PlanStep& st = plan_.steps[step];
      if (st.node >= 0) {
        for (const graph::Arg& a : g.nodes[size_t(st.node)].args) {
          if (a.tag == kTensor) view_tensor(a.value);
          for (int32_t v : a.values) view_tensor(v);
        }
        if (launched && !device_.is_cpu()) {
          if (!have_settled) settled = settled_inputs(vals);
          have_settled = true;
          ctx.plan_settled = &settled;
        }
        run_node(g, size_t(st.node), ctx, vals, numbers);
        ctx.plan_settled = nullptr;
      } else {
        const Kernel& k = plan_.kernels[size_t(st.kernel)];
        bufs.clear();
        for (int32_t b : k.buffers) {
          const Buffer& buf = plan_.buffers[size_t(b)];
          if (buf.check) {
            checked = true;
            bufs.push_back(device_.is_cpu() ? host_word : check_word());
            continue;
          }
          if (buf.runtime) {
            draw_numbers(ctx, k, lg.draws, run_values, drawn);
            bufs.push_back(run_values.data());
            continue;
          }
          if (buf.numbers) {
            bufs.push_back(number_words.data());
            continue;
          }
          if (buf.computed) allocate(b);
          const Tensor& t = tensor_of(b);
          if (!t.defined() || t.is_lazy()) throw Error(cat("internal: buffer #", b, " has no storage"));
          if (!buf.computed && !layout_is(t, buf))
            throw Error(cat("a tensor changed layout since the graph was compiled: ", t.describe()));
          if (!(t.device() == device_)) {  // a 0-d CPU tensor (a scalar) read by a device kernel
            moved.push_back(to_device(t, device_));
            bufs.push_back(moved.back().storage()->data);
            continue;
          }
          bufs.push_back(t.storage()->data);
        }
        launch(size_t(st.kernel), bufs.data());
        launched = true;
      }
      for (int32_t b : st.release)
        if (mine[size_t(b)] == 1) tensor_of(b) = Tensor();
      if (g.transient || unheld)
        for (int32_t gv : dead_[step])
          if (g.transient || (*unheld)[size_t(gv)]) vals[size_t(gv)] = Tensor();
    }
    if (checked && device_.is_cpu()) raise_check(host_word, lg.sites);
  } catch (const Error&) {
    for (size_t b = 0; b < mine.size(); ++b)
      if (mine[b] == 2) Tensor::unattach(temps[b].get());
    throw;
  }
  if (checked && !device_.is_cpu()) defer_check();
  for (int32_t gv : g.outputs) view_tensor(gv);
  // (a transient graph freed the aliases that give no output: graph::kept_values)
  const std::vector<char> kept = g.transient && !g.aliases.empty() ? graph::kept_values(g) : std::vector<char>();
  for (const graph::Graph::Alias& a : g.aliases) {
    if (!kept.empty() && !kept[size_t(a.removed)]) continue;
    view_tensor(a.kept);
    Tensor& r = vals[size_t(a.removed)];
    if (!r.defined() || r.is_lazy()) r = vals[size_t(a.kept)];
  }
}

}  // namespace cr::jit
