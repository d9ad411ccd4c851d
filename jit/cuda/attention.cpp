#include "jit/cuda/attention.hpp"

#include <cmath>

#include "jit/cuda/attention_simt.hpp"
#include "jit/cuda/exprs.hpp"
#include "jit/cuda/library.hpp"
#include "jit/cuda/prelude.hpp"
#include "jit/cuda/program.hpp"
#include "vm/kernels/loop.hpp"

namespace cr::jit::cuda {
namespace {

// Device code both attention kernels share.
constexpr const char* kAttentionCommon = R"CUDA(
__device__ __forceinline__ uint32_t smem_address(const void* p) {
  uint32_t a;
  asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
// 2^x with one MUFU instruction (exp2f adds a denormal path: the kernels were issue-bound on it);
// results below 2^-126 flush to 0, under a float32 weight's resolution next to the row's 1.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// p moved to (batch, head) bh: batch dims folded into two strided ones {bh / heads, bh % heads}.
template <class P> __device__ __forceinline__ const P* head_of(const P* p, long long bh, int heads, long long s0, long long s1) {
  const long long b0 = bh / heads;
  return p + b0 * s0 + (bh - b0 * heads) * s1;
}
)CUDA";

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
// and the last step divides by l. Keys past S read as zeros and score -inf; causal
// rows stop at their diagonal (tiles wholly above every row of the block are never loaded; long
// causal blocks are scheduled first). The kernel was issue-bound (ncu: ALU the busiest pipe, 3
// warps per scheduler): the trees, ex2.approx and packed conversions took 260 -> 215 us. Fragment layouts:
// PTX ISA, "Matrix fragments for mma.m16n8k16"; g = lane / 4 is a fragment's row, t = lane % 4
// its column pair.
constexpr const char* kAttentionText = R"CUDA(
#define ROWS (16 * WARPS)
#if WGMMA
#define PITCH D
#define STAGES 3
#else
#define PITCH (D + 8)
#define STAGES 2
#endif
__device__ __forceinline__ void copy16(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void ldsm4(uint32_t r[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void ldsm4t(uint32_t r[4], uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}
__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." MMA_T "." MMA_T ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t pack(float lo, float hi) {  // two floats as a 16-bit pair, lo first
  uint32_t r;
  asm("cvt.rn." MMA_T "x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// The fold of a thread's N scores of row half h (elements 2h, 2h + 1 of each n-tile) as a tree,
// not a chain of N dependent instructions.
struct RowMax { __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); } };
struct RowSum { __device__ __forceinline__ float operator()(float a, float b) const { return a + b; } };
template <int LO, int N, class Op> __device__ __forceinline__ float tree(const float (*s)[4], int h, Op op) {
  if constexpr (N == 1) return s[LO / 2][2 * h + (LO & 1)];
  else return op(tree<LO, N / 2>(s, h, op), tree<LO + N / 2, N / 2>(s, h, op));
}

// Copies key / value rows [key0, key0 + BN) into one stage; rows past S are zero-filled. For
// ldmatrix: rows of D elements padded by 8. For wgmma: 8 x 8 core matrices (eight 16-byte rows,
// 128 contiguous bytes; PTX ISA, "Shared memory matrix layout"), k's K-major (the core matrices
// of 8 keys side by side along the head dim, then the next 8 keys: chunk c lands at 16c) and v's
// MN-major (the core matrices of 16 bytes of 8 keys down the keys, then the next 8 head dims).
__device__ __forceinline__ void load_tile(uint32_t ks, uint32_t vs, const T* k, const T* v, long long ksr, long long vsr,
                                          int key0, int S) {
  constexpr int kChunks = BN * (D / 8), kThreads = 32 * WARPS;
#pragma unroll
  for (int j = 0; j < (kChunks + kThreads - 1) / kThreads; ++j) {
    const int c = threadIdx.x + j * kThreads;
    if (kChunks % kThreads != 0 && c >= kChunks) break;
#if WGMMA
    const int r = (c / D) * 8 + (c & 7), col = ((c >> 3) % (D / 8)) * 8;  // (8 lanes: one core matrix)
    const uint32_t kat = 16 * c, vat = 16 * ((col / 8) * BN + r);
#else
    const int r = c / (D / 8), col = (c % (D / 8)) * 8;
    const uint32_t kat = 2 * (r * PITCH + col), vat = kat;
#endif
    const int key = key0 + r, bytes = key < S ? 16 : 0;
    const long long row = key < S ? key : 0;
    copy16(ks + kat, k + row * ksr + col, bytes);
    copy16(vs + vat, v + row * vsr + col, bytes);
  }
  asm volatile("cp.async.commit_group;");
}

// The masks of a tile at the end of the keys or on the causal diagonal, then flash attention's
// online softmax: s becomes exp2(s * scale_log2 - m) with m the running max of the row (log2
// units), l the running sum; alpha = exp2(m_old - m_new) is the factor of the accumulators.
__device__ __forceinline__ void softmax_tile(float (*s)[4], float m[2], float l[2], float alpha[2], int key0, int S,
                                             int row0, int causal, float scale_log2) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const float ninf = -__int_as_float(0x7f800000);
  if (key0 + BN > S || (causal && key0 + BN - 1 > row0))
#pragma unroll
    for (int n = 0; n < BN / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + 8 * n + 2 * t + (e & 1), row = row0 + g + 8 * (e >> 1);
        if (key >= S || (causal && key > row)) s[n][e] = ninf;
      }
  float base[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = tree<0, BN / 4>(s, h, RowMax());
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mn = fmaxf(m[h], mx * scale_log2);  // (log2 units; scale > 0 keeps the order)
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
      for (int e = 0; e < 4; ++e) s[n][e] = ex2(__fmul_rn(s[n][e], scale_log2) - base[e >> 1]);
  else
#pragma unroll
    for (int n = 0; n < BN / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = ex2(fmaf(s[n][e], scale_log2, -base[e >> 1]));
#pragma unroll
  for (int h = 0; h < 2; ++h) l[h] += tree<0, BN / 4>(s, h, RowSum());
}

__device__ __forceinline__ void rescale(float (*o)[4], const float alpha[2]) {
  if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f))  // (once the maxima settle, rarely)
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[n][0] *= alpha[0];
      o[n][1] *= alpha[0];
      o[n][2] *= alpha[1];
      o[n][3] *= alpha[1];
    }
}

// p's float32 C fragments as 16-bit A fragments (the C layout of two n-tiles is the A layout of
// one k-step of 16 keys).
__device__ __forceinline__ void pack_p(uint32_t pa[4], const float (*s)[4], int kk) {
  pa[0] = pack(s[2 * kk][0], s[2 * kk][1]), pa[1] = pack(s[2 * kk][2], s[2 * kk][3]);
  pa[2] = pack(s[2 * kk + 1][0], s[2 * kk + 1][1]), pa[3] = pack(s[2 * kk + 1][2], s[2 * kk + 1][3]);
}

#if WGMMA
// s = q k^T for the warpgroup's 64 rows x BN keys, one wgmma per 16 head dims (k's core
// matrices: 128 bytes apart along the head dim, 16 * D bytes along the keys); issued, not waited.
__device__ __forceinline__ void issue_scores(float (*s)[4], uint32_t qb, uint32_t kb) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    wgmma_s(&s[0][0], descriptor(qb + 256 * kk, 128, 16 * D), descriptor(kb + 256 * kk, 128, 16 * D), kk > 0);
  asm volatile("wgmma.commit_group.sync.aligned;");
}
// o += p v, one wgmma per 16 keys, v transposed (its core matrices: 128 bytes apart along the
// keys, 16 * BN bytes along the head dim); issued, not waited.
__device__ __forceinline__ void issue_values(float (*o)[4], const uint32_t (*pa)[4], uint32_t vb) {
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) wgmma_o(&o[0][0], pa[kk], descriptor(vb + 256 * kk, 128, 16 * BN), 1);
  asm volatile("wgmma.commit_group.sync.aligned;");
}
#else
__device__ __forceinline__ void scores(float (*s)[4], const uint32_t (*qa)[4], uint32_t kb) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int n = 0; n < BN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int np = 0; np < BN / 16; ++np) {
      uint32_t b[4];  // keys 16np + 0..7 / 8..15, dims 16kk + 0..7 / 8..15
      const int key = 16 * np + (lane & 7) + 8 * (lane >> 4), col = 16 * kk + 8 * ((lane >> 3) & 1);
      ldsm4(b, kb + 2 * (key * PITCH + col));
      mma(s[2 * np], qa[kk], b[0], b[1]);
      mma(s[2 * np + 1], qa[kk], b[2], b[3]);
    }
}
__device__ __forceinline__ void values(float (*o)[4], const float (*s)[4], uint32_t vb) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    uint32_t pa[4];
    pack_p(pa, s, kk);
