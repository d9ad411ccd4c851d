// Split-K attention for a few query rows over a long key axis (flash-decoding), compiled after
// the prelude, attention_common.cuh and the launcher's T, E, EV and EVP (EV rounded up to a power
// of two; attention_decode.cpp).
//
// attention_split_<LQ> (2 to 8 rows): block (bh, split) takes keys [split * chunk, min(S, (split + 1) * chunk))
// of (batch, head) bh for its LQ >= L query rows (rows past L are zeros, never stored), in tiles
// of TK keys, 128 threads:
//   s = q k^T   G lanes per key, E / G elements each, summed by shuffles (q pre-scaled to log2
//               units in shared memory); the mask and the causal rule applied, keys past the
//               slice -inf
//   softmax     a warp per row: the tile's max, the running max m and sum l, p = exp2(s - m)
//   o += p v    thread (kg, d): column d over keys kg, kg + KG, ... (v rows read coalesced)
// attention_row_1 (one row, a decoder's step) keeps no tile in shared memory: each warp takes
// RK keys at a time with its own online softmax, so a slice of 64 keys is one memory round trip
// and no barrier. One split writes the output and lse itself; several write (o, m, l) partials
// in float32, which attention_combine merges in split order (no atomics: deterministic). On sm_90
// the CL splits of a (batch, head) run as one thread-block cluster and its first block merges the
// partials from the others' shared memory, in the same order: one kernel, no workspace
// (attention_row_1_cCL).
// With a cache write (NewRows::k set: the _attention_cache op), attention_row also stores the new
// k and v rows of each (batch, head) at the 1-based slot *pos of the cache that k and v view, and
// takes that key's row from them, not from the cache: one kernel for a decoder's cache write and
// attention. A slot outside 1..S is recorded in the check word (as index_put_ reports it) and no
// row is written.
#define NT 128
#define TK 32
#define G 8
#define KG (NT / EVP)
#define MAXL 8

// The new rows of a cache write (attention_decode.hpp: NewRows): head (b, h)'s k row at
// k + head_offset(bh, ..., ks0, ks1), its v row likewise; k null: no write.
struct NewRows {
  const T* k;
  const T* v;
  long long ks0, ks1, vs0, vs1;
  const int64_t* pos;
  int64_t* check;
};

// what one block leaves for the combine or the output: o (unnormalised), m (log2 units), l
template <int LQ> struct SplitSmem {
  float q[LQ][E];
  float s[LQ][TK];
  float alpha[LQ], m[LQ], l[LQ];
  float red[KG * LQ * EVP];
};

// Scores of keys key0 .. key0 + TK of the tile into sm.s (in log2 units, masked).
template <int LQ>
__device__ __forceinline__ void tile_scores(SplitSmem<LQ>& sm, const T* __restrict__ k, long long ksr, int key0,
                                            int end, int L, int S, int causal, const void* mask, int mask_kind,
                                            long long msr, long long msc) {
  const int gk = threadIdx.x / G, gl = threadIdx.x % G;
  // (loops of constant trip counts, unrolled: a thread's loads are all in flight at once)
#pragma unroll
  for (int j = 0; j < TK / (NT / G); ++j) {
    const int kk = gk + j * (NT / G), key = key0 + kk;
    float acc[LQ];
#pragma unroll
    for (int a = 0; a < LQ; ++a) acc[a] = 0.f;
    if (key < end) {
      const T* kr = k + key * ksr;
#pragma unroll
      for (int i = 0; i < (E + G - 1) / G; ++i) {
        const int e = gl + i * G;
        if (E % G != 0 && e >= E) break;
        const float kv = float(kr[e]);
#pragma unroll
        for (int a = 0; a < LQ; ++a) acc[a] = fmaf(sm.q[a][e], kv, acc[a]);
      }
    }
#pragma unroll
    for (int a = 0; a < LQ; ++a)
#pragma unroll
      for (int x = 1; x < G; x *= 2) acc[a] += __shfl_xor_sync(0xffffffffu, acc[a], x);
    if (gl == 0)
#pragma unroll
      for (int a = 0; a < LQ; ++a) {
        float s = acc[a];
        if (key >= end || (causal && key > a)) s = -__int_as_float(0x7f800000);
        else if (mask_kind) s += mask_term<T>(mask, mask_kind, msr, msc, a, key, L, S);
        sm.s[a][kk] = s;
      }
  }
}

