// The collectives as graph nodes (issue 40), the functional forms of torch's funcol: each returns a
// new tensor, never writes its input, so a compiled function keeps them inside its graph:
//   _dist_all_reduce(input, op) -> every rank's input reduced (op: sum avg max min prod)
//   _dist_all_gather(input) -> the ranks' inputs concatenated along dim 1 (rank order)
//   _dist_reduce_scatter(input, op) -> block `rank` (along dim 1) of the ranks' reduced inputs
//   _dist_broadcast(input, src) -> rank src's input
//   _dist_bucket_start(grads, op) -> the grads packed into one flat buffer, reduced in place on
//     the communication stream after the current stream's work so far (DDP's bucket, placed in
//     a compiled backward by vm/graph/buckets.cpp); _dist_bucket_wait(flat) -> the current
//     stream waits for it, then the reduced grads: views of flat shaped as the start's grads
// They run on the default process group (vm/collectives.hpp) when their node runs. The eager
// backend and the native programs both run extern steps in graph order, so every rank issues
// them in the order of its trace, whichever backend runs the graph on that rank at the time;
// kCollective keeps graph passes from folding, merging, dropping or recomputing them.
#include <map>
#include <mutex>

#include "vm/collectives.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/kernels/loop.hpp"
#include "vm/ops/dense.hpp"
#include "vm/registry.hpp"