#pragma unroll
    for (int np = 0; np < D / 16; ++np) {
      uint32_t b[4];  // keys 16kk + 0..7 / 8..15, dims 16np + 0..7 / 8..15, transposed
      const int key = 16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1), col = 16 * np + 8 * (lane >> 4);
      ldsm4t(b, vb + 2 * (key * PITCH + col));
      mma(o[2 * np], pa, b[0], b[1]);
      mma(o[2 * np + 1], pa, b[2], b[3]);
    }
  }
}
#endif

#if WGMMA
// Copies the block's q rows [row0, row0 + ROWS) to shared memory as k's tiles (K-major core
// matrices: wgmma's A operand); rows past L are zero-filled. One cp.async group.
__device__ __forceinline__ void load_q(uint32_t qs, const T* q, long long qsr, int row0, int L) {
  constexpr int kChunks = ROWS * (D / 8), kThreads = 32 * WARPS;
#pragma unroll
  for (int j = 0; j < kChunks / kThreads; ++j) {
    const int c = threadIdx.x + j * kThreads;
    const int r = (c / D) * 8 + (c & 7), col = ((c >> 3) % (D / 8)) * 8, row = row0 + r;
    copy16(qs + 16 * c, q + (row < L ? row : 0) * qsr + col, row < L ? 16 : 0);
  }
  asm volatile("cp.async.commit_group;");
}
#endif

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS) attention_fwd(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out, int L, int S,
    int heads, int row_blocks, long long qs0, long long qs1, long long qsr, long long ks0, long long ks1, long long ksr,
    long long vs0, long long vs1, long long vsr, float scale_log2, int causal) {
  // shared memory: (wgmma: the block's q rows,) STAGES k tiles, then STAGES v tiles
  extern __shared__ __align__(128) unsigned char tiles_smem[];
  const uint32_t q_bytes = WGMMA ? 2 * ROWS * D : 0, stage_bytes = 2 * BN * PITCH;
  const uint32_t qb0 = smem_address(tiles_smem), kb0 = qb0 + q_bytes, vb0 = kb0 + STAGES * stage_bytes;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const long long bh = blockIdx.x / row_blocks;
  const int rb = row_blocks - 1 - int(blockIdx.x - bh * row_blocks);  // (long causal blocks first)
  q = head_of(q, bh, heads, qs0, qs1), k = head_of(k, bh, heads, ks0, ks1), v = head_of(v, bh, heads, vs0, vs1);
  const int block_row = rb * ROWS, row0 = block_row + 16 * warp;  // this warp's rows: row0 + 0..15

#if !WGMMA
  uint32_t qa[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = row0 + g + 8 * (r & 1), col = 16 * kk + 2 * t + 8 * (r >> 1);
      qa[kk][r] = row < L ? *reinterpret_cast<const uint32_t*>(q + row * qsr + col) : 0u;
    }
#endif
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  const float ninf = -__int_as_float(0x7f800000);
  float m[2] = {ninf, ninf}, l[2] = {0.f, 0.f}, alpha[2];
  float s[BN / 8][4];

  const int last_key = causal ? min(S, block_row + ROWS) : S;
  const int tiles = (last_key + BN - 1) / BN;
  auto load = [&](int tile) {  // (one cp.async group, empty past the last tile)
    const int st = tile % STAGES;
    if (tile < tiles) load_tile(kb0 + st * stage_bytes, vb0 + st * stage_bytes, k, v, ksr, vsr, tile * BN, S);
    else asm volatile("cp.async.commit_group;");
  };
#if WGMMA
  // Three stages, and the scores of tile j issued before p v of tile j - 1 (flash attention 3's
  // overlap inside a warpgroup): the softmax of tile j runs while the tensor cores do p v.
  // Tiles j + 1 and j + 2 are in flight meanwhile; a stage is refilled once p v has read it.
  uint32_t pa[BN / 16][4];
  auto arrived = [] {  // tile it is here (it + 1 may be in flight), written by cp.async for wgmma
    asm volatile("cp.async.wait_group 1;");
    asm volatile("fence.proxy.async.shared::cta;");
    __syncthreads();
    asm volatile("wgmma.fence.sync.aligned;");
  };
  const uint32_t qb = qb0 + 2 * 64 * D * (warp / 4);  // (this warpgroup's 64 rows)
  load_q(qb0, q, qsr, block_row, L);
  load(0);
  load(1);
  if (tiles > 0) {  // tile 0: its scores alone (one loop body, no branch between the wgmmas)
    arrived();
    issue_scores(s, qb, kb0);
    asm volatile("wgmma.wait_group.sync.aligned 0;");
    softmax_tile(s, m, l, alpha, 0, S, row0, causal, scale_log2);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) pack_p(pa[kk], s, kk);
    load(2);
  }
  for (int it = 1; it < tiles; ++it) {
    arrived();
    issue_scores(s, qb, kb0 + (it % STAGES) * stage_bytes);
    issue_values(o, pa, vb0 + ((it - 1) % STAGES) * stage_bytes);
    asm volatile("wgmma.wait_group.sync.aligned 1;");  // (the scores: the older group)
    softmax_tile(s, m, l, alpha, it * BN, S, row0, causal, scale_log2);
    asm volatile("wgmma.wait_group.sync.aligned 0;");
    rescale(o, alpha);
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) pack_p(pa[kk], s, kk);
    __syncthreads();  // (every warp's p v has read tile it - 1's stage: refill it)
    load(it + 2);
  }
  if (tiles > 0) {
    asm volatile("wgmma.fence.sync.aligned;");
    issue_values(o, pa, vb0 + ((tiles - 1) % STAGES) * stage_bytes);
    asm volatile("wgmma.wait_group.sync.aligned 0;");
  }
