// Compiled after the prelude and the launcher's typedefs I (the values: int or long long), O (the
// result: long long counts, float or double weight sums) and B (a shared-memory bin: unsigned
// counts, else O) (bincount.cpp).
//
// bincount_low: one pass over the values for each block's minimum and maximum (range[2 * block],
// range[2 * block + 1]) and the counts (weight sums: w not null) of the values in [0, cap), summed
// in shared-memory bins, each touched bin added once into out's first cap bins (zeroed).
// bincount_high: the values in [lo, hi) added into out's bins, summed in shared memory first when
// `shared` (hi - lo bins fit), else by atomics on out. cap == 0: the range only.
// value_compact (one block): the blocks' ranges reduced into meta {min, max, distinct}; with
// `values`, when every value lies in [0, cap), the bins of low that hold a count, in order, as
// values and counts (distinct: how many; -1 when the range does not fit).
#define LL_MAX 0x7fffffffffffffffll

__forceinline__ void add_out(long long* o, unsigned v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(o), (unsigned long long)v);
}
__forceinline__ void add_out(float* o, float v) { atomicAdd(o, v); }
__forceinline__ void add_out(double* o, double v) { atomicAdd(o, v); }
__forceinline__ B weight(const O* w, long long i) { return w ? B(w[i]) : B(1); }
__forceinline__ long long lesser(long long a, long long b) { return a < b ? a : b; }
__forceinline__ long long greater(long long a, long long b) { return a > b ? a : b; }

// The block's minimum and maximum of (mn, mx), written by thread 0 (blockDim a multiple of 32).
__device__ __forceinline__ void block_range(long long mn, long long mx, long long* range) {
  __shared__ long long lows[32], highs[32];
  for (int o = 16; o > 0; o >>= 1) {
    mn = lesser(mn, __shfl_xor_sync(0xffffffffu, mn, o));
    mx = greater(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) lows[warp] = mn, highs[warp] = mx;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int k = 1; k < int(blockDim.x >> 5); ++k) mn = lesser(mn, lows[k]), mx = greater(mx, highs[k]);
    range[2 * blockIdx.x] = mn;
    range[2 * blockIdx.x + 1] = mx;
  }
}

__device__ __forceinline__ void clear(B* bins, long long count) {
  for (long long b = threadIdx.x; b < count; b += blockDim.x) bins[b] = B(0);
  __syncthreads();
}

// Each touched bin once into out (a zero sum adds nothing: skipped).
__device__ __forceinline__ void flush(const B* bins, long long count, O* out) {
  __syncthreads();
  for (long long b = threadIdx.x; b < count; b += blockDim.x)
    if (bins[b] != B(0)) add_out(out + b, bins[b]);
}

extern "C" __global__ void bincount_low(const I* __restrict__ x, const O* __restrict__ w, long long n, long long cap,
                                        O* __restrict__ out, long long* __restrict__ range) {
  cr::grid_wait();
  extern __shared__ __align__(16) unsigned char smem[];
  B* bins = reinterpret_cast<B*>(smem);
  clear(bins, cap);
  long long mn = LL_MAX, mx = -LL_MAX - 1;
  const long long step = (long long)gridDim.x * blockDim.x;
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * step < n; i += 4 * step) {  // (four loads in flight per thread)
    long long v[4];
    for (int u = 0; u < 4; ++u) v[u] = x[i + u * step];
    for (int u = 0; u < 4; ++u) {
      mn = lesser(mn, v[u]), mx = greater(mx, v[u]);
      if ((unsigned long long)v[u] < (unsigned long long)cap) atomicAdd(bins + v[u], weight(w, i + u * step));
    }
  }
  for (; i < n; i += step) {
    const long long v = x[i];
    mn = lesser(mn, v), mx = greater(mx, v);
    if ((unsigned long long)v < (unsigned long long)cap) atomicAdd(bins + v, weight(w, i));
  }
  block_range(mn, mx, range);
  flush(bins, cap, out);
}

extern "C" __global__ void bincount_high(const I* __restrict__ x, const O* __restrict__ w, long long n, long long lo,
                                         long long hi, int shared, O* __restrict__ out) {
  cr::grid_wait();
  extern __shared__ __align__(16) unsigned char smem[];
  B* bins = reinterpret_cast<B*>(smem);
  if (shared) clear(bins, hi - lo);
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
    const long long v = x[i];
    if (v < lo || v >= hi) continue;
    if (shared) atomicAdd(bins + (v - lo), weight(w, i));
    else add_out(out + v, weight(w, i));
  }
  if (shared) flush(bins, hi - lo, out + lo);
}

extern "C" __global__ void value_compact(const long long* __restrict__ range, long long blocks,
                                        const O* __restrict__ low, long long cap, I* __restrict__ values,
                                        long long* __restrict__ counts, long long* __restrict__ meta) {
  cr::grid_wait();
  __shared__ long long partial[32];
  long long mn = LL_MAX, mx = -LL_MAX - 1;
  for (long long b = threadIdx.x; b < blocks; b += blockDim.x)
    mn = lesser(mn, range[2 * b]), mx = greater(mx, range[2 * b + 1]);
  mn = cr::block_reduce<256>(mn, [](long long a, long long b) { return lesser(a, b); }, partial);
  mx = cr::block_reduce<256>(mx, [](long long a, long long b) { return greater(a, b); }, partial);
  const bool fits = values && mn >= 0 && mx < cap;
  if (threadIdx.x == 0) meta[0] = mn, meta[1] = mx;
  if (!fits) {
    if (threadIdx.x == 0) meta[2] = -1;
    return;
  }
  // each thread a contiguous run of the bins 0..mx, ranked by a block scan of the runs' counts
  const long long bins = mx + 1, run = (bins + blockDim.x - 1) / blockDim.x, lo = threadIdx.x * run;
  const long long hi = lo + run < bins ? lo + run : bins;
  long long mine = 0;
  for (long long b = lo; b < hi; ++b) mine += low[b] != O(0);
  long long below = cr::block_exclusive_sum(mine, partial, nullptr);
  for (long long b = lo; b < hi; ++b)
    if (low[b] != O(0)) values[below] = I(b), counts[below] = (long long)low[b], ++below;
  if (threadIdx.x == blockDim.x - 1) meta[2] = below;
}
