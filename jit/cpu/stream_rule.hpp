// When a store of a generated CPU kernel streams past the cache (jit/cpu/stream_rule.cpp); the
// emitter (emit.cpp) writes such a store through a stack block and stream_block
// (vm/kernels/stream.hpp).
#pragma once

#include "jit/loop_ir.hpp"

namespace cr::jit::cpu {

bool streamed(const Kernel& k, const Store& s);
bool any_streamed(const Kernel& k);  // some store of k streams

}  // namespace cr::jit::cpu
