#include "jit/cuda/attention.hpp"

#include <cmath>

#include "jit/cuda/attention_simt.hpp"
#include "vm/cuda/driver.hpp"
#include "jit/cuda/exprs.hpp"
#include "jit/cuda/library.hpp"
#include "jit/cuda/prelude.hpp"
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
// The mask term of score (row, key) in log2 units, added to the scaled score: kind 1, a value of
// q's dtype M; kind 2, bool (false: -inf). Rows past L and keys past S read nothing (their scores
// are never stored, or become -inf). (Measured on the H100, 16x8x1024x64: loading key pairs as
// one word, and row pointers kept per thread, were no faster; the float32 kernel was slower.)
template <class M> __device__ __forceinline__ float mask_term(const void* mask, int kind, long long msr, long long msc,
                                                            int row, int key, int L, int S) {
  if (row >= L || key >= S) return 0.f;
  const long long at = row * msr + key * msc;
  if (kind == 2) return static_cast<const unsigned char*>(mask)[at] ? 0.f : -__int_as_float(0x7f800000);
  return float(static_cast<const M*>(mask)[at]) * 1.4426950408889634f;
}
__device__ __forceinline__ long long head_offset(long long bh, int heads, long long s0, long long s1) {
  const long long b0 = bh / heads;
  return b0 * s0 + (bh - b0 * heads) * s1;
}
template <class P> __device__ __forceinline__ const P* head_of(const P* p, long long bh, int heads, long long s0, long long s1) {
  return p + head_offset(bh, heads, s0, s1);
}
// the mask moved to (batch, head) bh, for mask elements of type M (kind 1) or bool (kind 2)
template <class M> __device__ __forceinline__ const void* mask_of(const void* mask, int kind, long long bh, int heads,
                                                                  long long s0, long long s1) {
  if (kind == 1) return static_cast<const M*>(mask) + head_offset(bh, heads, s0, s1);
  if (kind == 2) return static_cast<const unsigned char*>(mask) + head_offset(bh, heads, s0, s1);
  return mask;
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
// and the last step divides by l. A mask (bool, or values added to the scaled scores) is read
// per score where it lies, broadcast by zero strides. Keys past S read as zeros and score -inf;
// causal rows stop at their diagonal (tiles wholly above every row of the block are never loaded; long
// causal blocks are scheduled first). The kernel was issue-bound (ncu: ALU the busiest pipe, 3
// warps per scheduler): the trees, ex2.approx and packed conversions took 260 -> 215 us. Fragment layouts:
// PTX ISA, "Matrix fragments for mma.m16n8k16"; g = lane / 4 is a fragment's row, t = lane % 4
// its column pair.
constexpr const char* kAttentionText = R"CUDA(
#define ROWS (16 * WARPS)
#define PITCH (D + 8)
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

// Copies key / value rows [key0, key0 + BN) into one stage; rows past S are zero-filled.
__device__ __forceinline__ void load_tile(uint32_t ks, uint32_t vs, const T* k, const T* v, long long ksr, long long vsr,
                                          int key0, int S) {
  constexpr int kChunks = BN * (D / 8), kThreads = 32 * WARPS;
#pragma unroll
  for (int j = 0; j < (kChunks + kThreads - 1) / kThreads; ++j) {
    const int c = threadIdx.x + j * kThreads;
    if (kChunks % kThreads != 0 && c >= kChunks) break;
    const int r = c / (D / 8), col = (c % (D / 8)) * 8, key = key0 + r;
    const int bytes = key < S ? 16 : 0;
    const long long row = key < S ? key : 0;
    const uint32_t at = 2 * (r * PITCH + col);
    copy16(ks + at, k + row * ksr + col, bytes);
    copy16(vs + at, v + row * vsr + col, bytes);
  }
  asm volatile("cp.async.commit_group;");
}

extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS) attention_fwd(
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ out, int L, int S,
    int heads, int row_blocks, long long qs0, long long qs1, long long qsr, long long ks0, long long ks1, long long ksr,
    long long vs0, long long vs1, long long vsr, float scale_log2, int causal, const void* __restrict__ mask,
    int mask_kind, long long ms0, long long ms1, long long msr, long long msc) {
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
  if (tiles > 0) load_tile(kb0, vb0, k, v, ksr, vsr, 0, S);
  for (int it = 0; it < tiles; ++it) {
    const int st = it & 1, key0 = it * BN;
    // the next tile's copy in flight while this one computes
    if (it + 1 < tiles) load_tile(kb0 + (st ^ 1) * stage_bytes, vb0 + (st ^ 1) * stage_bytes, k, v, ksr, vsr, key0 + BN, S);
    else asm volatile("cp.async.commit_group;");
    asm volatile("cp.async.wait_group 1;");
    __syncthreads();

    float s[BN / 8][4];
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
    const uint32_t kb = kb0 + st * stage_bytes, vb = vb0 + st * stage_bytes;
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
      const uint32_t pa[4] = {pack(s[2 * kk][0], s[2 * kk][1]), pack(s[2 * kk][2], s[2 * kk][3]),
                              pack(s[2 * kk + 1][0], s[2 * kk + 1][1]), pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int np = 0; np < D / 16; ++np) {
        uint32_t b[4];  // keys 16kk + 0..7 / 8..15, dims 16np + 0..7 / 8..15, transposed
        const int key = 16 * kk + (lane & 7) + 8 * ((lane >> 3) & 1), col = 16 * np + 8 * (lane >> 4);
        ldsm4t(b, vb + 2 * (key * PITCH + col));
        mma(o[2 * np], pa, b[0], b[1]);
        mma(o[2 * np + 1], pa, b[2], b[3]);
      }
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
  int rows() const { return 16 * warps; }
  size_t shared_bytes(int64_t E) const { return size_t(2 * 2 * bn * (E + 8)) * 2; }  // {k, v} x 2 stages
};
BlockShape block_shape(int E) { return E <= 64 ? BlockShape{4, 64, 4} : BlockShape{4, 32, 3}; }

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

bool attention_takes(DType d, int64_t L, int64_t E, int64_t Ev, double scale) {
  // (scale > 0: the kernels take a row's max before scaling, which a positive scale keeps)
  if (!(scale > 0)) return false;
  // A float32 block computes 128 query rows whatever L is: for a few rows (decoding without a
  // mask) the composite's two products and a softmax cost less. H100, 1024 keys, back to back:
  // 12 heads of 1 row 41 us composite (the kernel takes as long as for 64 rows: 116); 63 rows
  // 111 composite, 116 kernel; 128 heads of 63 rows 157 composite, 119 kernel.
  constexpr int64_t kSimtMinRows = 32;
  if (d == DType::f32)
    return L >= kSimtMinRows && E > 0 && E <= 128 && E % 4 == 0 && Ev > 0 && Ev <= 128 && Ev % 16 == 0;
  return (d == DType::f16 || d == DType::bf16) && E == Ev && (E == 16 || E == 32 || E == 64 || E == 128);
}

std::string attention_source(DType d, int E) {
  const BlockShape b = block_shape(E);
  return cat(prelude(), "\ntypedef cr::", d == DType::f16 ? "half_t" : "bf16_t", " T;\n#define MMA_T \"",
             d == DType::f16 ? "f16" : "bf16", "\"\n#define D ", E, "\n#define BN ", b.bn, "\n#define WARPS ", b.warps,
             "\n#define MIN_BLOCKS ", b.min_blocks, "\n", kAttentionCommon, kAttentionText);
}

// A mask view's strides as the kernels read them: batch dims folded into {s0, s1} like q's (at
// most two of them: a mask view's broadcast strides cannot be merged), then row and key.
struct MaskOperand {
  int kind = 0;  // 0 none, 1 q's dtype, 2 bool
  const void* p = nullptr;
  long long s0 = 0, s1 = 0, row = 0, col = 0;
};
bool mask_operand(const Tensor& m, MaskOperand& o) {
  if (!m.defined()) return true;
  const int r = m.dim();
  if (r > 4) return false;
  o.kind = m.dtype() == DType::b8 ? 2 : 1;
  o.p = m.data_bytes();
  o.row = m.stride(r - 2);
  o.col = m.stride(r - 1);
  if (r >= 3) o.s1 = m.stride(r - 3);
  if (r == 4) o.s0 = m.stride(0);
  return true;
}

bool attention(Context& ctx, const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
               bool causal, const Tensor& mask) {
  const int r = q.dim();
  const int64_t L = q.size(r - 2), E = q.size(r - 1), S = k.size(r - 2), Ev = v.size(r - 1);
  if (!attention_takes(q.dtype(), L, E, Ev, scale) || L >= (int64_t(1) << 31) || S >= (int64_t(1) << 31)) return false;
  const int device = out.device().index;
  const cr::cuda::DeviceInfo& info = cr::cuda::device_info(device);
  if (info.sm_major < 8) return false;  // (cp.async and mma.m16n8k16: sm_80 on)
  MaskOperand mo;
  if (!mask_operand(mask, mo)) return false;
  if (out.numel() == 0) return true;
  // The kernel and its block: tensor cores for 16-bit values, the FMA pipes for float32.
  const bool simt = q.dtype() == DType::f32;
  const size_t shared_limit = size_t(info.max_shared_per_block);
  const BlockShape mma_shape = block_shape(int(E));
  const SimtShape simt_shape_ = simt_shape(int(E), int(Ev), shared_limit);
  const int64_t rows = simt ? simt_shape_.rows() : mma_shape.rows(), heads = r >= 3 ? q.size(r - 3) : 1,
                batch = out.numel() / (L * Ev);
  if (rows == 0) return false;  // (no float32 block fits this GPU's shared memory)
  const int64_t row_blocks = (L + rows - 1) / rows;
  if (batch * row_blocks >= (int64_t(1) << 31)) return false;
  const Operand qo = operand_of(q, heads), ko = operand_of(k, heads), vo = operand_of(v, heads);
  void *qp = qo.t.data_bytes(), *kp = ko.t.data_bytes(), *vp = vo.t.data_bytes(), *op = out.data_bytes();
  int L_ = int(L), S_ = int(S), heads_ = int(heads), rbs = int(row_blocks), causal_ = causal;
  long long qs0 = qo.s0, qs1 = qo.s1, qsr = qo.row, ks0 = ko.s0, ks1 = ko.s1, ksr = ko.row, vs0 = vo.s0, vs1 = vo.s1,
            vsr = vo.row;
  float scale_log2 = float(scale * 1.4426950408889634);  // (log2 e: the kernels' exponentials are exp2)
  const void* mp = mo.p;
  void* args[] = {&qp,  &kp,  &vp,  &op,  &L_,  &S_,  &heads_,     &rbs,     &qs0,  &qs1,   &qsr,   &ks0,
                  &ks1, &ksr, &vs0, &vs1, &vsr, &scale_log2, &causal_, &mp, &mo.kind, &mo.s0, &mo.s1, &mo.row, &mo.col};
  if (simt)
    library_launch(ctx, device, cat("attention_f32_", E, "_", Ev),
                   [&] { return attention_simt_source(int(E), int(Ev), shared_limit); },
                   "attention_simt", batch * row_blocks, 256, args, simt_shape_.shared_bytes(int(Ev)));
  else
    library_launch(ctx, device, cat("attention_", dtype_name(q.dtype()), "_", E),
                   [&] { return attention_source(q.dtype(), int(E)); }, "attention_fwd", batch * row_blocks,
                   32 * mma_shape.warps, args, mma_shape.shared_bytes(E));
  return true;
}

}  // namespace cr::jit::cuda