// The online softmax of the tile's scores: a warp per row; p replaces s, alpha rescales o.
template <int LQ> __device__ __forceinline__ void tile_softmax(SplitSmem<LQ>& sm, float (&m)[(LQ + 3) / 4],
                                                               float (&l)[(LQ + 3) / 4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int i = 0; i < (LQ + 3) / 4; ++i) {
    const int a = warp + 4 * i;
    if (a >= LQ) break;
    const float x = sm.s[a][lane];
    const float mn = fmaxf(m[i], cr::warp_reduce(x, [](float u, float w) { return fmaxf(u, w); }));
    const float base = mn == -__int_as_float(0x7f800000) ? 0.f : mn;  // (no key yet: no -inf - -inf)
    const float alpha = ex2(m[i] - base), p = ex2(x - base);
    sm.s[a][lane] = p;
    l[i] = l[i] * alpha + cr::warp_reduce(p, [](float u, float w) { return u + w; });
    m[i] = mn;
    if (lane == 0) sm.alpha[a] = alpha;
  }
}

template <int LQ>
__device__ __forceinline__ void attention_split(const T* __restrict__ q, const T* __restrict__ k,
                                                const T* __restrict__ v, T* __restrict__ out,
                                                float* __restrict__ part, float* __restrict__ lse, int L, int S,
                                                int heads, int splits, int chunk, long long qs0, long long qs1,
                                                long long qsr, long long ks0, long long ks1, long long ksr,
                                                long long vs0, long long vs1, long long vsr, float scale_log2,
                                                int causal, const void* __restrict__ mask, int mask_kind,
                                                long long ms0, long long ms1, long long msr, long long msc, NewRows) {
  __shared__ SplitSmem<LQ> sm;
  cr::grid_wait();
  const long long bh = blockIdx.x / splits;
  const int split = int(blockIdx.x - bh * splits);
  q = head_of(q, bh, heads, qs0, qs1), k = head_of(k, bh, heads, ks0, ks1), v = head_of(v, bh, heads, vs0, vs1);
  mask = mask_of<T>(mask, mask_kind, bh, heads, ms0, ms1);
  for (int i = threadIdx.x; i < LQ * E; i += NT) {
    const int a = i / E, e = i % E;
    sm.q[a][e] = a < L ? float(q[a * qsr + e]) * scale_log2 : 0.f;
  }
  const int start = split * chunk, end = min(S, start + chunk);
  const int d = threadIdx.x % EVP, kg = threadIdx.x / EVP;
  float o[LQ], m[(LQ + 3) / 4], l[(LQ + 3) / 4];
#pragma unroll
  for (int a = 0; a < LQ; ++a) o[a] = 0.f;
#pragma unroll
  for (int i = 0; i < (LQ + 3) / 4; ++i) m[i] = -__int_as_float(0x7f800000), l[i] = 0.f;
  __syncthreads();
  for (int key0 = start; key0 < end; key0 += TK) {
    tile_scores<LQ>(sm, k, ksr, key0, end, L, S, causal, mask, mask_kind, msr, msc);
    __syncthreads();
    tile_softmax<LQ>(sm, m, l);
    __syncthreads();
#pragma unroll
    for (int a = 0; a < LQ; ++a) o[a] *= sm.alpha[a];
    if (d < EV) {
      constexpr int kKeys = (TK + KG - 1) / KG;  // (keys past the tile or the slice: 0, and p is 0)
      float vv[kKeys];
#pragma unroll
      for (int j = 0; j < kKeys; ++j) {
        const int kk = kg + j * KG;
        vv[j] = kk < TK && key0 + kk < end ? float(v[(key0 + kk) * vsr + d]) : 0.f;
      }
#pragma unroll
      for (int j = 0; j < kKeys; ++j) {
        const int kk = min(kg + j * KG, TK - 1);
#pragma unroll
        for (int a = 0; a < LQ; ++a) o[a] = fmaf(sm.s[a][kk], vv[j], o[a]);
      }
    }
    __syncthreads();  // (every thread is done with p before the next tile's scores)
  }
  // the key groups' sums in order; the row's m and l from its warp
#pragma unroll
  for (int a = 0; a < LQ; ++a) sm.red[(kg * LQ + a) * EVP + d] = o[a];
  if ((threadIdx.x & 31) == 0)
#pragma unroll
    for (int i = 0; i < (LQ + 3) / 4; ++i)
      if ((threadIdx.x >> 5) + 4 * i < LQ) sm.m[(threadIdx.x >> 5) + 4 * i] = m[i], sm.l[(threadIdx.x >> 5) + 4 * i] = l[i];
  __syncthreads();
  for (int i = threadIdx.x; i < LQ * EVP; i += NT) {
    const int a = i / EVP, c = i % EVP;
    if (a >= L || c >= EV) continue;
    float sum = 0.f;
    for (int g = 0; g < KG; ++g) sum += sm.red[(g * LQ + a) * EVP + c];
    if (splits == 1) {
      // S = 0: zeros (the composite's empty product); a row that sees no key: 0 / 0, NaN
      out[(bh * L + a) * EV + c] = T(S == 0 ? 0.f : sum / sm.l[a]);
      if (lse && c == 0) lse[bh * L + a] = row_lse(sm.m[a], sm.l[a]);
    } else {
      float* pr = part + ((bh * L + a) * splits + split) * (EV + 2);  // (a row's splits together)
      pr[c] = sum;
      if (c == 0) pr[EV] = sm.m[a], pr[EV + 1] = sm.l[a];
    }
  }
}

