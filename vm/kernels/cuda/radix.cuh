// Compiled after the prelude, the launcher's typedefs T (elements) and K (the unsigned key: 32 or
// 64 bits) and its ITEMS (keys a thread moves in a pass) (radix.cpp).
//
// A stable LSD radix sort of lines of {outer, n, inner} (element i of line l = (o, j) at
// (o * n + i) * inner + j), 8 bits a pass, as onesweep. A key is the element's own bits (K wide);
// its digits come from sort_key, an unsigned key in the CPU's order (vm/ops/sorting.cpp: -0 equals
// 0, NaN above every number, all NaNs equal; descending: the key inverted, so ties stay in
// position order), so the sorted keys are the sorted values (CUB's way). Contiguous lines
// (inner 1) are read from x by the first pass; others are laid out line-contiguous by radix_keys
// beside their 0-based positions. radix_histogram counts every pass's digits in one read,
// radix_starts places each digit's run, and per pass radix_onesweep moves the keys tile by tile
// with decoupled look-back over the tiles' digit counts; the last pass writes the first k values
// of each line and their 1-based positions.
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

// The bits of v as a key, and back; sort_key: the digits' key of the bits.
__forceinline__ K raw_of(T v) {
  union { T t; K k; } u;
  u.k = K(0);
  u.t = v;
  return u.k;
}
__forceinline__ T value_of(K raw) {
  union { T t; K k; } u;
  u.k = raw;
  return u.t;
}
__forceinline__ K sort_key(K raw, int desc) {
  const K k = K(ordered(value_of(raw)));
  return desc ? K(~k) : k;
}

// Whether the 32 lanes' digits d (live lanes; the others among themselves) match: a ballot a bit
// (CUB's MatchAny: a warp's __match_any_sync is slower than 9 ballots).
__device__ __forceinline__ unsigned match_digit(unsigned d, bool live) {
  unsigned peers = __ballot_sync(0xffffffffu, live);
  if (!live) peers = ~peers;
#pragma unroll
  for (int b = 0; b < 8; ++b) {
    const unsigned m = __ballot_sync(0xffffffffu, (d >> b) & 1u);
    peers &= (d >> b) & 1u ? m : ~m;
  }
  return peers;
}

// Key i of line `line`: from x (contiguous lines, the first pass) or the keys of the last pass.
__device__ __forceinline__ K load_key(const T* __restrict__ x, const K* __restrict__ keys, long long at) {
  return x ? raw_of(x[at]) : keys[at];
}

extern "C" __global__ void radix_keys(const T* __restrict__ x, K* __restrict__ keys, int* __restrict__ pos, long long n,
                                      long long inner, long long total) {
  cr::grid_wait();
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (long long)gridDim.x * blockDim.x) {
    const long long line = e / n, i = e - line * n, o = line / inner, j = line - o * inner;
    keys[e] = raw_of(x[(o * n + i) * inner + j]);
    pos[e] = int(i);
  }
}

// radix_histogram: every pass's digit counts of each line in one read of the keys (or of x),
// summed per block in shared memory (a warp whose keys share a digit adds once: skewed keys) and
// added into counts[(line * passes + p) * RADIX + d] (zeroed); radix_starts turns each (line, pass)
// row of counts into its exclusive running sum: where each digit's run starts.
#define HU 4  // the keys a thread of radix_histogram has in flight

// Lane 0's key, and the OR of the warp's keys (bits where some lane differs from lane 0).
__device__ __forceinline__ unsigned lane0_of(unsigned v) { return __shfl_sync(0xffffffffu, v, 0); }
__device__ __forceinline__ unsigned long long lane0_of(unsigned long long v) { return __shfl_sync(0xffffffffu, v, 0); }
__device__ __forceinline__ unsigned or_lanes(unsigned v) { return __reduce_or_sync(0xffffffffu, v); }
__device__ __forceinline__ unsigned long long or_lanes(unsigned long long v) {
  const unsigned hi = __reduce_or_sync(0xffffffffu, unsigned(v >> 32)), lo = __reduce_or_sync(0xffffffffu, unsigned(v));
  return (unsigned long long)hi << 32 | lo;
}

