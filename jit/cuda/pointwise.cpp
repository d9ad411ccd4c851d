// Pointwise kernels (no reductions): every variable of the Kernel is flattened into one linear
// index walked grid-stride, so any shape fills the GPU the same way:
//
//   for (g = blockIdx.x * B + threadIdx.x; g < n / V; g += gridDim.x * B)
//     variables from l = g * V (constant divisors); loads, arithmetic, stores
//
// Vectorised form (V = 4): when every store writes 4 consecutive elements of the innermost
// variable at an address that is a multiple of 4 (16 bytes for float32), the 4 lanes' stores
// are one vector store; loads of the same kind are one vector load, loads constant along the
// innermost variable one scalar load, and any other load (a transposed input) is read per lane.
// Templates of dynamic graphs (sizes are parameters P<j>) divide by the parameters. Whether
// their row length and addresses are multiples of 4 is known only at launch, so a template has
// both forms: the kernel checks its parameters once and takes the vector loop when they allow
// (the host makes the same check to size the grid, launch_grid). One source serves every size;
// no recompile when a size stops being a multiple of 4.
#include "jit/cuda/kernels.hpp"

#include <algorithm>
#include <cstdlib>

#include "vm/env.hpp"

namespace cr::jit::cuda {

namespace {


// Waves of resident blocks a pointwise grid may have (each thread then walks fewer steps of the
// grid-stride loop, with more loads in flight across the GPU). CRESCENT_CUDA_WAVES overrides the
// default, for tuning.
int64_t pointwise_waves() {
  static const int64_t w = [] {
    return int64_t(env_number(kEnvCudaWaves));  // default 8: best of 1, 8, 32 on the H100 (bench/diag_cuda.lua)
  }();
  return w;
}

// Address a walks the innermost variable `last` with unit stride from a multiple of `vec` whenever
// that variable is a multiple of `vec`. In a template, a parameter may be any value: `params` then
// gets the parameters that must be multiples of `vec` (checked at run time).
bool aligned_unit(const Affine& a, size_t last, int vec, std::vector<int64_t>* params = nullptr) {
  if (a.coef(last) != 1) return false;
  auto multiple = [&](int64_t x) {
    if (params && is_param(x)) {
      params->push_back(x);
      return true;
    }
    return x % vec == 0;
  };
  if (!multiple(a.c)) return false;
  for (size_t v = 0; v < a.k.size(); ++v)
    if (v != last && !multiple(a.k[v])) return false;
  return true;
}

// The lanes of a vector group: 16 bytes of the stored values - 8 when every store is a 16-bit
// float, else 4 (one 16-byte access for float32 / int32, two for 8-byte types).
int group_width(const Kernel& k) {
  for (const Store& s : k.stores)
    if (dtype_size(k.body.exprs[size_t(s.expr)].dtype) != 2) return 4;
  return 8;
}

// Whether every store writes `vec` lanes with one vector store (and the innermost loop is a
// multiple of `vec`): for a template, whether it can, given `params` (the row length and the
// addresses' parameters) multiples of `vec`.
bool vectorisable(const Kernel& k, int vec, std::vector<int64_t>* params = nullptr) {
  size_t last = k.sizes.size() - 1;
  if (k.stores.empty()) return false;
  if (params && is_param(k.sizes[last])) params->push_back(k.sizes[last]);
  else if (k.sizes[last] % vec != 0) return false;
  for (const Store& s : k.stores)
    if (!aligned_unit(s.addr, last, vec, params)) return false;
  return true;
}

// The loads a vector group reads with one vector load.
std::vector<char> vector_loads(const Kernel& k, int vec, std::vector<int64_t>* params = nullptr) {
  std::vector<char> r(k.body.exprs.size(), 0);
  for (size_t i = 0; i < k.body.exprs.size(); ++i) {
    const Expr& e = k.body.exprs[i];
    r[i] = e.op == EOp::Load && !e.gather() && aligned_unit(e.index[0], k.sizes.size() - 1, vec, params);
  }
  return r;
}

// A template's vector form: the parameters that must be multiples of `vec` for it (none: it has no
// vector form). The instance (same structure, concrete values) tells whether this launch takes it.
std::vector<int64_t> vector_params(const Kernel& t, int vec) {
  std::vector<int64_t> ps;
  if (!vectorisable(t, vec, &ps)) return {};
  vector_loads(t, vec, &ps);
  std::sort(ps.begin(), ps.end());
  ps.erase(std::unique(ps.begin(), ps.end()), ps.end());
  return ps;
}

// Whether a vector group's lanes run in pairs (Exprs::pair): the kernel rounds float32 to 16
// bits, and nothing but its vector loads depends on the lane (no index, gather or per-lane load).
bool pairable(const Kernel& k, const std::vector<char>& vec_load) {
  size_t last = k.sizes.size() - 1;
  bool rounds = false;
  for (size_t i = 0; i < k.body.exprs.size(); ++i) {
    const Expr& e = k.body.exprs[i];
    bool half = e.dtype == DType::f16 || e.dtype == DType::bf16;
    if (e.op == EOp::Cast && half) rounds |= k.body.exprs[size_t(e.a)].dtype != e.dtype;
    bool per_lane = (e.op == EOp::Load && !vec_load[i]) || e.op == EOp::Index;
    if (per_lane && (e.gather() || e.index[0].coef(last) != 0)) return false;
  }
  return rounds;
}

void scalar_body(KernelWriter& w, Exprs& ex) {
  for (const Store& s : w.k.stores) w.lines.add(cat("p", s.buffer, "[", affine_str(s.addr), "] = ", ex.ref(s.expr), ";"));
}

// The `vec` lanes of one group: vector loads before the lane loop, vector stores after it.
void vector_body(KernelWriter& w, Exprs& ex, int vec) {
  const Kernel& k = w.k;
  size_t last = k.sizes.size() - 1;
  std::string lane_var = cat("i", last);
  w.lines.add(cat("const ", w.idx, " ", lane_var, " = j;  // lane 0"));
  // (a template's vector form reads with vectors what its instances' may: vector_params)
  std::vector<int64_t> params;
  std::vector<char> vec_load = vector_loads(k, vec, w.dynamic ? &params : nullptr);
  for (size_t i = 0; i < k.body.exprs.size(); ++i) {
    const Expr& e = k.body.exprs[i];
    if (!vec_load[i]) continue;
    w.lines.add(cat("const cr::vec<", cuda_type(e.dtype), ", ", vec, "> v", i, " = cr::loadv<", vec, ">(p", e.value, " + ",
                    affine_str(e.index[0]), ");"));
  }
  for (size_t s = 0; s < k.stores.size(); ++s)
    w.lines.add(cat("cr::vec<", cuda_type(k.body.exprs[size_t(k.stores[s].expr)].dtype), ", ", vec, "> s", s, ";"));
  // lane loads: a vectorised load reads its lane of the vector (the expression's id is its
  // position in the body)
  const std::vector<Expr>& exprs = k.body.exprs;
  ex.load = [vec_load, &exprs, &k, &ex](const Expr& e) {
    size_t i = size_t(&e - exprs.data());
    return vec_load[i] ? cat("v", i, ".v[u", ex.lane ? " + 1" : "", "]") : plain_load(k, e);
  };
  ex.pair = pairable(k, vec_load);
  w.lines.add("#pragma unroll");
  w.lines.open(cat("for (int u = 0; u < ", vec, "; u += ", ex.pair ? 2 : 1, ")"));
  w.lines.add(cat("const ", w.idx, " ", lane_var, " = j + u;"));
  ex.open_scope();
  for (size_t s = 0; s < k.stores.size(); ++s) {
    std::string v = ex.ref(k.stores[s].expr);
    if (!ex.pair) w.lines.add(cat("s", s, ".v[u] = ", v, ";"));
    else w.lines.add(cat("s", s, ".v[u] = ", v, "_0, s", s, ".v[u + 1] = ", v, "_1;"));
  }
  ex.close_scope();
  ex.pair = false;
  w.lines.close();
  for (size_t s = 0; s < k.stores.size(); ++s)
    w.lines.add(cat("cr::storev(p", k.stores[s].buffer, " + ", affine_str(k.stores[s].addr), ", s", s, ");"));
}

}  // namespace

namespace {

// for (g = first group of this thread; g < groups; g += threads in the grid): the body per group
// (`vec` elements, or 1 when not vector)
void group_loop(KernelWriter& w, int vec) {
  const bool vector = vec > 1;
  const Kernel& k = w.k;
  Lines& L = w.lines;
  const std::string B = cat(w.out.block), &idx = w.idx;
  const size_t n = k.sizes.size(), last = n - 1;
  std::string elements = w.product_text(0, n);
  std::string groups = !vector ? elements : w.dynamic ? cat(elements, " / ", vec) : cat(product(k, 0, n) / vec);
  L.add(cat("const ", idx, " n = ", groups, ";  // ", vector ? cat("groups of ", vec, " elements") : "elements"));
  L.open(cat("for (", idx, " g = ", idx, "(blockIdx.x) * ", B, " + ", idx, "(threadIdx.x); g < n; g += ", idx, "(gridDim.x) * ", B, ")"));
  L.add(cat("const ", idx, " l = g", vector ? cat(" * ", vec) : "", ";"));
  Exprs ex(k, L, w.functions);
  if (!vector) {
    w.decompose("l", 0, n, n);
    scalar_body(w, ex);
  } else {
    w.decompose("l", 0, last, n);
    L.add(cat("const ", idx, " j = l % ", int_str(k.sizes[last]), ";"));
    vector_body(w, ex, vec);
  }
  L.close();
}

// The instance's launch takes the vector form: its values of the template's parameters are
// multiples of `vec`.
bool instance_vectorises(const std::vector<int64_t>& params, const std::vector<int64_t>& values, int vec) {
  if (params.empty()) return false;
  for (int64_t p : params)
    if (values[param_slot(p)] % vec != 0) return false;
  return true;
}

}  // namespace

void write_pointwise(KernelWriter& w) {
  const Kernel& k = w.k;
  CudaKernel& o = w.out;
  o.form = Form::Pointwise;
  const KernelConfig& cfg = w.config;
  o.block = cfg.block ? cfg.block : kPointwiseBlock;
  // 16-bit stores take groups of 8 (16 bytes) when the kernel allows it, else of 4
  int vec = group_width(k);
  if (vec == 8 && !(w.dynamic ? !vector_params(k, vec).empty() : vectorisable(k, vec))) vec = 4;
  std::vector<int64_t> vparams = w.dynamic ? vector_params(k, vec) : std::vector<int64_t>{};
  const bool vector = w.dynamic ? instance_vectorises(vparams, w.params, vec) : cfg.vector_width != 1 && vectorisable(k, vec);
  o.vector_width = vector ? vec : 1;
  o.vector_form = w.dynamic ? !vparams.empty() : vector;
  w.set_grid(o.block, cfg.waves ? cfg.waves : pointwise_waves());
  w.set_index_type();
  if (!w.dynamic || vparams.empty()) {
    group_loop(w, vector ? vec : 1);
    return;
  }
  std::string test;
  for (int64_t p : vparams) test += cat(test.empty() ? "" : " && ", int_str(p), " % ", vec, " == 0");
  w.lines.open(cat("if (", test, ")"));
  group_loop(w, vec);
  w.lines.close();
  w.lines.open("else");
  group_loop(w, 1);
  w.lines.close();
}

}  // namespace cr::jit::cuda
