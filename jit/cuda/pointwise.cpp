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
// Templates of dynamic graphs (sizes are parameters P<j>) divide by the parameters, and are
// scalar: nothing in their structure says that the row length is a multiple of 4.
#include "jit/cuda/kernels.hpp"

#include <cstdlib>

namespace cr::jit::cuda {

namespace {

constexpr int kVec = 4;

// Waves of resident blocks a pointwise grid may have (each thread then walks fewer steps of the
// grid-stride loop, with more loads in flight across the GPU). CRESCENT_CUDA_WAVES overrides the
// default, for tuning.
int64_t pointwise_waves() {
  static const int64_t w = [] {
    const char* e = std::getenv("CRESCENT_CUDA_WAVES");
    return e && std::atoi(e) > 0 ? int64_t(std::atoi(e)) : int64_t(8);  // 8: best of 1, 8, 32 on the H100 (bench/diag_cuda.lua)
  }();
  return w;
}

// Address a walks the innermost variable `last` with unit stride from a multiple of 4 whenever
// that variable is a multiple of 4.
bool aligned_unit(const Affine& a, size_t last) {
  if (a.coef(last) != 1 || a.c % kVec != 0) return false;
  for (size_t v = 0; v < a.k.size(); ++v)
    if (v != last && a.k[v] % kVec != 0) return false;
  return true;
}

// A template's row length is a parameter, which may be any size: no vectors (its addresses'
// parameters would need to be multiples of 4 too).
bool vectorisable(const Kernel& k) {
  size_t last = k.sizes.size() - 1;
  if (is_param(k.sizes[last]) || k.sizes[last] % kVec != 0 || k.stores.empty()) return false;
  for (const Store& s : k.stores)
    if (!aligned_unit(s.addr, last)) return false;
  return true;
}

void scalar_body(KernelWriter& w, Exprs& ex) {
  for (const Store& s : w.k.stores) w.lines.add(cat("p", s.buffer, "[", affine_str(s.addr), "] = ", ex.ref(s.expr), ";"));
}

// The 4 lanes of one group: vector loads before the lane loop, vector stores after it.
void vector_body(KernelWriter& w, Exprs& ex) {
  const Kernel& k = w.k;
  size_t last = k.sizes.size() - 1;
  std::string lane_var = cat("i", last);
  w.lines.add(cat("const ", w.idx, " ", lane_var, " = j;  // lane 0"));
  std::vector<char> vec_load(k.body.exprs.size(), 0);
  for (size_t i = 0; i < k.body.exprs.size(); ++i) {
    const Expr& e = k.body.exprs[i];
    if (e.op != EOp::Load || !aligned_unit(e.index[0], last)) continue;
    vec_load[i] = 1;
    w.lines.add(cat("const cr::vec4<", cuda_type(e.dtype), "> v", i, " = cr::load4(p", e.value, " + ", affine_str(e.index[0]), ");"));
  }
  for (size_t s = 0; s < k.stores.size(); ++s)
    w.lines.add(cat("cr::vec4<", cuda_type(k.body.exprs[size_t(k.stores[s].expr)].dtype), "> s", s, ";"));
  // lane loads: a vectorised load reads its lane of the vector (the expression's id is its
  // position in the body)
  const std::vector<Expr>& exprs = k.body.exprs;
  ex.load = [vec_load, &exprs](const Expr& e) {
    size_t i = size_t(&e - exprs.data());
    return vec_load[i] ? cat("v", i, ".v[u]") : plain_load(e);
  };
  w.lines.add("#pragma unroll");
  w.lines.open(cat("for (int u = 0; u < ", kVec, "; ++u)"));
  w.lines.add(cat("const ", w.idx, " ", lane_var, " = j + u;"));
  ex.open_scope();
  for (size_t s = 0; s < k.stores.size(); ++s) w.lines.add(cat("s", s, ".v[u] = ", ex.ref(k.stores[s].expr), ";"));
  ex.close_scope();
  w.lines.close();
  for (size_t s = 0; s < k.stores.size(); ++s)
    w.lines.add(cat("cr::store4(p", k.stores[s].buffer, " + ", affine_str(k.stores[s].addr), ", s", s, ");"));
}

}  // namespace

void write_pointwise(KernelWriter& w) {
  const Kernel& k = w.k;
  CudaKernel& o = w.out;
  o.form = Form::Pointwise;
  o.vector_width = vectorisable(k) ? kVec : 1;
  o.block = kPointwiseBlock;
  w.set_grid(o.block, pointwise_waves());
  w.set_index_type();
  Lines& L = w.lines;
  std::string B = cat(o.block);
  std::string groups = o.vector_width == 1 ? w.product_text(0, k.sizes.size()) : cat(product(k, 0, k.sizes.size()) / o.vector_width);
  L.add(cat("const ", w.idx, " n = ", groups, ";  // ", o.vector_width == 1 ? "elements" : "groups of 4 elements"));
  L.open(cat("for (", w.idx, " g = ", w.idx, "(blockIdx.x) * ", B, " + ", w.idx, "(threadIdx.x); g < n; g += ", w.idx, "(gridDim.x) * ", B, ")"));
  L.add(cat("const ", w.idx, " l = g", o.vector_width == 1 ? "" : cat(" * ", kVec), ";"));
  Exprs ex(k, L, w.functions);
  size_t last = k.sizes.size() - 1;
  if (o.vector_width == 1) {
    w.decompose("l", 0, k.sizes.size(), k.sizes.size());
    scalar_body(w, ex);
  } else {
    w.decompose("l", 0, last, k.sizes.size());
    L.add(cat("const ", w.idx, " j = l % ", k.sizes[last], ";"));
    vector_body(w, ex);
  }
  L.close();
}

}  // namespace cr::jit::cuda
