#include "vm/kernels/cuda/attention.hpp"

#include <algorithm>
#include <cmath>

#include "vm/kernels/cuda/attention_decode.hpp"
#include "vm/kernels/cuda/attention_simt.hpp"
#include "vm/cuda/checks.hpp"
#include "vm/cuda/cudnn_sdpa.hpp"
#include "vm/cuda/driver.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/cuda/prelude.hpp"
#include "vm/kernels/cuda/sources.hpp"
#include "vm/kernels/loop.hpp"

namespace cr::cuda {
namespace {

// A block's shape: warps, keys per tile, blocks per SM the registers are bounded for (two stages
// of k / v tiles in dynamic shared memory, under the 48 KiB a launch takes without opting in).
// 4 warps, 64 keys, 4 blocks per SM (128 registers, no spills) were the best of the shapes tried
// (bench/RESULTS.md H35); head size 128 takes 32 keys and 3 blocks (168 registers).
struct BlockShape {
  int warps, bn, min_blocks;
  int rows() const { return 16 * warps; }
  size_t shared_bytes(int64_t E) const { return size_t(2 * 2 * bn * (E + 8)) * 2; }  // {k, v} x 2 stages
};
BlockShape block_shape(int E) { return E <= 64 ? BlockShape{4, 64, 4} : BlockShape{4, 32, 3}; }

// q / k / v as the kernels read them: rows of E contiguous elements (16-byte aligned for the
// tiled kernels' vector copies), batch dims folded into at most two strided ones {b0, b1}. Other
// layouts are copied to contiguous first.
struct Operand {
  Tensor t;
  long long s0 = 0, s1 = 0, row = 0;
  HeadOperand head() const { return {t.data_bytes(), s0, s1, row}; }
};
Operand operand_of(const Tensor& x, int64_t heads, bool aligned = true) {
  auto fits = [aligned](const Tensor& y) {
    const int r = y.dim();
    if (y.stride(r - 1) != 1 || r > 4) return false;
    if (!aligned) return true;
    if (reinterpret_cast<uintptr_t>(y.data_bytes()) % 16 != 0) return false;
    for (int d = 0; d < r - 1; ++d)
      if (y.stride(d) % (16 / int64_t(y.itemsize())) != 0) return false;
    return true;
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

// Few query rows take the split kernel: always in float32 (the tiled kernel computes 128 rows a
// block), for 16-bit values once the keys outnumber a tile of the tensor-core kernel (one block
// per head leaves most SMs idle) or where that kernel does not take the head size.
bool mma_takes(DType d, int64_t E, int64_t Ev) {
  return (d == DType::f16 || d == DType::bf16) && E == Ev && (E == 16 || E == 32 || E == 64 || E == 128);
}
bool decode_rows(DType d, int64_t L, int64_t S, int64_t E, int64_t Ev) {
  if (!attention_decode_takes(d, L, E, Ev)) return false;
  return d == DType::f32 || !mma_takes(d, E, Ev) || S > block_shape(int(E)).bn;
}

// x's operand as cuDNN's attention reads it, {b, h, s, e} with the strides of Operand (dims of one
// element given their dense strides).
SdpaOperand sdpa_operand(const Operand& o, int64_t heads, int64_t s) {
  const long long row = o.row, s1 = o.s1 ? o.s1 : row * s, s0 = o.s0 ? o.s0 : s1 * heads;
  return {o.t.data_bytes(), {s0, s1, row, 1}};
}

// The forward through cuDNN (vm/cuda/cudnn_sdpa.hpp) where it takes the call; false: not run.
bool cudnn_attention(Context& ctx, const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                     bool causal, const Tensor& lse) {
  const int r = q.dim(), device = out.device().index;
  const int64_t L = q.size(r - 2), E = q.size(r - 1), S = k.size(r - 2);
  if (!cudnn_sdpa_takes(device, q.dtype(), E, v.size(r - 1))) return false;
  const int64_t heads = r >= 3 ? q.size(r - 3) : 1;
  SdpaCall c;
  c.dtype = q.dtype(), c.h = heads, c.b = out.numel() / (L * E * heads), c.s_q = L, c.s_kv = S, c.d = E;
  c.scale = scale, c.causal = causal;
  // (copies of misaligned inputs live until the call is queued: freed earlier, its workspace could take them)
  const Operand qo = operand_of(q, heads), ko = operand_of(k, heads), vo = operand_of(v, heads),
                oo = operand_of(out, heads);
  if (oo.t.data_bytes() != out.data_bytes()) return false;  // (its layout would take a copy: written in vain)
  c.q = sdpa_operand(qo, heads, L), c.k = sdpa_operand(ko, heads, S), c.v = sdpa_operand(vo, heads, S);
  c.out = sdpa_operand(oo, heads, L);
  c.stats = lse.defined() ? lse.data_bytes() : nullptr;
  return cudnn_sdpa_forward(device, c, ctx.logs.perf);
}

}  // namespace

bool attention_takes(DType d, int64_t L, int64_t E, int64_t Ev, double scale) {
  // (scale > 0: the kernels take a row's max before scaling, which a positive scale keeps)
  if (!(scale > 0)) return false;
  // A float32 block computes 128 query rows whatever L is: up to 8 rows take the split kernel,
  // from 9 to 31 the composite's two products and a softmax cost less (bench/RESULTS.md H35).
  constexpr int64_t kSimtMinRows = 32;
  if (attention_decode_takes(d, L, E, Ev)) return true;
  if (d == DType::f32)
    return L >= kSimtMinRows && E > 0 && E <= 128 && E % 4 == 0 && Ev > 0 && Ev <= 128 && Ev % 16 == 0;
  return mma_takes(d, E, Ev);
}

std::string attention_source(DType d, int E) {
  const BlockShape b = block_shape(E);
  return cat(prelude(), "\ntypedef cr::", d == DType::f16 ? "half_t" : "bf16_t", " T;\n#define MMA_T \"",
             d == DType::f16 ? "f16" : "bf16", "\"\n#define D ", E, "\n#define BN ", b.bn, "\n#define WARPS ", b.warps,
             "\n#define MIN_BLOCKS ", b.min_blocks, "\n", cuda_source("attention_common.cuh"),
             cuda_source("attention_mma.cuh"), cuda_source("attention.cuh"));
}

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
               bool causal, const Tensor& mask, const Tensor& lse) {
  const int r = q.dim();
  const int64_t L = q.size(r - 2), E = q.size(r - 1), S = k.size(r - 2), Ev = v.size(r - 1);
  if (!attention_takes(q.dtype(), L, E, Ev, scale) || L >= (int64_t(1) << 31) || S >= (int64_t(1) << 31)) return false;
  const int device = out.device().index;
  const DeviceInfo& info = device_info(device);
  if (info.sm_major < 8) return false;  // (cp.async and mma.m16n8k16: sm_80 on)
  MaskOperand mo;
  if (!mask_operand(mask, mo)) return false;
  if (out.numel() == 0) return true;
  const int64_t heads = r >= 3 ? q.size(r - 3) : 1;
  if (decode_rows(q.dtype(), L, S, E, Ev)) {
    const Operand qo = operand_of(q, heads, false), ko = operand_of(k, heads, false), vo = operand_of(v, heads, false);
    attention_decode(ctx, out, qo.head(), ko.head(), vo.head(), L, S, E, Ev, heads, scale, causal, mo, lse);
    return true;
  }
  if (!mask.defined() && cudnn_attention(ctx, out, q, k, v, scale, causal, lse)) return true;
  // The kernel and its block: tensor cores for 16-bit values, the FMA pipes for float32.
  const bool simt = q.dtype() == DType::f32;
  const size_t shared_limit = size_t(info.max_shared_per_block);
  const BlockShape mma_shape = block_shape(int(E));
  const SimtShape simt_shape_ = simt_shape(int(E), int(Ev), shared_limit);
  const int64_t rows = simt ? simt_shape_.rows() : mma_shape.rows(), batch = out.numel() / (L * Ev);
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
  void* lp = lse.defined() ? lse.data_bytes() : nullptr;
  void* args[] = {&qp,  &kp,  &vp,  &op,  &L_,  &S_,  &heads_,     &rbs,     &qs0,  &qs1,   &qsr,   &ks0,   &ks1,
                  &ksr, &vs0, &vs1, &vsr, &scale_log2, &causal_, &mp, &mo.kind, &mo.s0, &mo.s1, &mo.row, &mo.col, &lp};
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

bool cache_row(const Tensor& dst, const Tensor& src, const Tensor& kv, CacheRow* row) {
  const int r = kv.dim(), n = dst.dim();
  if (r < 2 || r > 4 || n < 1 || src.dim() != n || kv.storage() != dst.storage()) return false;
  if (kv.size(r - 2) != dst.size(0) || kv.stride(r - 2) != dst.stride(0) || kv.stride(r - 1) != 1) return false;
  row->taken.assign(size_t(n), 0);
  row->fixed.assign(size_t(n), 0);
  long long batch[4] = {0, 0, 0, 0};  // (src strides of kv's dims, by their place in {b, h, -, e})
  for (int d = 0; d < r; ++d) {
    if (d == r - 2 || kv.size(d) == 1) continue;
    int j = 1;
    while (j < n && (row->taken[size_t(j)] || dst.size(j) != kv.size(d) || dst.stride(j) != kv.stride(d))) ++j;
    if (j == n) return false;
    row->taken[size_t(j)] = 1;
    batch[d + 4 - r] = src.stride(j);
  }
  if (kv.size(r - 1) > 1 && batch[3] != 1) return false;  // (the kernel reads a new row's elements contiguous)
  row->s0 = batch[0], row->s1 = batch[1];
  // kv's first element, from dst's: the other dims' coordinates, largest stride first
  std::vector<int> rest;
  for (int j = 1; j < n; ++j)
    if (!row->taken[size_t(j)] && dst.size(j) > 1) rest.push_back(j);
  std::sort(rest.begin(), rest.end(), [&](int a, int b) { return dst.stride(a) > dst.stride(b); });
  int64_t delta = kv.offset() - dst.offset();
  row->offset = src.offset();
  for (int j : rest) {
    if (dst.stride(j) <= 0 || delta < 0) return false;
    const int64_t c = std::min(delta / dst.stride(j), dst.size(j) - 1);
    row->fixed[size_t(j)] = c;
    delta -= c * dst.stride(j);
    row->offset += c * src.stride(j);
  }
  return delta == 0;
}

bool attention_cache(Context& ctx, const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                     bool causal, const Tensor& mask, const Tensor& dst, const Tensor& idx, const Tensor& values) {
  const int r = q.dim();
  if (r < 2 || k.dim() != r || v.dim() != r) return false;
  const int64_t L = q.size(r - 2), E = q.size(r - 1), S = k.size(r - 2), Ev = v.size(r - 1);
  if (L != 1 || !attention_takes(q.dtype(), L, E, Ev, scale) || !decode_rows(q.dtype(), L, S, E, Ev)) return false;
  if (S >= (int64_t(1) << 31) || out.numel() == 0 || dst.dim() < 1) return false;
  const int device = out.device().index;
  if (device_info(device).sm_major < 8) return false;
  if (idx.dtype() != DType::i64 || idx.numel() != 1 || idx.dim() != 1 || idx.device() != dst.device()) return false;
  if (values.dtype() != dst.dtype() || q.dtype() != dst.dtype() || values.device() != dst.device()) return false;
  for (const Tensor* t : {&q, &values, &idx, &mask})  // (the kernel reads them while it writes dst)
    if (t->defined() && t->storage() == dst.storage()) return false;
  Shape sel = dst.sizes();
  sel[0] = 1;
  for (int d = 0; d < dst.dim(); ++d)  // (an expanded dst would be several elements a slot)
    if (dst.size(d) > 1 && dst.stride(d) == 0) return false;
  if (!broadcasts_to(values.sizes(), sel)) return false;
  const Tensor src = Tensor::view_of(values, sel, broadcast_strides(values, sel), values.offset());
  CacheRow kr, vr;
  if (!cache_row(dst, src, k, &kr) || !cache_row(dst, src, v, &vr) || kr.taken != vr.taken || kr.fixed == vr.fixed)
    return false;
  int64_t left = 1;  // (dst's dims kv and v do not span: two places in all, one each)
  for (int j = 1; j < dst.dim(); ++j)
    if (!kr.taken[size_t(j)]) left *= dst.size(j);
  if (left != 2) return false;
  MaskOperand mo;
  if (!mask_operand(mask, mo)) return false;
  const int64_t heads = r >= 3 ? q.size(r - 3) : 1;
  const Operand qo = operand_of(q, heads, false), ko = operand_of(k, heads, false), vo = operand_of(v, heads, false);
  if (ko.t.data_bytes() != k.data_bytes() || vo.t.data_bytes() != v.data_bytes()) return false;  // (not copies)
  const std::shared_ptr<DeviceCheck> check = library_check(device, "index_put_", {cat("dim 1 of size ", S)});
  const char* base = static_cast<const char*>(src.storage()->data);
  NewRows nr;
  nr.k = base + kr.offset * int64_t(src.itemsize()), nr.v = base + vr.offset * int64_t(src.itemsize());
  nr.ks0 = kr.s0, nr.ks1 = kr.s1, nr.vs0 = vr.s0, nr.vs1 = vr.s1;
  nr.pos = idx.data_bytes(), nr.check = check->word;
  attention_decode(ctx, out, qo.head(), ko.head(), vo.head(), L, S, E, Ev, heads, scale, causal, mo, Tensor(), nr);
  defer_check(check, current_stream(device));
  return true;
}

}  // namespace cr::cuda
