// Ops along one dim whose output has the input's shape: cumsum, softmax, log_softmax.
// The input is made contiguous and viewed as {outer, n, inner} with the op's dim in the middle:
// inner == 1 runs each row as one contiguous, vectorised loop; inner > 1 walks the n rows of a
// tile of columns together, so memory is still read in order.
#include <cmath>
#include <memory>

#include "vm/kernels/folds.hpp"
#include "vm/kernels/wide.hpp"
#if CR_HAVE_AVX512_TWINS
#include <immintrin.h>
#endif
#include "vm/kernels/cuda/library.hpp"
#include "vm/ops/operands.hpp"

namespace cr {
namespace {

constexpr int64_t kTile = 256;  // columns walked together when inner > 1

// Calls row(o, j0, cols) for every outer index and tile of columns, in parallel.
template <class Row> void for_tiles(const Along& a, Row row) {
  const int64_t tile = std::min(a.inner, kTile), tiles = (a.inner + tile - 1) / tile;
  parallel_for(a.outer * tiles, std::max<int64_t>(1, kParallelGrain / (a.n * tile)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      int64_t j0 = (t % tiles) * tile;
      row(t / tiles, j0, std::min(tile, a.inner - j0));
    }
  });
}

bool dtype_option(const OpCall& c, int i, DType* d) {
  if (!c.has(i)) return false;
  *d = dtype_named(c.str(i));
  return true;
}

// ---- cumsum --------------------------------------------------------------------------------------

// Integers and bools sum into int64, floating types in double (as PyTorch's CPU kernel).
std::vector<Meta> infer_cumsum(OpCall& c) {
  Tensor x = c.tensor(0);
  c.dim(1, x.dim());
  DType d = is_floating(x.dtype()) ? x.dtype() : DType::i64;
  dtype_option(c, 2, &d);
  return {{x.sizes(), d, x.device()}};
}

// One contiguous row. Each group of 8 is summed locally first, so only one add per group waits
// for the running total (a plain scan is one long chain of dependent adds).
// Integer sums wrap around on overflow (dtype.hpp: wrapping_add).
template <class Acc, class T> void cumsum_row(const T* x, T* y, int64_t n) {
  Acc carry = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    Acc local[8];
    local[0] = Acc(load(x[i]));
    for (int k = 1; k < 8; ++k) local[k] = wrapping_add(local[k - 1], Acc(load(x[i + k])));
    for (int k = 0; k < 8; ++k) store(y[i + k], wrapping_add(carry, local[k]));
    carry = wrapping_add(carry, local[7]);
  }
  for (; i < n; ++i) {
    carry = wrapping_add(carry, Acc(load(x[i])));
    store(y[i], carry);
  }
}

void run_cumsum(OpCall& c) {
  const Tensor& out = c.outs[0];
  Tensor x = contiguous(cast(c.tensor(0), out.dtype()));
  Along a = along(x, x.dim() == 0 ? 0 : c.dim(1, x.dim()));
  if (x.numel() == 0) return;
  if (!out.device().is_cpu()) return cuda::cumsum(c.ctx, out, x, a.outer, a.n, a.inner);  // (a library kernel)
  visit(x.dtype(), [&](auto t) {
    using T = decltype(t);
    using Acc = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, uint64_t>;  // ints wrap
    const T* xp = x.data<T>();
    T* yp = out.data<T>();
    if (a.inner == 1) {
      parallel_for(a.outer, std::max<int64_t>(1, kParallelGrain / a.n), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) cumsum_row<Acc>(xp + r * a.n, yp + r * a.n, a.n);
      });
      return;
    }
    for_tiles(a, [&](int64_t o, int64_t j0, int64_t cols) {
      Acc acc[kTile] = {};
      const int64_t base = o * a.n * a.inner + j0;
      for (int64_t i = 0; i < a.n; ++i) {
        const T* xr = xp + base + i * a.inner;
        T* yr = yp + base + i * a.inner;
        for (int64_t j = 0; j < cols; ++j) {
          acc[j] += Acc(load(xr[j]));
          store(yr[j], acc[j]);
        }
      }
    });
  });
}

// ---- softmax, log_softmax --------------------------------------------------------------------------
// float / double are folded as compiled softmax folds them (jit/lower_reduce.cpp), with the same
// functions, so that both give the same bits: rows (inner == 1) in blocks of
// lanes::kSoftmaxBlock, as the code generator's reductions fold a block per call; columns element
// after element in the compute dtype. Every exp goes through the BlockFn of softmax_exp_block.

