// reduce-overhead on CUDA (README "CUDA graphs"): a proven plan (replay.cpp) is recorded into a
// CUDA graph after one replay from the host, and replayed with one launch from then on.
//  - arguments are copied into static buffers of the graph (and back, when the graph writes
//    them); tensors of the Lua state (weights, caches) are used at their address - one that
//    moved records the graph again;
//  - results live in the graph's private memory pool. Unlike PyTorch, a result stays valid after
//    the next replay: a replay first copies the results of the last one that are still
//    referenced out of the pool (one device copy each) - never stale data, never an error;
//  - random ops of compiled kernels read the seed and a base offset from device words that each
//    replay sets, and advance the generator as the host replay would (the same numbers);
//  - what cannot be recorded (a random op on an eager kernel, a result that is a view of an
//    argument, a synchronisation inside the graph) keeps the host replay; CRESCENT_LOGS=cudagraphs
//    says why.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "vm/graph/graph.hpp"

namespace cr::cuda {
class Graph;
}

namespace cr::graph {

struct CudaReplay {
  std::unique_ptr<cuda::Graph> graph;
  std::string refused;  // why this plan replays from the host ("": it may record)
  int host_runs = 0;    // host replays so far (the first loads kernels and handles)
  int records = 0;
  int device = -1;
  struct Input {
    int32_t vid = -1;
    int32_t cand = -1;
    bool arg = false;          // copied into `buffer` before a replay (and back when `written`)
    bool written = false;
    const void* addr = nullptr;  // a state tensor's address as recorded
    size_t nbytes = 0;
    Tensor buffer;
  };
  std::vector<Input> inputs;
  Tensor rng;                  // {seed, base offset} of the graph's random draws, set per replay
  int64_t rng_host[2] = {0, 0};
  uint64_t draws = 0;          // values the graph draws per replay
  std::vector<Storage*> blocks;  // the results' storages of the last replay (one reference each)
  std::vector<void*> block_addr;
  struct Out {
    int32_t block;
    Shape sizes, strides;
    int64_t offset;
    DType dtype;
  };
  std::vector<Out> outs;

  ~CudaReplay();
  void drop();  // forgets the recording (results still referenced are copied out first)
};

}  // namespace cr::graph