// The split kernels' parameters, and their names passed on to attention_split.
#define SPLIT_PARAMS                                                                                             \
  const T* q, const T* k, const T* v, T* out, float* part, float* lse, int L, int S, int heads, int splits,      \
      int chunk, long long qs0, long long qs1, long long qsr, long long ks0, long long ks1, long long ksr,        \
      long long vs0, long long vs1, long long vsr, float scale_log2, int causal, const void* mask, int mask_kind, \
      long long ms0, long long ms1, long long msr, long long msc, NewRows nr
#define SPLIT_ARGS                                                                                         \
  q, k, v, out, part, lse, L, S, heads, splits, chunk, qs0, qs1, qsr, ks0, ks1, ksr, vs0, vs1, vsr, scale_log2, \
      causal, mask, mask_kind, ms0, ms1, msr, msc, nr
#define SPLIT_KERNEL(LQ)                                                                \
  extern "C" __global__ void __launch_bounds__(NT) attention_split_##LQ(SPLIT_PARAMS) { \
    attention_split<LQ>(SPLIT_ARGS);                                                    \
  }
SPLIT_KERNEL(2)
SPLIT_KERNEL(4)
SPLIT_KERNEL(8)

#define RNT 256           // attention_row's threads
#define RW (RNT / 32)     // its warps
#define RG 4              // lanes a key's score
#define RK (32 / RG)      // keys a warp takes at a time
#define RC ((EV + 31) / 32)  // output columns a lane

// what a block of attention_row leaves: its warps' (m, l, o); in a cluster's first block, every
// block's (m, l, o), stored there by each (at most 8 blocks: the portable cluster size)
struct RowSmem {
  float wm[RW], wl[RW], wo[RW][32 * RC];
  float m[8], l[8], po[8][EV];
};

#if __CUDA_ARCH__ >= 900
// The cluster's CL partials (po, m, l of each block, stored into the first block's shared memory
// before the barrier) merged there as attention_combine merges them; the others leave at once.
template <int CL> __device__ __forceinline__ void cluster_merge(RowSmem& sm, T* __restrict__ out,
                                                               float* __restrict__ lse, long long bh) {
  static_assert(CL <= 8, "RowSmem holds 8 blocks' partials");
  cr::cluster_sync();
  if (cr::cluster_rank() == 0)
    for (int c = threadIdx.x; c < EV; c += RNT) {
      float mx = -__int_as_float(0x7f800000);
#pragma unroll
      for (int s = 0; s < CL; ++s) mx = fmaxf(mx, sm.m[s]);
      const float base = mx == -__int_as_float(0x7f800000) ? 0.f : mx;
      float total = 0.f, sum = 0.f;
#pragma unroll
      for (int s = 0; s < CL; ++s) {
        const float w = ex2(sm.m[s] - base);
        total += sm.l[s] * w;
        sum += sm.po[s][c] * w;
      }
      out[bh * EV + c] = T(sum / total);
      if (lse && c == 0) lse[bh] = row_lse(mx, total);
    }
}
#endif

