// Compiled after the prelude and the launcher's typedefs T (w), S (scales) and A (the
// arithmetic: float, double for float64) (int8_mm.cpp).
//
// The dequantisation of the `_int8_weight_mm` registry op (vm/ops/quant.cpp) for more than
// kInt8GemvRows rows of x (fewer run gemv.cuh over the int8 rows): q {n, kp} int8 (rows padded with
// zeros to kp), one scale per row, dequantised into x's dtype for cuBLAS (the launcher).

// w {n, k} in T = q * scale, a thread per element (grid-stride).
extern "C" __global__ void int8_dequant(const signed char* q, const S* scales, T* w, long long n, long long k,
                                        long long kp) {
  cr::grid_wait();
  const long long total = n * k;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
    const long long row = e / k, col = e % k;
    w[e] = T(A(q[row * kp + col]) * A(scales[row]));
  }
}