// y[i] = exp(x[i]) for float softmax (y may be x): lanes::exp_poly.
void exp_loop(const void* a, const void*, void* out, int64_t n) {
  lanes::exp_block(static_cast<const float*>(a), static_cast<float*>(out), n);
}
#if CR_HAVE_AVX512_TWINS
// exp_poly on 16 lanes, step for step, with AVX-512's scalef doing the scaling by 2^k in one
// instruction (exp_poly's two products by powers of two round the same way): the same bits,
// about 1.7x faster than exp_poly auto-vectorised (test_blocks checks the bits).
// (The maskz forms: GCC 12's unmasked min / max / scalef warn about an undefined source.)
CR_TARGET_AVX512 void exp_loop_avx512(const void* a, const void*, void* out, int64_t n) {
  using namespace lanes::exp_c;
  const float* x = static_cast<const float*>(a);
  float* y = static_cast<float*>(out);
  constexpr __mmask16 all = 0xFFFF;
  const __m512 c_hi = _mm512_set1_ps(hi), c_lo = _mm512_set1_ps(lo), c_log2e = _mm512_set1_ps(log2e),
               c_round = _mm512_set1_ps(round), c_ln2_hi = _mm512_set1_ps(ln2_hi), c_ln2_lo = _mm512_set1_ps(ln2_lo),
               c_p0 = _mm512_set1_ps(p0), c_p1 = _mm512_set1_ps(p1), c_p2 = _mm512_set1_ps(p2),
               c_p3 = _mm512_set1_ps(p3), c_p4 = _mm512_set1_ps(p4), c_p5 = _mm512_set1_ps(p5),
               c_one = _mm512_set1_ps(1.0f), c_min_k = _mm512_set1_ps(-126.0f), c_sub_k = _mm512_set1_ps(149.0f),
               c_two23 = _mm512_set1_ps(8388608.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 xc = _mm512_maskz_min_ps(all, c_hi, _mm512_loadu_ps(x + i));  // (NaN: the second operand)
    xc = _mm512_maskz_max_ps(all, c_lo, xc);
    __m512 t = _mm512_fmadd_ps(xc, c_log2e, c_round);
    __m512 k = _mm512_sub_ps(t, c_round);
    __m512 r = _mm512_fnmadd_ps(k, c_ln2_hi, xc);
    r = _mm512_fnmadd_ps(k, c_ln2_lo, r);
    __m512 p = _mm512_fmadd_ps(r, c_p0, c_p1);
    p = _mm512_fmadd_ps(p, r, c_p2);
    p = _mm512_fmadd_ps(p, r, c_p3);
    p = _mm512_fmadd_ps(p, r, c_p4);
    p = _mm512_fmadd_ps(p, r, c_p5);
    p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), c_one);
    // subnormal results (k < -126) as an integer's bits, as exp_poly builds them; no scalef may
    // underflow (a microcode assist each)
    const __mmask16 sub = _mm512_cmp_ps_mask(k, c_min_k, _CMP_LT_OQ);
    if (!sub) {
      _mm512_storeu_ps(y + i, _mm512_maskz_scalef_ps(all, p, k));
      continue;
    }
    const __m512 v = _mm512_add_ps(_mm512_maskz_scalef_ps(sub, p, _mm512_add_ps(k, c_sub_k)), c_two23);
    const __m512i bits = _mm512_sub_epi32(_mm512_castps_si512(v), _mm512_castps_si512(c_two23));
    _mm512_storeu_ps(y + i, _mm512_mask_blend_ps(sub, _mm512_maskz_scalef_ps(_knot_mask16(sub), p, k),
                                                 _mm512_castsi512_ps(bits)));
  }
  for (; i < n; ++i) y[i] = lanes::exp_poly(x[i]);
}
#else
void exp_loop_avx512(const void* a, const void* b, void* out, int64_t n) { exp_loop(a, b, out, n); }
#endif
template <class T> void log_loop(const void* a, const void*, void* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) static_cast<T*>(out)[i] = std::log(static_cast<const T*>(a)[i]);
}

// The largest value of a row, NaN when the row holds a NaN: its blocks' maxima merged in order.
template <class C, class T> C row_max(const T* x, int64_t n) {
  folds::Extreme<T, true, C> f;
  C m = f.init();
  for (int64_t i = 0; i < n; i += lanes::kSoftmaxBlock) f.run(m, x + i, std::min(lanes::kSoftmaxBlock, n - i), 0);
  return m;
}

// Σ exp(x - m) over a float / double row, the exps kept in y when it is not null: per block, the
// exps as `exp` computes them, summed as the sum reduction sums a block (folds::Sum).
template <class C> double row_exp_sum(const C* x, C* y, int64_t n, C m, BlockFn exp) {
  C buf[lanes::kSoftmaxBlock];
  double total = 0;
  for (int64_t i = 0; i < n; i += lanes::kSoftmaxBlock) {
    const int64_t len = std::min(lanes::kSoftmaxBlock, n - i);
    C* e = y ? y + i : buf;
    for (int64_t j = 0; j < len; ++j) e[j] = x[i + j] - m;
    exp(e, nullptr, e, len);
    folds::Sum<C>{}.run(total, e, len, 0);
  }
  return total;
}

