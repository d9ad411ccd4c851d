// NCCL (the collectives of T.distributed), loaded at run time like the driver: dlopen of
// $CRESCENT_NCCL_LIB (the file, or a folder holding libnccl.so.2), "libnccl.so.2", then
// $CUDA_HOME/lib64 and /usr/local/cuda/lib64. Linking it would make every binary need it; PyTorch's
// pip wheels carry one (nvidia/nccl/lib), which CRESCENT_NCCL_LIB may name.
//
// Communicators are blocking (ncclConfig_t.blocking = 1): a non-blocking one makes NCCL start a
// thread per collective (~100 us a call). A call that may wait for the other ranks (init, an
// enqueue that connects peers, finalize) runs under a watchdog thread, which ends the process
// with a clear message when it outlives its deadline, so a rank that never comes is no hang (a
// call blocked inside NCCL cannot be unwound). Waiting for queued collectives (nccl_wait) polls
// instead: past the timeout it aborts the communicator and raises an error Lua can catch.
#pragma once
#include <array>
#include <cstddef>
#include <string>

#include "vm/cuda/driver.hpp"
#include "vm/dtype.hpp"

namespace cr::cuda {

bool nccl_available(std::string* why = nullptr);
int nccl_version();  // ncclGetVersion's code, e.g. 22809; raises without NCCL

using NcclId = std::array<char, 128>;  // ncclUniqueId
NcclId nccl_unique_id();

struct NcclComm;  // ncclComm
// Joins the communicator of `world` ranks as `rank` on device `index` (collective: every rank
// calls it with the same id); the process ends when the others do not come within timeout_s.
NcclComm* nccl_comm_init(const NcclId& id, int rank, int world, int index, double timeout_s);
void nccl_comm_destroy(NcclComm* c, double timeout_s);  // flushes its work first
void nccl_comm_abort(NcclComm* c);
// Waits on the host until the work queued so far on `stream` is done (a collective the other
// ranks never join never is): past timeout_s, or on an error NCCL reports, aborts the
// communicator (ncclCommAbort: later collectives raise) and raises a catchable error naming
// `what`, `rank` and the timeout. Nothing of NCCL is blocked meanwhile, so no watchdog is needed.
void nccl_wait(NcclComm* c, CUstream stream, const char* what, int rank, double timeout_s);

enum class Coll { all_reduce, broadcast, all_gather, reduce_scatter };
enum class RedOp { sum = 0, prod = 1, max = 2, min = 3, avg = 4 };  // ncclRedOp_t's values
// Queues collective `c` on `stream` of the communicator's device. count: the elements of send for
// all_reduce / broadcast / all_gather, of recv for reduce_scatter; root: broadcast's source rank.
// bool travels as uint8 with sum -> max and prod -> min (logical or / and), as in PyTorch.
void nccl_collective(NcclComm* c, Coll coll, const void* send, void* recv, size_t count, DType d, RedOp op, int root,
                     CUstream stream);

}  // namespace cr::cuda
