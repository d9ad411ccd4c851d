// The attention backward kernels (FlashAttention-2's), compiled after the prelude,
// attention_common.cuh and the launcher's T (q's dtype), E, EV (attention_bwd.cpp).
//
// q, k, v, out, dout, dq, dk, dv are contiguous {bh, rows, size}; lse {bh, L} is the forward's
// row logsumexp (natural log) of the scaled, masked scores, so p = exp(s * scale + mask - lse)
// is recomputed per tile and the {L, S} matrices never reach memory:
//   attention_bwd_dot   delta = rowsum(dout * out), a warp per row (attention_bwd_dot.cuh)
//   attention_bwd_kv    a block per B keys walks the query rows in tiles of B:
//                       dv += p^T dout, dp = dout v^T, ds = p (dp - delta), dk += ds^T q * scale
//   attention_bwd_q     a block per B query rows walks the keys: dq += ds k * scale
//   attention_bwd       float32 unless deterministic: the key pass adding ds k * scale into dq by
//                       atomics, in place of the query pass (which recomputes s and dp)
// The two passes sum in a fixed order, so their gradients are deterministic. Tiles live in shared
// memory as float, the accumulators in registers. Register tiles: a block of NT threads owns a
// B x B tile of scores, thread (tr, tc) = (t / 16, t % 16) rows 4 tr + i and columns 4 tc + j of
// it, so every 4 steps of a product read 8 float4 from shared memory per 64 FMAs. Head widths pad
// with zeros to multiples of 64 (EW, VW).
constexpr int NT = 256, B = 64;
constexpr int EW = (E + 63) / 64 * 64, VW = (EV + 63) / 64 * 64;
constexpr int QP = EW + 4, OP = VW + 4, KP = B + 4;  // pitches: rows 16-byte aligned, 4 banks apart

// Rows [row0, row0 + B) of a {rows, W} head as floats, padded to WP columns: row-major
// (dst[r * P + e]) or transposed (dst[e * P + r]); rows at or past `end` and columns past W are 0.
template <int W, int WP, int P, bool TRANS>
__device__ __forceinline__ void load_tile(float* dst, const T* src, int row0, int end) {
  if constexpr (sizeof(T) == 4 && W % 4 == 0) {  // float32 rows of whole float4s, when src is aligned
    if ((reinterpret_cast<unsigned long long>(src) & 15) == 0) {
      for (int i = threadIdx.x; i < B * WP / 4; i += NT) {
        const int r = i / (WP / 4), e = 4 * (i - r * (WP / 4)), row = row0 + r;
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (row < end && e < W) x = *reinterpret_cast<const float4*>(src + (long long)row * W + e);
        if constexpr (TRANS)
          dst[e * P + r] = x.x, dst[(e + 1) * P + r] = x.y, dst[(e + 2) * P + r] = x.z, dst[(e + 3) * P + r] = x.w;
        else
          *reinterpret_cast<float4*>(dst + r * P + e) = x;
      }
      return;
    }
  }
  for (int i = threadIdx.x; i < B * WP; i += NT) {
    const int r = i / WP, e = i - r * WP, row = row0 + r;
    const float x = row < end && e < W ? float(src[(long long)row * W + e]) : 0.f;
    if constexpr (TRANS) dst[e * P + r] = x;
    else dst[r * P + e] = x;
  }
}

__device__ __forceinline__ float4 ld4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ void fma4(float (&acc)[4], float a, float4 b) {
  acc[0] = fmaf(a, b.x, acc[0]), acc[1] = fmaf(a, b.y, acc[1]), acc[2] = fmaf(a, b.z, acc[2]), acc[3] = fmaf(a, b.w, acc[3]);
}

