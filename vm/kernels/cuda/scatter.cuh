// Compiled after the prelude and the launcher's typedefs T (elements) and A (what alpha * src is
// computed in: float for float32 / 16-bit floats, double, long long for integers, int for bool)
// (scatter.cpp).
//
// scatter_add: out[c with c[d] := index(c) - 1] += alpha * src[c] for every position c of the
// iteration shape (index_add: source's shape, its 1-D index broadcast along the other dims;
// scatter_add: index's), a thread per position. Colliding positions add atomically, so the order
// of additions (and a float sum's last bits) varies from run to run, as in PyTorch's CUDA kernel.
// An index outside 1..limit writes nothing and is recorded in the check word (vm/checks.hpp).
struct ScatterGeo {
  long long sizes[16], idx_strides[16], src_strides[16], out_strides[16];
  long long n, limit;
  int nd, d;
};

__forceinline__ void add_at(float* o, float v) { atomicAdd(o, v); }
__forceinline__ void add_at(double* o, double v) { atomicAdd(o, v); }
__forceinline__ void add_at(int* o, long long v) { atomicAdd(reinterpret_cast<unsigned*>(o), unsigned(v)); }
__forceinline__ void add_at(long long* o, long long v) {
  atomicAdd(reinterpret_cast<unsigned long long*>(o), (unsigned long long)v);  // (wraps, as the CPU)
}

// 16-bit floats and bool: a compare-and-swap on the aligned 32-bit word that holds the element
// (the caching allocator's blocks are multiples of 512 bytes, so the word lies inside the block).
template <class F> __forceinline__ void update_word(void* at, int bits, F f) {
  const unsigned long long a = reinterpret_cast<unsigned long long>(at);
  unsigned* w = reinterpret_cast<unsigned*>(a & ~3ull);
  const unsigned shift = unsigned(a & 3ull) * 8u, mask = (bits == 16 ? 0xffffu : 0xffu) << shift;
  unsigned old = *w, assumed;
  do {
    assumed = old;
    const unsigned v = f((assumed & mask) >> shift);
    old = atomicCAS(w, assumed, (assumed & ~mask) | (v << shift));
  } while (old != assumed);
}
__forceinline__ void add_at(cr::half_t* o, float v) {
  update_word(o, 16, [v](unsigned bits) {
    cr::half_t h;
    h.bits = (unsigned short)bits;
    return unsigned(cr::half_t(float(h) + v).bits);
  });
}
__forceinline__ void add_at(cr::bf16_t* o, float v) {
  update_word(o, 16, [v](unsigned bits) {
    cr::bf16_t h;
    h.bits = (unsigned short)bits;
    return unsigned(cr::bf16_t(float(h) + v).bits);
  });
}
__forceinline__ void add_at(bool* o, int v) {
  if (v) update_word(o, 8, [](unsigned) { return 1u; });  // ("or", as the CPU)
}

// alpha * s in A: floats rounded once (never contracted into the atomic's add), integers wrap,
// bool is "and".
__forceinline__ float scaled(float alpha, float s) { return __fmul_rn(alpha, s); }
__forceinline__ double scaled(double alpha, double s) { return __dmul_rn(alpha, s); }
__forceinline__ long long scaled(long long alpha, long long s) {
  return (long long)((unsigned long long)alpha * (unsigned long long)s);
}
__forceinline__ int scaled(int alpha, int s) { return alpha != 0 && s != 0; }

// Position i of the iteration shape: src's offset, and out's element (null for a bad index).
__forceinline__ T* target(T* out, const long long* index, const ScatterGeo& g, long long i, long long* so,
                          int64_t* check) {
  long long rem = i, io = 0, oo = 0;
  *so = 0;
  for (int k = g.nd - 1; k >= 0; --k) {
    long long c = rem;  // (dim 0's coordinate is what remains: no division; none for 1-D)
    if (k > 0) {
      const long long q = rem / g.sizes[k];
      c = rem - q * g.sizes[k];
      rem = q;
    }
    io += c * g.idx_strides[k];
    *so += c * g.src_strides[k];
    if (k != g.d) oo += c * g.out_strides[k];
  }
  const long long p = index[io];
  if (p < 1 || p > g.limit) {
    cr::position(p, g.limit, 0, check);
    return nullptr;
  }
  return out + oo + (p - 1) * g.out_strides[g.d];
}

extern "C" __global__ void scatter_add(T* __restrict__ out, const long long* __restrict__ index, const T* __restrict__ src,
                                       ScatterGeo g, A alpha, int64_t* check) {
  cr::grid_wait();
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long so;
  if (i >= g.n) return;
  if (T* o = target(out, index, g, i, &so, check)) add_at(o, scaled(alpha, A(src[so])));
}

