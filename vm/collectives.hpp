// The default process group of this process (T.distributed, issue 40): an NCCL communicator for
// CUDA tensors (vm/cuda/nccl.hpp), or the simulated group for CPU tensors (vm/sim_group.hpp, a
// test backend). The eager entries (vm/lua/dist_api.cpp) and the collective registry ops
// (vm/ops/collectives.cpp, what compiled graphs hold) both run collectives through here.
#pragma once
#include <memory>
#include <string>

#include "vm/cuda/nccl.hpp"
#include "vm/tensor.hpp"

namespace cr::dist {

class SimGroup;

struct Group {
  cuda::NcclComm* comm = nullptr;  // the nccl backend
  std::shared_ptr<SimGroup> sim;   // the simulated backend
  int rank = 0, world = 0, device = 0;
  double timeout_s = 300;
  bool active() const { return comm != nullptr || sim != nullptr; }
};
Group& group();  // (one per process, as NCCL's communicator)

const char* coll_name(cuda::Coll c);  // "all_reduce", "broadcast", "all_gather", "reduce_scatter"

// Runs `coll` from send into recv (checked: dtypes, element counts, devices, contiguity): through
// NCCL on `stream` (a streams.hpp id; -1: the current stream), or the simulated group. `name`:
// the caller's op, which its errors do not repeat (the caller prefixes them).
void collective(const char* name, cuda::Coll coll, const Tensor& send, const Tensor& recv, cuda::RedOp op, int root,
                int64_t stream = -1);

}  // namespace cr::dist
