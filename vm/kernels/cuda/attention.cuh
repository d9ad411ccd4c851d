// The float16 / bfloat16 attention kernel, compiled after the prelude, attention_common.cuh,
// attention_mma.cuh and the launcher's T, MMA_T, D, BN, WARPS and MIN_BLOCKS (attention.cpp
// attention_source).
//
// A block of WARPS warps takes 16 * WARPS query rows of one (batch, head); each warp owns 16 rows
// and keeps them in registers: q as mma A fragments, the output accumulators
// (float32), the running max m and sum l of each row. The block walks the keys in tiles of BN: k
// and v tiles are copied to shared memory with cp.async (two stages, the next tile in flight while
// this one computes; rows padded by 8 elements so ldmatrix's eight 16-byte rows hit distinct banks),
// then per warp
//   s = q k^T                 mma.m16n8k16, k fragments by ldmatrix
//   online softmax            max over the row (a tree over the thread's scores, then the 4
//                             lanes of a quad, which share a row), exp2 of the scores scaled
//                             into log2 units (one FFMA + one MUFU each, for maxima under 2^10),
//                             the row sums as trees, the accumulators rescaled by exp2(m - m')
//                             when a row's max grew
//   o += p v                  p's float32 C fragments repacked as 16-bit A fragments (the C
//                             layout of two n-tiles is the A layout of one k-step), v fragments
//                             by ldmatrix.trans
// and the last step divides by l. A mask (bool, or values added to the scaled scores) is read
// per score where it lies, broadcast by zero strides. Keys past S read as zeros and score -inf;
// causal rows stop at their diagonal (tiles wholly above every row of the block are never loaded; long
// causal blocks are scheduled first). The kernel was issue-bound (ncu: ALU the busiest pipe, 3
// warps per scheduler): hence the trees, ex2.approx and packed conversions (H35). Fragment layouts:
// PTX ISA, "Matrix fragments for mma.m16n8k16"; g = lane / 4 is a fragment's row, t = lane % 4
// its column pair.
#define ROWS (16 * WARPS)
// The fold of a thread's N scores of row half h (elements 2h, 2h + 1 of each n-tile) as a tree,
// not a chain of N dependent instructions.
struct RowMax { __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct RowSum { __device__ __forceinline__ float operator()(float a, float b) const { return a + b; } };
template <int LO, int N, class Op> __device__ __forceinline__ float tree(const float (*s)[4], int h, Op op) {
  if constexpr (N == 1) return s[LO / 2][2 * h + (LO & 1)];
  else return op(tree<LO, N / 2>(s, h, op), tree<LO + N / 2, N / 2>(s, h, op));
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS) attention_fwd(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out, int L, int S,
    int heads, int row_blocks, long long qs0, long long qs1, long long qsr, long long ks0, long long ks1, long long ksr,
    long long vs0, long long vs1, long long vsr, float scale_log2, int causal, const void* __restrict__ mask,
    int mask_kind, long long ms0, long long ms1, long long msr, long long msc, float* __restrict__ lse) {
  cr::grid_wait();
  extern __shared__ __align__(16) unsigned char tiles_smem[];  // two k tiles, then two v tiles
  const uint32_t stage_bytes = 2 * BN * PITCH, kb0 = smem_address(tiles_smem), vb0 = kb0 + 2 * stage_bytes;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const long long bh = blockIdx.x / row_blocks;
  const int rb = row_blocks - 1 - int(blockIdx.x - bh * row_blocks);  // (long causal blocks first)
  q = head_of(q, bh, heads, qs0, qs1), k = head_of(k, bh, heads, ks0, ks1), v = head_of(v, bh, heads, vs0, vs1);
  mask = mask_of<T>(mask, mask_kind, bh, heads, ms0, ms1);  // (mask_kind: 0 none, 1 q's dtype, 2 bool)
  // with a mask the scores are scaled (and the mask added) first: the rest multiplies by 1
  const float sc = mask_kind ? 1.f : scale_log2;
  const int block_row = rb * ROWS, row0 = block_row + 16 * warp;  // this warp's rows: row0 + 0..15

  uint32_t qa[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = row0 + g + 8 * (r & 1), col = 16 * kk + 2 * t + 8 * (r >> 1);
      qa[kk][r] = row < L ? *reinterpret_cast<const uint32_t*>(q + row * qsr + col) : 0u;
    }
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  const float ninf = -__int_as_float(0x7f800000);
  float m[2] = {ninf, ninf}, l[2] = {0.f, 0.f};

  const int last_key = causal ? min(S, block_row + ROWS) : S;
  const int tiles = (last_key + BN - 1) / BN;
  if (tiles > 0) load_rows<BN>(kb0, vb0, k, v, ksr, vsr, 0, S);
  for (int it = 0; it < tiles; ++it) {
    const int st = it & 1, key0 = it * BN;
    // the next tile's copy in flight while this one computes
    if (it + 1 < tiles) load_rows<BN>(kb0 + (st ^ 1) * stage_bytes, vb0 + (st ^ 1) * stage_bytes, k, v, ksr, vsr, key0 + BN, S);
    else asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_group 1;");
    __syncthreads();

    float s[BN / 8][4];
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
    const uint32_t kb = kb0 + st * stage_bytes, vb = vb0 + st * stage_bytes;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) mma_b<BN>(s, qa[kk], kb, kk, lane);

    if (mask_kind)
#pragma unroll
      for (int n = 0; n < BN / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + 8 * n + 2 * t + (e & 1), row = row0 + g + 8 * (e >> 1);
          s[n][e] = fmaf(s[n][e], scale_log2, mask_term<T>(mask, mask_kind, msr, msc, row, key, L, S));
        }
    if (key0 + BN > S || (causal && key0 + BN - 1 > row0))  // a tile at the end or the diagonal
#pragma unroll
      for (int n = 0; n < BN / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key0 + 8 * n + 2 * t + (e & 1), row = row0 + g + 8 * (e >> 1);
          if (key >= S || (causal && key > row)) s[n][e] = ninf;
        }
    float mx[2], alpha[2], base[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = tree<0, BN / 4>(s, h, RowMax());
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float mn = fmaxf(m[h], mx[h] * sc);  // (log2 units; scale > 0 keeps the order)
      base[h] = mn == ninf ? 0.f : mn;  // (no key seen yet: keep exp2 away from -inf - -inf)
      alpha[h] = ex2(m[h] - base[h]);
      m[h] = mn;
      l[h] *= alpha[h];
    }
    // FFMA: the exact product minus the rounded max, off by one factor per row (<= 2^(ulp / 2) of
    // the max) that the division by l cancels - while the max is under 2^10. Past it (bfloat16
    // scores of 1e30: 2^(1e22)) the product is rounded first, as the max was.
    if (__any_sync(0xffffffffu, fabsf(base[0]) >= 1024.f || fabsf(base[1]) >= 1024.f))
#pragma unroll
      for (int n = 0; n < BN / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] = ex2(__fmul_rn(s[n][e], sc) - base[e >> 1]);
    else
#pragma unroll
      for (int n = 0; n < BN / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] = ex2(fmaf(s[n][e], sc, -base[e >> 1]));
#pragma unroll
    for (int h = 0; h < 2; ++h) l[h] += tree<0, BN / 4>(s, h, RowSum());
    if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f))  // (once the maxima settle, rarely)
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][0] *= alpha[0];
        o[n][1] *= alpha[0];
        o[n][2] *= alpha[1];
        o[n][3] *= alpha[1];
      }

#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t pa[4];
      c_to_a(pa, s, kk);
      mma_bt<D>(o, pa, vb, 16 * kk, lane);
    }
    __syncthreads();  // (every warp is done with this stage before the next load overwrites it)
  }

  out += bh * (long long)L * D;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = l[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    // S = 0: zeros (the composite's empty product). Otherwise a zero sum means a row that sees
    // no key (scores of -inf from the values or the mask; causal rows see key 0): NaN (0 * inf),
    // as softmax.
    const float inv = S == 0 ? 0.f : 1.f / sum;
    const int row = row0 + g + 8 * h;
    if (row >= L) continue;
    if (lse && t == 0) lse[bh * L + row] = row_lse(m[h], sum);
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<uint32_t*>(out + (long long)row * D + 8 * n + 2 * t) = pack(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
  }
}
