// Compiled after the prelude and the launcher's typedefs T (the scores and their gradient), L
// (lse, a, b, k and the class weights: the loss's dtype, T or wider) and A (arithmetic: float,
// or double for float64) (cross_entropy.cpp).
//
// The gradient of cross_entropy with class indices (vm/ops/losses.cpp), one thread per element
// of the input {outer, C, inner} (p = the position (o, i), c its class):
//   grad = a[p] * exp(x - lse[p]) - (c == t[p] - 1 ? b[p] : 0) - k[p] * (w ? w[c] : 1)

// exp for the per-element terms: float as one MUFU ex2 of x log2(e) (the kernels were issue-bound
// on expf; its error is the product's rounding, ~1e-7 x |x|, next to terms of weight exp(x));
// double as vmath's.
__device__ __forceinline__ float exp_term(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
  return y;
}
__device__ __forceinline__ double exp_term(double x) { return vmath::exp(x); }

// The gradient at score x of class c, given position p's lse, a, b, k and target t (0-based).
__device__ __forceinline__ T ce_grad(T x, long long c, A lse, A a, A b, A k, long long t, const L* w) {
  A g = a * exp_term(A(x) - lse) - k * (w ? A(w[c]) : A(1));
  if (c == t) g -= b;
  return T(g);
}

extern "C" __global__ void cross_entropy_bwd(const T* x, const L* lse, const long long* t, const L* a, const L* b,
                                             const L* k, const L* w, T* out, long long n, long long classes,
                                             long long inner) {
  cr::grid_wait();
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const long long i = e % inner, c = (e / inner) % classes, p = e / (inner * classes) * inner + i;
  out[e] = ce_grad(x[e], c, A(lse[p]), A(a[p]), A(b[p]), A(k[p]), t[p] - 1, w);
}

// Calls f(i, v, n) over the elements [lo, hi) of x, the block's threads striding: n == V (16
// bytes of T) values v of elements i.. from an aligned 16-byte load, G of them in flight a thread,
// or n == 1 for the elements before the first 16-byte boundary and after the last (rows of odd
// length start anywhere). Data written at x's offsets shares its alignment.
#define V (16 / int(sizeof(T)))
template <int G, class F> __device__ __forceinline__ void each_vector(const T* x, long long lo, long long hi, F f) {
  const long long bd = blockDim.x, tid = threadIdx.x;
  long long a = lo + (long long)((16 - (reinterpret_cast<unsigned long long>(x + lo) & 15)) & 15) / (long long)sizeof(T);
  if (a > hi) a = hi;
  for (long long i = lo + tid; i < a; i += bd) f(i, x + i, 1);
  const long long nv = (hi - a) / V;
  const uint4* xv = reinterpret_cast<const uint4*>(x + a);
  long long j = tid;
  for (; j + (G - 1) * bd < nv; j += G * bd) {
    uint4 u[G];
#pragma unroll
    for (int g = 0; g < G; ++g) u[g] = xv[j + g * bd];
#pragma unroll
    for (int g = 0; g < G; ++g) f(a + (j + g * bd) * V, reinterpret_cast<const T*>(&u[g]), V);
  }
  for (; j < nv; j += bd) {
    const uint4 u = xv[j];
    f(a + j * V, reinterpret_cast<const T*>(&u), V);
  }
  for (long long i = a + nv * V + tid; i < hi; i += bd) f(i, x + i, 1);
}

// The same for inner == 1 (the usual {N, C} scores) without a division per element (three
// 64-bit divisions an element held the general form to a quarter of the copy bandwidth): block b
// writes `span` classes of row b / chunks, the row's numbers read once, in 16-byte vectors.
#define kCeGroup 4
extern "C" __global__ void cross_entropy_bwd_rows(const T* x, const L* lse, const long long* t, const L* a, const L* b,
                                                  const L* k, const L* w, T* out, long long chunks, long long span,
                                                  long long classes) {
  cr::grid_wait();
  const long long p = blockIdx.x / chunks, first = (blockIdx.x % chunks) * span;
  const long long end = first + span < classes ? first + span : classes;
  T* outr = out + p * classes;
  const A lp = A(lse[p]), ap = A(a[p]), bp = A(b[p]), kp = A(k[p]);
  const long long tp = t[p] - 1;
  each_vector<kCeGroup>(x + p * classes, first, end, [&](long long i, const T* v, int n) {
    if (n == 1) {
      outr[i] = ce_grad(v[0], i, lp, ap, bp, kp, tp, w);
      return;
    }
    uint4 o;
#pragma unroll
    for (int e = 0; e < V; ++e) reinterpret_cast<T*>(&o)[e] = ce_grad(v[e], i + e, lp, ap, bp, kp, tp, w);
    *reinterpret_cast<uint4*>(outr + i) = o;
  });
}