// acc[i][4 m + j] += sum over t < K of a[(r0 + i) AP + t] b[t BP + c0 + 64 m + j]: a's rows four
// floats at a time (a warp's two row groups 4 rows apart: distinct banks), b's rows as float4.
template <int K, int AP, int BP, int M>
__device__ __forceinline__ void dots(float (&acc)[4][M][4], const float* a, const float* b, int r0, int c0) {
#pragma unroll 2
  for (int t = 0; t < K; t += 4) {
    float4 av[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) av[i] = ld4(a + (r0 + i) * AP + t);
#pragma unroll
    for (int u = 0; u < 4; ++u)
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const float4 bv = ld4(b + (t + u) * BP + c0 + 64 * m);
#pragma unroll
        for (int i = 0; i < 4; ++i) fma4(acc[i][m], lane_of(av[i], u), bv);
      }
  }
}

// The same with a transposed: acc[i][4 m + j] += sum over t < K of a[t AP + r0 + i] b[t BP + ...].
template <int K, int AP, int BP, int M>
__device__ __forceinline__ void dots_t(float (&acc)[4][M][4], const float* a, const float* b, int r0, int c0) {
#pragma unroll 4
  for (int t = 0; t < K; ++t) {
    const float4 av = ld4(a + t * AP + r0);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float4 bv = ld4(b + t * BP + c0 + 64 * m);
      fma4(acc[0][m], av.x, bv), fma4(acc[1][m], av.y, bv), fma4(acc[2][m], av.z, bv), fma4(acc[3][m], av.w, bv);
    }
  }
}

// acc[i][j] += sum over t < K of a[(r0 + i) AP + t] b[(c + 16 j) BP + t], both along t as float4:
// the thread's columns are c + 16 j, so a warp's 16 rows of b start 4 banks apart.
template <int K, int AP, int BP, int N>
__device__ __forceinline__ void dots_nt(float (&acc)[4][N], const float* a, const float* b, int r0, int c) {
#pragma unroll 2
  for (int t = 0; t < K; t += 4) {
    float4 av[4], bv[N];
#pragma unroll
    for (int i = 0; i < 4; ++i) av[i] = ld4(a + (r0 + i) * AP + t);
#pragma unroll
    for (int j = 0; j < N; ++j) bv[j] = ld4(b + (c + 16 * j) * BP + t);
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < N; ++j)
        acc[i][j] = fmaf(av[i].w, bv[j].w,
                         fmaf(av[i].z, bv[j].z, fmaf(av[i].y, bv[j].y, fmaf(av[i].x, bv[j].x, acc[i][j]))));
  }
}

// The row's lse in log2 units and delta of rows row0.. into shared memory (rows past L: 0).
__device__ __forceinline__ void load_rows_stats(float* lses, float* deltas, const float* lse, const float* delta,
                                                int row0, int L) {
  for (int r = threadIdx.x; r < B; r += NT) {
    const int row = row0 + r;
    lses[r] = row < L ? lse[row] * 1.4426950408889634f : 0.f;
    deltas[r] = row < L ? delta[row] : 0.f;
  }
}

// p and ds of the thread's 4 x 4 scores s (rows row0 + r0 + i, keys key0 + c0 + j) into ps / dss
// (pitch KP; ps only when given): scores of rows past L, keys past S, masked or above a causal
// diagonal give p = 0.
__device__ __forceinline__ void tile_grads(float* ps, float* dss, const float (&s)[4][1][4], const float (&dp)[4][1][4],
                                           const float* lses, const float* deltas, int r0, int c0, int row0,
                                           int key0, int L, int S, float scale_log2, int causal, const void* mask,
                                           int mask_kind, long long msr, long long msc) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = r0 + i, row = row0 + r;
    float p[4], ds[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int key = key0 + c0 + j;
      p[j] = 0.f;
      if (row < L && key < S && !(causal && key > row)) {
        const float m = mask_kind ? mask_term<T>(mask, mask_kind, msr, msc, row, key, L, S) : 0.f;
        p[j] = exp2f(fmaf(s[i][0][j], scale_log2, m) - lses[r]);
      }
      ds[j] = p[j] * (dp[i][0][j] - deltas[r]);
    }
    if (ps) *reinterpret_cast<float4*>(ps + r * KP + c0) = make_float4(p[0], p[1], p[2], p[3]);
    *reinterpret_cast<float4*>(dss + r * KP + c0) = make_float4(ds[0], ds[1], ds[2], ds[3]);
  }
}

