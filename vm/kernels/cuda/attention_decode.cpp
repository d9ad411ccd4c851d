#include "vm/kernels/cuda/attention_decode.hpp"

#include <algorithm>

#include "vm/cuda/driver.hpp"
#include "vm/kernels/cuda/attention.hpp"
#include "vm/kernels/cuda/library.hpp"
#include "vm/kernels/cuda/prelude.hpp"
#include "vm/kernels/cuda/sources.hpp"
#include "vm/kernels/loop.hpp"

namespace cr::cuda {
namespace {

constexpr int64_t kTile = 32;  // keys a tile (TK in attention_decode.cuh)
constexpr int kThreads = 128;  // NT
constexpr int kRowThreads = 256;  // RNT (attention_row_1, one query row)
constexpr int64_t kMaxCluster = 8;  // (the portable thread-block cluster size: attention_row_1_c8)

int pow2_at_least(int64_t n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}
int64_t instance_rows(int64_t L) { return L <= 2 ? 2 : L <= 4 ? 4 : 8; }
const char* type_name(DType d) { return d == DType::f16 ? "cr::half_t" : d == DType::bf16 ? "cr::bf16_t" : "float"; }

}  // namespace

bool attention_decode_takes(DType d, int64_t L, int64_t E, int64_t Ev) {
  return (d == DType::f32 || d == DType::f16 || d == DType::bf16) && L >= 1 && L <= kDecodeMaxRows && E >= 1 &&
         E <= 128 && Ev >= 1 && Ev <= 128;
}

DecodeSplits attention_decode_splits(int64_t bh, int64_t S, int sms, bool clusters) {
  const int64_t tiles = std::max<int64_t>(1, (S + kTile - 1) / kTile);
  const int64_t want = (2 * int64_t(std::max(sms, 1)) + bh - 1) / bh;
  int64_t splits = std::clamp<int64_t>(want, 1, tiles);
  if (clusters) {
    splits = std::min(splits, kMaxCluster);
    while (splits & (splits - 1)) splits &= splits - 1;  // (the largest power of two below)
    if (splits > 1) return {splits, (tiles + splits - 1) / splits * kTile, true};
  }
  const int64_t chunk = (tiles + splits - 1) / splits;
  return {(tiles + chunk - 1) / chunk, chunk * kTile};  // (whole tiles a split: none is empty)
}

std::string attention_decode_source(DType d, int E, int Ev) {
  return cat(prelude(), "\ntypedef ", type_name(d), " T;\n#define E ", E, "\n#define EV ", Ev, "\n#define EVP ",
             pow2_at_least(Ev), "\n", cuda_source("attention_common.cuh"),
             cuda_source("attention_decode.cuh"));
}

void attention_decode(Context& ctx, const Tensor& out, const HeadOperand& q, const HeadOperand& k,
                      const HeadOperand& v, int64_t L, int64_t S, int64_t E, int64_t Ev, int64_t heads, double scale,
                      bool causal, const MaskOperand& mask, const Tensor& lse, const NewRows& rows) {
  const int device = out.device().index;
  const int64_t bh = out.numel() / (L * Ev);
  const DeviceInfo& info = device_info(device);
  const DecodeSplits sp = attention_decode_splits(bh, S, info.multiprocessors, info.sm_major >= 9 && L == 1);
  const int64_t splits = sp.splits;
  int chunk = int(sp.chunk);
  const bool separate = splits > 1 && !sp.cluster;  // (partials in a workspace, merged by attention_combine)
  const Tensor part = separate ? Tensor::empty({bh * L * splits * (Ev + 2)}, DType::f32, out.device()) : Tensor();
  const std::string key = cat("attention_decode_", dtype_name(out.dtype()), "_", E, "_", Ev);
  auto source = [&] { return attention_decode_source(out.dtype(), int(E), int(Ev)); };
  const void *qp = q.p, *kp = k.p, *vp = v.p, *mp = mask.p;
  void *op = out.data_bytes(), *pp = separate ? part.data_bytes() : nullptr, *lp = lse.defined() ? lse.data_bytes() : nullptr;
  int L_ = int(L), S_ = int(S), heads_ = int(heads), splits_ = int(splits), causal_ = causal, kind = mask.kind;
  long long qs0 = q.s0, qs1 = q.s1, qsr = q.row, ks0 = k.s0, ks1 = k.s1, ksr = k.row, vs0 = v.s0, vs1 = v.s1, vsr = v.row,
            ms0 = mask.s0, ms1 = mask.s1, msr = mask.row, msc = mask.col;
  float scale_log2 = float(scale * 1.4426950408889634);  // (log2 e: the kernel's exponentials are exp2)
  if (rows.k && L != 1) fail("internal: attention_decode writes a cache only with one query row");
  NewRows nr = rows;
  void* args[] = {&qp,  &kp,  &vp,  &op,  &pp,  &lp,  &L_,         &S_,      &heads_, &splits_, &chunk, &qs0, &qs1, &qsr,
                  &ks0, &ks1, &ksr, &vs0, &vs1, &vsr, &scale_log2, &causal_, &mp,     &kind,    &ms0,   &ms1, &msr,
                  &msc, &nr};
  const std::string fn = sp.cluster ? cat("attention_row_1_c", splits)
                         : L == 1   ? std::string("attention_row_1")
                                    : cat("attention_split_", instance_rows(L));
  library_launch(ctx, device, key, source, fn.c_str(), bh * splits, L == 1 ? kRowThreads : kThreads, args);
  if (!separate) return;
  void* combine_args[] = {&pp, &op, &lp, &splits_};
  library_launch(ctx, device, key, source, "attention_combine", bh * L, kThreads, combine_args);
}

}  // namespace cr::cuda
