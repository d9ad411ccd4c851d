// Compiled after the prelude and the launcher's typedefs T (elements) and A (the accumulator)
// (library.cpp source_of).
//
// cumsum over a contiguous {outer, n, inner}.
// cumsum_rows (inner == 1, rows longer than a warp): a block per chunk of a row walks it in tiles
// of 4 * blockDim elements: each thread adds its 4 neighbours, a warp scan (shuffles) of the
// threads' sums, the warps' totals scanned by warp 0, and the carry of the tiles before. Few long
// rows (a block per row would leave most of the GPU idle) are cut into chunks: cumsum_totals sums
// each chunk first, and a chunk's block starts from the sum of the totals before it.
// cumsum_walk (columns, or short rows): a thread per (outer, inner) position adds along n, reading
// `inner` apart (neighbouring threads read neighbouring columns).
__device__ __forceinline__ A warp_scan(A v, int lane) {
  for (int o = 1; o < 32; o <<= 1) {
    const A t = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += t;
  }
  return v;
}

// The sum of every thread's v, for all threads; `shared` holds 32 values.
__device__ __forceinline__ A block_total(A v, A* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  A t = A(0);
  for (int w = 0; w < warps; ++w) t += shared[w];
  return t;
}

extern "C" __global__ void cumsum_totals(const T* __restrict__ x, A* __restrict__ totals, long long n, long long chunk,
                                         long long chunks) {
  cr::grid_wait();
  __shared__ A shared[32];
  const long long row = blockIdx.x / chunks, c = blockIdx.x - row * chunks;
  const long long lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;
  x += row * n;
  A s = A(0);
  for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) s += A(x[i]);
  s = block_total(s, shared);
  if (threadIdx.x == 0) totals[blockIdx.x] = s;
}

extern "C" __global__ void cumsum_rows(const T* __restrict__ x, T* __restrict__ y, long long n, long long chunk,
                                       long long chunks, const A* __restrict__ totals) {
  cr::grid_wait();
  __shared__ A shared[32];
  const long long row = blockIdx.x / chunks, c = blockIdx.x - row * chunks;
  const long long lo = c * chunk, hi = lo + chunk < n ? lo + chunk : n;
  x += row * n;
  y += row * n;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  A carry = A(0);
  if (c > 0) {  // the chunks before this one
    for (long long k = threadIdx.x; k < c; k += blockDim.x) carry += totals[row * chunks + k];
    carry = block_total(carry, shared);
  }
  for (long long base = lo; base < hi; base += 4 * (long long)blockDim.x) {
    const long long i0 = base + 4 * (long long)threadIdx.x;
    A v[4], run = A(0);
    for (int e = 0; e < 4; ++e) {
      if (i0 + e < hi) run += A(x[i0 + e]);
      v[e] = run;
    }
    const A inclusive = warp_scan(run, lane);
    A before = __shfl_up_sync(0xffffffffu, inclusive, 1);
    if (lane == 0) before = A(0);
    __syncthreads();  // (every reader of the last tile's totals is done)
    if (lane == 31) shared[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
      const A t = warp_scan(lane < warps ? shared[lane] : A(0), lane);
      if (lane < warps) shared[lane] = t;
    }
    __syncthreads();
    if (warp > 0) before += shared[warp - 1];
    before += carry;
    for (int e = 0; e < 4; ++e)
      if (i0 + e < hi) y[i0 + e] = T(before + v[e]);
    carry += shared[warps - 1];
  }
}

extern "C" __global__ void cumsum_walk(const T* __restrict__ x, T* __restrict__ y, long long n, long long inner,
                                       long long positions) {
  cr::grid_wait();
  const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= positions) return;
  const long long o = p / inner, at = o * n * inner + (p - o * inner);
  A acc = A(0);
  for (long long i = 0; i < n; ++i) {
    acc += A(x[at + i * inner]);
    y[at + i * inner] = T(acc);
  }
}

// cumsum_scan (rows longer than a chunk; not under T.use_deterministic_algorithms for floats: the
// carry's association depends on timing): one pass over tiles of SCAN_TILE elements of a row, a
// block each, taken in order from a counter (every tile before a block's has started: its waits
// end), CUB's single-pass scan. A warp loads its 32 x SCAN_ITEMS elements coalesced, turns them
// through shared memory so a thread holds SCAN_ITEMS neighbours, adds them serially, and scans
// the threads' sums with shuffles; the tile posts its total (flag 1), warp 0 looks back over the
// row's tiles before, 32 at a time, for the sum up to the nearest one that posted its inclusive
// sum (flag 2), and posts its own.
#define SCAN_WARPS 8
#define SCAN_ITEMS 16
#define SCAN_TILE (SCAN_WARPS * 32 * SCAN_ITEMS)
#define SCAN_PAD(i) ((i) + ((i) >> 5))  // (a word of padding per 32: the blocked reads hit every bank)

