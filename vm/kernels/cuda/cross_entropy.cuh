// Compiled after the prelude and the launcher's typedefs T (elements) and A (their arithmetic:
// float, or double for float64) (cross_entropy.cpp).
//
// The gradient of cross_entropy with class indices (vm/ops/losses.cpp), one thread per element
// of the input {outer, C, inner} (p = the position (o, i), c its class):
//   grad = a[p] * exp(x - lse[p]) - (c == t[p] - 1 ? b[p] : 0) - k[p] * (w ? w[c] : 1)

// The gradient at score x of class c at position p.
__device__ __forceinline__ T ce_grad(T x, long long c, long long p, const T* lse, const long long* t, const T* a,
                                     const T* b, const T* k, const T* w) {
  A g = A(a[p]) * vmath::exp(A(x) - A(lse[p])) - A(k[p]) * (w ? A(w[c]) : A(1));
  if (c == t[p] - 1) g -= A(b[p]);
  return T(g);
}

extern "C" __global__ void cross_entropy_bwd(const T* x, const T* lse, const long long* t, const T* a, const T* b,
                                             const T* k, const T* w, T* out, long long n, long long classes,
                                             long long inner) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const long long i = e % inner, c = (e / inner) % classes, p = e / (inner * classes) * inner + i;
  out[e] = ce_grad(x[e], c, p, lse, t, a, b, k, w);
}

// The same for inner == 1 (the usual {N, C} scores) without a division per element (three
// 64-bit divisions an element held the general form to a quarter of the copy bandwidth): block b
// writes `span` classes of row b / chunks.
extern "C" __global__ void cross_entropy_bwd_rows(const T* x, const T* lse, const long long* t, const T* a, const T* b,
                                                  const T* k, const T* w, T* out, long long chunks, long long span,
                                                  long long classes) {
  const long long p = blockIdx.x / chunks, first = (blockIdx.x % chunks) * span;
  const long long end = first + span < classes ? first + span : classes;
  const long long row = p * classes;
  for (long long c = first + threadIdx.x; c < end; c += blockDim.x) out[row + c] = ce_grad(x[row + c], c, p, lse, t, a, b, k, w);
}