// One contiguous row. float / double rows store exp(x - max) and rescale it in place; float16 /
// bfloat16 rows recompute it, so the output is rounded once.
template <bool Log, class T> void softmax_row(const T* x, T* y, int64_t n, BlockFn exp) {
  using C = compute_t<T>;
  const C m = row_max<C>(x, n);
  if constexpr (!std::is_same_v<T, C>) {
    const double sum = lanes::exp_sum(x, n, m);
    if constexpr (Log) {
      const C log_sum = C(std::log(sum));
      for (int64_t i = 0; i < n; ++i) store(y[i], (load(x[i]) - m) - log_sum);
    } else {
      const C inv = C(1.0 / sum);
      for (int64_t i = 0; i < n; ++i) store(y[i], lanes::exp_fast(load(x[i]) - m) * inv);
    }
  } else if constexpr (Log) {
    // (x - max) - log Σ: x - (max + log Σ) would round the large shift first
    const C log_sum = C(std::log(row_exp_sum<C>(x, nullptr, n, m, exp)));
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) - log_sum;
  } else {
    const C inv = C(1.0 / row_exp_sum<C>(x, y, n, m, exp));
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

// A tile of `cols` columns over n rows with row stride `stride`: the column maxima, Σ exp, then
// the output, each column folded in order in C. Each row's exps are computed in a buffer so that
// they vectorise.
template <bool Log, class T> void softmax_cols(const T* x, T* y, int64_t n, int64_t stride, int64_t cols, BlockFn exp) {
  using C = compute_t<T>;
  C m[kTile], s[kTile], e[kTile];
  for (int64_t j = 0; j < cols; ++j) {
    m[j] = -std::numeric_limits<C>::infinity();
    s[j] = 0;
  }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < cols; ++j) m[j] = lanes::max_step(m[j], C(load(x[i * stride + j])));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < cols; ++j) e[j] = C(load(x[i * stride + j])) - m[j];
    exp(e, nullptr, e, cols);
    for (int64_t j = 0; j < cols; ++j) s[j] += e[j];
  }
  for (int64_t j = 0; j < cols; ++j) s[j] = Log ? C(std::log(s[j])) : C(1) / s[j];
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (Log) {
      for (int64_t j = 0; j < cols; ++j) store(y[i * stride + j], (C(load(x[i * stride + j])) - m[j]) - s[j]);
      continue;
    }
    for (int64_t j = 0; j < cols; ++j) e[j] = C(load(x[i * stride + j])) - m[j];
    exp(e, nullptr, e, cols);
    for (int64_t j = 0; j < cols; ++j) store(y[i * stride + j], e[j] * s[j]);
  }
}

// softmax(x, dim[, {dtype =}]): floating inputs only (PyTorch has no integer kernel); {dtype =}
// converts first.
std::vector<Meta> infer_softmax(OpCall& c) {
  Tensor x = c.tensor(0);
  c.dim(1, x.dim());
  DType d = x.dtype();
  if (!dtype_option(c, 2, &d) && !is_floating(d))
    fail(cat(dtype_list_error("a floating tensor", d), " (convert with x:float() or pass {dtype = \"float32\"})"));
  if (!is_floating(d)) fail(cat("dtype expected a floating dtype, got ", dtype_name(d)));
  return {{x.sizes(), d, x.device()}};
}

template <bool Log> void run_softmax(OpCall& c) {
  const Tensor& out = c.outs[0];
  Tensor x = contiguous(cast(c.tensor(0), out.dtype()));
  Along a = along(x, x.dim() == 0 ? 0 : c.dim(1, x.dim()));
  if (x.numel() == 0) return;
  visit_floating(x.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* xp = x.data<T>();
    T* yp = out.data<T>();
    const BlockFn exp = softmax_exp_block(std::is_same_v<compute_t<T>, double> ? DType::f64 : DType::f32);
    if (a.inner == 1) {
      parallel_for(a.outer, std::max<int64_t>(1, kParallelGrain / a.n), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) softmax_row<Log>(xp + r * a.n, yp + r * a.n, a.n, exp);
      });
      return;
    }
    for_tiles(a, [&](int64_t o, int64_t j0, int64_t cols) {
      const int64_t base = o * a.n * a.inner + j0;
      softmax_cols<Log>(xp + base, yp + base, a.n, a.inner, cols, exp);
    });
  });
}

}  // namespace

// float64: the exp op's block (vmath::exp, vectorised): std::exp, a libm call per element, made
// softmax three times slower.
BlockFn softmax_exp_block(DType compute) {
  static const BlockFn exp64 = Registry::get().find("exp")->block(DType::f64);
  if (compute == DType::f64) return exp64;
  if (compute != DType::f32) return nullptr;
  return use_avx512_loops() ? &exp_loop_avx512 : &exp_loop;
}
BlockFn softmax_log_block(DType compute) {
  return compute == DType::f32 ? &log_loop<float> : compute == DType::f64 ? &log_loop<double> : nullptr;
}

void register_scans(Registry& r) {
  r.add(OpDef{"cumsum", "self:T, dim:D, opts:{dtype:S}", OpKind::Other, kDeviceAware | kExtern, infer_cumsum, run_cumsum});
  r.add(OpDef{"softmax", "self:T, dim:D, opts:{dtype:S}", OpKind::Other, 0, infer_softmax, run_softmax<false>});
  r.add(OpDef{"log_softmax", "self:T, dim:D, opts:{dtype:S}", OpKind::Other, 0, infer_softmax, run_softmax<true>});
  r.set_cast({"cumsum", "softmax", "log_softmax"}, CastPolicy::Float32);  // PyTorch's autocast: float32
}

}  // namespace cr
