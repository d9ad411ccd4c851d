// attention's backward on tensor cores for float16 / bfloat16 with equal head sizes D (64, 128):
// attention_bwd.cuh's two passes with mma.m16n8k16 products (float32 accumulators), compiled after
// attention_common.cuh, attention_mma.cuh, attention_bwd_dot.cuh and the launcher's BR (query rows
// a tile of the key pass), BN (keys a tile of the query pass) and MIN_BLOCKS.
//
//   attention_bwd_kv_tc  a block of WARPS warps per 16 * WARPS keys, k and v tiles in shared
//                        memory, each warp owning 16 keys; it walks the query rows in tiles of BR
//                        (q, dout and the rows' lse / delta by cp.async, two stages) and computes
//                        the transposed products, whose results are the A operands of the next ones:
//                          s^T = k q^T, dp^T = v dout^T       (B fragments: q, dout rows, ldmatrix)
//                          p^T = exp(s^T scale + mask - lse), ds^T = p^T (dp^T - delta)
//                          dv += p^T dout, dk += ds^T q       (B: q, dout rows, ldmatrix.trans)
//   attention_bwd_tc     the same pass that also makes dq, FlashAttention-2's way: the block's ds^T
//                        tile goes through shared memory, each warp multiplies 16 of its rows by
//                        the block's k (dq_part = ds k) and adds them to a float32 dq by atomics
//                        (their order varies: not under T.use_deterministic_algorithms); BR == ROWS
//   attention_bwd_q_tc   a block per 16 * WARPS query rows, each warp 16 rows with q and dout
//                        as A fragments in registers, k / v tiles of BN keys (two stages):
//                          s = q k^T, dp = dout v^T, ds = p (dp - delta), dq += ds k
// p and ds are rounded to T for the second products, as FlashAttention-2's. Arguments as the FMA
// kernels' (q, k, v, dout contiguous {bh, rows, D}).
#define ROWS (16 * WARPS)

// The p and ds of the 16 x N C fragments s / dp (rows r0 + g (+ 8), cols c0 + 8n + 2t (+ 1); query
// rows along the rows and keys along the cols, or the other way round where KEY_ROWS) in place:
// p = exp2(s scale_log2 + mask - lse log2 e), ds = p (dp - delta), query row i's lse and delta
// at lse[i - base], delta[i - base]. Rows past L, keys past S and keys above a causal diagonal
// give 0 where `edge` (the tile reaches them).
template <int N, bool KEY_ROWS>
__device__ __forceinline__ void p_ds(float (*s)[4], float (*dp)[4], int r0, int c0, const float* lse,
                                     const float* delta, int base, bool edge, int L, int S, float scale_log2,
                                     int causal, const void* mask, int mask_kind, long long msr, long long msc) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int n = 0; n < N / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = r0 + g + 8 * (e >> 1), j = c0 + 8 * n + 2 * t + (e & 1);
      const int row = KEY_ROWS ? j : i, key = KEY_ROWS ? i : j;
      const bool in = row < L;
      const float m = mask_kind ? mask_term<T>(mask, mask_kind, msr, msc, row, key, L, S) : 0.f;
      float p = ex2(fmaf(s[n][e], scale_log2, m) - (in ? lse[row - base] * 1.4426950408889634f : 0.f));
      if (edge && (!in || key >= S || (causal && key > row))) p = 0.f;
      s[n][e] = p;
      dp[n][e] = p * (dp[n][e] - (in ? delta[row - base] : 0.f));
    }
}

// Rows row0 + g, row0 + g + 8 of the C fragments c (D / 8 n-tiles) times f into dst {rows, D}, rows before `end`.
__device__ __forceinline__ void store_rows(T* dst, const float (*c)[4], int row0, int end, float f) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + g + 8 * h;
    if (row >= end) continue;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<uint32_t*>(dst + (long long)row * D + 8 * n + 2 * t) = pack(c[n][2 * h] * f, c[n][2 * h + 1] * f);
  }
}