#else
  load(0);
  for (int it = 0; it < tiles; ++it) {
    const uint32_t kb = kb0 + (it % STAGES) * stage_bytes, vb = vb0 + (it % STAGES) * stage_bytes;
    load(it + 1);  // (the next tile's copy in flight while this one computes)
    asm volatile("cp.async.wait_group 1;");
    __syncthreads();
    scores(s, qa, kb);
    softmax_tile(s, m, l, alpha, it * BN, S, row0, causal, scale_log2);
    rescale(o, alpha);
    values(o, s, vb);
    __syncthreads();  // (every warp is done with this stage before the next load overwrites it)
  }
#endif
  asm volatile("cp.async.wait_group 0;");

  out += bh * (long long)L * D;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float sum = l[h];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    // S = 0: zeros (the composite's empty product). Otherwise every row sees a key (causal rows
    // see key 0), so a zero sum means scores of -inf from the values: NaN (0 * inf), as softmax.
    const float inv = S == 0 ? 0.f : 1.f / sum;
    const int row = row0 + g + 8 * h;
    if (row >= L) continue;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<uint32_t*>(out + (long long)row * D + 8 * n + 2 * t) = pack(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
  }
}
)CUDA";

// A block's shape: warps, keys per tile, blocks per SM the registers are bounded for (two stages
// of k / v tiles in dynamic shared memory, under the 48 KiB a launch takes without opting in).
// Measured on the H100 (16x8x1024x64 float16): 4 warps, 64 keys, 4 blocks per SM (128 registers,
// no spills) was the best of 4 / 8 warps, 1 / 2 m-tiles of 16 rows a warp, 32 / 64 / 128 keys,
// one / two / three stages (bench/RESULTS.md); head size 128 takes 32 keys and 3 blocks (168
// registers).
struct BlockShape {
  int warps, bn, min_blocks;
  bool wgmma;
  int rows() const { return 16 * warps; }
  int pitch(int64_t E) const { return int(E) + (wgmma ? 0 : 8); }
  int stages() const { return wgmma ? 3 : 2; }
  size_t shared_bytes(int64_t E) const {  // (wgmma: q,) {k, v} x stages
    return size_t((wgmma ? rows() * E : 0) + stages() * 2 * bn * pitch(E)) * 2;
  }
};
BlockShape block_shape(int E, bool wgmma) {
  if (wgmma) return E <= 64 ? BlockShape{8, 64, 2, true} : BlockShape{8, 32, 2, true};
  return E <= 64 ? BlockShape{4, 64, 4, false} : BlockShape{4, 32, 3, false};
}

