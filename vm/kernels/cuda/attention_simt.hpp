// float32 fused attention on the FMA pipes (attention_simt.cuh): the module source and its block
// shape. An internal header of attention.cpp, which picks the kernel and launches it.
#pragma once
#include <cstddef>
#include <string>

namespace cr::cuda {

// A block: 256 threads, 16 * ra query rows, keys in tiles of bn, output columns in groups of g;
// pk is the shared-memory pitch of q and k rows (floats).
struct SimtShape {
  int ra = 4, bn = 64, min_blocks = 2, pk = 68, g = 4;
  int rows() const { return 16 * ra; }
  size_t shared_bytes(int Ev) const;  // q, one k tile, one v tile, p
};
// The block for head sizes E / Ev under `shared_limit` bytes of shared memory a block; rows() is
// 0 when no block fits (the caller runs the composite).
SimtShape simt_shape(int E, int Ev, size_t shared_limit);

// The module source for head sizes E (q, k: a multiple of 4) and Ev (v: a multiple of 16), with
// the block simt_shape picks under shared_limit.
std::string attention_simt_source(int E, int Ev, size_t shared_limit);

}  // namespace cr::cuda