// The rows' gradient into out rows `pitch` apart (pitch > classes, 16-byte aligned rows: the
// products reading it need them, vm/cuda/blas.cpp), the classes past the scores written as 0.
// A 16-byte vector of out takes x's elements from the two aligned vectors around them, shifted
// by the row's misalignment: h half-words (uniform in a block).
__device__ __forceinline__ uint4 shift_down(uint4 lo, uint4 hi, int h) {
  const unsigned u[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  const int k = h >> 1;
  unsigned o[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const unsigned a = k == 0 ? u[i] : k == 1 ? u[i + 1] : k == 2 ? u[i + 2] : u[i + 3];
    const unsigned b = k == 0 ? u[i + 1] : k == 1 ? u[i + 2] : k == 2 ? u[i + 3] : u[i + 4];
    o[i] = (h & 1) ? __funnelshift_r(a, b, 16) : a;
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

extern "C" __global__ void cross_entropy_bwd_pitched(const T* x, const L* lse, const long long* t, const L* a,
                                                     const L* b, const L* k, const L* w, T* out, long long chunks,
                                                     long long span, long long classes, long long pitch) {
  cr::grid_wait();
  const long long p = blockIdx.x / chunks, first = (blockIdx.x % chunks) * span, bd = blockDim.x;
  const long long end = first + span < pitch ? first + span : pitch;
  const T* xr = x + p * classes;
  T* outr = out + p * pitch;
  const A lp = A(lse[p]), ap = A(a[p]), bp = A(b[p]), kp = A(k[p]);
  const long long tp = t[p] - 1;
  const int s = int((reinterpret_cast<unsigned long long>(xr) & 15) / sizeof(T)), h = s * int(sizeof(T)) / 2;
  const uint4* xa = reinterpret_cast<const uint4*>(xr - s);
  const long long whole = classes / V * V, vend = end < whole ? end : whole;  // vectors wholly of scores
  auto put = [&](long long c, uint4 u) {
    uint4 o;
#pragma unroll
    for (int e = 0; e < V; ++e)
      reinterpret_cast<T*>(&o)[e] = ce_grad(reinterpret_cast<const T*>(&u)[e], c + e, lp, ap, bp, kp, tp, w);
    *reinterpret_cast<uint4*>(outr + c) = o;
  };
  long long c = first + threadIdx.x * V;
  for (; c + (kCeGroup - 1) * bd * V < vend; c += kCeGroup * bd * V) {
    uint4 lo[kCeGroup], hi[kCeGroup];
#pragma unroll
    for (int g = 0; g < kCeGroup; ++g) {
      const long long q = (c + g * bd * V) / V;
      lo[g] = xa[q];
      hi[g] = s ? xa[q + 1] : lo[g];
    }
#pragma unroll
    for (int g = 0; g < kCeGroup; ++g) put(c + g * bd * V, s ? shift_down(lo[g], hi[g], h) : lo[g]);
  }
  for (; c < vend; c += bd * V) put(c, s ? shift_down(xa[c / V], xa[c / V + 1], h) : xa[c / V]);
  for (long long i = (vend > first ? vend : first) + threadIdx.x; i < end; i += bd)
    outr[i] = i < classes ? ce_grad(xr[i], i, lp, ap, bp, kp, tp, w) : T(0);
}

// lse of each row of {rows, classes} scores in one pass: a block a row, each thread a running
// maximum m and sum s of exp(x - m) over its 16-byte vectors (kLseGroup in flight), then the
// block's (m, s) pairs rescaled to its maximum. v == m adds exp(0) = 1, which keeps rows of -inf
// at -inf without an inf - inf.
#define kLseBlock 256
#define kLseGroup 4
__device__ __forceinline__ A lse_term(A v, A m) { return v == m ? A(1) : exp_term(v - m); }

extern "C" __global__ void cross_entropy_lse_rows(const T* x, L* lse, long long classes) {
  cr::grid_wait();
  __shared__ A smem[kLseBlock / 32];
  A m = -cr::inf_<A>(), s = 0;
  each_vector<kLseGroup>(x + (long long)blockIdx.x * classes, 0, classes, [&](long long, const T* v, int n) {
    A mx = A(v[0]);
    for (int u = 1; u < n; ++u) mx = A(v[u]) > mx ? A(v[u]) : mx;
    if (mx > m) {
      s *= vmath::exp(m - mx);
      m = mx;
    }
    for (int u = 0; u < n; ++u) s += lse_term(A(v[u]), m);
  });
  const A M = cr::block_reduce<kLseBlock>(m, cr::Max{}, smem);
  const A S = cr::block_reduce<kLseBlock>(m == M ? s : s * vmath::exp(m - M), cr::Sum{}, smem);
  if (threadIdx.x == 0) lse[blockIdx.x] = L(M + vmath::log(S));
}