// wgmma.mma_async m64n<n>k16 with A (16-bit) from registers and B from shared memory by
// descriptor, float32 accumulators d[n / 2] (each warp's 16 rows in mma.m16n8k16's C layout),
// written out per instantiation: the operand list grows with n.
std::string wgmma_function(const char* name, int n, bool a_in_registers, bool transpose_b, const char* type) {
  const int regs = n / 2, a_ops = a_in_registers ? 4 : 1;
  std::string d, outs;
  for (int i = 0; i < regs; ++i) {
    d += cat(i ? ", " : "", "%", i);
    outs += cat(i ? ", " : "", "\"+f\"(d[", i, "])");
  }
  const std::string a = a_in_registers ? cat("{%", regs, ", %", regs + 1, ", %", regs + 2, ", %", regs + 3, "}") : cat("%", regs);
  const int desc = regs + a_ops, acc = desc + 1;
  return cat("__device__ __forceinline__ void ", name, "(float* d, ",
             a_in_registers ? "const uint32_t a[4]" : "uint64_t a", ", uint64_t desc, int accumulate) {\n",
             "  asm volatile(\"{\\n.reg .pred p;\\nsetp.ne.b32 p, %", acc, ", 0;\\n\"\n",
             "    \"wgmma.mma_async.sync.aligned.m64n", n, "k16.f32.", type, ".", type, " {", d, "}, ", a, ", %", desc,
             ", p, 1, 1, ", a_in_registers ? "" : "0, ", transpose_b ? 1 : 0, ";\\n}\\n\"\n", "    : ", outs, "\n    : ",
             a_in_registers ? "\"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3])" : "\"l\"(a)",
             ", \"l\"(desc), \"r\"(accumulate));\n}\n");
}

