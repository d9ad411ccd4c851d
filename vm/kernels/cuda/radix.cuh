// Compiled after the prelude, the launcher's typedefs T (elements) and K (the unsigned key: 32 or
// 64 bits) and its ITEMS (keys a thread moves in a pass) (radix.cpp).
//
// A stable LSD radix sort of lines of {outer, n, inner} (element i of line l = (o, j) at
// (o * n + i) * inner + j), 8 bits a pass, as onesweep. radix_keys maps each value to an unsigned
// key in the CPU's order (vm/ops/sorting.cpp: -0 equals 0, NaN above every number, all NaNs equal;
// descending: the key inverted, so ties stay in position order) beside its 0-based position,
// line-contiguous. radix_histogram counts every pass's digits in one read, radix_starts places
// each digit's run, and per pass radix_onesweep moves the keys tile by tile with decoupled
// look-back over the tiles' digit counts. radix_write gathers the first k values of each sorted
// line from x and their 1-based positions.
#define RADIX 256
#define WARPS 8  // blockDim.x == RADIX: a thread per digit

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

// radix_histogram: every pass's digit counts of each line in one read of the keys, summed per
// block in shared memory (a warp's equal digits add once: skewed keys) and added into
// counts[(line * passes + p) * RADIX + d] (zeroed); radix_starts turns each (line, pass) row of
// counts into its exclusive running sum: where each digit's run starts.
extern "C" __global__ void radix_histogram(const K* __restrict__ keys, long long n, long long chunk, long long chunks,
                                           int passes, unsigned* __restrict__ counts) {
  __shared__ unsigned hist[8][RADIX];
  const long long line = blockIdx.x / chunks, c = blockIdx.x - line * chunks;
  const long long lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;
  for (int p = 0; p < passes; ++p) hist[p][threadIdx.x] = 0u;
  __syncthreads();
  for (long long r = lo; r < hi; r += blockDim.x) {  // (uniform bounds: whole warps match)
    const long long i = r + threadIdx.x;
    const bool live = i < hi;
    const K k = live ? keys[line * n + i] : K(0);
    for (int p = 0; p < passes; ++p) {
      const unsigned d = live ? unsigned(k >> (8 * p)) & 255u : RADIX;
      const unsigned peers = __match_any_sync(0xffffffffu, d);
      if (live && (threadIdx.x & 31u) == unsigned(__ffs(peers) - 1)) atomicAdd(&hist[p][d], unsigned(__popc(peers)));
    }
  }
  __syncthreads();
  for (int p = 0; p < passes; ++p)
    if (hist[p][threadIdx.x]) atomicAdd(counts + (line * passes + p) * RADIX + threadIdx.x, hist[p][threadIdx.x]);
}

// The exclusive running sum of the RADIX values at s (a thread each), in place; every thread calls it.
__device__ __forceinline__ unsigned exclusive_scan(unsigned* s) {
  const unsigned mine = s[threadIdx.x];
  for (int o = 1; o < RADIX; o <<= 1) {
    __syncthreads();
    const unsigned v = threadIdx.x >= unsigned(o) ? s[threadIdx.x - o] : 0u;
    __syncthreads();
    s[threadIdx.x] += v;
  }
  __syncthreads();
  return s[threadIdx.x] - mine;
}

extern "C" __global__ void radix_starts(unsigned* __restrict__ counts) {
  __shared__ unsigned s[RADIX];
  unsigned* c = counts + (long long)blockIdx.x * RADIX;
  s[threadIdx.x] = c[threadIdx.x];
  c[threadIdx.x] = exclusive_scan(s);
}

// radix_onesweep: one pass of 8 bits over tiles of TILE keys of a line, a block each, taken in
// order from a counter (every tile before a block's has started: its waits end). A warp ranks
// its ITEMS rounds of 32 keys (match_any, running counts per warp and digit), the thread of digit
// d sums the warps' counts into the tile's, publishes it in status[tile][d] (flag 1: the tile's
// count, flag 2: with every tile before), and looks back over the tiles before for their sum
// (decoupled look-back); the tile is ordered by digit in shared memory and written out in order
// (runs of a digit land on consecutive addresses). Status words: tag (2 * pass + flag) << 32 |
// count, so one zeroing serves every pass.
#define TILE (ITEMS * RADIX)  // (ITEMS: the launcher's, 16 keys a thread, 8 of 64-bit keys: shared memory)

