// Array helpers that generated CPU kernels call: the numerics of pointwise functions and of
// reductions live here, compiled with crescent itself (vectorised, -march of the runtime), so
// compiled graphs compute exactly what the eager kernels compute.
//
// Why calls and not inline code: libgccjit 12 cannot mark a declaration `simd`, so neither glibc's
// libmvec nor SLEEF can be reached by GCC's vectoriser from JIT code; emitting our own polynomial
// exp/log/erf as libgccjit trees would duplicate vm/kernels/vmath.hpp. A generated kernel instead
// evaluates its inner loop in blocks of kBlock elements held in stack arrays (L1-resident): plain
// arithmetic is emitted inline, and each function call or reduction is one call over the block.
#pragma once
#include <cstdint>

#include "jit/reduce.hpp"
#include "vm/dtype.hpp"
#include "vm/kernels/lanes.hpp"
#include "vm/kernels/stream.hpp"
#include "vm/registry.hpp"  // cr::BlockFn

namespace cr::jit {

constexpr int64_t kBlock = 512;  // elements per block of a generated inner loop
static_assert(kBlock == lanes::kSoftmaxBlock, "eager softmax rows fold in the blocks of generated loops");

// out[i] = f(a[i], b[i]) for i < n; a, b and out are contiguous arrays of the op's compute dtype
// (out: bool for predicates). Unary functions ignore b.
using BlockFn = cr::BlockFn;

// Reductions over a block (jit/reduce.hpp): folds x[0..n) (contiguous, dtype `in`) into *acc.
using ReduceFn = void (*)(const void* x, int64_t n, void* acc);
ReduceFn reduce_fn(ReduceKind kind, DType in);  // nullptr when unsupported (float16 / bfloat16)
// Merges the partial accumulator `b` (positions after a's) into *a: for split reductions.
void reduce_merge(ReduceKind kind, DType acc, void* a, const void* b);

// Streaming stores (vm/kernels/stream.hpp): a generated kernel computes a block of a large output
// in a stack array and hands it to stream_block, which writes it to dst with non-temporal stores;
// stream_fence at the end of the kernel's work items makes those stores visible before the thread
// pool reports them done.
using StreamFn = void (*)(void* dst, const void* src, int64_t nbytes);
using FenceFn = void (*)();
using cr::stream_block;
using cr::stream_fence;

}  // namespace cr::jit
