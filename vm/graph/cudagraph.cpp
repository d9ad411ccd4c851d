#include "vm/graph/cudagraph.hpp"

#include <algorithm>

#include "vm/cuda/graphs.hpp"
#include "vm/cuda/memory.hpp"
#include "vm/devices.hpp"
#include "vm/graph/segment.hpp"

namespace cr::graph {
namespace {

constexpr int kMaxRecords = 4;  // a plan whose state tensors keep moving stays on the host replay

void keep_block(void*, void*) {}  // (a result block is the graph's: CudaReplay frees it)

int cuda_device_of(const Graph& g) {
  for (const Value& v : g.values)
    if (v.meta.device.type == 1) return v.meta.device.index;
  return -1;
}

// Whether the graph's native code is in (or it has none): a recording keeps the kernels it saw.
bool native_settled(const Graph& g) {
  if (!g.native) return true;
  std::lock_guard<std::mutex> lock(g.native->mutex);
  return g.native->done;
}

// A result block the last replay handed out and that is still referenced: its storage gets a
// copy in memory of its own, so the next replay cannot change it. Returns the graph's storage
// for the block from now on (null when `keep` is false).
Storage* free_block(Storage* s, void* block, bool keep) {
  if (s->refs.load(std::memory_order_acquire) == 1) {
    if (keep) return s;
    storage_release(s);
    return nullptr;
  }
  const size_t n = s->nbytes;
  const Device d = s->device;
  void* fresh = device_alloc(n, d);
  cuda::copy_on_device(fresh, block, n, d.index);
  s->data = fresh;
  s->free_fn = nullptr;
  storage_release(s);
  return keep ? storage_wrap(block, n, d, keep_block, nullptr) : nullptr;
}

// Whether graph input value `vid` comes from an argument of the call (not from its Lua state).
bool is_argument(const Graph& g, const guards::Plan& p, int32_t vid) {
  const size_t i = size_t(std::find(g.inputs.begin(), g.inputs.end(), vid) - g.inputs.begin());
  return i < p.source.size() && p.source[i] < p.nargs;
}

}  // namespace

CudaReplay::~CudaReplay() {
  try {
    drop();
  } catch (const std::exception&) {  // (the process is going down with its context)
  }
}

void CudaReplay::drop() {
  for (size_t k = 0; k < blocks.size(); ++k) {
    const size_t n = blocks[k]->nbytes;
    free_block(blocks[k], block_addr[k], false);
    device_free(block_addr[k], n, Device{1, int8_t(device)});
  }
  blocks.clear();
  block_addr.clear();
  outs.clear();
  inputs.clear();
  rng = Tensor();
  draws = 0;
  graph.reset();
}

// Records the plan's graph: its inputs bound to static buffers (arguments) or to the state's
// tensors, its run captured on a side stream, its results' blocks kept. Throws why it cannot.
void Recorder::record_on_graph(guards::Plan& p, std::vector<Tensor>& vals) {
  CudaReplay& c = *p.cuda;
  const Graph& g = *p.graph;
  const std::vector<char> written = written_roots(g);
  auto graph = std::make_unique<cuda::Graph>(c.device);
  std::vector<Tensor> cv(g.values.size());
  cuda::pool_enter(graph->pool().get());
  try {
    for (size_t i = 0; i < g.inputs.size(); ++i) {
      CudaReplay::Input in;
      in.vid = g.inputs[i];
      in.cand = p.source[i];
      in.arg = in.cand < p.nargs;
      const Tensor& t = vals[size_t(in.vid)];
      const int32_t alias = g.values[size_t(in.vid)].alias_of;
      if (alias >= 0 && (in.arg || is_argument(g, p, alias)))
        fail(cat("input ", i + 1, " shares its storage with an argument"));
      if (in.arg) {
        if (!t.is_contiguous()) fail(cat("argument ", in.cand + 1, " is not contiguous"));
        in.written = written[size_t(storage_root(g, in.vid))];
        in.nbytes = size_t(t.numel()) * t.itemsize();
        in.buffer = Tensor::empty(t.sizes(), t.dtype(), t.device());
        cv[size_t(in.vid)] = in.buffer;
      } else {
        in.addr = t.data_bytes();
        cv[size_t(in.vid)] = t;
      }
      c.inputs.push_back(std::move(in));
    }
  } catch (...) {
    cuda::pool_enter(nullptr);
    throw;
  }
  cuda::pool_enter(nullptr);
  Generator& gen = ctx_.gen;
  const uint64_t offset = gen.offset;
  c.rng = Tensor::empty({2}, DType::i64, Device{1, int8_t(c.device)});
  gen.capture_words = reinterpret_cast<const int64_t*>(c.rng.data_bytes());
  gen.captured = 0;
  graph->begin();
  try {
    execute(g, cv, p.numbers.empty() ? nullptr : p.numbers.data());
  } catch (...) {
    gen.capture_words = nullptr;
    gen.offset = offset;
    graph->abort();
    throw;
  }
  gen.capture_words = nullptr;
  graph->end();
  c.draws = gen.captured;
  if (gen.offset != offset) {
    gen.offset = offset;
    for (const Node& n : g.nodes)
      if (n.random()) fail(cat("it draws random numbers on an eager kernel (", n.def().name, " at ", n.where, ")"));
    fail("it draws random numbers on an eager kernel");
  }
  for (int32_t r : p.rets) {
    const Tensor& t = cv[size_t(r)];
    Storage* s = t.storage();
    if (!cuda::pool_owns(*graph->pool(), s->data))
      fail("a result is not made by the graph (an input, a view of one, or a constant)");
    for (const CudaReplay::Input& in : c.inputs)  // (the static buffers are the pool's too)
      if (in.arg && in.buffer.storage() == s) fail(cat("a result is argument ", in.cand + 1, " or a view of it"));
    auto it = std::find(c.blocks.begin(), c.blocks.end(), s);
    if (it == c.blocks.end()) {
      storage_retain(s);
      s->free_fn = keep_block;
      c.blocks.push_back(s);
      c.block_addr.push_back(s->data);
      it = c.blocks.end() - 1;
    }
    c.outs.push_back({int32_t(it - c.blocks.begin()), t.sizes(), t.strides(), t.offset(), t.dtype()});
  }
  c.graph = std::move(graph);
}

bool Recorder::replay_on_graph(guards::Plan& p, std::vector<Tensor>& vals, std::vector<Tensor>& rets) {
  if (!cudagraphs) return false;
  if (!p.cuda) {
    p.cuda = std::make_shared<CudaReplay>();
    p.cuda->device = cuda_device_of(*p.graph);
    std::string why;
    if (p.cuda->device < 0) p.cuda->refused = "not on a CUDA device";
    else if (!cuda::graphs_available(&why)) p.cuda->refused = why;
  }
  CudaReplay& c = *p.cuda;
  if (!c.refused.empty()) return false;
  const Graph& g = *p.graph;
  if (c.graph)
    for (const CudaReplay::Input& in : c.inputs)
      if (!in.arg && vals[size_t(in.vid)].data_bytes() != in.addr) {
        if (logs.cudagraphs) log("cudagraphs", cat(g.name, ": a tensor of its Lua state moved: recording again"));
        c.drop();
        break;
      }
  if (!c.graph) {
    if (!native_settled(g) || c.host_runs++ < 1) return false;  // (the first host replay loads what it needs)
    try {
      if (++c.records > kMaxRecords) fail(cat("tensors of its Lua state moved ", kMaxRecords, " times"));
      record_on_graph(p, vals);
    } catch (const Error& e) {
      c.drop();
      c.refused = e.what();
      if (logs.cudagraphs) log("cudagraphs", cat(g.name, ": replayed from the host: ", c.refused));
      return false;
    }
    ++stats.cudagraphs_recorded;
    if (logs.cudagraphs)
      log("cudagraphs", cat(g.name, ": recorded a CUDA graph of ", c.graph->nodes(), " nodes (",
                            cuda::pool_reserved(*c.graph->pool()) >> 10, " KiB pool)"));
  }
  for (const CudaReplay::Input& in : c.inputs)
    if (in.arg) cuda::copy_on_device(in.buffer.data_bytes(), vals[size_t(in.vid)].data_bytes(), in.nbytes, c.device);
  for (size_t k = 0; k < c.blocks.size(); ++k) c.blocks[k] = free_block(c.blocks[k], c.block_addr[k], true);
  if (c.draws) {  // (the replay draws what the host replay would: same seed, next counters)
    c.rng_host[0] = int64_t(ctx_.gen.seed);
    c.rng_host[1] = int64_t(ctx_.gen.offset);
    ctx_.gen.offset += c.draws;
    cuda::copy_to_device(c.rng.data_bytes(), c.rng_host, sizeof c.rng_host, c.device);
  }
  c.graph->launch();
  for (const CudaReplay::Input& in : c.inputs)
    if (in.arg && in.written)
      cuda::copy_on_device(vals[size_t(in.vid)].data_bytes(), in.buffer.data_bytes(), in.nbytes, c.device);
  for (const CudaReplay::Out& o : c.outs) {
    storage_retain(c.blocks[size_t(o.block)]);
    rets.push_back(Tensor::from_storage(c.blocks[size_t(o.block)], o.sizes, o.strides, o.offset, o.dtype));
  }
  ++stats.cudagraph_replays;
  return true;
}

}  // namespace cr::graph