namespace cr {
namespace {

using cuda::Coll;
using cuda::RedOp;

const dist::Group& need_group() {
  const dist::Group& g = dist::group();
  if (!g.active()) fail("the default process group is not initialized (T.distributed.init_process_group)");
  return g;
}

RedOp redop(const OpCall& c, int i) {
  const std::string s = c.has(i) ? c.str(i) : "sum";
  static const char* const names[] = {"sum", "prod", "max", "min", "avg"};  // (RedOp's order)
  for (int k = 0; k < 5; ++k)
    if (s == names[k]) return RedOp(k);
  fail(cat("op expected \"sum\", \"avg\", \"max\", \"min\" or \"prod\", got \"", s, "\""));
}

// input's metadata with dim 1 scaled: by world (gather), divided by it (scatter), or kept
Meta resized(const OpCall& c, int mul, int div) {
  const Tensor t = c.tensor(0);
  Shape s = t.sizes();
  if (s.empty()) {
    if (mul == 1 && div == 1) return {s, t.dtype(), t.device()};
    fail(cat("input expected at least one dimension, got a 0-dim tensor"));
  }
  if (s[0] % div != 0) fail(cat("input's dim 1 (", s[0], ") expected a multiple of the world size (", div, ")"));
  s[0] = s[0] * mul / div;
  return {s, t.dtype(), t.device()};
}

std::vector<Meta> infer_same(OpCall& c) { return {resized(c, 1, 1)}; }
std::vector<Meta> infer_gather(OpCall& c) { return {resized(c, need_group().world, 1)}; }
std::vector<Meta> infer_scatter(OpCall& c) { return {resized(c, 1, need_group().world)}; }

void run(OpCall& c, Coll coll, RedOp op, int root) {
  dist::collective(c.def.name, coll, dense(c.tensor(0)), c.outs[0], op, root);
}

void run_all_reduce(OpCall& c) { run(c, Coll::all_reduce, redop(c, 1), 0); }
void run_all_gather(OpCall& c) { run(c, Coll::all_gather, RedOp::sum, 0); }
void run_reduce_scatter(OpCall& c) { run(c, Coll::reduce_scatter, redop(c, 1), 0); }
void run_broadcast(OpCall& c) {
  const int64_t src = c.integer(1);
  if (src < 0 || src >= need_group().world) fail(cat("src expected a rank in 0 .. ", need_group().world - 1, ", got ", src));
  run(c, Coll::broadcast, RedOp::sum, int(src));
}

// A bucket reduction in flight, by its flat buffer's address (a start and its wait share the
// buffer): the event its wait orders the current stream after (CUDA), and its gradients' sizes.
struct Flight {
  int64_t done = -1;
  std::vector<Shape> sizes;
};
std::mutex g_flight_mutex;
std::map<const void*, Flight> g_flight;

int64_t comm_stream(int device) {
  static std::map<int, int64_t> streams;  // (one per device, as T.distributed's)
  std::lock_guard lock(g_flight_mutex);
  auto it = streams.find(device);
  return it != streams.end() ? it->second : streams[device] = cuda::pool_stream(device);
}

// The slice of `flat` from element pos, shaped as sizes.
Tensor slot_of(const Tensor& flat, const Shape& sizes, int64_t pos) {
  return Tensor::view_of(flat, sizes, contiguous_strides(sizes), flat.offset() + pos);
}

std::vector<Meta> infer_bucket_start(OpCall& c) {
  const std::vector<Tensor> ts = c.tensors(0);
  if (ts.empty()) fail("grads expected at least one tensor, got none");
  int64_t n = 0;
  for (const Tensor& t : ts) {
    if (t.dtype() != ts[0].dtype() || !(t.device() == ts[0].device()))
      fail(cat("grads expected one dtype and device, got ", ts[0].describe(), " and ", t.describe()));
    n += t.numel();
  }
  return {Meta{{n}, ts[0].dtype(), ts[0].device()}};
}

void run_bucket_start(OpCall& c) {
  const Tensor& flat = c.outs[0];
  Flight f;
  int64_t pos = 0;
  for (const Tensor& t : c.tensors(0)) {
    copy_into(slot_of(flat, t.sizes(), pos), t);
    pos += t.numel();
    f.sizes.push_back(t.sizes());
  }
  if (flat.device().is_cpu()) {
    dist::collective(c.def.name, Coll::all_reduce, flat, flat, redop(c, 1), 0);
  } else {
    const int d = flat.device().index;
    const int64_t comm = comm_stream(d), current = int64_t(d) * cuda::kSlots + cuda::current_slot(d);
    const int64_t ready = cuda::event_create(d, false);
    f.done = cuda::event_create(d, false);
    cuda::event_record(ready, current);  // (the packed buffer)
    cuda::stream_wait_event(comm, ready);
    cuda::event_destroy(ready);  // (released once recorded work completes)
    dist::collective(c.def.name, Coll::all_reduce, flat, flat, redop(c, 1), 0, comm);
    cuda::event_record(f.done, comm);
  }
  std::lock_guard lock(g_flight_mutex);
  g_flight[flat.data_bytes()] = std::move(f);
}

// Its results are views of flat, made here (no infer rule): the gradients leave the graph as the
// bucket's slots, with no copy (as DDP's gradient_as_bucket_view), and each graph a new bucket.
void run_bucket_wait(OpCall& c) {
  const Tensor flat = c.tensor(0);
  Flight f;
  {
    std::lock_guard lock(g_flight_mutex);
    auto it = g_flight.find(flat.data_bytes());
    if (it == g_flight.end()) fail("internal: no _dist_bucket_start in flight on this buffer");
    f = std::move(it->second);
    g_flight.erase(it);
  }
  if (f.done >= 0) {
    const int d = flat.device().index;
    cuda::stream_wait_event(int64_t(d) * cuda::kSlots + cuda::current_slot(d), f.done);
    cuda::event_destroy(f.done);
  }
  int64_t pos = 0;
  for (const Shape& sizes : f.sizes) {
    c.outs.push_back(slot_of(flat, sizes, pos));
    pos += shape_numel(sizes);
  }
}

}  // namespace

void register_collectives(Registry& r) {
  const int32_t flags = kNoMethod | kDeviceAware | kCollective | kExtern;
  const auto add = [&](const char* name, const char* schema, std::vector<Meta> (*infer)(OpCall&), void (*fn)(OpCall&)) {
    OpDef d{name, schema, OpKind::Other, flags, infer, fn};
    d.grad.not_differentiable = true;  // (as torch's c10d collectives: no gradient flows through them)
    r.add(d);
  };
  add("_dist_all_reduce", "input:T, op:S?", infer_same, run_all_reduce);
  add("_dist_all_gather", "input:T", infer_gather, run_all_gather);
  add("_dist_reduce_scatter", "input:T, op:S?", infer_scatter, run_reduce_scatter);
  add("_dist_broadcast", "input:T, src:I", infer_same, run_broadcast);
  add("_dist_bucket_start", "grads:TL, op:S?", infer_bucket_start, run_bucket_start);
  add("_dist_bucket_wait", "flat:T", nullptr, run_bucket_wait);
}

}  // namespace cr
