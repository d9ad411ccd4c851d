// The attention backward's delta = rowsum(dout * out), a warp per row of EV elements, blocks of
// 128 threads: compiled after the prelude and the launcher's T and EV (attention_bwd.cpp), in the
// modules of both backward kernels.
extern "C" __global__ void __launch_bounds__(128) attention_bwd_dot(const T* __restrict__ out, const T* __restrict__ dout,
                                                                 float* __restrict__ delta, long long rows) {
  cr::grid_wait();
  const long long row = (long long)blockIdx.x * 4 + (threadIdx.x >> 5);
  if (row >= rows) return;
  float acc = 0.f;
  for (int d = threadIdx.x & 31; d < EV; d += 32) acc = fmaf(float(out[row * EV + d]), float(dout[row * EV + d]), acc);
  acc = cr::warp_reduce(acc, cr::Sum());
  if ((threadIdx.x & 31) == 0) delta[row] = acc;
}
