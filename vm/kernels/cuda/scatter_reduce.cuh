// Compiled after scatter.cuh's module (the prelude, T, A, B and scatter.cuh: ScatterGeo, target,
// add_at, update_word) (scatter.cpp).
//
// scatter_reduce (vm/ops/scatter_reduce.cpp) on a copy of self, as PyTorch's CUDA kernel does:
// without include_self, scatter_identity first sets every position the index names to the
// reduction's identity (-0 for sums: -0 + v is v exactly; 1; -inf / +inf or the integer
// extremes); scatter_reduce then combines each source value atomically - sum and mean by add_at
// (mean also counts the hits of each element), prod / amax / amin by compare-and-swap loops
// (a NaN wins amax / amin) - and scatter_mean divides by the count where it is above 1 (integers
// round down, as the CPU).
#define R_SUM 0
#define R_PROD 1
#define R_MEAN 2
#define R_AMAX 3
#define R_AMIN 4

__forceinline__ A combined(int reduce, A a, A b) {
  if (reduce == R_PROD) return scaled(a, b);  // (scatter.cuh: floats rounded once, integers wrap)
  if (a != a) return a;                       // (NaN, floats only: it wins)
  if (b != b) return b;
  return (reduce == R_AMAX) == (b > a) ? b : a;
}

// *o = combined(reduce, *o, v), atomically: a compare-and-swap loop on o's bits.
__forceinline__ void combine_at(float* o, int reduce, float v) {
  unsigned old = __float_as_uint(*o), assumed;
  do {
    assumed = old;
    old = atomicCAS(reinterpret_cast<unsigned*>(o), assumed, __float_as_uint(combined(reduce, __uint_as_float(assumed), v)));
  } while (old != assumed);
}
__forceinline__ void combine_at(double* o, int reduce, double v) {
  unsigned long long* w = reinterpret_cast<unsigned long long*>(o);
  unsigned long long old = *w, assumed;
  do {
    assumed = old;
    const double r = combined(reduce, __longlong_as_double((long long)assumed), v);
    old = atomicCAS(w, assumed, (unsigned long long)__double_as_longlong(r));
  } while (old != assumed);
}
__forceinline__ void combine_at(int* o, int reduce, long long v) {
  unsigned* w = reinterpret_cast<unsigned*>(o);
  unsigned old = *w, assumed;
  do {
    assumed = old;
    old = atomicCAS(w, assumed, unsigned(int(combined(reduce, (long long)int(assumed), v))));
  } while (old != assumed);
}
__forceinline__ void combine_at(long long* o, int reduce, long long v) {
  unsigned long long* w = reinterpret_cast<unsigned long long*>(o);
  unsigned long long old = *w, assumed;
  do {
    assumed = old;
    old = atomicCAS(w, assumed, (unsigned long long)combined(reduce, (long long)assumed, v));
  } while (old != assumed);
}
template <class H> __forceinline__ void combine_at(H* o, int reduce, float v) {  // (16-bit floats)
  update_word(o, 16, [reduce, v](unsigned bits) {
    H h;
    h.bits = (unsigned short)bits;
    return unsigned(H(combined(reduce, float(h), v)).bits);
  });
}

extern "C" __global__ void scatter_identity(T* __restrict__ out, const long long* __restrict__ index,
                                            const T* __restrict__ src, ScatterGeo g, A identity, int64_t* check) {
  cr::grid_wait();
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long so;
  if (i >= g.n) return;
  if (T* o = target(out, index, g, i, &so, check)) *o = T(identity);
}

extern "C" __global__ void scatter_reduce(T* __restrict__ out, const long long* __restrict__ index,
                                          const T* __restrict__ src, ScatterGeo g, int reduce, int* __restrict__ counts,
                                          int64_t* check) {
  cr::grid_wait();
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long so;
  if (i >= g.n) return;
  T* o = target(out, index, g, i, &so, check);
  if (!o) return;
  const A v = A(src[so]);
  if (reduce == R_SUM || reduce == R_MEAN) add_at(o, v);
  else combine_at(o, reduce, v);
  if (reduce == R_MEAN) atomicAdd(counts + (o - out), 1);
}

// out (contiguous, n elements) divided by its hits (+1 with include_self) where they are above 1.
extern "C" __global__ void scatter_mean(T* __restrict__ out, const int* __restrict__ counts, long long n, int include_self) {
  cr::grid_wait();
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= n) return;
  const A c = A(counts[e] + include_self), a = A(out[e]);
  if (!(c > A(1))) return;
  A q = a / c;
  if (A(0.5) == A(0) && q * c != a && (a < A(0)) != (c < A(0))) q -= A(1);  // (integers: toward -inf)
  out[e] = T(q);
}
