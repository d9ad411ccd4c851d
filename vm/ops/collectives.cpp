// The collectives as graph nodes (issue 40), the functional forms of torch's funcol: each returns a
// new tensor, never writes its input, so a compiled function keeps them inside its graph:
//   _dist_all_reduce(input, op) -> every rank's input reduced (op: sum avg max min prod)
//   _dist_all_gather(input) -> the ranks' inputs concatenated along dim 1 (rank order)
//   _dist_reduce_scatter(input, op) -> block `rank` (along dim 1) of the ranks' reduced inputs
//   _dist_broadcast(input, src) -> rank src's input
// They run on the default process group (vm/collectives.hpp) when their node runs. The eager
// backend and the native programs both run extern steps in graph order, so every rank issues
// them in the order of its trace, whichever backend runs the graph on that rank at the time;
// kCollective keeps graph passes from folding, merging, dropping or recomputing them.
#include "vm/collectives.hpp"
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
}

}  // namespace cr