extern "C" __global__ void radix_histogram(const T* __restrict__ x, const K* __restrict__ keys, long long n, long long chunk,
                                           long long chunks, int passes, int desc, unsigned* __restrict__ counts) {
  cr::grid_wait();
  __shared__ unsigned hist[8][RADIX];
  const long long line = blockIdx.x / chunks, c = blockIdx.x - line * chunks;
  const long long lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;
  const unsigned lane = threadIdx.x & 31u;
  for (int p = 0; p < passes; ++p) hist[p][threadIdx.x] = 0u;
  __syncthreads();
  for (long long r = lo; r < hi; r += HU * blockDim.x) {  // (uniform bounds: whole warps vote)
    K k[HU];
    bool live[HU];
#pragma unroll
    for (int u = 0; u < HU; ++u) {
      const long long i = r + u * blockDim.x + threadIdx.x;
      live[u] = i < hi;
      k[u] = live[u] ? sort_key(load_key(x, keys, line * n + i), desc) : K(0);
    }
    const bool whole = r + (threadIdx.x & ~31u) + (HU - 1) * blockDim.x + 31 < hi;  // (all lanes live, all rounds)
#pragma unroll
    for (int u = 0; u < HU; ++u) {
      const K diff = whole ? k[u] ^ lane0_of(k[u]) : ~K(0);
      const K same = ~or_lanes(diff);  // (bits every lane's key shares)
      for (int p = 0; p < passes; ++p) {
        const unsigned d = unsigned(k[u] >> (8 * p)) & 255u;
        if ((unsigned(same >> (8 * p)) & 255u) == 255u) {
          if (lane == 0u) atomicAdd(&hist[p][d], 32u);
        } else if (live[u]) {
          atomicAdd(&hist[p][d], 1u);
        }
      }
    }
  }
  __syncthreads();
  for (int p = 0; p < passes; ++p)
    if (hist[p][threadIdx.x]) atomicAdd(counts + (line * passes + p) * RADIX + threadIdx.x, hist[p][threadIdx.x]);
}

// The exclusive running sum of the block's RADIX values v (a thread each): shuffles within a
// warp, then the warps' totals (`sums`: WARPS words, written once); every thread calls it.
__device__ __forceinline__ unsigned exclusive_scan(unsigned v, unsigned* sums) {
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  unsigned inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned t = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= unsigned(o)) inc += t;
  }
  if (lane == 31u) sums[warp] = inc;
  __syncthreads();
  for (unsigned w = 0; w < warp; ++w) inc += sums[w];
  return inc - v;
}

extern "C" __global__ void radix_starts(unsigned* __restrict__ counts) {
  cr::grid_wait();
  __shared__ unsigned sums[WARPS];
  unsigned* c = counts + (long long)blockIdx.x * RADIX;
  c[threadIdx.x] = exclusive_scan(c[threadIdx.x], sums);
}

// radix_onesweep: one pass of 8 bits over tiles of TILE keys of a line, a block each, taken in
// order from a counter (every tile before a block's has started: its waits end). A warp ranks
// its ITEMS rounds of 32 keys (match_digit, running counts per warp and digit), the thread of digit
// d sums the warps' counts into the tile's, publishes it in status[tile][d] (flag 1: the tile's
// count, flag 2: with every tile before), and looks back over the tiles before for their sum
// (decoupled look-back); the keys are ordered by digit in shared memory and written out in order
// (runs of a digit land on consecutive addresses), then their positions through the same memory
// (loaded only then: fewer registers, more blocks a multiprocessor); the last pass (y given) writes
// values and 1-based positions. Status words: tag (2 * pass + flag) << 32 | count, so one zeroing
// serves every pass.
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

