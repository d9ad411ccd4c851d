// Fused attention: out = softmax(q k^T * scale) v in one kernel that never writes the {L, S}
// scores (flash attention's online softmax). float16 / bfloat16 run on tensor cores (mma.sync,
// attention.cuh); float32 on the FMA pipes (attention_simt.cuh: tensor cores would round it to
// tf32). Library kernels (library.hpp): CUDA C written once, instantiated per dtype and head size.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "vm/registry.hpp"

namespace cr::cuda {

// Whether a kernel takes q / k / v of dtype d with L query rows, head size E (q, k) and Ev (v)
// and this scale: a positive scale, and float16 or bfloat16 with E == Ev one of 16, 32, 64, 128,
// or float32 with at least 32 query rows, E a multiple of 4 and Ev of 16, both at most 128, or
// any of the three with at most 8 query rows and head sizes up to 128 (the split kernel,
// attention_decode.hpp). The one predicate of T.attention, F.scaled_dot_product_attention and
// the graph rewrite.
bool attention_takes(DType d, int64_t L, int64_t E, int64_t Ev, double scale);

// out {..., L, Ev} (contiguous) = attention of q {..., L, E}, k {..., S, E}, v {..., S, Ev} on one
// CUDA device, query i seeing keys 0..i when causal. mask (undefined: none) is a view of the
// scores' shape {..., L, S} (broadcast dims of stride 0), bool (true: attend) or q's dtype (added
// to the scaled scores). False (nothing ran) when the kernel does not take them (attention_takes;
// a mask with more than two batch dims) and on GPUs before sm_80. lse (undefined: not wanted),
// float32 {..., L} contiguous, gets each row's logsumexp of its scaled, masked scores.
bool attention(Context& ctx, const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
               bool causal, const Tensor& mask, const Tensor& lse = Tensor());

// attention() after index_put_(dst, {idx}, values), the static KV cache's step, as one kernel
// where it takes the call: one query row, idx one int64 position on the device (1-based, along
// dst's first dim: the cache's slots), k and v views of dst's storage whose rows at that slot
// the write fills exactly (cache_row), values and q apart from that storage. False: nothing ran
// (the caller runs the two ops). A slot out of range raises as index_put_'s does.
bool attention_cache(Context& ctx, const Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                     bool causal, const Tensor& mask, const Tensor& dst, const Tensor& idx, const Tensor& values);

// Where index_put_(dst, {idx}, src) puts kv's rows (dst {S, rest...}, its first dim the slots;
// src broadcast to {1, rest...}; kv {..., S, E} a view of dst's storage with kv's slot axis
// dst's first dim): every other dim of kv of size > 1 is one of dst's rest dims (`taken`), the
// rest of dst's dims sit at coordinates `fixed`. Head (b, h) of kv (batch dims folded as the
// kernels fold them: {b, h} strides s0 / s1) is then written from src's elements at `offset` +
// b * s0 + h * s1 + e. False when kv is not such a view.
struct CacheRow {
  int64_t offset = 0;
  long long s0 = 0, s1 = 0;
  std::vector<char> taken;
  std::vector<int64_t> fixed;
};
bool cache_row(const Tensor& dst, const Tensor& src, const Tensor& kv, CacheRow* row);

// A mask view's strides as the kernels read them: batch dims folded into {s0, s1} like q's (at
// most two of them: a mask view's broadcast strides cannot be merged), then row and key.
struct MaskOperand {
  int kind = 0;  // 0 none, 1 q's dtype, 2 bool
  const void* p = nullptr;
  long long s0 = 0, s1 = 0, row = 0, col = 0;
};
// o = mask m's operand (undefined: kind 0); false for masks of more than two batch dims.
bool mask_operand(const Tensor& m, MaskOperand& o);

// The module source for dtype d and head size E (tests compile it to CUBIN without a GPU).
std::string attention_source(DType d, int E);

}  // namespace cr::cuda
