// Compiled after the prelude and the launcher's typedefs T (elements) and A (the accumulator)
// (library.cpp source_of).
//
// cumsum over a contiguous {outer, n, inner}.
// cumsum_rows (inner == 1, rows longer than a warp): a block per row walks it in rounds of
// 4 * blockDim elements: each thread adds its 4 neighbours, a warp scan (shuffles) of the threads'
// sums, the warps' totals scanned by warp 0, and the carry of the rounds before.
// cumsum_scan (few long rows): one pass with decoupled look-back over tiles of SCAN_ITEMS *
// blockDim elements (below). cumsum_walk (columns, or short rows): a thread per (outer, inner)
// position adds along n, reading `inner` apart (neighbouring threads read neighbouring columns).
__device__ __forceinline__ A warp_scan(A v, int lane) {
  for (int o = 1; o < 32; o <<= 1) {
    const A t = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += t;
  }
  return v;
}

// The sum of the runs of the threads before this one in the block; *total gets the block's sum.
// `shared` holds 32 values; every thread calls it.
__device__ __forceinline__ A block_exclusive(A run, A* shared, A* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const A inclusive = warp_scan(run, lane);
  A before = __shfl_up_sync(0xffffffffu, inclusive, 1);
  if (lane == 0) before = A(0);
  __syncthreads();  // (every reader of the last round's totals is done)
  if (lane == 31) shared[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const A t = warp_scan(lane < warps ? shared[lane] : A(0), lane);
    if (lane < warps) shared[lane] = t;
  }
  __syncthreads();
  if (warp > 0) before += shared[warp - 1];
  *total = shared[warps - 1];
  return before;
}

extern "C" __global__ void cumsum_rows(const T* __restrict__ x, T* __restrict__ y, long long n) {
  __shared__ A shared[32];
  x += blockIdx.x * n;
  y += blockIdx.x * n;
  A carry = A(0);
  for (long long base = 0; base < n; base += 4 * (long long)blockDim.x) {
    const long long i0 = base + 4 * (long long)threadIdx.x;
    A v[4], run = A(0), total;
    for (int e = 0; e < 4; ++e) {
      if (i0 + e < n) run += A(x[i0 + e]);
      v[e] = run;
    }
    const A before = block_exclusive(run, shared, &total) + carry;
    for (int e = 0; e < 4; ++e)
      if (i0 + e < n) y[i0 + e] = T(before + v[e]);
    carry += total;
  }
}

// cumsum_scan: each block takes the next tile in order from a counter (state[0]; so every tile
// before it has started: the waits below end), scans it, and publishes its aggregate (flag 1) or,
// with the tiles before, its inclusive prefix (flag 2) in state[1 + tile] / sums. Warp 0 looks
// back over the 32 tiles before until one has its inclusive prefix and every later one its
// aggregate, then adds those aggregates to it in tile order: the prefix is the same sum as a tile
// by tile chain would make (inclusive(t) = inclusive(t - 1) + aggregate(t)), so the bits do not
// depend on which tiles were done first.
#define SCAN_ITEMS 16

__device__ __forceinline__ void publish(A* sums, int* flags, long long tile, int flag, A v) {
  reinterpret_cast<volatile A*>(sums)[2 * tile + flag - 1] = v;
  __threadfence();
  reinterpret_cast<volatile int*>(flags)[tile] = flag;
}

// Warp 0's look-back for tile t of a row (its global tile id): the sum of the tiles before it.
__device__ __forceinline__ A look_back(const A* sums, const int* flags, long long id, long long t) {
  const int lane = threadIdx.x & 31;
  const long long j = t - 1 - lane;  // the tile this lane watches (none before the row: "inclusive 0")
  int f;
  A v;
  unsigned inc, open;
  do {
    f = j >= 0 ? reinterpret_cast<const volatile int*>(flags)[id - 1 - lane] : 2;
    __threadfence();
    v = j >= 0 && f ? reinterpret_cast<const volatile A*>(sums)[2 * (id - 1 - lane) + f - 1] : A(0);
    inc = __ballot_sync(0xffffffffu, f == 2);
    open = __ballot_sync(0xffffffffu, f == 0);
  } while (!inc || (open & ((inc & (0u - inc)) - 1u)));  // (the nearest inclusive, no gap before it)
  const int nearest = __ffs(inc) - 1;
  A prefix = __shfl_sync(0xffffffffu, v, nearest);
  for (int l = nearest - 1; l >= 0; --l) prefix += __shfl_sync(0xffffffffu, v, l);
  return prefix;
}

extern "C" __global__ void cumsum_scan(const T* __restrict__ x, T* __restrict__ y, long long n, long long tiles,
                                       int* __restrict__ state, A* __restrict__ sums) {
  __shared__ A shared[32];
  __shared__ A prefix_s;
  __shared__ long long id_s;
  if (threadIdx.x == 0) id_s = atomicAdd(reinterpret_cast<unsigned*>(state), 1u);
  __syncthreads();
  const long long id = id_s, row = id / tiles, t = id - row * tiles;
  int* flags = state + 1;
  const long long i0 = t * SCAN_ITEMS * (long long)blockDim.x + SCAN_ITEMS * (long long)threadIdx.x;
  x += row * n;
  y += row * n;
  A v[SCAN_ITEMS], run = A(0), total;
  for (int e = 0; e < SCAN_ITEMS; ++e) {
    if (i0 + e < n) run += A(x[i0 + e]);
    v[e] = run;
  }
  const A before = block_exclusive(run, shared, &total);
  if (threadIdx.x < 32) {
    if (threadIdx.x == 0) publish(sums, flags, id, t == 0 ? 2 : 1, total);
    const A prefix = t == 0 ? A(0) : look_back(sums, flags, id, t);
    if (threadIdx.x == 0) {
      if (t > 0) publish(sums, flags, id, 2, prefix + total);
      prefix_s = prefix;
    }
  }
  __syncthreads();
  const A start = prefix_s + before;
  for (int e = 0; e < SCAN_ITEMS; ++e)
    if (i0 + e < n) y[i0 + e] = T(start + v[e]);
}

extern "C" __global__ void cumsum_walk(const T* __restrict__ x, T* __restrict__ y, long long n, long long inner,
                                       long long positions) {
  const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= positions) return;
  const long long o = p / inner, at = o * n * inner + (p - o * inner);
  A acc = A(0);
  for (long long i = 0; i < n; ++i) {
    acc += A(x[at + i * inner]);
    y[at + i * inner] = T(acc);
  }
}
