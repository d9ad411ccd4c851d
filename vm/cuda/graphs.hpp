// CUDA graphs: the work a thread queues on one device, recorded once by stream capture and
// replayed with one launch (the reduce-overhead replay, vm/graph/cudagraph.cpp; T.cuda.CUDAGraph).
//
// A capture runs on a side stream of the pool that waits for the current stream's work, made
// current for the capture, in relaxed mode (allocations are allowed); what the work allocates
// comes from the graph's private memory pool (vm/cuda/memory.hpp), which the graph keeps: a
// replay writes the same addresses. Anything that synchronises (a copy to the host, item(), a
// print) breaks the capture; end() then raises saying so. A replay goes to the current stream.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "vm/cuda/driver.hpp"

namespace cr::cuda {

struct Pool;
struct DeviceCheck;

// Whether this driver has CUDA graphs (why not, in `why`).
bool graphs_available(std::string* why = nullptr);

class Graph {
 public:
  // pool: another graph's, to share its memory (captures replayed in the order they were made)
  explicit Graph(int index, std::shared_ptr<Pool> pool = nullptr);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  void begin();  // captures the calling thread's work on the device from here
  void end();    // stops capturing and instantiates; raises what broke the capture
  void abort() noexcept;  // stops a capture that failed (an error in the captured work)
  void launch() const;    // one replay, on the current stream
  void reset();           // drops the recording (the pool stays)
  void share_pool(const Graph& other);  // before a capture: record into other's pool
  bool capturing() const { return side_ >= 0; }
  bool ready() const { return exec_ != nullptr; }
  int index() const { return index_; }
  size_t nodes() const { return nodes_; }
  const std::shared_ptr<Pool>& pool() const { return pool_; }

 private:
  void leave() noexcept;  // restores the current stream and leaves the pool
  int index_;
  std::shared_ptr<Pool> pool_;
  CUgraph graph_ = nullptr;
  CUgraphExec exec_ = nullptr;
  int64_t side_ = -1, prev_ = -1;  // during a capture: its stream, and the one current before
  size_t nodes_ = 0;
  std::vector<std::shared_ptr<DeviceCheck>> checks_;  // the check words its kernels write
};

// T.cuda.CUDAGraph's graphs, by id (the Lua boundary holds numbers).
int64_t graph_new(int index);
Graph& graph_at(int64_t id);  // raises on an unknown id
void graph_delete(int64_t id);

}  // namespace cr::cuda
