// The simulated process group (T.distributed.init_process_group("simulated")): a test backend
// for CPU tensors, so that collectives, their order across ranks, timeouts and compiled
// distributed steps run without GPUs. Ranks are processes (crescent --nproc N); a collective is
// rank r writing file "sim-<run>-<seq>-<r>" (then a rename) into a shared folder and reading
// every other rank's of the same sequence number. Every rank reduces in rank order, so all get
// the same bits. Slow (files): not a transport for training - crescent has no CPU backend.
#pragma once
#include <cstdint>
#include <string>

#include "vm/cuda/nccl.hpp"
#include "vm/tensor.hpp"

namespace cr::dist {

class SimGroup {
 public:
  SimGroup(std::string dir, std::string run, int rank, int world, double timeout_s);
  // Raises (and the group is aborted) when a rank posted another collective or shape at this
  // sequence number, or did not post within the timeout.
  void run(const char* name, cuda::Coll coll, const Tensor& send, const Tensor& recv, cuda::RedOp op, int root);

 private:
  struct Header {
    char magic[8] = {'c', 'r', 's', 'i', 'm', '0', '1', 0};
    int32_t coll = 0, dtype = 0, op = 0, root = 0;
    int64_t seq = 0, numel = 0;
  };
  std::string path(int64_t seq, int rank) const;
  void post(const Header& h, const Tensor& send) const;
  std::string await(const char* name, const Header& mine, int q);
  std::string describe(const Header& h) const;

  std::string dir_, run_;
  int rank_, world_;
  double timeout_s_;
  int64_t seq_ = 0;
  std::string aborted_;  // why the group is unusable ("" while it is)
};

}  // namespace cr::dist
