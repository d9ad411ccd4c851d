// Split-K attention for a few query rows over a long key axis (flash-decoding,
// attention_decode.cuh): what a decoder's one-token step runs. An internal header of
// attention.cpp, which picks the kernel.
#pragma once
#include <cstdint>
#include <string>

#include "vm/registry.hpp"

namespace cr::cuda {

struct MaskOperand;

// Query rows the split kernels take at most (attention_row_1 for one, attention_split_N for 2, 4, 8).
constexpr int64_t kDecodeMaxRows = 8;

// Whether the split kernel takes dtype d (float32, float16, bfloat16) with L <= 8 query rows and
// head sizes E (q, k) and Ev (v) from 1 to 128.
bool attention_decode_takes(DType d, int64_t L, int64_t E, int64_t Ev);

// The key axis of bh (batch, head) pairs and S keys cut for a GPU of `sms` SMs: about two blocks
// per SM, `splits` slices of `chunk` keys (whole tiles of 32); one for short S. Fixed per shape,
// as a CUDA graph's replays need. With `clusters` (sm_90, one query row) the splits are 1, 2, 4
// or 8, one thread-block cluster a (batch, head) that merges its own partials (`cluster`; the
// last slices may be empty), instead of the combine kernel.
struct DecodeSplits {
  int64_t splits, chunk;
  bool cluster = false;
};
DecodeSplits attention_decode_splits(int64_t bh, int64_t S, int sms, bool clusters = false);

// attention() (attention.hpp) by the split kernel and, for several splits, its cluster's merge
// or the combine kernel (float32 partials in a workspace from the device allocator). q / k / v
// as attention.cpp folds them: {pointer, batch strides s0 / s1, row stride}, rows of contiguous
// elements.
struct HeadOperand {
  const void* p;
  long long s0, s1, row;
};
// A cache write the one-row kernel makes as it attends (attention_decode.cuh's NewRows, the same
// layout): head bh's new k row at k + its batch strides {ks0, ks1} (elements contiguous), v's
// likewise, stored at the 1-based slot *pos (int64 on the device) of the cache k and v view; a
// slot outside 1..S is reported through `check` (a DeviceCheck word) and nothing is written.
struct NewRows {
  const void* k = nullptr;
  const void* v = nullptr;
  long long ks0 = 0, ks1 = 0, vs0 = 0, vs1 = 0;
  const void* pos = nullptr;
  void* check = nullptr;
};

void attention_decode(Context& ctx, const Tensor& out, const HeadOperand& q, const HeadOperand& k,
                      const HeadOperand& v, int64_t L, int64_t S, int64_t E, int64_t Ev, int64_t heads, double scale,
                      bool causal, const MaskOperand& mask, const Tensor& lse, const NewRows& rows = NewRows{});

// The module source for dtype d and head sizes E / Ev (tests compile it to CUBIN without a GPU).
std::string attention_decode_source(DType d, int E, int Ev);

}  // namespace cr::cuda