// A long 1-D line into a 1-D target of few bins (a histogram: bincount, histc, a 1-D index_add):
// scatter_bins sums a grid-stride share of the line per block into bins of B in shared memory,
// then adds each touched bin once into out. Floating bins start at -0.0 (the additive identity,
// so an untouched bin is skipped exactly); a constant source (stride 0: counting) keeps 32-bit
// counters, multiplied by the value at the merge.
__forceinline__ void bin_add(float* b, float v) { atomicAdd(b, v); }
__forceinline__ void bin_add(double* b, double v) { atomicAdd(b, v); }
__forceinline__ void bin_add(unsigned long long* b, long long v) { atomicAdd(b, (unsigned long long)v); }
__forceinline__ void bin_add(unsigned* b, long long v) { atomicAdd(b, unsigned(v)); }
__forceinline__ void bin_add(unsigned* b, int v) { if (v) atomicOr(b, 1u); }
__forceinline__ bool untouched(float b) { return __float_as_uint(b) == 0x80000000u; }
__forceinline__ bool untouched(double b) { return (unsigned long long)__double_as_longlong(b) == 0x8000000000000000ull; }
__forceinline__ bool untouched(unsigned long long b) { return b == 0; }
__forceinline__ bool untouched(unsigned b) { return b == 0; }

extern "C" __global__ void scatter_bins(T* __restrict__ out, const long long* __restrict__ index,
                                        const T* __restrict__ src, ScatterGeo g, A alpha, int64_t* check) {
  cr::grid_wait();
  extern __shared__ __align__(16) unsigned char smem[];
  B* bins = reinterpret_cast<B*>(smem);
  unsigned* counts = reinterpret_cast<unsigned*>(smem);
  const bool counting = g.src_strides[0] == 0;
  for (long long b = threadIdx.x; b < g.limit; b += blockDim.x) {
    if (counting) counts[b] = 0u;
    else bins[b] = B(-0.0);
  }
  __syncthreads();
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < g.n; i += step) {
    const long long p = index[i * g.idx_strides[0]];
    if (p < 1 || p > g.limit) cr::position(p, g.limit, 0, check);
    else if (counting) atomicAdd(counts + (p - 1), 1u);
    else bin_add(bins + (p - 1), scaled(alpha, A(src[i * g.src_strides[0]])));
  }
  __syncthreads();
  const A each = counting ? scaled(alpha, A(src[0])) : A(0);
  for (long long b = threadIdx.x; b < g.limit; b += blockDim.x) {
    T* o = out + b * g.out_strides[0];
    if (counting) {
      if (counts[b]) add_at(o, scaled(each, A(counts[b])));
    } else if (!untouched(bins[b])) add_at(o, A(bins[b]));
  }
}

// count_line: a constant source (counting) into a 1-D target too large for shared memory; the
// lanes of a warp that hit one bin are grouped (match_any) and their leader adds the count once.
extern "C" __global__ void count_line(T* __restrict__ out, const long long* __restrict__ index, const T* __restrict__ src,
                                      ScatterGeo g, A alpha, int64_t* check) {
  cr::grid_wait();
  const A each = scaled(alpha, A(src[0]));
  const long long step = (long long)gridDim.x * blockDim.x;
  const unsigned lane = threadIdx.x & 31u;
  for (long long base = (long long)blockIdx.x * blockDim.x; base < g.n; base += step) {  // (uniform: whole warps)
    const long long i = base + threadIdx.x;
    const long long p = i < g.n ? index[i * g.idx_strides[0]] : 1;
    const bool ok = i < g.n && p >= 1 && p <= g.limit;
    if (i < g.n && !ok) cr::position(p, g.limit, 0, check);
    const unsigned live = __ballot_sync(0xffffffffu, ok);
    if (!ok) continue;
#if __CUDA_ARCH__ >= 700
    const unsigned peers = __match_any_sync(live, p);
#else
    const unsigned peers = 1u << lane;
#endif
    if (lane == unsigned(__ffs(peers) - 1)) add_at(out + (p - 1) * g.out_strides[0], scaled(each, A(__popc(peers))));
  }
}

// The ordered scatter_add (T.use_deterministic_algorithms; scatter.cpp ordered_scatter_add):
// scatter_keys writes each position's target (its offset in out; a bad index the largest key,
// sorted last and skipped), the keys are sorted stably with their positions (radix.cuh), and
// scatter_runs adds each run of equal keys into out in position order with one write: the same
// bits every run, and float sums in the CPU's order (16-bit floats summed in float, rounded once).
#define NO_KEY 0x7fffffffffffffffll
extern "C" __global__ void scatter_keys(T* __restrict__ out, const long long* __restrict__ index,
                                        const T* __restrict__ src, ScatterGeo g, long long* __restrict__ keys,
                                        int64_t* check) {
  cr::grid_wait();
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long so;
  if (i >= g.n) return;
  T* o = target(out, index, g, i, &so, check);
  keys[i] = o ? (long long)(o - out) : NO_KEY;
}

__forceinline__ long long src_offset(const ScatterGeo& g, long long i) {
  long long rem = i, so = 0;
  for (int k = g.nd - 1; k >= 0; --k) {
    so += rem % g.sizes[k] * g.src_strides[k];
    rem /= g.sizes[k];
  }
  return so;
}

extern "C" __global__ void scatter_runs(T* __restrict__ out, const long long* __restrict__ index,
                                        const T* __restrict__ src, ScatterGeo g, A alpha,
                                        const long long* __restrict__ keys, const long long* __restrict__ order,
                                        int64_t* check) {
  cr::grid_wait();
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= g.n) return;
  const long long key = keys[i];
  if (key == NO_KEY || (i > 0 && keys[i - 1] == key)) return;
  A sum = A(out[key]);
  for (long long j = i; j < g.n && keys[j] == key; ++j) sum += scaled(alpha, A(src[src_offset(g, order[j] - 1)]));
  out[key] = T(sum);
}
