#include "vm/kernels/cuda/attention_bwd.hpp"

#include "vm/cuda/cudnn_sdpa.hpp"
#include "vm/cuda/driver.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/deterministic.hpp"
#include "vm/kernels/cuda/attention.hpp"
#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/cuda/prelude.hpp"
#include "vm/kernels/cuda/sources.hpp"
#include "vm/kernels/loop.hpp"

namespace cr::cuda {
namespace {

// FMA kernels: the tile (attention_bwd.cuh's B: rows and keys), threads, and shared memory: tiles of
// float with head widths padded to 64 and pitches + 4, as its KvTiles / QTiles.
constexpr int64_t kTile = 64, kThreads = 256;
int64_t padded(int64_t w) { return (w + 63) / 64 * 64; }
size_t kv_shared(int64_t E, int64_t Ev) {
  const int64_t kp = kTile + 4, ew = padded(E), vw = padded(Ev);
  return size_t(ew * kp + vw * kp + kTile * (ew + 4) + kTile * (vw + 4) + 2 * kTile * kp + 2 * kTile) * 4;
}
size_t q_shared(int64_t E, int64_t Ev) {
  const int64_t kp = kTile + 4, ew = padded(E), vw = padded(Ev);
  return size_t(2 * kTile * (ew + 4) + kTile * (vw + 4) + ew * kp + vw * kp + kTile * kp + 2 * kTile) * 4;
}

// Tensor-core kernels: 4 warps of 16 keys (rows) each; the key pass walks query tiles of BR rows,
// the query pass key tiles of BN (the accumulators of head size 128 take twice the registers).
struct TcShape {
  int warps, br, bn, min_blocks;
  int rows() const { return 16 * warps; }
  // {k, v} + two stages of {q, dout} (16-bit rows of D + 8) and of {lse, delta} (float) / two stages of {k, v}
  size_t kv_bytes(int D) const { return size_t(4 * rows() + 8 * br) * (D + 8) + 16 * br; }
  size_t q_bytes(int D) const { return size_t(8 * bn) * (D + 8); }
  // the one-pass form (attention_bwd_tc: a query tile as tall as the keys' block) adds a ds^T tile
  bool one_pass() const { return br == rows(); }
  size_t fused_bytes(int D) const { return kv_bytes(D) + size_t(2 * rows()) * (D + 8); }
};
TcShape tc_shape(int D) { return D <= 64 ? TcShape{4, 64, 64, 2} : TcShape{4, 32, 32, 2}; }

// The backward through cuDNN (vm/cuda/cudnn_sdpa.hpp) where it takes the call, on contiguous
// operands {..., L, E}; false: not run.
bool cudnn_attention_backward(Context& ctx, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                              const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                              double scale, bool causal) {
  const int r = q.dim(), device = q.device().index;
  const int64_t L = q.size(r - 2), E = q.size(r - 1), S = k.size(r - 2);
  if (!cudnn_sdpa_takes(device, q.dtype(), E, v.size(r - 1))) return false;
  for (const Tensor* t : {&dq, &dk, &dv})
    if (!t->is_contiguous()) return false;
  const int64_t heads = r >= 3 ? q.size(r - 3) : 1;
  auto dense = [&](const Tensor& t, int64_t s) { return SdpaOperand{t.data_bytes(), {heads * s * E, s * E, E, 1}}; };
  SdpaCall c;
  c.dtype = q.dtype(), c.h = heads, c.b = q.numel() / (L * E * heads), c.s_q = L, c.s_kv = S, c.d = E;
  c.scale = scale, c.causal = causal, c.stats = lse.data_bytes();
  c.q = dense(q, L), c.k = dense(k, S), c.v = dense(v, S), c.out = dense(out, L), c.dout = dense(dout, L);
  c.dq = dense(dq, L), c.dk = dense(dk, S), c.dv = dense(dv, S);
  return cudnn_sdpa_backward(device, c, ctx.logs.perf);
}

const char* type_name(DType d) { return d == DType::f16 ? "cr::half_t" : d == DType::bf16 ? "cr::bf16_t" : "float"; }

}  // namespace

bool attention_backward_takes(DType d, int64_t E, int64_t Ev) {
  return (d == DType::f32 || d == DType::f16 || d == DType::bf16) && E >= 1 && E <= 128 && Ev >= 1 && Ev <= 128;
}

bool attention_backward_tc_takes(DType d, int64_t E, int64_t Ev) {
  return (d == DType::f16 || d == DType::bf16) && E == Ev && (E == 64 || E == 128);
}

std::string attention_backward_source(DType d, int E, int Ev) {
  return cat(prelude(), "\ntypedef ", type_name(d), " T;\n#define E ", E, "\n#define EV ", Ev, "\n",
             cuda_source("attention_common.cuh"), cuda_source("attention_bwd_dot.cuh"), cuda_source("attention_bwd.cuh"));
}

std::string attention_backward_tc_source(DType d, int D) {
  const TcShape s = tc_shape(D);
  return cat(prelude(), "\ntypedef ", type_name(d), " T;\n#define MMA_T \"", d == DType::f16 ? "f16" : "bf16",
             "\"\n#define D ", D, "\n#define EV ", D, "\n#define WARPS ", s.warps, "\n#define BR ", s.br, "\n#define BN ",
             s.bn, "\n#define MIN_BLOCKS ", s.min_blocks, "\n", cuda_source("attention_common.cuh"),
             cuda_source("attention_mma.cuh"), cuda_source("attention_bwd_dot.cuh"), cuda_source("attention_bwd_tc.cuh"));
}

bool attention_backward(Context& ctx, const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dout,
                        const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                        double scale, bool causal, const Tensor& mask) {
  const int r = q.dim();
  const int64_t L = q.size(r - 2), E = q.size(r - 1), S = k.size(r - 2), Ev = v.size(r - 1);
  if (!attention_backward_takes(q.dtype(), E, Ev) || L >= (int64_t(1) << 31) || S >= (int64_t(1) << 31)) return false;
  MaskOperand mo;
  if (!mask_operand(mask, mo)) return false;
  const int device = q.device().index;
  const Tensor qc = contiguous(q), kc = contiguous(k), vc = contiguous(v), oc = contiguous(out), gc = contiguous(dout),
               lc = contiguous(lse);
  if (!mask.defined() && cudnn_attention_backward(ctx, dq, dk, dv, gc, qc, kc, vc, oc, lc, scale, causal)) return true;
  // tensor cores (mma.m16n8k16: sm_80 on) for 16-bit head sizes 64 / 128, else the FMA pipes;
  // their 16-byte row copies need aligned operands (a contiguous view may start anywhere)
  auto aligned = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_bytes()) % 16 == 0; };
  const bool tc = attention_backward_tc_takes(q.dtype(), E, Ev) && device_info(device).sm_major >= 8 &&
                  aligned(qc) && aligned(kc) && aligned(vc) && aligned(gc) && aligned(dq) && aligned(dk) && aligned(dv);
  const int64_t bh = q.numel() / (L * E), b = tc ? tc_shape(int(E)).rows() : kTile;
  const int64_t row_blocks = (L + b - 1) / b, key_blocks = (S + b - 1) / b;
  if (bh * std::max(row_blocks, key_blocks) >= (int64_t(1) << 31)) return false;
  const Tensor delta = Tensor::empty({bh * L}, DType::f32, q.device());
  const std::string key = cat(tc ? "attention_bwd_tc_" : "attention_bwd_", dtype_name(q.dtype()), "_", E, "_", Ev);
  auto source = [&] {
    return tc ? attention_backward_tc_source(q.dtype(), int(E)) : attention_backward_source(q.dtype(), int(E), int(Ev));
  };

  void *op = oc.data_bytes(), *gp = gc.data_bytes(), *dp = delta.data_bytes();
  long long rows = bh * L;
  void* dot_args[] = {&op, &gp, &dp, &rows};
  library_launch(ctx, device, key, source, "attention_bwd_dot", (rows + 3) / 4, 128, dot_args);

  void *qp = qc.data_bytes(), *kp = kc.data_bytes(), *vp = vc.data_bytes(), *lp = lc.data_bytes();
  void *dqp = dq.data_bytes(), *dkp = dk.data_bytes(), *dvp = dv.data_bytes();
  const void* mp = mo.p;
  int L_ = int(L), S_ = int(S), heads = r >= 3 ? int(q.size(r - 3)) : 1, kbs = int(key_blocks), rbs = int(row_blocks),
      causal_ = causal;
  float scale_ = float(scale);
  void* kv_args[] = {&qp,  &kp,     &vp,      &gp,  &lp,     &dp,     &dkp,    &dvp,   &L_,    &S_,
                     &heads, &kbs, &scale_, &causal_, &mp, &mo.kind, &mo.s0, &mo.s1, &mo.row, &mo.col};
  void* q_args[] = {&qp, &kp, &vp, &gp, &lp, &dp, &dqp, &L_, &S_, &heads, &rbs, &scale_, &causal_,
                    &mp, &mo.kind, &mo.s0, &mo.s1, &mo.row, &mo.col};
  const TcShape ts = tc_shape(int(E));
  if (tc && ts.one_pass() && !deterministic()) {  // (dq by float atomics: their order varies)
    const int64_t n = bh * L * E;
    const Tensor acc = Tensor::empty({n}, DType::f32, q.device());
    fill_pattern(acc.data_bytes(), size_t(n), 4, 0u, device);
    void* ap = acc.data_bytes();
    void* one_args[] = {&qp,  &kp,     &vp,      &gp,  &lp,     &dp,     &dkp,    &dvp,   &L_,    &S_,    &heads,
                        &kbs, &scale_, &causal_, &mp, &mo.kind, &mo.s0, &mo.s1, &mo.row, &mo.col, &ap};
    library_launch(ctx, device, key, source, "attention_bwd_tc", bh * key_blocks, 32 * ts.warps, one_args,
                   ts.fused_bytes(int(E)));
    long long n4 = n / 4;
    void* cast_args[] = {&ap, &dqp, &n4, &scale_};
    library_launch(ctx, device, key, source, "attention_bwd_dq_cast", std::min<int64_t>((n4 + 255) / 256, 4096), 256,
                   cast_args);
  } else if (tc) {
    library_launch(ctx, device, key, source, "attention_bwd_kv_tc", bh * key_blocks, 32 * ts.warps, kv_args,
                   ts.kv_bytes(int(E)));
    library_launch(ctx, device, key, source, "attention_bwd_q_tc", bh * row_blocks, 32 * ts.warps, q_args,
                   ts.q_bytes(int(E)));
  } else if (q.dtype() == DType::f32 && !deterministic()) {  // (dq by float atomics, into dq itself)
    fill_pattern(dqp, size_t(bh * L * E), 4, 0u, device);
    void* one_args[] = {&qp,  &kp,     &vp,      &gp,  &lp,     &dp,     &dkp,    &dvp,   &L_,    &S_,    &heads,
                        &kbs, &scale_, &causal_, &mp, &mo.kind, &mo.s0, &mo.s1, &mo.row, &mo.col, &dqp};
    library_launch(ctx, device, key, source, "attention_bwd", bh * key_blocks, kThreads, one_args, kv_shared(E, Ev));
  } else {
    library_launch(ctx, device, key, source, "attention_bwd_kv", bh * key_blocks, kThreads, kv_args, kv_shared(E, Ev));
    library_launch(ctx, device, key, source, "attention_bwd_q", bh * row_blocks, kThreads, q_args, q_shared(E, Ev));
  }
  return true;
}

}  // namespace cr::cuda