// (4 blocks a multiprocessor: at most 64 registers a thread; 3 blocks and 5 were slower)
extern "C" __global__ void __launch_bounds__(RADIX, 4)
radix_onesweep(const T* __restrict__ x, const K* __restrict__ keys, const int* __restrict__ pos,
               K* __restrict__ keys_out, int* __restrict__ pos_out, T* __restrict__ y, long long* __restrict__ yi,
               long long n, long long inner, long long k_out, long long tiles, int pass, int passes, int desc,
               const unsigned* __restrict__ starts, unsigned long long* status, unsigned* counter) {
  cr::grid_wait();
  __shared__ unsigned warp_runs[WARPS][RADIX], local[RADIX], sums[WARPS];
  __shared__ long long base[RADIX];
  __shared__ K tile_keys[TILE];  // (then, as ints, the positions)
  __shared__ unsigned char tile_digit[TILE];
  __shared__ long long id_s;
  int* const tile_pos = reinterpret_cast<int*>(tile_keys);
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const int shift = 8 * pass;
  if (threadIdx.x == 0) id_s = atomicAdd(counter + pass, 1u);
  for (int w = 0; w < WARPS; ++w) warp_runs[w][threadIdx.x] = 0u;
  __syncthreads();
  const long long id = id_s, line = id / tiles, t = id - line * tiles;
  const long long first = t * TILE + warp * (ITEMS * 32);  // (this warp's keys: ITEMS rounds of 32)
  K k[ITEMS];
  unsigned rank[ITEMS];  // (then the key's slot in the ordered tile)
#pragma unroll
  for (int r = 0; r < ITEMS; ++r) {
    const long long i = first + r * 32 + lane;
    k[r] = i < n ? load_key(x, keys, line * n + i) : K(0);
  }
#pragma unroll
  for (int r = 0; r < ITEMS; ++r) {
    const bool live = first + r * 32 + lane < n;
    const unsigned d = unsigned(sort_key(k[r], desc) >> shift) & 255u;
    const unsigned peers = match_digit(d, live);
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
  const unsigned at = exclusive_scan(count, sums);  // (where digit d starts in the ordered tile)
  local[threadIdx.x] = at;
  __syncthreads();
#pragma unroll
  for (int r = 0; r < ITEMS; ++r) {
    if (first + r * 32 + lane >= n) continue;
    const unsigned d = unsigned(sort_key(k[r], desc) >> shift) & 255u;
    rank[r] += local[d] + warp_runs[warp][d];
    tile_keys[rank[r]] = k[r];
  }
  base[threadIdx.x] = (long long)starts[(line * passes + pass) * RADIX + threadIdx.x] + before - at;
  __syncthreads();
  const long long live = n - t * TILE < TILE ? n - t * TILE : TILE;
  const long long o = line / inner, j = line - o * inner;  // (the last pass: y / yi {outer, k_out, inner})
  for (long long i = threadIdx.x; i < live; i += blockDim.x) {
    const K key = tile_keys[i];
    const unsigned d = unsigned(sort_key(key, desc) >> shift) & 255u;
    const long long r = base[d] + i;  // (its rank in the line)
    tile_digit[i] = (unsigned char)d;
    if (!y) keys_out[line * n + r] = key;
    else if (r < k_out) y[(o * k_out + r) * inner + j] = value_of(key);
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < ITEMS; ++r) {
    const long long i = first + r * 32 + lane;
    if (i < n) tile_pos[rank[r]] = x ? int(i) : pos[line * n + i];
  }
  __syncthreads();
  for (long long i = threadIdx.x; i < live; i += blockDim.x) {
    const long long r = base[tile_digit[i]] + i;
    if (!y) pos_out[line * n + r] = tile_pos[i];
    else if (r < k_out) yi[(o * k_out + r) * inner + j] = (long long)tile_pos[i] + 1;
  }
}
