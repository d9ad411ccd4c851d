// The CUDA module of a plan: prelude, the device functions of the registry ops the kernels call,
// then one kernel per Plan kernel (bodies: pointwise.cpp, reduce.cpp), with the launch table.
#include "jit/cuda/emit.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "jit/cuda/kernels.hpp"
#include "vm/kernels/cuda/prelude.hpp"

namespace cr::jit::cuda {

const char* form_name(Form f) {
  switch (f) {
    case Form::Pointwise: return "pointwise";
    case Form::ReduceThread: return "thread-per-row reduction";
    case Form::ReduceWarp: return "warp-per-row reduction";
    case Form::ReduceBlock: return "block-per-row reduction";
    case Form::ReduceColumns: return "column-team reduction";
  }
  return "?";
}

// ---- KernelWriter helpers ----------------------------------------------------------------------

bool is_template(const Kernel& k) { return std::any_of(k.sizes.begin(), k.sizes.end(), is_param); }

int64_t product(const Kernel& k, size_t first, size_t last) {
  int64_t p = 1;
  for (size_t v = first; v < last; ++v) p *= k.sizes[v];
  return p;
}

int64_t launch_grid(const CudaKernel& c, const Kernel& instance) {
  int64_t elements = product(instance, 0, instance.sizes.size());
  int64_t items = c.form == Form::Pointwise ? elements / c.vector_width : product(instance, 0, size_t(instance.n_outer));
  int64_t grid = std::min((items + c.items_per_block - 1) / c.items_per_block, c.max_grid);
  return (grid == 0 && elements != 0 ? 1 : grid) * c.cluster;
}

void KernelWriter::set_grid(int64_t per_block, int64_t waves) {
  int64_t wave = int64_t(target.sm_count) * std::max<int64_t>(1, target.max_threads_per_sm / out.block);
  out.items_per_block = per_block;
  out.max_grid = wave * waves;
  out.grid = launch_grid(out, instance);
}

std::string KernelWriter::product_text(size_t first, size_t last) const {
  if (!dynamic) return cat(product(k, first, last));
  int64_t literal = 1;  // (a template's loop sizes are all parameters; the rest stays general)
  std::vector<std::string> factors;
  for (size_t v = first; v < last; ++v)
    if (is_param(k.sizes[v])) factors.push_back(int_str(k.sizes[v]));
    else literal *= k.sizes[v];
  if (literal != 1 || factors.empty()) factors.push_back(cat(literal));
  std::string s = factors[0];
  for (size_t f = 1; f < factors.size(); ++f) s += cat(" * ", factors[f]);
  return factors.size() > 1 ? cat("(", s, ")") : s;
}

void KernelWriter::set_index_type() {
  const Kernel& c = instance;  // (the same as k when specialised)
  int64_t bound = product(c, 0, c.sizes.size());
  auto reach = [&](const Affine& a) {
    int64_t r = std::abs(a.c);
    for (size_t v = 0; v < a.k.size() && v < c.sizes.size(); ++v) r += std::abs(a.k[v]) * std::max<int64_t>(c.sizes[v] - 1, 0);
    bound = std::max(bound, r);
  };
  for (const Expr& e : c.body.exprs)
    if (e.op == EOp::Load || e.op == EOp::Index) reach(e.index[0]);
  for (const Expr& e : c.body.exprs)  // a gather's position adds up to (limit - 1) * |stride|
    if (e.gather()) bound = std::max(bound, bound + std::max<int64_t>(e.limit - 1, 0) * std::abs(e.stride));
  for (const Store& s : c.stores) reach(s.addr);
  int64_t step = std::max<int64_t>(out.grid, 1) * out.block * 4;
  out.index32 = bound + step < (int64_t(1) << 31);
}

void KernelWriter::decompose(const std::string& linear, size_t first, size_t last, size_t end) {
  for (size_t v = first; v < last; ++v) {
    std::string stride = product_text(v + 1, end);
    std::string x = stride == "1" ? linear : cat("(", linear, " / ", stride, ")");
    if (v > first) x = cat(x, " % ", int_str(k.sizes[v]));
    lines.add(cat("const ", idx, " i", v, " = ", x, ";"));
  }
}

// ---- the module ------------------------------------------------------------------------------

namespace {

std::vector<Param> params_of(const Kernel& k, const Plan& plan) {
  std::vector<Param> ps(k.buffers.size());
  for (size_t s = 0; s < ps.size(); ++s) {
    ps[s].buffer = k.buffers[s];
    ps[s].dtype = plan.buffers[size_t(k.buffers[s])].dtype;
  }
  for (const Expr& e : k.body.exprs)
    if (e.op == EOp::Load) {
      ps[size_t(e.value)].read = true;
      ps[size_t(e.value)].dtype = e.dtype;
    }
  for (const Store& s : k.stores) {
    ps[size_t(s.buffer)].written = true;
    ps[size_t(s.buffer)].dtype = k.body.exprs[size_t(s.expr)].dtype;
  }
  if (k.check >= 0) ps[size_t(k.check)].written = ps[size_t(k.check)].read = true;  // (shared by all threads)
  if (k.runtime >= 0) ps[size_t(k.runtime)].words = plan.buffers[size_t(k.buffers[size_t(k.runtime)])].sizes[0];
  if (k.numbers >= 0) ps[size_t(k.numbers)].words = plan.buffers[size_t(k.buffers[size_t(k.numbers)])].sizes[0];
  return ps;
}

// extern "C" __global__ void __launch_bounds__(B) kN(float* __restrict__ p0, const float* ...)
// Size parameters follow the pointers as separate int64_t arguments named as the loop IR prints
// them (P<j>, int_str), so the addresses' text (affine_str) is valid CUDA as it is; they live in
// the constant bank like a struct's fields would, and need no struct type per count.
std::string signature(const CudaKernel& c) {
  std::string s = cat("extern \"C\" __global__ void __launch_bounds__(", c.block, ") ",
                      c.cluster > 1 ? cat("__cluster_dims__(", c.cluster, ", 1, 1) ") : std::string(), c.name, "(");
  for (size_t i = 0; i < c.params.size(); ++i) {
    const Param& p = c.params[i];
    if (p.words > 0) {  // (copied by the launch from the host: no device memory, no copy call)
      s += cat(i ? ", " : "", "const cr::words<", p.words, "> p", i);
      continue;
    }
    const char* t = cuda_type(p.dtype);
    // read-only: const __restrict__ (the read-only data path); written and read: no promise
    std::string q = p.written && p.read ? cat(t, "* ") : p.written ? cat(t, "* __restrict__ ") : cat("const ", t, "* __restrict__ ");
    s += cat(i ? ", " : "", q, "p", i);
  }
  // (32-bit code takes its sizes as int: the launch passes int64_t values, of which the driver
  // copies the parameter's 4 bytes - the low half, on every little-endian host)
  for (int j = 0; j < c.size_params; ++j) s += cat(", const ", c.index32 ? "int" : "int64_t", " P", j);
  return s + ")";
}

// The comment above a kernel. A template's names no size, grid or row count: the source is the
// cache key of every instance.
std::string head(const Kernel& k, const CudaKernel& c, bool dynamic) {
  if (dynamic) {
    std::string loops;
    for (size_t v = 0; v < k.sizes.size(); ++v) loops += cat(v ? ", " : "", int_str(k.sizes[v]));
    return cat("// ", k.name, ": ", form_name(c.form), c.vector_form ? ", vectors of 4 where the sizes allow" : "",
               c.form == Form::Pointwise ? "" : c.persistent ? ", persistent (rows up to a length)" : ", looped", ", block ", c.block, ", ", c.index32 ? "32" : "64",
               "-bit indices; loops {", loops, "}, sizes from ", c.size_params, " parameters\n");
  }
  std::string form = cat(form_name(c.form), c.vector_width > 1 ? cat(", vectors of ", c.vector_width) : "",
                         c.cluster > 1 ? cat(", clusters of ", c.cluster, " blocks a row") : "");
  return cat("// ", k.name, ": ", form,
             c.form != Form::Pointwise ? cat(", ", c.rows, " rows of ", c.row_size, c.persistent ? ", persistent" : ", looped") : "",
             ", grid ", c.grid, " x block ", c.block, ", ", c.index32 ? "32" : "64", "-bit indices; loops ", shape_str(k.sizes), "\n");
}

// CUDA's limit on a kernel's arguments (4 KB before CUDA 12.1 on Volta and later).
constexpr int64_t kMaxArgBytes = 4096;

// Kernel i of the plan, from its template when it has one (launched on its own sizes).
std::string kernel_text(size_t i, const Plan& plan, const Target& t, const KernelConfig& config, CudaKernel& c,
                        std::map<std::string, std::string>& fns, const std::string& suffix = "") {
  const Kernel& k = plan.code(i);
  c.name = k.name + suffix;
  c.params = params_of(k, plan);
  c.size_params = int(param_count(k));
  int64_t words = 0;
  for (const Param& p : c.params) words += p.words;
  if (int64_t(8 * (c.params.size() + size_t(c.size_params) + size_t(words))) > kMaxArgBytes)
    throw Error(cat("CUDA code generation: ", k.name, " has ", c.size_params, " size parameters, over CUDA's ", kMaxArgBytes, " bytes of arguments"));
  Lines body;
  body.indent = 1;
  static const std::vector<int64_t> none;
  static const KernelConfig heuristic;
  KernelWriter w{k, plan.kernels[i], plan.params.empty() ? none : plan.params[i], t, c, body, fns, is_template(k) ? heuristic : config};
  if (k.accs.empty()) write_pointwise(w);
  else write_reduction(w);
  return cat(head(k, c, w.dynamic), signature(c), " {\n  typedef ", c.index32 ? "int" : "int64_t",
             " idx_t;\n  cr::grid_wait();\n", body.text, "}\n");
}

bool identifier_char(char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; }

// `text` with each whole identifier `name` (not a part of a longer one) replaced by `to`.
std::string renamed(const std::string& text, const std::string& name, const std::string& to) {
  std::string out;
  size_t from = 0;
  for (size_t at = text.find(name); at != std::string::npos; at = text.find(name, at + 1)) {
    const size_t end = at + name.size();
    if (at < from || (at > 0 && identifier_char(text[at - 1])) || (end < text.size() && identifier_char(text[end]))) continue;
    out.append(text, from, at - from).append(to);
    from = end;
  }
  return out.append(text, from, std::string::npos);
}

// Parts of a module of `functions` functions: one up to kPartFunctions, then one per
// kPartFunctions, at most kMaxParts. A function of the count alone (not of this host's cores):
// the CUBIN is a cache entry that other hosts may load.
constexpr size_t kPartFunctions = 6, kMaxParts = 16;
size_t part_count(size_t functions) { return std::clamp<size_t>(functions / kPartFunctions, 1, kMaxParts); }

// The module of kernels[j] = kernel i_of(j) of the plan in config_of(j), named with suffix_of(j).
// With `share`, a kernel whose code differs from an earlier one's only in its name (the same loops
// over other buffers: a model's repeated layers) is not emitted again: it launches the earlier one.
template <class I, class C, class S>
CudaModule module_of(const Plan& plan, const Target& target, size_t n, bool share, I i_of, C config_of, S suffix_of) {
  CudaModule m;
  m.arch = target.arch;
  std::map<std::string, std::string> fns;
  std::map<std::string, size_t> function_of;  // code with the name as "@" -> its function
  std::vector<std::string> functions, names;   // their texts and names, in order
  std::vector<size_t> function(n);             // kernel j's
  for (size_t j = 0; j < n; ++j) {
    CudaKernel c;
    std::map<std::string, std::string> own;  // (its split reductions' arrays carry its name)
    std::string text = kernel_text(i_of(j), plan, target, config_of(j), c, own, suffix_of(j));
    auto [at, fresh] = share ? function_of.emplace(renamed(text, c.name, "@"), functions.size()) : std::pair{function_of.end(), true};
    function[j] = fresh ? functions.size() : at->second;
    if (fresh) {
      functions.push_back(std::move(text));
      names.push_back(c.name);
      fns.insert(own.begin(), own.end());
    } else {
      c.name = names[at->second];
    }
    m.kernels.push_back(std::move(c));
  }
  std::string head = cr::cuda::prelude();
  head += "\n// ---- the registry ops the kernels call ----\n";
  for (const auto& [name, def] : fns) {
    head += def;
    head += '\n';
  }
  m.source = head;
  for (const std::string& f : functions) m.source += '\n' + f;
  const size_t parts = share ? part_count(functions.size()) : 1;
  if (parts == 1) return m;
  m.parts.assign(parts, head);
  for (size_t f = 0; f < functions.size(); ++f) m.parts[f * parts / functions.size()] += '\n' + functions[f];
  for (size_t j = 0; j < n; ++j) m.kernels[j].part = int(function[j] * parts / functions.size());
  return m;
}

}  // namespace

ScheduleTarget schedule_target(int threads) { return {threads, 512}; }

CudaModule emit_plan(const Plan& plan, const Target& target, const std::vector<KernelConfig>& configs) {
  static const KernelConfig heuristic;
  return module_of(
      plan, target, plan.kernels.size(), true, [](size_t j) { return j; },
      [&](size_t j) -> const KernelConfig& { return j < configs.size() ? configs[j] : heuristic; }, [](size_t) { return std::string(); });
}

CudaModule emit_candidates(const Plan& plan, size_t k, const Target& target, const std::vector<KernelConfig>& configs) {
  return module_of(
      plan, target, configs.size(), false, [k](size_t) { return k; }, [&](size_t j) -> const KernelConfig& { return configs[j]; },
      [](size_t j) { return cat("_t", j); });
}

std::string config_name(const KernelConfig& c) {
  std::string s;
  auto part = [&](const char* what, int64_t v) {
    if (v) s += cat(s.empty() ? "" : " ", what, " ", v);
  };
  part("block", c.block);
  part("waves", c.waves);
  part("vector", c.vector_width);
  part("team", c.team);
  part("rows/block", c.rows_per_block);
  part("split", c.split);
  return s.empty() ? "heuristic" : s;
}

constexpr int64_t kMaxSplitBlocks = 8192;

std::vector<KernelConfig> candidates(const CudaKernel& c) {
  std::vector<KernelConfig> out{KernelConfig{}};
  if (c.size_params > 0) return out;
  if (c.form == Form::Pointwise) {
    for (int64_t block : {128, 256, 512})
      for (int64_t waves : {1, 8, 32})
        for (int vec : {0, 1})
          if (vec == 0 || c.vector_width > 1) out.push_back(KernelConfig{block, vec, waves, 0, 0});
    return out;
  }
  for (int64_t rows : {64, 256}) out.push_back(KernelConfig{0, 0, 0, 1, rows});
  for (int64_t rows : {1, 4, 8}) out.push_back(KernelConfig{0, 0, 0, 32, rows});
  for (int64_t team : {64, 128, 256, 512, 1024}) out.push_back(KernelConfig{0, 0, 0, team, 1});
  // few long rows (a whole-tensor sum's partials): blocks share a row, each a slice of at least
  // 4 elements a thread, up to kMaxSplitBlocks blocks
  for (int64_t split : {2, 4, 8, 16, 32, 64})
    if (c.splittable && c.rows * split <= kMaxSplitBlocks && c.row_size >= 4 * c.block * split)
      out.push_back(KernelConfig{0, 0, 0, c.block, 1, split});
  return out;
}

std::string render(const CudaModule& m) {
  std::string s = cat("// CUDA module for ", m.arch, ": ", m.kernels.size(), " kernels\n");
  for (const CudaKernel& k : m.kernels) {
    s += cat("//   ", k.name, "<<<", k.grid, ", ", k.block, ", ", k.shared_bytes, ">>>(");
    for (size_t i = 0; i < k.params.size(); ++i)
      s += cat(i ? ", " : "", dtype_name(k.params[i].dtype), k.params[i].written ? "* out" : "* in", " #", k.params[i].buffer);
    s += ")\n";
  }
  // the prelude is the same in every module: named, not shown
  const std::string marker = "// ---- end of the prelude ----";
  size_t end = m.source.find(marker);
  s += "// (the prelude of vm/kernels/cuda/prelude.cpp)";
  s += end == std::string::npos ? m.source : m.source.substr(end + marker.size());
  return s;
}

}  // namespace cr::jit::cuda
