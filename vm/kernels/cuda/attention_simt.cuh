// The float32 attention kernel, compiled after the prelude, attention_common.cuh and the launcher's
// E, EV, RA, BN, G, PK, PP and MIN_BLOCKS (attention_simt.cpp attention_simt_source).
//
// float32 flash attention on the FMA pipes (the tensor cores would round float32 to tf32, which a
// float32 product in PyTorch does not do). A block of 256 threads takes BM = 16 * RA query rows of
// one (batch, head) and walks the keys in tiles of BN. Thread (ty, tx) = (tid / 16, tid % 16) owns
// rows ty + 16a (a < RA) and keys tx + 16b (b < RB) of a score tile, and output columns
// 16G * n + G * tx + c (n < NG, c < G: G contiguous columns, NG groups). Per tile:
//   s = q k^T         float4 reads of q and k rows from shared memory: a warp reads 16 distinct k
//                     rows (pitch PK = 4 * odd: the 16-byte reads of 8 lanes cover the 32 banks)
//                     and two q rows (broadcast), RA * RB FMAs per pair of reads
//   online softmax    max over a row's 16 lanes (one half warp: shuffles), exp2 in log2 units,
//                     the running max m / sum l per row, the accumulators rescaled when m grows
//   o += p v          p goes through shared memory transposed (ps[key][RA * ty + a], written
//                     and read by one warp), then per key one float4 of p and NG reads of v.
// q, k and v are copied by cp.async; k of the next tile is in flight during the softmax and p v,
// v of the next tile during the next s. Keys past S read as zeros and score -inf; causal rows stop
// at their diagonal.
#define BM (16 * RA)
#define RB (BN / 16)
#define NG (EV / 16 / G)
template <int N> struct Vec;
template <> struct Vec<4> { typedef float4 type; };
template <> struct Vec<2> { typedef float2 type; };
template <> struct Vec<1> { typedef float type; };

// Copies rows [row0, row0 + ROWS) of `src` (W floats each, pitch `stride`) to shared memory of
// pitch P; rows at or past `end` are zero-filled. One cp.async group.
template <int ROWS, int W, int P>
__device__ __forceinline__ void load_rows(float* dst, const float* src, long long stride, int row0, int end) {
  constexpr int kChunks = ROWS * (W / 4);
  const uint32_t base = smem_address(dst);
#pragma unroll
  for (int j = 0; j < (kChunks + 255) / 256; ++j) {
    const int c = threadIdx.x + 256 * j;
    if (kChunks % 256 != 0 && c >= kChunks) break;
    const int r = c / (W / 4), col = 4 * (c % (W / 4)), row = row0 + r;
    const long long at = row < end ? row * stride + col : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(base + 4 * (r * P + col)), "l"(src + at),
                 "r"(row < end ? 16 : 0));
  }
  asm volatile("cp.async.commit_group;");
}

