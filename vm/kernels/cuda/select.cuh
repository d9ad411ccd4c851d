// Compiled after scatter.cuh's module (the prelude, T, A and scatter.cuh: add_at) (select.cpp).
//
// Selections whose size comes from the values - masked_select, nonzero - compact in two passes
// over tiles of `tile` elements, a block per tile: count_* counts each tile's selected elements,
// its last block scans the counts (inclusive offsets) and hands the host the total, and *_write
// places each tile's elements from its offset in order (warp ballots rank the selected ones, the
// warps' counts in shared memory place the warps). Tile bounds are uniform across a block, so
// every thread reaches each __syncthreads / ballot.
// index_gather / index_put: PyTorch's advanced indexing, a thread per element (grid-stride):
// element e = p * nr + r of the selection is self[idx_1[p], ..., idx_k[p], rest r], the k
// 1-based positions checked against their dims (site j: dim j), as the gathers do.

// The rank of each selected element of a tile of COMPACT_ROUNDS * blockDim elements: calls
// emit(i, slot) for every selected i in lo..hi-1, slots base, base + 1, ... in order of i. Each
// warp ballots its contiguous share (COMPACT_ROUNDS rounds of 32), the ballots kept in
// registers; one barrier places the warps.
#define COMPACT_ROUNDS 16
template <class Flag, class Emit>
__device__ __forceinline__ void compact_tile(long long lo, long long hi, long long base, Flag flag, Emit emit) {
  __shared__ int warp_count[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long first = lo + (long long)warp * 32 * COMPACT_ROUNDS + lane;
  unsigned bits[COMPACT_ROUNDS];
  int count = 0;
  for (int r = 0; r < COMPACT_ROUNDS; ++r) {
    const long long i = first + 32 * r;
    bits[r] = __ballot_sync(0xffffffffu, i < hi && flag(i));
    count += __popc(bits[r]);
  }
  if (lane == 0) warp_count[warp] = count;
  __syncthreads();
  for (int w = 0; w < warp; ++w) base += warp_count[w];
  const unsigned below = (1u << lane) - 1u;
  for (int r = 0; r < COMPACT_ROUNDS; ++r) {
    if ((bits[r] >> lane) & 1u) emit(first + 32 * r, base + __popc(bits[r] & below));
    base += __popc(bits[r]);
  }
}

// Each warp counts tiles' selected elements into offsets[tile] (16-byte loads where aligned); the
// last block to finish (the stream's ticket, which it sets back to 0) turns the counts into
// inclusive sums and writes the total to the host's pinned word: no scan kernel, no copy.
template <class V, class Flag>
__device__ __forceinline__ void count_tiles(const V* __restrict__ x, long long n, long long tile, long long tiles,
                                            int aligned, long long* offsets, unsigned* ticket, long long* total,
                                            Flag flag) {
  __shared__ long long partial[32];
  __shared__ bool last;
  constexpr int kPer = 16 / sizeof(V);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (long long t = (long long)blockIdx.x * warps + warp; t < tiles; t += (long long)gridDim.x * warps) {
    const long long lo = t * tile, hi = lo + tile < n ? lo + tile : n;
    long long c = 0;
    if (aligned && hi - lo == tile) {
      const uint4* v = reinterpret_cast<const uint4*>(x + lo);
#pragma unroll 8
      for (long long k = lane; k < tile / kPer; k += 32) {
        const uint4 w = v[k];
        V e[kPer];
        memcpy(e, &w, 16);
        for (int u = 0; u < kPer; ++u) c += flag(e[u]) ? 1 : 0;
      }
    } else {
      for (long long i = lo + lane; i < hi; i += 32) c += flag(x[i]) ? 1 : 0;
    }
    for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
    if (lane == 0) offsets[t] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    last = atomicAdd(ticket, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  // 16 counts a thread (their loads in flight together) and a block scan of the threads' sums,
  // 16 * blockDim counts a round
  long long carry = 0;
  for (long long round = 0; round < tiles; round += 16 * (long long)blockDim.x) {
    const long long first = round + 16 * (long long)threadIdx.x;
    long long v[16], mine = 0;
#pragma unroll
    for (int u = 0; u < 16; ++u) {
      v[u] = first + u < tiles ? __ldcg(offsets + first + u) : 0;
      mine += v[u];
    }
    long long sum;
    long long before = carry + cr::block_exclusive_sum(mine, partial, &sum);
    carry += sum;
#pragma unroll
    for (int u = 0; u < 16; ++u)
      if (first + u < tiles) offsets[first + u] = before += v[u];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *ticket = 0u;
    *reinterpret_cast<volatile long long*>(total) = carry;
    __threadfence_system();
  }
}

// The offset of this block's tile among the selected elements (offsets: inclusive sums).
__device__ __forceinline__ long long tile_base(const long long* offsets) {
  return blockIdx.x == 0 ? 0 : offsets[blockIdx.x - 1];
}

__device__ __forceinline__ bool nonzero_value(T v) { return A(v) != A(0); }  // (NaN counts, -0 does not)

extern "C" __global__ void count_mask(const bool* __restrict__ mask, long long n, long long tile, long long tiles,
                                      int aligned, long long* offsets, unsigned* ticket, long long* total) {
  cr::grid_wait();
  count_tiles(mask, n, tile, tiles, aligned, offsets, ticket, total, [](bool v) { return v; });
}

extern "C" __global__ void count_nonzero(const T* __restrict__ x, long long n, long long tile, long long tiles,
                                         int aligned, long long* offsets, unsigned* ticket, long long* total) {
  cr::grid_wait();
  count_tiles(x, n, tile, tiles, aligned, offsets, ticket, total, [](T v) { return nonzero_value(v); });
}

extern "C" __global__ void masked_select_write(const T* __restrict__ x, const bool* __restrict__ mask, long long n,
                                               long long tile, const long long* __restrict__ offsets, T* __restrict__ out) {
  cr::grid_wait();
  const long long lo = (long long)blockIdx.x * tile, hi = lo + tile < n ? lo + tile : n;
  compact_tile(lo, hi, tile_base(offsets), [&](long long i) { return mask[i]; },
               [&](long long i, long long slot) { out[slot] = x[i]; });
}

// nonzero's rows: the 1-based coordinates of each selected element of x (sizes: x's, nd dims).
struct Coords {
  long long sizes[16];
  int nd;
};

extern "C" __global__ void nonzero_write(const T* __restrict__ x, long long n, long long tile,
                                         const long long* __restrict__ offsets, long long* __restrict__ out, Coords g) {
  cr::grid_wait();
  const long long lo = (long long)blockIdx.x * tile, hi = lo + tile < n ? lo + tile : n;
  compact_tile(lo, hi, tile_base(offsets), [&](long long i) { return nonzero_value(x[i]); },
               [&](long long i, long long slot) {
                 long long rem = i;  // (dim 0's coordinate is what remains: no division; none for 1-D)
                 for (int k = g.nd - 1; k > 0; --k) {
                   const long long q = rem / g.sizes[k];
                   out[slot * g.nd + k] = rem - q * g.sizes[k] + 1;
                   rem = q;
                 }
                 out[slot * g.nd] = rem + 1;
               });
}

// The geometry of an advanced index: the k indexed dims of self (their sizes are the positions'
// limits), the rest dims after them; idx holds the k index rows of nb positions each.
struct IndexGeo {
  long long limits[16], strides[16], rest_sizes[16], rest_strides[16];
  long long value_sizes[16], value_strides[16];  // (index_put's source: its dims, merged where dense)
  long long nb, nr, n;
  int k, nrest, nvalue;
};

// The element offset in self of selection element e, or -1 when a position is out of range
// (recorded in the check word, site j for dim j).
__device__ __forceinline__ long long index_offset(const long long* idx, const IndexGeo& g, long long e, int64_t* check) {
  const long long p = e / g.nr;
  long long r = e - p * g.nr, off = 0;
  for (int j = 0; j < g.k; ++j) {
    const long long q = idx[j * g.nb + p];
    if (q < 1 || q > g.limits[j]) {
      cr::position(q, g.limits[j], j, check);
      return -1;
    }
    off += (q - 1) * g.strides[j];
  }
  for (int d = g.nrest - 1; d >= 0; --d) {
    const long long c = r % g.rest_sizes[d];
    r /= g.rest_sizes[d];
    off += c * g.rest_strides[d];
  }
  return off;
}

extern "C" __global__ void index_gather(const T* __restrict__ self, const long long* __restrict__ idx, T* __restrict__ out,
                                        IndexGeo g, int64_t* check) {
  cr::grid_wait();
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < g.n; e += (long long)gridDim.x * blockDim.x) {
    const long long off = index_offset(idx, g, e, check);
    if (off >= 0) out[e] = self[off];
  }
}

// The element offset in index_put's values of selection element e (no division for a dense
// source: one dim, e < its size).
__device__ __forceinline__ long long value_offset(const IndexGeo& g, long long e) {
  if (g.nvalue == 0) return 0;
  long long off = 0;
  for (int d = g.nvalue - 1; d > 0; --d) {
    const long long c = e % g.value_sizes[d];
    e /= g.value_sizes[d];
    off += c * g.value_strides[d];
  }
  return off + e * g.value_strides[0];
}

// self[...] = values[e] (accumulate: += atomically, as index_put's CUDA kernel in PyTorch; without
// it, of positions named twice one write wins, unspecified which, as in PyTorch).
extern "C" __global__ void index_put(T* self, const long long* __restrict__ idx, const T* __restrict__ values, IndexGeo g,
                                     int accumulate, int64_t* check) {
  cr::grid_wait();
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < g.n; e += (long long)gridDim.x * blockDim.x) {
    const long long off = index_offset(idx, g, e, check);
    if (off < 0) continue;
    const T v = values[value_offset(g, e)];
    if (accumulate) add_at(self + off, A(v));
    else self[off] = v;
  }
}

// index_put's accumulate under T.use_deterministic_algorithms (select.cpp): each selection
// element's offset in self as a key (a bad position NO_KEY: skipped), for scatter.cuh's ordered sum.
extern "C" __global__ void index_put_keys(const long long* __restrict__ idx, IndexGeo g, long long* __restrict__ keys,
                                          int64_t* check) {
  cr::grid_wait();
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < g.n; e += (long long)gridDim.x * blockDim.x) {
    const long long off = index_offset(idx, g, e, check);
    keys[e] = off >= 0 ? off : NO_KEY;
  }
}
