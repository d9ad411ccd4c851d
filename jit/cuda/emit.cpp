// The CUDA module of a plan: prelude, the device functions of the registry ops the kernels call,
// then one kernel per Plan kernel (bodies: pointwise.cpp, reduce.cpp), with the launch table.
#include "jit/cuda/emit.hpp"

#include <cstdlib>

#include "jit/cuda/kernels.hpp"
#include "jit/cuda/prelude.hpp"

namespace cr::jit::cuda {

const char* form_name(Form f) {
  switch (f) {
    case Form::Pointwise: return "pointwise";
    case Form::ReduceThread: return "thread-per-row reduction";
    case Form::ReduceWarp: return "warp-per-row reduction";
    case Form::ReduceBlock: return "block-per-row reduction";
  }
  return "?";
}

// ---- KernelWriter helpers ----------------------------------------------------------------------

int64_t KernelWriter::product(size_t first, size_t last) const {
  int64_t p = 1;
  for (size_t v = first; v < last; ++v) p *= k.sizes[v];
  return p;
}

int64_t KernelWriter::grid_for(int64_t items, int64_t per_block, int64_t waves) const {
  int64_t wave = int64_t(target.sm_count) * std::max<int64_t>(1, target.max_threads_per_sm / out.block);
  return std::min((items + per_block - 1) / per_block, wave * waves);
}

void KernelWriter::set_index_type() {
  int64_t bound = product(0, k.sizes.size());
  auto reach = [&](const Affine& a) {
    int64_t r = std::abs(a.c);
    for (size_t v = 0; v < a.k.size() && v < k.sizes.size(); ++v) r += std::abs(a.k[v]) * std::max<int64_t>(k.sizes[v] - 1, 0);
    bound = std::max(bound, r);
  };
  for (const Expr& e : k.body.exprs)
    if (e.op == EOp::Load) reach(e.index[0]);
  for (const Store& s : k.stores) reach(s.addr);
  int64_t step = std::max<int64_t>(out.grid, 1) * out.block * 4;
  out.index32 = bound + step < (int64_t(1) << 31);
}

void KernelWriter::decompose(const std::string& linear, size_t first, size_t last, size_t end) {
  for (size_t v = first; v < last; ++v) {
    int64_t stride = product(v + 1, end);
    std::string x = stride == 1 ? linear : cat("(", linear, " / ", stride, ")");
    if (v > first) x = cat(x, " % ", k.sizes[v]);
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
  return ps;
}

// extern "C" __global__ void __launch_bounds__(B) kN(float* __restrict__ p0, const float* ...)
std::string signature(const CudaKernel& c) {
  std::string s = cat("extern \"C\" __global__ void __launch_bounds__(", c.block, ") ", c.name, "(");
  for (size_t i = 0; i < c.params.size(); ++i) {
    const Param& p = c.params[i];
    const char* t = cuda_type(p.dtype);
    // read-only: const __restrict__ (the read-only data path); written and read: no promise
    std::string q = p.written && p.read ? cat(t, "* ") : p.written ? cat(t, "* __restrict__ ") : cat("const ", t, "* __restrict__ ");
    s += cat(i ? ", " : "", q, "p", i);
  }
  return s + ")";
}

std::string kernel_text(const Kernel& k, const Plan& plan, const Target& t, CudaKernel& c, std::map<std::string, std::string>& fns) {
  c.name = k.name;
  c.params = params_of(k, plan);
  Lines body;
  body.indent = 1;
  KernelWriter w{k, t, c, body, fns};
  if (k.accs.empty()) write_pointwise(w);
  else write_reduction(w);
  if (c.grid == 0 && w.product(0, k.sizes.size()) != 0) c.grid = 1;
  std::string head = cat("// ", k.name, ": ", form_name(c.form), c.vector_width > 1 ? ", float4-style vectors of 4" : "",
                         c.form != Form::Pointwise ? cat(", ", c.rows, " rows of ", c.row_size, c.persistent ? ", persistent" : ", looped") : "",
                         ", grid ", c.grid, " x block ", c.block, ", ", c.index32 ? "32" : "64", "-bit indices; loops ", shape_str(k.sizes), "\n");
  return cat(head, signature(c), " {\n  typedef ", c.index32 ? "int" : "int64_t", " idx_t;\n", body.text, "}\n");
}

}  // namespace

CudaModule emit_plan(const Plan& plan, const Target& target) {
  CudaModule m;
  m.arch = target.arch;
  std::map<std::string, std::string> fns;
  std::string kernels;
  for (const Kernel& k : plan.kernels) {
    CudaKernel c;
    kernels += '\n';
    kernels += kernel_text(k, plan, target, c, fns);
    m.kernels.push_back(std::move(c));
  }
  m.source = prelude();
  m.source += "\n// ---- the registry ops the kernels call ----\n";
  for (const auto& [name, def] : fns) {
    m.source += def;
    m.source += '\n';
  }
  m.source += kernels;
  return m;
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
  s += "// (the prelude of jit/cuda/prelude.cpp)";
  s += end == std::string::npos ? m.source : m.source.substr(end + marker.size());
  return s;
}

}  // namespace cr::jit::cuda