__device__ __forceinline__ A warp_total(A v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Tile t's value, then its flag: a reader that sees the flag sees the value (fenced).
__device__ __forceinline__ void post_tile(int* flag, A* value, A v, int f) {
  *reinterpret_cast<volatile A*>(value) = v;
  __threadfence();
  *reinterpret_cast<volatile int*>(flag) = f;
}

// Warp 0's look-back from tile t of a row (flags, partial, inclusive: the row's tile 0): the sum
// of every tile before t. Lane l reads tile j - l; tiles before 0 read as inclusive zeros.
__device__ A look_back(const int* flags, const A* partial, const A* inclusive, long long t, int lane) {
  A sum = A(0);
  for (long long j = t - 1;; j -= 32) {
    const long long mine = j - lane;
    int f;
    do {
      f = mine >= 0 ? *reinterpret_cast<const volatile int*>(flags + mine) : 2;
    } while (__any_sync(0xffffffffu, f == 0));
    __threadfence();
    A v = A(0);
    if (mine >= 0) v = *reinterpret_cast<const volatile A*>((f == 2 ? inclusive : partial) + mine);
    const unsigned done = __ballot_sync(0xffffffffu, f == 2);
    if (done && lane > __ffs(done) - 1) v = A(0);  // (past the nearest inclusive sum)
    sum += warp_total(v);
    if (done) return sum;
  }
}

extern "C" __global__ void __launch_bounds__(SCAN_WARPS * 32, 6)
    cumsum_scan(const T* __restrict__ x, T* __restrict__ y, long long n, long long tiles, int* flags,
                A* partial, A* inclusive, unsigned* counter) {
  cr::grid_wait();
  __shared__ T buf[SCAN_WARPS][SCAN_PAD(32 * SCAN_ITEMS)];
  __shared__ A warp_sums[SCAN_WARPS], prefix_s;
  __shared__ unsigned id_s;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) id_s = atomicAdd(counter, 1u);
  __syncthreads();
  const long long id = id_s, row = id / tiles, t = id - row * tiles;
  const long long first = t * SCAN_TILE + warp * (32 * SCAN_ITEMS);  // (this warp's elements)
  x += row * n;
  y += row * n;
  T* b = buf[warp];
#pragma unroll
  for (int r = 0; r < SCAN_ITEMS; ++r) {
    const long long i = first + r * 32 + lane;
    if (i < n) b[SCAN_PAD(r * 32 + lane)] = x[i];
  }
  __syncwarp();
  A run = A(0);  // (the running sums are made again at the end: no registers held across the look-back)
#pragma unroll
  for (int e = 0; e < SCAN_ITEMS; ++e)
    if (first + lane * SCAN_ITEMS + e < n) run += A(b[SCAN_PAD(lane * SCAN_ITEMS + e)]);
  const A inclusive_run = warp_scan(run, lane);
  A before = __shfl_up_sync(0xffffffffu, inclusive_run, 1);
  if (lane == 0) before = A(0);
  if (lane == 31) warp_sums[warp] = inclusive_run;
  __syncthreads();
  A aggregate = A(0);
  for (int w = 0; w < SCAN_WARPS; ++w) {
    if (w == warp) before += aggregate;
    aggregate += warp_sums[w];
  }
  if (warp == 0) {
    const long long at = row * tiles + t;
    if (lane == 0) post_tile(flags + at, (t == 0 ? inclusive : partial) + at, aggregate, t == 0 ? 2 : 1);
    const A prefix = t == 0 ? A(0) : look_back(flags + row * tiles, partial + row * tiles, inclusive + row * tiles, t, lane);
    if (lane == 0) {
      if (t > 0) post_tile(flags + at, inclusive + at, prefix + aggregate, 2);
      prefix_s = prefix;
    }
  }
  __syncthreads();
  before += prefix_s;
#pragma unroll
  for (int e = 0; e < SCAN_ITEMS; ++e) {
    T& at = b[SCAN_PAD(lane * SCAN_ITEMS + e)];
    if (first + lane * SCAN_ITEMS + e < n) before += A(at);
    at = T(before);
  }
  __syncwarp();
#pragma unroll
  for (int r = 0; r < SCAN_ITEMS; ++r) {
    const long long i = first + r * 32 + lane;
    if (i < n) y[i] = b[SCAN_PAD(r * 32 + lane)];
  }
}