// One query row: warp w of block (bh, split) takes keys key0 .. key0 + RK of its slice, key0 =
// start + w * RK, + RW * RK, ...; it loads their k and v rows at once (RG lanes a key's k, a lane
// per output column of v), then updates its running max m, sum l and o. CL as attention_split.
template <int CL>
__device__ __forceinline__ void attention_row(const T* __restrict__ q, const T* __restrict__ k,
                                              const T* __restrict__ v, T* __restrict__ out,
                                              float* __restrict__ part, float* __restrict__ lse, int S, int heads,
                                              int splits, int chunk, long long qs0, long long qs1, long long ks0,
                                              long long ks1, long long ksr, long long vs0, long long vs1,
                                              long long vsr, float scale_log2, int causal,
                                              const void* __restrict__ mask, int mask_kind, long long ms0,
                                              long long ms1, long long msc, const NewRows& nr) {
  __shared__ RowSmem sm;
  const float kNegInf = -__int_as_float(0x7f800000);
  constexpr int kE = (E + RG - 1) / RG;  // k elements a lane
  const long long bh = blockIdx.x / splits;
  const int split = int(blockIdx.x - bh * splits), warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int gk = lane / RG, gl = lane % RG;
  q = head_of(q, bh, heads, qs0, qs1), k = head_of(k, bh, heads, ks0, ks1), v = head_of(v, bh, heads, vs0, vs1);
  mask = mask_of<T>(mask, mask_kind, bh, heads, ms0, ms1);
  const int start = split * chunk, end = min(S, start + chunk);
  // the warp's k and v rows into L2 (lane: a key of 8, a 128-byte line of 4) while the previous
  // kernel runs
  for (int key = start + warp * RK + lane / 4, b = lane % 4 * 128; key < end; key += RW * RK) {
    if (b < E * int(sizeof(T))) cr::to_l2(reinterpret_cast<const char*>(k + key * ksr) + b);
    if (b < EV * int(sizeof(T))) cr::to_l2(reinterpret_cast<const char*>(v + key * vsr) + b);
  }
  cr::grid_wait();
  // a cache write: slot p (0-based; -1 none) takes the new rows, which this block stores when p
  // is in its slice (no block reads that slot from the cache)
  long long p = -1;
  const T *kn = nullptr, *vn = nullptr;
  if (nr.k) {
    const long long at = *nr.pos;
    if (at >= 1 && at <= S) p = at - 1;
    else if (threadIdx.x == 0 && blockIdx.x == 0) cr::position(at, S, 0, nr.check);
    kn = head_of(nr.k, bh, heads, nr.ks0, nr.ks1), vn = head_of(nr.v, bh, heads, nr.vs0, nr.vs1);
    if (p >= start && p < end) {
      for (int e = threadIdx.x; e < E; e += RNT) const_cast<T*>(k)[p * ksr + e] = kn[e];
      for (int e = threadIdx.x; e < EV; e += RNT) const_cast<T*>(v)[p * vsr + e] = vn[e];
    }
  }
  float qr[kE];  // (the lane's q elements, read by every key group: cached, no barrier)
#pragma unroll
  for (int i = 0; i < kE; ++i) {
    const int e = gl + i * RG;
    qr[i] = E % RG == 0 || e < E ? float(q[e]) * scale_log2 : 0.f;
  }
  float m = kNegInf, l = 0.f, o[RC];
#pragma unroll
  for (int c = 0; c < RC; ++c) o[c] = 0.f;
  for (int key0 = start + warp * RK; key0 < end; key0 += RW * RK) {
    const int key = key0 + gk;
    const bool in = key < end;
    T kr[kE], vr[RK][RC];  // (every load of the group in flight at once)
    const T* krow = key == p ? kn : k + key * ksr;
#pragma unroll
    for (int i = 0; i < kE; ++i) {
      const int e = gl + i * RG;
      kr[i] = in && (E % RG == 0 || e < E) ? krow[e] : T(0.f);
    }
#pragma unroll
    for (int j = 0; j < RK; ++j) {
      const T* vrow = key0 + j == p ? vn : v + (key0 + j) * vsr;
#pragma unroll
      for (int c = 0; c < RC; ++c) {
        const int col = lane + 32 * c;
        vr[j][c] = key0 + j < end && (EV % 32 == 0 || col < EV) ? vrow[col] : T(0.f);
      }
    }
    const float mt = mask_kind && in ? mask_term<T>(mask, mask_kind, 0, msc, 0, key, 1, S) : 0.f;
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < kE; ++i) acc = fmaf(qr[i], float(kr[i]), acc);
#pragma unroll
    for (int x = 1; x < RG; x *= 2) acc += __shfl_xor_sync(0xffffffffu, acc, x);
    const float s = !in || (causal && key > 0) ? kNegInf : acc + mt;
    const float mn = fmaxf(m, cr::warp_reduce(s, [](float u, float w) { return fmaxf(u, w); }));
    const float base = mn == kNegInf ? 0.f : mn;  // (no key yet: no -inf - -inf)
    const float alpha = ex2(m - base), p = ex2(s - base);
    l = l * alpha + cr::warp_reduce(gl == 0 ? p : 0.f, [](float u, float w) { return u + w; });
    m = mn;
#pragma unroll
    for (int c = 0; c < RC; ++c) o[c] *= alpha;
#pragma unroll
    for (int j = 0; j < RK; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j * RG);
#pragma unroll
      for (int c = 0; c < RC; ++c) o[c] = fmaf(pj, float(vr[j][c]), o[c]);
    }
  }
  // the warps' states merged in warp order
  if (lane == 0) sm.wm[warp] = m, sm.wl[warp] = l;
