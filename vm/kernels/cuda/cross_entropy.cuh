// Compiled after the prelude and the launcher's typedefs T (the scores and their gradient), L
// (lse, a, b, k and the class weights: the loss's dtype, T or wider) and A (arithmetic: float,
// or double for float64) (cross_entropy.cpp).
//
// The gradient of cross_entropy with class indices (vm/ops/losses.cpp), one thread per element
// of the input {outer, C, inner} (p = the position (o, i), c its class):
//   grad = a[p] * exp(x - lse[p]) - (c == t[p] - 1 ? b[p] : 0) - k[p] * (w ? w[c] : 1)

// The gradient at score x of class c, given position p's lse, a, b, k and target t (0-based).
__device__ __forceinline__ T ce_grad(T x, long long c, A lse, A a, A b, A k, long long t, const L* w) {
  A g = a * vmath::exp(A(x) - lse) - k * (w ? A(w[c]) : A(1));
  if (c == t) g -= b;
  return T(g);
}

extern "C" __global__ void cross_entropy_bwd(const T* x, const L* lse, const long long* t, const L* a, const L* b,
                                             const L* k, const L* w, T* out, long long n, long long classes,
                                             long long inner) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const long long i = e % inner, c = (e / inner) % classes, p = e / (inner * classes) * inner + i;
  out[e] = ce_grad(x[e], c, A(lse[p]), A(a[p]), A(b[p]), A(k[p]), t[p] - 1, w);
}

// The same for inner == 1 (the usual {N, C} scores) without a division per element (three
// 64-bit divisions an element held the general form to a quarter of the copy bandwidth): block b
// writes `span` classes of row b / chunks, the row's numbers read once, kCeGroup loads in flight
// a thread (the rows' odd lengths leave them unaligned for vector loads).
#define kCeGroup 8
extern "C" __global__ void cross_entropy_bwd_rows(const T* x, const L* lse, const long long* t, const L* a, const L* b,
                                                  const L* k, const L* w, T* out, long long chunks, long long span,
                                                  long long classes) {
  const long long p = blockIdx.x / chunks, first = (blockIdx.x % chunks) * span;
  const long long end = first + span < classes ? first + span : classes;
  const T* xr = x + p * classes;
  T* outr = out + p * classes;
  const A lp = A(lse[p]), ap = A(a[p]), bp = A(b[p]), kp = A(k[p]);
  const long long tp = t[p] - 1, bd = blockDim.x;
  long long c = first + threadIdx.x;
  for (; c + (kCeGroup - 1) * bd < end; c += kCeGroup * bd) {
    T v[kCeGroup];
#pragma unroll
    for (int u = 0; u < kCeGroup; ++u) v[u] = xr[c + u * bd];
#pragma unroll
    for (int u = 0; u < kCeGroup; ++u) outr[c + u * bd] = ce_grad(v[u], c + u * bd, lp, ap, bp, kp, tp, w);
  }
  for (; c < end; c += bd) outr[c] = ce_grad(xr[c], c, lp, ap, bp, kp, tp, w);
}

// lse of each row of {rows, classes} scores in one pass: a block a row, each thread a running
// maximum m and sum s of exp(x - m) over groups of kLseGroup loads in flight, then the block's
// (m, s) pairs rescaled to its maximum. v == m adds exp(0) = 1, which keeps rows of -inf at -inf
// without an inf - inf.
#define kLseBlock 256
#define kLseGroup 16
__device__ __forceinline__ A lse_term(A v, A m) { return v == m ? A(1) : vmath::exp(v - m); }

extern "C" __global__ void cross_entropy_lse_rows(const T* x, L* lse, long long classes) {
  __shared__ A smem[kLseBlock / 32];
  const T* row = x + (long long)blockIdx.x * classes;
  A m = -cr::inf_<A>(), s = 0;
  long long c = threadIdx.x;
  for (; c + (kLseGroup - 1) * kLseBlock < classes; c += kLseGroup * kLseBlock) {
    A v[kLseGroup];
#pragma unroll
    for (int u = 0; u < kLseGroup; ++u) v[u] = A(row[c + u * kLseBlock]);
    A mx = v[0];
#pragma unroll
    for (int u = 1; u < kLseGroup; ++u) mx = v[u] > mx ? v[u] : mx;
    if (mx > m) {
      s *= vmath::exp(m - mx);
      m = mx;
    }
#pragma unroll
    for (int u = 0; u < kLseGroup; ++u) s += lse_term(v[u], m);
  }
  for (; c < classes; c += kLseBlock) {
    const A v = A(row[c]);
    if (v > m) {
      s *= vmath::exp(m - v);
      m = v;
    }
    s += lse_term(v, m);
  }
  const A M = cr::block_reduce<kLseBlock>(m, cr::Max{}, smem);
  const A S = cr::block_reduce<kLseBlock>(m == M ? s : s * vmath::exp(m - M), cr::Sum{}, smem);
  if (threadIdx.x == 0) lse[blockIdx.x] = L(M + vmath::log(S));
}
