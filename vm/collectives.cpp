#include "vm/collectives.hpp"

#include "vm/cuda/streams.hpp"
#include "vm/error.hpp"
#include "vm/sim_group.hpp"

namespace cr::dist {

Group& group() {
  static Group g;
  return g;
}

const char* coll_name(cuda::Coll c) {
  static const char* const names[] = {"all_reduce", "broadcast", "all_gather", "reduce_scatter"};
  return names[int(c)];
}

namespace {

// The rules of one collective's tensors, as NCCL states them (counts in elements).
void check(cuda::Coll coll, const Group& g, const Tensor& s, const Tensor& r) {
  if (s.dtype() != r.dtype()) fail(cat("input is ", dtype_name(s.dtype()), ", output is ", dtype_name(r.dtype())));
  const int64_t ns = s.numel(), nr = r.numel();
  const auto want = [&](bool ok, const char* rule) {
    if (!ok) fail(cat("expected ", rule, " (world size ", g.world, "), got ", ns, " and ", nr, " elements"));
  };
  if (coll == cuda::Coll::all_gather) want(nr == ns * g.world, "output elements = input elements x world size");
  else if (coll == cuda::Coll::reduce_scatter) want(ns == nr * g.world, "input elements = output elements x world size");
  else want(ns == nr, "output elements = input elements");
  for (const Tensor* t : {&s, &r}) {
    const char* what = t == &s ? "input" : "output";
    if (!t->is_contiguous()) fail(cat(what, " must be contiguous"));
    if (g.comm && t->device().is_cpu())
      fail(cat(what, " is a CPU tensor; the nccl backend takes CUDA tensors only (no CPU backend in crescent)"));
    if (g.comm && t->device().index != g.device)
      fail(cat(what, " is on cuda:", int(t->device().index), ", but this rank's device is cuda:", g.device));
    if (g.sim && !t->device().is_cpu())
      fail(cat(what, " is a CUDA tensor; the simulated process group takes CPU tensors only"));
  }
}

}  // namespace

void collective(const char* name, cuda::Coll coll, const Tensor& send, const Tensor& recv, cuda::RedOp op, int root,
                int64_t stream) {
  Group& g = group();
  if (!g.active()) fail("the default process group is not initialized (T.distributed.init_process_group)");
  check(coll, g, send, recv);
  if (g.sim) return g.sim->run(name, coll, send, recv, op, root);
  const cuda::CUstream st = stream < 0 ? cuda::current_stream(g.device) : cuda::stream_of(stream);
  if (stream >= 0 && cuda::stream_device(stream) != g.device) fail("the stream is not on this rank's device");
  const size_t count = size_t(coll == cuda::Coll::reduce_scatter ? recv.numel() : send.numel());
  cuda::nccl_collective(g.comm, coll, send.data_bytes(), recv.data_bytes(), count, send.dtype(), op, root, st);
}

}  // namespace cr::dist