// The shared address of tile `it` of N rows of two operands a, b ({rows, D}; tiles `first` + N it..,
// rows at or past `end` zero) in stage it % 2 of {a, b} tiles at stage0, once every thread's copy
// of it landed; the copy of tile it + 1 into the other stage starts first.
template <int N> __device__ __forceinline__ uint32_t stage_ready(uint32_t stage0, int it, int tiles, const T* a,
                                                                 const T* b, int first, int end) {
  constexpr uint32_t stage_bytes = 2 * 2 * N * PITCH;
  if (it + 1 < tiles) {
    const uint32_t next = stage0 + ((it + 1) & 1) * stage_bytes;
    load_rows<N>(next, next + 2 * N * PITCH, a, b, D, D, first + (it + 1) * N, end);
  } else {
    asm volatile("cp.async.commit_group;");
  }
  asm volatile("cp.async.wait_group 1;");
  __syncthreads();
  return stage0 + (it & 1) * stage_bytes;
}

// Copies the lse and delta of query rows row0 .. row0 + BR (rows at or past L: 0) to shared
// address dst (lse, then delta) by cp.async, joining the group the next commit closes.
__device__ __forceinline__ void load_stats(uint32_t dst, const float* lse, const float* delta, int row0, int L) {
  for (int i = threadIdx.x; i < 2 * BR; i += 32 * WARPS) {
    const int row = row0 + i % BR;
    const float* src = (i < BR ? lse : delta) + (row < L ? row : 0);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst + 4 * i), "l"(src), "r"(row < L ? 4 : 0));
  }
}

// The A fragment of rows m0 + 0..15, cols k0 + 0..15 of the transpose of a [row][PITCH] tile
// (ldsm4t: the tile's rows k0.. are the fragment's k).
__device__ __forceinline__ int at_at(int k0, int m0, int lane) {
  return (k0 + (lane & 7) + 8 * (lane >> 4)) * PITCH + m0 + 8 * ((lane >> 3) & 1);
}

// dst[0], dst[1] += a, b (one 8-byte reduction on sm_90)
__device__ __forceinline__ void red2(float* dst, float a, float b) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(dst), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(dst, a), atomicAdd(dst + 1, b);
#endif
}

