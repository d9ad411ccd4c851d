// When a store of a generated CPU kernel streams past the cache (jit/cpu/stream_rule.cpp); the
// emitter (emit.cpp) writes such a store through a stack block and stream_block
// (vm/kernels/stream.hpp).
#pragma once

#include "jit/loop_ir.hpp"

namespace cr::jit::cpu {

// `from`: the bytes from which a store streams (stream_store_bytes(), or a tuning candidate's;
// 1: every store that may stream does)
bool streamed(const Kernel& k, const Store& s, int64_t from);
bool any_streamed(const Kernel& k, int64_t from);  // some store of k streams

}  // namespace cr::jit::cpu