// The thread's accumulators (rows row0 + r0 + i, columns c0 + 64 m + j of a {rows, W} head) times
// f into dst, rows before `end`, columns before W.
template <int W, int M>
__device__ __forceinline__ void store_tile(T* dst, const float (&acc)[4][M][4], int row0, int r0, int c0, int end,
                                           float f) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int row = row0 + r0 + i, col = c0 + 64 * m + j;
        if (row < end && col < W) dst[(long long)row * W + col] = T(acc[i][m][j] * f);
      }
}

struct KvTiles {  // attention_bwd_kv's shared memory (attention_bwd.cpp sizes it)
  float kt[EW * KP], vt[VW * KP], qs[B * QP], dos[B * OP], ps[B * KP], dss[B * KP], lses[B], deltas[B];
};
struct QTiles {  // attention_bwd_q's
  float qs[B * QP], dos[B * OP], kt[EW * KP], ks[B * QP], vt[VW * KP], dss[B * KP], lses[B], deltas[B];
};

// The key pass; with DQ (attention_bwd, float32 only) it also adds each tile's ds k * scale into dq
// (zeroed by the launcher) by atomics, FlashAttention-2's way, and the query pass is not run.
template <bool DQ>
__device__ __forceinline__ void key_pass(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                         const T* __restrict__ dout, const float* __restrict__ lse,
                                         const float* __restrict__ delta, T* __restrict__ dk, T* __restrict__ dv,
                                         float* __restrict__ dq, int L, int S, int heads, int key_blocks, float scale,
                                         int causal, const void* __restrict__ mask, int mask_kind, long long ms0,
                                         long long ms1, long long msr, long long msc) {
  cr::grid_wait();
  extern __shared__ __align__(16) unsigned char key_smem[];
  KvTiles& t = *reinterpret_cast<KvTiles*>(key_smem);
  const long long bh = blockIdx.x / key_blocks;
  const int key0 = int(blockIdx.x - bh * key_blocks) * B, r0 = 4 * (threadIdx.x >> 4), c0 = 4 * (threadIdx.x & 15);
  q += bh * L * E, dout += bh * L * EV, lse += bh * L, delta += bh * L;
  k += bh * S * E, v += bh * S * EV, dk += bh * S * E, dv += bh * S * EV;
  if constexpr (DQ) dq += bh * L * E;
  mask = mask_of<T>(mask, mask_kind, bh, heads, ms0, ms1);
  const float scale_log2 = scale * 1.4426950408889634f;
  load_tile<E, EW, KP, true>(t.kt, k, key0, S);
  load_tile<EV, VW, KP, true>(t.vt, v, key0, S);
  float ak[4][EW / 64][4] = {}, av[4][VW / 64][4] = {};
  for (int row0 = causal ? key0 : 0; row0 < L; row0 += B) {  // (causal: rows before key0 see none)
    __syncthreads();  // (the previous tile's products are done)
    load_tile<E, EW, QP, false>(t.qs, q, row0, L);
    load_tile<EV, VW, OP, false>(t.dos, dout, row0, L);
    load_rows_stats(t.lses, t.deltas, lse, delta, row0, L);
    __syncthreads();
    float s[4][1][4] = {}, dp[4][1][4] = {};
    dots<EW, QP, KP, 1>(s, t.qs, t.kt, r0, c0);
    dots<VW, OP, KP, 1>(dp, t.dos, t.vt, r0, c0);
    tile_grads(t.ps, t.dss, s, dp, t.lses, t.deltas, r0, c0, row0, key0, L, S, scale_log2, causal, mask, mask_kind,
               msr, msc);
    __syncthreads();
    dots_t<B, KP, OP, VW / 64>(av, t.ps, t.dos, r0, c0);   // dv += p^T dout
    dots_t<B, KP, QP, EW / 64>(ak, t.dss, t.qs, r0, c0);  // dk += ds^T q
    if constexpr (DQ) {
      float aq[4][EW / 16] = {};
      dots_nt<B, KP, KP, EW / 16>(aq, t.dss, t.kt, r0, threadIdx.x & 15);  // dq += ds k
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < EW / 16; ++j) {
          const int row = row0 + r0 + i, col = (threadIdx.x & 15) + 16 * j;
          if (row < L && col < E) atomicAdd(dq + (long long)row * E + col, aq[i][j] * scale);
        }
    }
  }
  store_tile<EV, VW / 64>(dv, av, key0, r0, c0, S, 1.f);
  store_tile<E, EW / 64>(dk, ak, key0, r0, c0, S, scale);
}