// The key pass; DQ: also dq (into dq_acc, float32, unscaled; shared memory holds the ds^T tile
// after the stages).
template <bool DQ>
__device__ __forceinline__ void kv_pass(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                        const T* __restrict__ dout, const float* __restrict__ lse,
                                        const float* __restrict__ delta, T* __restrict__ dk, T* __restrict__ dv, int L,
                                        int S, int heads, int key_blocks, float scale, int causal,
                                        const void* __restrict__ mask, int mask_kind, long long ms0, long long ms1,
                                        long long msr, long long msc, float* __restrict__ dq_acc) {
  // k, v, two stages of {q, dout}, then two stages of {lse, delta} (float)
  extern __shared__ __align__(16) unsigned char kv_smem[];
  const uint32_t ks = smem_address(kv_smem), vs = ks + 2 * ROWS * PITCH, stage0 = vs + 2 * ROWS * PITCH;
  float* const stats = reinterpret_cast<float*>(kv_smem + 4 * ROWS * PITCH + 8 * BR * PITCH);
  const uint32_t stats0 = smem_address(stats);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const long long bh = blockIdx.x / key_blocks;
  const int key0 = int(blockIdx.x - bh * key_blocks) * ROWS, wkey = key0 + 16 * warp;  // (long causal blocks first)
  q += bh * L * D, dout += bh * L * D, lse += bh * L, delta += bh * L;
  k += bh * S * D, v += bh * S * D, dk += bh * S * D, dv += bh * S * D;
  if (DQ) dq_acc += bh * L * D;
  const uint32_t dss = stats0 + 16 * BR;  // (DQ: the ds^T tile, [key][PITCH])
  mask = mask_of<T>(mask, mask_kind, bh, heads, ms0, ms1);
  const float scale_log2 = scale * 1.4426950408889634f;

  load_rows<ROWS>(ks, vs, k, v, D, D, key0, S);
  const int first = causal ? key0 / BR * BR : 0;  // (causal: rows before key0 see none of these keys)
  const int tiles = first < L ? (L - first + BR - 1) / BR : 0;
  if (tiles > 0) {
    load_stats(stats0, lse, delta, first, L);
    load_rows<BR>(stage0, stage0 + 2 * BR * PITCH, q, dout, D, D, first, L);
  }
  float dka[D / 8][4] = {}, dva[D / 8][4] = {};
  for (int it = 0; it < tiles; ++it) {
    const int row0 = first + it * BR;
    if (it + 1 < tiles) load_stats(stats0 + ((it + 1) & 1) * 8 * BR, lse, delta, row0 + BR, L);
    const uint32_t qs = stage_ready<BR>(stage0, it, tiles, q, dout, first, L), dos = qs + 2 * BR * PITCH;
    const float* const lses = stats + (it & 1) * 2 * BR;

    float st[BR / 8][4] = {}, dpt[BR / 8][4] = {};  // s^T, dp^T: rows wkey + g (+ 8), cols row0 + 8n + 2t (+ 1)
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      ldsm4(a, ks + 2 * a_at(16 * warp, 16 * kk, lane));
      mma_b<BR>(st, a, qs, kk, lane);
      ldsm4(a, vs + 2 * a_at(16 * warp, 16 * kk, lane));
      mma_b<BR>(dpt, a, dos, kk, lane);
    }
    const bool edge = row0 + BR > L || wkey + 16 > S || (causal && wkey + 15 > row0);
    p_ds<BR, true>(st, dpt, wkey, row0, lses, lses + BR, row0, edge, L, S, scale_log2, causal, mask, mask_kind, msr,
                   msc);
#pragma unroll
    for (int kk = 0; kk < BR / 16; ++kk) {
      uint32_t a[4];
      c_to_a(a, st, kk);
      mma_bt<D>(dva, a, dos, 16 * kk, lane);
      c_to_a(a, dpt, kk);
      mma_bt<D>(dka, a, qs, 16 * kk, lane);
    }
    if (DQ) {
      const int g = lane >> 2, t = lane & 3;
#pragma unroll
      for (int n = 0; n < BR / 8; ++n)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t at = dss + 2 * ((16 * warp + g + 8 * h) * PITCH + 8 * n + 2 * t);
          asm volatile("st.shared.b32 [%0], %1;" ::"r"(at), "r"(pack(dpt[n][2 * h], dpt[n][2 * h + 1])));
        }
      __syncthreads();
      float dqa[D / 8][4] = {};  // rows row0 + 16 warp + g (+ 8), cols 8n + 2t (+ 1)
#pragma unroll
      for (int kk = 0; kk < ROWS / 16; ++kk) {
        uint32_t a[4];
        ldsm4t(a, dss + 2 * at_at(16 * kk, 16 * warp, lane));
        mma_bt<D>(dqa, a, ks, 16 * kk, lane);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + 16 * warp + g + 8 * h;
        if (row >= L) continue;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) red2(dq_acc + (long long)row * D + 8 * n + 2 * t, dqa[n][2 * h], dqa[n][2 * h + 1]);
      }
    }
    __syncthreads();  // (every warp is done with this stage before the next load overwrites it)
  }
  asm volatile("cp.async.wait_group 0;");  // (no tile: k and v still in flight)
  store_rows(dv, dva, wkey, S, 1.f);
  store_rows(dk, dka, wkey, S, scale);
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS) attention_bwd_kv_tc(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, T* __restrict__ dk, T* __restrict__ dv, int L,
    int S, int heads, int key_blocks, float scale, int causal, const void* __restrict__ mask, int mask_kind,
    long long ms0, long long ms1, long long msr, long long msc) {
  cr::grid_wait();
  kv_pass<false>(q, k, v, dout, lse, delta, dk, dv, L, S, heads, key_blocks, scale, causal, mask, mask_kind, ms0, ms1,
                 msr, msc, nullptr);
}