// A shared-memory matrix descriptor without swizzling: start address, the byte distance between
// core matrices along K (lbo) and along M / N (sbo), each in 16-byte units.
constexpr const char* kDescriptorText = R"CUDA(
__device__ __forceinline__ uint64_t descriptor(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}
)CUDA";

// q / k / v as the kernel reads them: rows of E contiguous elements, 16-byte aligned, batch dims
// folded into at most two strided ones {b0, b1}. Other layouts are copied to contiguous first.
struct Operand {
  Tensor t;
  long long s0 = 0, s1 = 0, row = 0;
};
Operand operand_of(const Tensor& x, int64_t heads) {
  auto fits = [](const Tensor& y) {
    const int r = y.dim();
    if (y.stride(r - 1) != 1 || reinterpret_cast<uintptr_t>(y.data_bytes()) % 16 != 0) return false;
    for (int d = 0; d < r - 1; ++d)
      if (y.stride(d) % (16 / int64_t(y.itemsize())) != 0) return false;
    return r <= 4;
  };
  Operand o{fits(x) ? x : contiguous(x)};
  const int r = o.t.dim();
  o.row = o.t.stride(r - 2);
  if (r >= 3) o.s1 = o.t.stride(r - 3);
  if (r == 4) o.s0 = o.t.stride(0);
  else if (r > 4) {  // contiguous: one batch dim of every head
    o.s1 = o.t.stride(r - 3);
    o.s0 = o.s1 * heads;
  }
  return o;
}

}  // namespace

const char* attention_common_text() { return kAttentionCommon; }