#define KEY_PASS_PARAMS                                                                                              \
  const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v, const T *__restrict__ dout,           \
      const float *__restrict__ lse, const float *__restrict__ delta, T *__restrict__ dk, T *__restrict__ dv, int L, \
      int S, int heads, int key_blocks, float scale, int causal, const void *__restrict__ mask, int mask_kind,     \
      long long ms0, long long ms1, long long msr, long long msc
extern "C" __global__ void __launch_bounds__(NT) attention_bwd_kv(KEY_PASS_PARAMS) {
  key_pass<false>(q, k, v, dout, lse, delta, dk, dv, nullptr, L, S, heads, key_blocks, scale, causal, mask, mask_kind,
                  ms0, ms1, msr, msc);
}
extern "C" __global__ void __launch_bounds__(NT) attention_bwd(KEY_PASS_PARAMS, float* __restrict__ dq) {
  key_pass<true>(q, k, v, dout, lse, delta, dk, dv, dq, L, S, heads, key_blocks, scale, causal, mask, mask_kind, ms0,
                 ms1, msr, msc);
}
#undef KEY_PASS_PARAMS

extern "C" __global__ void __launch_bounds__(NT) attention_bwd_q(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, T* __restrict__ dq, int L, int S, int heads,
    int row_blocks, float scale, int causal, const void* __restrict__ mask, int mask_kind, long long ms0,
    long long ms1, long long msr, long long msc) {
  cr::grid_wait();
  extern __shared__ __align__(16) unsigned char bwd_smem[];
  QTiles& t = *reinterpret_cast<QTiles*>(bwd_smem);
  const long long bh = blockIdx.x / row_blocks;
  const int row0 = int(blockIdx.x - bh * row_blocks) * B, r0 = 4 * (threadIdx.x >> 4), c0 = 4 * (threadIdx.x & 15);
  q += bh * L * E, dout += bh * L * EV, lse += bh * L, delta += bh * L, dq += bh * L * E;
  k += bh * S * E, v += bh * S * EV;
  mask = mask_of<T>(mask, mask_kind, bh, heads, ms0, ms1);
  const float scale_log2 = scale * 1.4426950408889634f;
  load_tile<E, EW, QP, false>(t.qs, q, row0, L);
  load_tile<EV, VW, OP, false>(t.dos, dout, row0, L);
  load_rows_stats(t.lses, t.deltas, lse, delta, row0, L);
  float aq[4][EW / 64][4] = {};
  const int last_key = causal ? min(S, row0 + B) : S;
  for (int key0 = 0; key0 < last_key; key0 += B) {
    __syncthreads();
    load_tile<E, EW, KP, true>(t.kt, k, key0, S);
    load_tile<E, EW, QP, false>(t.ks, k, key0, S);
    load_tile<EV, VW, KP, true>(t.vt, v, key0, S);
    __syncthreads();
    float s[4][1][4] = {}, dp[4][1][4] = {};
    dots<EW, QP, KP, 1>(s, t.qs, t.kt, r0, c0);
    dots<VW, OP, KP, 1>(dp, t.dos, t.vt, r0, c0);
    tile_grads(nullptr, t.dss, s, dp, t.lses, t.deltas, r0, c0, row0, key0, L, S, scale_log2, causal, mask,
               mask_kind, msr, msc);
    __syncthreads();
    dots<B, KP, QP, EW / 64>(aq, t.dss, t.ks, r0, c0);  // dq += ds k
  }
  store_tile<E, EW / 64>(dq, aq, row0, r0, c0, L, scale);
}
