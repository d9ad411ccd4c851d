#include "vm/cuda/graphs.hpp"

#include <map>
#include <mutex>

#include "vm/cuda/blas.hpp"
#include "vm/cuda/cudnn.hpp"
#include "vm/cuda/checks.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/error.hpp"

namespace cr::cuda {
namespace {

constexpr int kCaptureRelaxed = 2;  // CU_STREAM_CAPTURE_MODE_RELAXED: allocations may happen

int64_t current_id(int index) { return int64_t(index) * kSlots + current_slot(index); }

std::mutex g_graphs_mutex;
std::map<int64_t, std::unique_ptr<Graph>> g_graphs;
int64_t g_next_graph = 1;

}  // namespace

bool graphs_available(std::string* why) {
  const Driver* d = driver(why);
  if (!d) return false;
  if (d->cuStreamBeginCapture && d->cuStreamEndCapture && d->cuGraphInstantiateWithFlags && d->cuGraphLaunch &&
      d->cuGraphExecDestroy && d->cuGraphDestroy && d->cuGraphGetNodes && d->cuStreamIsCapturing)
    return true;
  if (why) *why = "the CUDA driver lacks the graph API (cuStreamBeginCapture_v2 ... cuGraphLaunch)";
  return false;
}

Graph::Graph(int index, std::shared_ptr<Pool> pool) : index_(index), pool_(pool ? std::move(pool) : pool_new(index)) {
  std::string why;
  if (!graphs_available(&why)) fail("CUDA graphs: " + why);
}

Graph::~Graph() {
  abort();
  try {
    reset();
  } catch (const std::exception&) {  // (the context is going down with the process)
  }
}

void Graph::begin() {
  if (capturing()) fail("CUDAGraph:capture: a capture of this graph is already under way");
  reset();
  use_device(index_);
  prev_ = current_id(index_);
  const int64_t side = pool_stream(index_);
  stream_wait_stream(side, prev_);  // (the captured work comes after what was queued before)
  set_current_stream(side);
  side_ = side;
  try {
    blas_prepare(index_);  // (a handle made inside the capture would allocate its workspace there)
    cudnn_prepare(index_);
    pool_enter(pool_.get());
    CR_CU(cuStreamBeginCapture(stream_of(side_), kCaptureRelaxed), "beginning a CUDA graph capture");
  } catch (...) {
    leave();
    throw;
  }
}

void Graph::leave() noexcept {
  pool_enter(nullptr);
  if (prev_ >= 0) set_current_stream(prev_);
  side_ = -1;
}

void Graph::end() {
  if (!capturing()) fail("CUDAGraph: end of a capture that was not begun");
  CUstream s = stream_of(side_);
  CUgraph g = nullptr;
  const CUresult rc = driver()->cuStreamEndCapture(s, &g);
  checks_ = move_deferred(s, stream_of(prev_));
  leave();
  if (rc != 0) {
    if (g) driver()->cuGraphDestroy(g);
    check(rc, "cuStreamEndCapture", "the captured work synchronised with the host or used another stream");
  }
  graph_ = g;
  size_t n = 0;
  CR_CU(cuGraphGetNodes(graph_, nullptr, &n), "counting a CUDA graph's nodes");
  nodes_ = n;
  CR_CU(cuGraphInstantiateWithFlags(&exec_, graph_, 0), "instantiating a CUDA graph");
}

void Graph::abort() noexcept {
  if (!capturing()) return;
  CUgraph g = nullptr;
  driver()->cuStreamEndCapture(stream_of(side_), &g);
  if (g) driver()->cuGraphDestroy(g);
  try {
    move_deferred(stream_of(side_), stream_of(prev_));
  } catch (const std::exception&) {
  }
  leave();
}

void Graph::launch() const {
  if (!exec_) fail("CUDAGraph:replay: nothing captured (capture first)");
  use_device(index_);
  CUstream s = current_stream(index_);
  CR_CU(cuGraphLaunch(exec_, s), "replaying a CUDA graph");
  launch_counts().graphs.fetch_add(1, std::memory_order_relaxed);
  launch_counts().graph_nodes.fetch_add(int64_t(nodes_), std::memory_order_relaxed);
  for (const auto& c : checks_) defer_check(c, s);
}

void Graph::share_pool(const Graph& other) {
  if (capturing()) fail("CUDAGraph: the pool of a graph cannot change during its capture");
  if (other.index_ != index_)
    fail(cat("CUDAGraph: a graph of cuda:", index_, " cannot share the pool of a graph of cuda:", other.index_));
  pool_ = other.pool_;
}

int64_t graph_new(int index) {
  if (index < 0 || index >= device_count()) fail(cat("T.cuda.CUDAGraph: no device cuda:", index));
  auto g = std::make_unique<Graph>(index);
  std::lock_guard<std::mutex> lock(g_graphs_mutex);
  const int64_t id = g_next_graph++;
  g_graphs[id] = std::move(g);
  return id;
}

Graph& graph_at(int64_t id) {
  std::lock_guard<std::mutex> lock(g_graphs_mutex);
  auto it = g_graphs.find(id);
  if (it == g_graphs.end()) fail(cat("T.cuda.CUDAGraph: no graph ", id));
  return *it->second;
}

void graph_delete(int64_t id) {
  std::unique_ptr<Graph> g;
  {
    std::lock_guard<std::mutex> lock(g_graphs_mutex);
    auto it = g_graphs.find(id);
    if (it == g_graphs.end()) return;
    g = std::move(it->second);
    g_graphs.erase(it);
  }
}

void Graph::reset() {
  if (exec_) driver()->cuGraphExecDestroy(exec_);  // (a launch in flight completes first)
  if (graph_) driver()->cuGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
  nodes_ = 0;
  checks_.clear();
}

}  // namespace cr::cuda
