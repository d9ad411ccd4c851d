// Compiled after the prelude and the launcher's typedefs T (elements) and A (their arithmetic:
// float, or double for float64) (cross_entropy.cpp).
//
// The gradient of cross_entropy with class indices (vm/ops/losses.cpp), one thread per element
// of the input {outer, C, inner} (p = the position (o, i), c its class):
//   grad = a[p] * exp(x - lse[p]) - (c == t[p] - 1 ? b[p] : 0) - k[p] * (w ? w[c] : 1)
extern "C" __global__ void cross_entropy_bwd(const T* x, const T* lse, const long long* t, const T* a, const T* b,
                                             const T* k, const T* w, T* out, long long n, long long classes,
                                             long long inner) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const long long i = e % inner, c = (e / inner) % classes, p = e / (inner * classes) * inner + i;
  A g = A(a[p]) * vmath::exp(A(x[e]) - A(lse[p])) - A(k[p]) * (w ? A(w[c]) : A(1));
  if (c == t[p] - 1) g -= A(b[p]);
  out[e] = T(g);
}

// The same for inner == 1 (the usual {N, C} scores), without a division per element (three 64-bit
// divisions an element left the general form at a quarter of the copy bandwidth): block b writes
// kRowItems x blockDim.x classes of row b / chunks.
#define kRowItems 4
extern "C" __global__ void cross_entropy_bwd_rows(const T* x, const T* lse, const long long* t, const T* a, const T* b,
                                                  const T* k, const T* w, T* out, long long chunks, long long classes) {
  const long long p = blockIdx.x / chunks, first = (blockIdx.x % chunks) * (kRowItems * blockDim.x) + threadIdx.x;
  const A ap = A(a[p]), lp = A(lse[p]), kp = A(k[p]), bp = A(b[p]);
  const long long target = t[p] - 1, row = p * classes;
#pragma unroll
  for (int u = 0; u < kRowItems; ++u) {
    const long long c = first + (long long)u * blockDim.x;
    if (c >= classes) break;
    A g = ap * vmath::exp(A(x[row + c]) - lp) - kp * (w ? A(w[c]) : A(1));
    if (c == target) g -= bp;
    out[row + c] = T(g);
  }
}