#if BR == ROWS
extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS) attention_bwd_tc(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, T* __restrict__ dk, T* __restrict__ dv, int L,
    int S, int heads, int key_blocks, float scale, int causal, const void* __restrict__ mask, int mask_kind,
    long long ms0, long long ms1, long long msr, long long msc, float* __restrict__ dq_acc) {
  cr::grid_wait();
  kv_pass<true>(q, k, v, dout, lse, delta, dk, dv, L, S, heads, key_blocks, scale, causal, mask, mask_kind, ms0, ms1,
                msr, msc, dq_acc);
}
#endif

// dq = T(acc * scale), n elements (a multiple of 4, 16-byte aligned)
extern "C" __global__ void __launch_bounds__(256) attention_bwd_dq_cast(const float4* __restrict__ acc, T* __restrict__ dq,
                                                                      long long n4, float scale) {
  cr::grid_wait();
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < n4; i += 256ll * gridDim.x) {
    const float4 a = acc[i];
    uint2 w;
    w.x = pack(a.x * scale, a.y * scale), w.y = pack(a.z * scale, a.w * scale);
    reinterpret_cast<uint2*>(dq)[i] = w;
  }
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS) attention_bwd_q_tc(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ dout,
    const float* __restrict__ lse, const float* __restrict__ delta, T* __restrict__ dq, int L, int S, int heads,
    int row_blocks, float scale, int causal, const void* __restrict__ mask, int mask_kind, long long ms0,
    long long ms1, long long msr, long long msc) {
  cr::grid_wait();
  extern __shared__ __align__(16) unsigned char q_smem[];  // two stages of {k, v}
  const uint32_t stage0 = smem_address(q_smem);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const long long bh = blockIdx.x / row_blocks;
  const int rb = row_blocks - 1 - int(blockIdx.x - bh * row_blocks);  // (long causal blocks first)
  const int block_row = rb * ROWS, row0 = block_row + 16 * warp;     // this warp's rows: row0 + 0..15
  q += bh * L * D, dout += bh * L * D, lse += bh * L, delta += bh * L, dq += bh * L * D;
  k += bh * S * D, v += bh * S * D;
  mask = mask_of<T>(mask, mask_kind, bh, heads, ms0, ms1);
  const float scale_log2 = scale * 1.4426950408889634f;

  const int last_key = causal ? min(S, block_row + ROWS) : S;
  const int tiles = (last_key + BN - 1) / BN;
  if (tiles > 0) load_rows<BN>(stage0, stage0 + 2 * BN * PITCH, k, v, D, D, 0, S);
  uint32_t qa[D / 16][4], da[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = row0 + g + 8 * (r & 1), col = 16 * kk + 2 * t + 8 * (r >> 1);
      qa[kk][r] = row < L ? *reinterpret_cast<const uint32_t*>(q + (long long)row * D + col) : 0u;
      da[kk][r] = row < L ? *reinterpret_cast<const uint32_t*>(dout + (long long)row * D + col) : 0u;
    }
  float dqa[D / 8][4] = {};
  for (int it = 0; it < tiles; ++it) {
    const int key0 = it * BN;
    const uint32_t ks = stage_ready<BN>(stage0, it, tiles, k, v, 0, S), vs = ks + 2 * BN * PITCH;

    float s[BN / 8][4] = {}, dp[BN / 8][4] = {};  // rows row0 + g (+ 8), keys key0 + 8n + 2t (+ 1)
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      mma_b<BN>(s, qa[kk], ks, kk, lane);
      mma_b<BN>(dp, da[kk], vs, kk, lane);
    }
    const bool edge = row0 + 16 > L || key0 + BN > S || (causal && key0 + BN - 1 > row0);
    p_ds<BN, false>(s, dp, row0, key0, lse, delta, 0, edge, L, S, scale_log2, causal, mask, mask_kind, msr, msc);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[4];
      c_to_a(a, dp, kk);
      mma_bt<D>(dqa, a, ks, 16 * kk, lane);
    }
    __syncthreads();
  }
  store_rows(dq, dqa, row0, L, scale);
}