bool attention_takes(DType d, int64_t E, int64_t Ev, double scale) {
  // (scale > 0: the kernels take a row's max before scaling, which a positive scale keeps)
  if (!(scale > 0)) return false;
  if (d == DType::f32) return E > 0 && E <= 128 && E % 4 == 0 && Ev > 0 && Ev <= 128 && Ev % 16 == 0;
  return (d == DType::f16 || d == DType::bf16) && E == Ev && (E == 16 || E == 32 || E == 64 || E == 128);
}

bool uses_wgmma(const std::string& arch) { return arch == "sm_90"; }

std::string attention_source(DType d, int E, bool wgmma) {
  const BlockShape b = block_shape(E, wgmma);
  const char* type = d == DType::f16 ? "f16" : "bf16";
  const std::string mma_ops = wgmma ? cat(kDescriptorText, wgmma_function("wgmma_s", b.bn, false, false, type),
                                          wgmma_function("wgmma_o", E, true, true, type))
                                    : std::string();
  return cat(prelude(), "\ntypedef cr::", d == DType::f16 ? "half_t" : "bf16_t", " T;\n#define MMA_T \"", type,
             "\"\n#define D ", E, "\n#define BN ", b.bn, "\n#define WARPS ", b.warps, "\n#define MIN_BLOCKS ",
             b.min_blocks, "\n#define WGMMA ", wgmma ? 1 : 0, "\n", kAttentionCommon, mma_ops, kAttentionText);
}

bool attention(Context& ctx, const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
               bool causal) {
  const int r = q.dim();
  const int64_t L = q.size(r - 2), E = q.size(r - 1), S = k.size(r - 2), Ev = v.size(r - 1);
  if (!attention_takes(q.dtype(), E, Ev, scale) || L >= (int64_t(1) << 31) || S >= (int64_t(1) << 31)) return false;
  if (out.numel() == 0) return true;
  // The kernel and its block: tensor cores for 16-bit values, the FMA pipes for float32.
  const bool simt = q.dtype() == DType::f32;
  const int device = out.device().index;
  const bool wgmma = uses_wgmma(target_of(device).arch);
  const BlockShape mma_shape = block_shape(int(E), wgmma);
  const SimtShape simt_shape_ = simt_shape(int(E), int(Ev));
  const int64_t rows = simt ? simt_shape_.rows() : mma_shape.rows(), heads = r >= 3 ? q.size(r - 3) : 1,
                batch = out.numel() / (L * Ev), row_blocks = (L + rows - 1) / rows;
  if (batch * row_blocks >= (int64_t(1) << 31)) return false;
  const Operand qo = operand_of(q, heads), ko = operand_of(k, heads), vo = operand_of(v, heads);
  void *qp = qo.t.data_bytes(), *kp = ko.t.data_bytes(), *vp = vo.t.data_bytes(), *op = out.data_bytes();
  int L_ = int(L), S_ = int(S), heads_ = int(heads), rbs = int(row_blocks), causal_ = causal;
  long long qs0 = qo.s0, qs1 = qo.s1, qsr = qo.row, ks0 = ko.s0, ks1 = ko.s1, ksr = ko.row, vs0 = vo.s0, vs1 = vo.s1,
            vsr = vo.row;
  float scale_log2 = float(scale * 1.4426950408889634);  // (log2 e: the kernels' exponentials are exp2)
  void* args[] = {&qp,  &kp,  &vp,  &op,  &L_,  &S_,  &heads_, &rbs, &qs0, &qs1,       &qsr,
                  &ks0, &ks1, &ksr, &vs0, &vs1, &vsr, &scale_log2, &causal_};
  if (simt)
    library_launch(ctx, device, cat("attention_f32_", E, "_", Ev), [&] { return attention_simt_source(int(E), int(Ev)); },
                   "attention_simt", batch * row_blocks, 256, args, simt_shape_.shared_bytes(int(Ev)));
  else
    library_launch(ctx, device, cat("attention_", dtype_name(q.dtype()), "_", E, wgmma ? "_wgmma" : ""),
                   [&] { return attention_source(q.dtype(), int(E), wgmma); }, "attention_fwd", batch * row_blocks,
                   32 * mma_shape.warps, args, mma_shape.shared_bytes(E), wgmma);
  return true;
}

}  // namespace cr::jit::cuda
