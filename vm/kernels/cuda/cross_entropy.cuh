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