#pragma unroll
  for (int c = 0; c < RC; ++c) sm.wo[warp][lane + 32 * c] = o[c];
  __syncthreads();
  for (int c = threadIdx.x; c < EV; c += RNT) {
    float mx = kNegInf;
#pragma unroll
    for (int w = 0; w < RW; ++w) mx = fmaxf(mx, sm.wm[w]);
    const float base = mx == kNegInf ? 0.f : mx;
    float total = 0.f, sum = 0.f;
#pragma unroll
    for (int w = 0; w < RW; ++w) {
      const float x = ex2(sm.wm[w] - base);
      total += sm.wl[w] * x;
      sum += sm.wo[w][c] * x;
    }
    if (CL > 1) {
#if __CUDA_ARCH__ >= 900
      const unsigned rank = cr::cluster_rank();  // (into the first block's shared memory)
      cr::cluster_store(&sm.po[rank][c], 0u, sum);
      if (c == 0) cr::cluster_store(&sm.m[rank], 0u, mx), cr::cluster_store(&sm.l[rank], 0u, total);
#endif
    } else if (splits == 1) {
      // S = 0: zeros (the composite's empty product); a row that sees no key: 0 / 0, NaN
      out[bh * EV + c] = T(S == 0 ? 0.f : sum / total);
      if (lse && c == 0) lse[bh] = row_lse(mx, total);
    } else {
      float* pr = part + (bh * splits + split) * (EV + 2);
      pr[c] = sum;
      if (c == 0) pr[EV] = mx, pr[EV + 1] = total;
    }
  }
#if __CUDA_ARCH__ >= 900
  if constexpr (CL > 1) cluster_merge<CL>(sm, out, lse, bh);
#endif
}

#define ROW_ARGS                                                                                          \
  q, k, v, out, part, lse, S, heads, splits, chunk, qs0, qs1, ks0, ks1, ksr, vs0, vs1, vsr, scale_log2, causal, \
      mask, mask_kind, ms0, ms1, msc, nr
// (the split kernels' parameters: one launcher for both)
extern "C" __global__ void __launch_bounds__(RNT) attention_row_1(SPLIT_PARAMS) { attention_row<0>(ROW_ARGS); }

// attention_row_1_cCL: CL splits a (batch, head), one cluster (launched with splits == CL).
#if __CUDA_ARCH__ >= 900
#define CLUSTER_KERNEL(CL)                                                                                   \
  extern "C" __global__ void __launch_bounds__(RNT) __cluster_dims__(CL, 1, 1) attention_row_1_c##CL(SPLIT_PARAMS) { \
    attention_row<CL>(ROW_ARGS);                                                                             \
  }
CLUSTER_KERNEL(2)
CLUSTER_KERNEL(4)
CLUSTER_KERNEL(8)
#endif

// Row (bh, a) of the output from the splits' partials, in split order: a block of NT threads, a
// thread per output column. A row that sees no key in any split sums to 0: 0 / 0, NaN.
extern "C" __global__ void __launch_bounds__(NT) attention_combine(const float* __restrict__ part, T* __restrict__ out,
                                                                   float* __restrict__ lse, int splits) {
  cr::grid_wait();
  const long long row = blockIdx.x;
  const float* pr = part + row * splits * (EV + 2);
  float mx = -__int_as_float(0x7f800000);
  for (int s = 0; s < splits; ++s) mx = fmaxf(mx, pr[s * (EV + 2) + EV]);
  const float base = mx == -__int_as_float(0x7f800000) ? 0.f : mx;
  float total = 0.f;
  for (int s = 0; s < splits; ++s) total += pr[s * (EV + 2) + EV + 1] * ex2(pr[s * (EV + 2) + EV] - base);
  if (lse && threadIdx.x == 0) lse[row] = row_lse(mx, total);
  for (int c = threadIdx.x; c < EV; c += NT) {
    float sum = 0.f;
    for (int s = 0; s < splits; ++s) sum += pr[s * (EV + 2) + c] * ex2(pr[s * (EV + 2) + EV] - base);
    out[row * EV + c] = T(sum / total);
  }
}
