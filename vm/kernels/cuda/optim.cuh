// Compiled after the prelude and the launcher's typedefs T (elements) and C (their arithmetic:
// float, or double for float64) (optim.cpp).
//
// Multi-tensor optimizer updates (vm/ops/optim.cpp): one launch updates up to kListTensors
// parameters and their state, a block per chunk of kListChunk elements of one parameter. Per
// element they follow the CPU kernels' formulas in the same order of roundings - explicit
// __fmul_rn / __fadd_rn / __fdiv_rn (never contracted into an fma) and fma exactly where the CPU
// has one - so float32 results equal the CPU's bit for bit.
#define kListTensors 48
#define kListChunk 4096

struct TensorLists {
  T* p[kListTensors];
  const T* g[kListTensors];
  T* s[3][kListTensors];             // the state tensors (momentum; exp_avg, exp_avg_sq, max_exp_avg_sq)
  long long n[kListTensors];
  double a[kListTensors], b[kListTensors];  // per-parameter scalars (Adam: -step size, sqrt of bias correction 2; SGD: fresh)
  int first_block[kListTensors + 1];
  int count;
};

struct Scalars {
  double lr, wd, decay, beta1, beta2, keep1, keep2, eps;  // (SGD: beta1 = momentum, keep1 = 1 - dampening)
  int flag_a, flag_b, flag_c;                             // Adam: amsgrad, maximize, decoupled; SGD: nesterov, maximize, momentum
};

__forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__forceinline__ float div(float a, float b) { return __fdiv_rn(a, b); }
__forceinline__ float root(float a) { return __fsqrt_rn(a); }
__forceinline__ float fused(float a, float b, float c) { return fmaf(a, b, c); }
__forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
__forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
__forceinline__ double div(double a, double b) { return __ddiv_rn(a, b); }
__forceinline__ double root(double a) { return __dsqrt_rn(a); }
__forceinline__ double fused(double a, double b, double c) { return fma(a, b, c); }

// The parameter of this block (the last whose first block is at or before it) and its range.
__forceinline__ int tensor_of(const TensorLists& l, long long* lo, long long* hi) {
  int a = 0, b = l.count - 1;
  while (a < b) {
    const int m = (a + b + 1) / 2;
    if (l.first_block[m] <= int(blockIdx.x)) a = m;
    else b = m - 1;
  }
  *lo = (long long)(int(blockIdx.x) - l.first_block[a]) * kListChunk;
  *hi = *lo + kListChunk < l.n[a] ? *lo + kListChunk : l.n[a];
  return a;
}

extern "C" __global__ void fused_adam(TensorLists l, Scalars o) {
  cr::grid_wait();
  long long lo, hi;
  const int t = tensor_of(l, &lo, &hi);
  T *p = l.p[t], *m = l.s[0][t], *v = l.s[1][t], *vmax = o.flag_a ? l.s[2][t] : nullptr;
  const T* g = l.g[t];
  const C wd = C(o.wd), decay = C(o.decay), b1 = C(o.beta1), b2 = C(o.beta2), keep1 = C(o.keep1), keep2 = C(o.keep2);
  const C eps = C(o.eps), step = C(l.a[t]), bc2 = C(l.b[t]);
  for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    C gv = C(g[i]);
    if (o.flag_b) gv = -gv;
    C pv = C(p[i]);
    if (o.flag_c) pv = mul(pv, decay);
    else if (o.wd != 0) gv = fused(pv, wd, gv);
    const C mv = fused(gv, keep1, mul(C(m[i]), b1));
    C vv = fused(mul(keep2, gv), gv, mul(C(v[i]), b2));
    m[i] = T(mv);
    v[i] = T(vv);
    if (vmax) {
      const C old = C(vmax[i]);
      vv = (old != old || old > vv) ? old : vv;  // (torch.maximum keeps NaN)
      vmax[i] = T(vv);
    }
    const C denom = add(div(root(vv), bc2), eps);
    p[i] = T(add(pv, div(mul(step, mv), denom)));
  }
}

extern "C" __global__ void fused_sgd(TensorLists l, Scalars o) {
  cr::grid_wait();
  long long lo, hi;
  const int t = tensor_of(l, &lo, &hi);
  T *p = l.p[t], *buf = o.flag_c ? l.s[0][t] : nullptr;
  const T* g = l.g[t];
  const C wd = C(o.wd), mom = C(o.beta1), keep = C(o.keep1), neg_lr = C(-o.lr);
  const bool fresh = l.a[t] != 0;
  for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    C d = C(g[i]);
    if (o.flag_b) d = -d;
    const C pv = C(p[i]);
    if (o.wd != 0) d = fused(pv, wd, d);
    if (buf) {
      const C bv = fresh ? d : fused(d, keep, mul(C(buf[i]), mom));
      buf[i] = T(bv);
      d = o.flag_a ? fused(bv, mom, d) : bv;
    }
    p[i] = T(fused(d, neg_lr, pv));
  }
}