__device__ __forceinline__ void post(unsigned long long* at, int tag, unsigned v) {
  *reinterpret_cast<volatile unsigned long long*>(at) = ((unsigned long long)tag << 32) | v;
}

// Thread d's look-back for tile t of a line (its status row `row`): the count of digit d in the
// tiles before it.
__device__ __forceinline__ unsigned tiles_before(const unsigned long long* row, long long t, int pass) {
  unsigned sum = 0u;
  for (long long j = t - 1; j >= 0;) {
    const unsigned long long w = reinterpret_cast<const volatile unsigned long long*>(row)[(j - t) * RADIX];
    const int tag = int(w >> 32);
    if (tag <= 2 * pass) continue;  // (nothing yet in this pass)
    sum += unsigned(w);
    if (tag == 2 * pass + 2) break;
    --j;
  }
  return sum;
}

extern "C" __global__ void radix_onesweep(const K* __restrict__ keys, const int* __restrict__ pos, K* __restrict__ keys_out,
                                          int* __restrict__ pos_out, long long n, long long tiles, int pass, int passes,
                                          const unsigned* __restrict__ starts, unsigned long long* status,
                                          unsigned* counter) {
  __shared__ unsigned warp_runs[WARPS][RADIX], local[RADIX];
  __shared__ long long base[RADIX];
  __shared__ K tile_keys[TILE];
  __shared__ int tile_pos[TILE];
  __shared__ long long id_s;
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const int shift = 8 * pass;
  if (threadIdx.x == 0) id_s = atomicAdd(counter + pass, 1u);
  for (int w = 0; w < WARPS; ++w) warp_runs[w][threadIdx.x] = 0u;
  __syncthreads();
  const long long id = id_s, line = id / tiles, t = id - line * tiles;
  const long long first = t * TILE + warp * (ITEMS * 32);  // (this warp's keys: ITEMS rounds of 32)
  K k[ITEMS];
  int p[ITEMS];
  unsigned rank[ITEMS];
  for (int r = 0; r < ITEMS; ++r) {
    const long long i = first + r * 32 + lane;
    k[r] = i < n ? keys[line * n + i] : K(0);
    p[r] = i < n ? pos[line * n + i] : 0;
  }
  for (int r = 0; r < ITEMS; ++r) {
    const bool live = first + r * 32 + lane < n;
    const unsigned d = live ? unsigned(k[r] >> shift) & 255u : RADIX;
    const unsigned peers = __match_any_sync(0xffffffffu, d);
    const int leader = __ffs(peers) - 1;
    unsigned before = 0u;
    if (live && lane == unsigned(leader)) {
      before = warp_runs[warp][d];
      warp_runs[warp][d] = before + unsigned(__popc(peers));
    }
    rank[r] = __shfl_sync(0xffffffffu, before, leader) + unsigned(__popc(peers & ((1u << lane) - 1u)));
    __syncwarp();
  }
  __syncthreads();
  unsigned count = 0u;  // thread d: the warps' first ranks of digit d, and the tile's count
  for (int w = 0; w < WARPS; ++w) {
    const unsigned c = warp_runs[w][threadIdx.x];
    warp_runs[w][threadIdx.x] = count;
    count += c;
  }
  unsigned long long* mine = status + (line * tiles + t) * RADIX + threadIdx.x;
  post(mine, 2 * pass + (t == 0 ? 2 : 1), count);
  const unsigned before = t == 0 ? 0u : tiles_before(mine, t, pass);
  if (t > 0) post(mine, 2 * pass + 2, before + count);
  local[threadIdx.x] = count;
  const unsigned at = exclusive_scan(local);  // (where digit d starts in the ordered tile)
  base[threadIdx.x] = line * n + (long long)starts[(line * passes + pass) * RADIX + threadIdx.x] + before - at;
  __syncthreads();
  local[threadIdx.x] = at;
  __syncthreads();
  for (int r = 0; r < ITEMS; ++r) {
    if (first + r * 32 + lane >= n) continue;
    const unsigned d = unsigned(k[r] >> shift) & 255u;
    const unsigned slot = local[d] + warp_runs[warp][d] + rank[r];
    tile_keys[slot] = k[r];
    tile_pos[slot] = p[r];
  }
  __syncthreads();
  const long long live = n - t * TILE < TILE ? n - t * TILE : TILE;
  for (long long i = threadIdx.x; i < live; i += blockDim.x) {
    const K key = tile_keys[i];
    const long long dst = base[unsigned(key >> shift) & 255u] + i;
    keys_out[dst] = key;
    pos_out[dst] = tile_pos[i];
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
