// Selections on a CUDA device (select.cuh): masked_select and nonzero by a two-pass compaction
// (tile counts, their scan, an ordered write: the size read back once, as PyTorch does), and
// advanced indexing (index, index_put / index_put_) with the positions checked on the device.
#pragma once
#include <string>
#include <vector>

#include "vm/registry.hpp"

namespace cr::cuda {

// The elements of x where mask is true, in order (x and mask contiguous, of one numel, on one
// device): a new 1-D tensor. Synchronises once (to size the result).
Tensor masked_select(Context& ctx, const Tensor& x, const Tensor& mask);
// nonzero of contiguous x: {count, x.dim()} int64, 1-based coordinates in row-major order.
Tensor nonzero(Context& ctx, const Tensor& x);

// Advanced indexing over self's first k dims: idx {k, nb} int64 (contiguous, 1-based), the
// selection {nb, rest of self's dims} contiguous. A position outside its dim raises at the
// device's next synchronisation as `op`'s error about whats[j] ("dim 1 of size 5"); nothing is
// read or written for it.
void index_gather(Context& ctx, const Tensor& out, const Tensor& self, const Tensor& idx, const std::string& op,
                  const std::vector<std::string>& whats);
// self[selection] = values (the selection's shape, any strides: a broadcast or permuted view is
// read in place), or += when accumulate (atomic; the ordered sum of deterministic mode copies
// a strided values once).
void index_put(Context& ctx, const Tensor& self, const Tensor& idx, const Tensor& values, bool accumulate,
               const std::string& op, const std::vector<std::string>& whats);

std::string select_source(DType d);  // (tests compile it to CUBIN without a GPU)

}  // namespace cr::cuda
