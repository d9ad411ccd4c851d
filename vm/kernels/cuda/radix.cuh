// Compiled after the prelude and the launcher's typedefs T (elements) and K (the unsigned key:
// 32 or 64 bits) (radix.cpp).
//
// A stable LSD radix sort of lines of {outer, n, inner} (element i of line l = (o, j) at
// (o * n + i) * inner + j), 8 bits a pass. radix_keys maps each value to an unsigned key in the
// CPU's order (vm/ops/sorting.cpp: -0 equals 0, NaN above every number, all NaNs equal;
// descending: the key inverted, so ties stay in position order) beside its 0-based position,
// line-contiguous. A pass: radix_count counts each tile's digits into counts[line][digit][tile],
// their running sum per line (cumsum) places every (digit, tile) run, and radix_scatter moves a
// tile's keys to their runs in order (ranked by warp match, warps by a scan over their counts).
// radix_write gathers the first k values of each sorted line from x and their 1-based positions.
#define RADIX 256
#define WARPS 8  // blockDim.x == RADIX: a thread per digit where a block works on digits

__forceinline__ unsigned flip32(unsigned u) { return (u & 0x80000000u) ? ~u : (u | 0x80000000u); }
__forceinline__ unsigned flip16(unsigned u) { return (u & 0x8000u) ? (~u & 0xffffu) : (u | 0x8000u); }
__forceinline__ unsigned ordered(float f) {
  return flip32(f != f ? 0x7fc00000u : f == 0.0f ? 0u : __float_as_uint(f));
}
__forceinline__ unsigned long long ordered(double f) {
  const unsigned long long u = f != f ? 0x7ff8000000000000ull : f == 0.0 ? 0ull : (unsigned long long)__double_as_longlong(f);
  return (u >> 63) ? ~u : (u | (1ull << 63));
}
// 16-bit floats order by their own bits (2 passes): NaN made one pattern above inf, -0 made 0.
__forceinline__ unsigned ordered16(unsigned h, unsigned inf, unsigned nan) {
  const unsigned a = h & 0x7fffu;
  return flip16(a > inf ? nan : a == 0 ? 0u : h);
}
__forceinline__ unsigned ordered(cr::half_t v) { return ordered16(v.bits, 0x7c00u, 0x7e00u); }
__forceinline__ unsigned ordered(cr::bf16_t v) { return ordered16(v.bits, 0x7f80u, 0x7fc0u); }
__forceinline__ unsigned ordered(int v) { return unsigned(v) ^ 0x80000000u; }
__forceinline__ unsigned long long ordered(long long v) { return (unsigned long long)v ^ (1ull << 63); }
__forceinline__ unsigned ordered(bool v) { return v ? 1u : 0u; }

extern "C" __global__ void radix_keys(const T* __restrict__ x, K* __restrict__ keys, int* __restrict__ pos, long long n,
                                      long long inner, long long total, int desc) {
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
    const long long line = e / n, i = e - line * n, o = line / inner, j = line - o * inner;
    const K k = K(ordered(x[(o * n + i) * inner + j]));
    keys[e] = desc ? K(~k) : k;
    pos[e] = int(i);
  }
}

extern "C" __global__ void radix_count(const K* __restrict__ keys, long long n, long long tile, long long tiles, int shift,
                                       long long* __restrict__ counts) {
  __shared__ unsigned hist[RADIX];
  const long long line = blockIdx.x / tiles, t = blockIdx.x - line * tiles;
  const long long lo = t * tile, hi = lo + tile < n ? lo + tile : n;
  const K* k = keys + line * n;
  hist[threadIdx.x] = 0u;
  __syncthreads();
  for (long long r = lo; r < hi; r += blockDim.x) {  // (a warp's equal digits add once: skewed keys)
    const long long i = r + threadIdx.x;
    const unsigned d = i < hi ? unsigned(k[i] >> shift) & 255u : RADIX;
    const unsigned peers = __match_any_sync(0xffffffffu, d);
    if (d < RADIX && (threadIdx.x & 31u) == unsigned(__ffs(peers) - 1)) atomicAdd(&hist[d], unsigned(__popc(peers)));
  }
  __syncthreads();
  counts[(line * RADIX + threadIdx.x) * tiles + t] = hist[threadIdx.x];
}

// Rounds of blockDim elements in order: a warp ranks its lanes of one digit (match_any), the
// thread of digit d turns the warps' counts of d into their first slots, each element goes to its
// warp's slot plus its rank. Round bounds are uniform across the block.
extern "C" __global__ void radix_scatter(const K* __restrict__ keys, const int* __restrict__ pos, K* __restrict__ keys_out,
                                         int* __restrict__ pos_out, long long n, long long tile, long long tiles, int shift,
                                         const long long* __restrict__ counts, const long long* __restrict__ offsets) {
  __shared__ long long slot[WARPS][RADIX];
  __shared__ long long next[RADIX];
  const long long line = blockIdx.x / tiles, t = blockIdx.x - line * tiles;
  const long long lo = t * tile, hi = lo + tile < n ? lo + tile : n;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const long long c = (line * RADIX + threadIdx.x) * tiles + t;
  next[threadIdx.x] = line * n + offsets[c] - counts[c];  // (offsets: running sums, inclusive)
  for (long long r = lo; r < hi; r += blockDim.x) {
    const long long i = r + threadIdx.x;
    const bool live = i < hi;
    const K k = live ? keys[line * n + i] : K(0);
    const unsigned d = live ? unsigned(k >> shift) & 255u : RADIX;
    for (int w = 0; w < WARPS; ++w) slot[w][threadIdx.x] = 0;
    __syncthreads();
    const unsigned peers = __match_any_sync(0xffffffffu, d);
    if (live && lane == unsigned(__ffs(peers) - 1)) slot[warp][d] = __popc(peers);
    __syncthreads();
    long long run = next[threadIdx.x];
    for (int w = 0; w < WARPS; ++w) {
      const long long m = slot[w][threadIdx.x];
      slot[w][threadIdx.x] = run;
      run += m;
    }
    next[threadIdx.x] = run;
    __syncthreads();
    if (live) {
      const long long dst = slot[warp][d] + __popc(peers & ((1u << lane) - 1u));
      keys_out[dst] = k;
      pos_out[dst] = pos[line * n + i];
    }
    __syncthreads();  // (every thread has read its slot before the next round clears them)
  }
}

extern "C" __global__ void radix_write(const T* __restrict__ x, const int* __restrict__ pos, T* __restrict__ y,
                                       long long* __restrict__ yi, long long n, long long inner, long long k,
                                       long long total) {
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
    const long long line = e / k, i = e - line * k, o = line / inner, j = line - o * inner;
    const long long p = pos[line * n + i], at = (o * k + i) * inner + j;
    y[at] = x[(o * n + p) * inner + j];
    yi[at] = p + 1;
  }
}