extern "C" __global__ void __launch_bounds__(256, MIN_BLOCKS) attention_simt(
    const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v, float* __restrict__ out, int L,
    int S, int heads, int row_blocks, long long qs0, long long qs1, long long qsr, long long ks0, long long ks1,
    long long ksr, long long vs0, long long vs1, long long vsr, float scale_log2, int causal,
    const void* __restrict__ mask, int mask_kind, long long ms0, long long ms1, long long msr, long long msc,
    float* __restrict__ lse) {
  cr::grid_wait();
  extern __shared__ __align__(16) float smem[];
  float* qs = smem;            // BM x PK
  float* ks = qs + BM * PK;    // BN x PK
  float* vs = ks + BN * PK;    // BN x EV
  float* ps = vs + BN * EV;    // BN x PP: ps[key][RA * ty + a] = p of row ty + 16a
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const long long bh = blockIdx.x / row_blocks;
  const int rb = row_blocks - 1 - int(blockIdx.x - bh * row_blocks);  // (long causal blocks first)
  q = head_of(q, bh, heads, qs0, qs1), k = head_of(k, bh, heads, ks0, ks1), v = head_of(v, bh, heads, vs0, vs1);
  mask = mask_of<float>(mask, mask_kind, bh, heads, ms0, ms1);  // (mask_kind: 0 none, 1 float, 2 bool)
  // with a mask the scores are scaled (and the mask added) first: the rest multiplies by 1
  const float sc = mask_kind ? 1.f : scale_log2;
  const int block_row = rb * BM;
  const int last_key = causal ? min(S, block_row + BM) : S;
  const int tiles = (last_key + BN - 1) / BN;

  load_rows<BM, E, PK>(qs, q, qsr, block_row, L);
  if (tiles > 0) {
    load_rows<BN, E, PK>(ks, k, ksr, 0, S);
    load_rows<BN, EV, EV>(vs, v, vsr, 0, S);
  }
  const float ninf = -__int_as_float(0x7f800000);
  float o[RA][NG * G], m[RA], l[RA];
#pragma unroll
  for (int a = 0; a < RA; ++a) {
    m[a] = ninf;
    l[a] = 0.f;
#pragma unroll
    for (int c = 0; c < NG * G; ++c) o[a][c] = 0.f;
  }

  for (int it = 0; it < tiles; ++it) {
    const int key0 = it * BN;
    asm volatile("cp.async.wait_group 1;");  // q and this tile's k (its v may be in flight)
    __syncthreads();
    float s[RA][RB];
#pragma unroll
    for (int a = 0; a < RA; ++a)
#pragma unroll
      for (int b = 0; b < RB; ++b) s[a][b] = 0.f;
#pragma unroll 4
    for (int e = 0; e < E; e += 4) {
      float4 kf[RB];
#pragma unroll
      for (int b = 0; b < RB; ++b) kf[b] = *reinterpret_cast<const float4*>(ks + (tx + 16 * b) * PK + e);
#pragma unroll
      for (int a = 0; a < RA; ++a) {
        const float4 qf = *reinterpret_cast<const float4*>(qs + (ty + 16 * a) * PK + e);
#pragma unroll
        for (int b = 0; b < RB; ++b)
          s[a][b] = fmaf(qf.w, kf[b].w, fmaf(qf.z, kf[b].z, fmaf(qf.y, kf[b].y, fmaf(qf.x, kf[b].x, s[a][b]))));
      }
    }
    __syncthreads();  // (every warp is done with k before the next tile's copy overwrites it)
    if (it + 1 < tiles) load_rows<BN, E, PK>(ks, k, ksr, key0 + BN, S);
    else asm volatile("cp.async.commit_group;");  // (an empty group keeps the count)

    if (mask_kind)
#pragma unroll
      for (int a = 0; a < RA; ++a)
#pragma unroll
        for (int b = 0; b < RB; ++b) {
          const int key = key0 + tx + 16 * b, row = block_row + ty + 16 * a;
          s[a][b] = fmaf(s[a][b], scale_log2, mask_term<float>(mask, mask_kind, msr, msc, row, key, L, S));
        }
    if (key0 + BN > S || (causal && key0 + BN - 1 > block_row))  // a tile at the end or the diagonal
#pragma unroll
      for (int a = 0; a < RA; ++a)
#pragma unroll
        for (int b = 0; b < RB; ++b) {
          const int key = key0 + tx + 16 * b, row = block_row + ty + 16 * a;
          if (key >= S || (causal && key > row)) s[a][b] = ninf;
        }
    float alpha[RA], base[RA];
    bool big = false;
#pragma unroll
    for (int a = 0; a < RA; ++a) {
      float mx = s[a][0];
#pragma unroll
      for (int b = 1; b < RB; ++b) mx = fmaxf(mx, s[a][b]);
#pragma unroll
      for (int x = 1; x < 16; x *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, x));
      const float mn = fmaxf(m[a], mx * sc);  // (log2 units; scale > 0 keeps the order)
      base[a] = mn == ninf ? 0.f : mn;                // (no key seen yet: keep exp2 away from -inf - -inf)
      alpha[a] = ex2(m[a] - base[a]);
      m[a] = mn;
      l[a] *= alpha[a];
      big |= fabsf(base[a]) >= 1024.f;
    }
    // FFMA: the exact product minus the rounded max is off by one factor per row, which the
    // division by l cancels, while the max is under 2^10; past it the product is rounded first.
    if (__any_sync(0xffffffffu, big))
#pragma unroll
      for (int a = 0; a < RA; ++a)
#pragma unroll
        for (int b = 0; b < RB; ++b) s[a][b] = ex2(__fmul_rn(s[a][b], sc) - base[a]);
    else
#pragma unroll
      for (int a = 0; a < RA; ++a)
#pragma unroll
        for (int b = 0; b < RB; ++b) s[a][b] = ex2(fmaf(s[a][b], sc, -base[a]));
#pragma unroll
    for (int a = 0; a < RA; ++a) {
#pragma unroll
      for (int b = 0; b < RB; ++b) l[a] += s[a][b];
      if (alpha[a] != 1.f)
#pragma unroll
        for (int c = 0; c < NG * G; ++c) o[a][c] *= alpha[a];
    }
#pragma unroll
    for (int b = 0; b < RB; ++b)
#pragma unroll
      for (int a = 0; a < RA; a += 4)
        *reinterpret_cast<float4*>(ps + (tx + 16 * b) * PP + RA * ty + a) = make_float4(s[a][b], s[a + 1][b], s[a + 2][b], s[a + 3][b]);

    asm volatile("cp.async.wait_group 1;");  // this tile's v (the next k may be in flight)
    __syncthreads();
#pragma unroll 4
    for (int j = 0; j < BN; ++j) {
      float p[RA];
#pragma unroll
      for (int a = 0; a < RA; a += 4) {
        const float4 pf = *reinterpret_cast<const float4*>(ps + j * PP + RA * ty + a);
        p[a] = pf.x, p[a + 1] = pf.y, p[a + 2] = pf.z, p[a + 3] = pf.w;
      }
#pragma unroll
      for (int n = 0; n < NG; ++n) {
        const typename Vec<G>::type vf = *reinterpret_cast<const typename Vec<G>::type*>(vs + j * EV + 16 * G * n + G * tx);
#pragma unroll
        for (int c = 0; c < G; ++c)
#pragma unroll
          for (int a = 0; a < RA; ++a) o[a][G * n + c] = fmaf(p[a], lane_of(vf, c), o[a][G * n + c]);
      }
    }
    __syncthreads();  // (every warp is done with v and p)
    if (it + 1 < tiles) load_rows<BN, EV, EV>(vs, v, vsr, key0 + BN, S);
    else asm volatile("cp.async.commit_group;");
  }
  asm volatile("cp.async.wait_group 0;");

  out += bh * (long long)L * EV;
#pragma unroll
  for (int a = 0; a < RA; ++a) {
    float sum = l[a];
#pragma unroll
    for (int x = 1; x < 16; x *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, x);
    // S = 0: zeros (the composite's empty product). Otherwise every row sees a key, so a zero sum
    // means scores of -inf from the values: NaN (0 * inf), as softmax.
    const float inv = S == 0 ? 0.f : 1.f / sum;
    const int row = block_row + ty + 16 * a;
    if (row >= L) continue;
    if (lse && tx == 0) lse[bh * L + row] = row_lse(m[a], sum);
#pragma unroll
    for (int n = 0; n < NG; ++n) {
      typename Vec<G>::type r;
      float* rf = reinterpret_cast<float*>(&r);
#pragma unroll
      for (int c = 0; c < G; ++c) rf[c] = o[a][G * n + c] * inv;
      *reinterpret_cast<typename Vec<G>::type*>(out + (long long)row * EV + 16 * G * n + G * tx) = r;
    }
  }
}
