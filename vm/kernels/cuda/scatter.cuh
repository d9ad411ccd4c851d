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
    const long long c = rem % g.sizes[k];
    rem /= g.sizes[k];
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
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long so;
  if (i >= g.n) return;
  if (T* o = target(out, index, g, i, &so, check)) add_at(o, scaled(alpha, A(src[so])));
}
