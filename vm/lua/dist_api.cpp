// The T.distributed entries of the cr_api table (vm/lua/ffi_api.h cr_dist_api): one NCCL
// communicator per process (the default process group), the collectives on a stream of its
// device. The rendezvous, list forms and work handles are stdlib/distributed.lua's.
#include "vm/lua/dist_api.hpp"

#include <cstring>

#include "vm/cuda/nccl.hpp"
#include "vm/cuda/streams.hpp"
#include "vm/graph/recorder.hpp"

namespace cr {
namespace {

struct Group {
  cuda::NcclComm* comm = nullptr;
  int rank = 0, world = 0, device = 0;
};
Group group;

template <class F> int32_t guarded(cr_ctx* c, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    Context::of(c).error = e.what();
    return -1;
  }
}

const char* dist_unavailable() {
  static std::string why;
  return cuda::nccl_available(&why) ? nullptr : why.c_str();
}

int32_t dist_unique_id(cr_ctx* c, char* out) {
  return guarded(c, [&] {
    const cuda::NcclId id = cuda::nccl_unique_id();
    std::memcpy(out, id.data(), id.size());
    return 0;
  });
}

int32_t dist_init(cr_ctx* c, const char* id, int32_t rank, int32_t world, int32_t device, double timeout_s) {
  return guarded(c, [&] {
    if (group.comm) fail("init_process_group: the default process group is already initialized");
    if (std::string p = cuda::device_problem(device); !p.empty())
      fail(cat("init_process_group: rank ", rank, " uses cuda:", device, " (LOCAL_RANK), but ", p));
    cuda::NcclId nid;
    std::memcpy(nid.data(), id, nid.size());
    group.comm = cuda::nccl_comm_init(nid, rank, world, device, timeout_s);
    group.rank = rank, group.world = world, group.device = device;
    return 0;
  });
}

int32_t dist_destroy(cr_ctx* c, int32_t abort, double timeout_s) {
  return guarded(c, [&] {
    cuda::NcclComm* comm = group.comm;
    group = Group{};
    if (!comm) return 0;
    if (abort) cuda::nccl_comm_abort(comm);
    else cuda::nccl_comm_destroy(comm, timeout_s);
    return 0;
  });
}

// The device memory of t, checked for a collective of `op`; `write`: the collective writes it.
void* buffer(cr_ctx* c, cr_tensor* p, const char* op, const char* what, bool write) {
  Context& ctx = Context::of(c);
  graph::ensure_real(ctx, p);
  Tensor t(p, true);
  if (t.device().is_cpu())
    fail(cat(op, ": ", what, " is a CPU tensor; the nccl backend takes CUDA tensors only (no CPU backend in crescent)"));
  if (t.device().index != group.device)
    fail(cat(op, ": ", what, " is on cuda:", int(t.device().index), ", but this rank's device is cuda:", group.device));
  if (!t.is_contiguous()) fail(cat(op, ": ", what, " must be contiguous"));
  if (write) {
    graph::before_write(ctx, t.storage());
    t.storage()->version.fetch_add(1);
  }
  return t.data_bytes();
}

int32_t dist_collective(cr_ctx* c, int32_t coll, cr_tensor* send, cr_tensor* recv, int32_t op, int32_t root,
                        int64_t stream) {
  static const char* const names[] = {"all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor"};
  return guarded(c, [&] {
    if (coll < 0 || coll > 3) fail(cat("dist_collective: no collective ", coll));
    const char* name = names[coll];
    if (!group.comm) fail(cat(name, ": the default process group is not initialized (T.distributed.init_process_group)"));
    const Tensor s(send, true), r(recv, true);
    if (s.dtype() != r.dtype()) fail(cat(name, ": input is ", dtype_name(s.dtype()), ", output is ", dtype_name(r.dtype())));
    const int64_t ns = s.numel(), nr = r.numel();
    const auto want = [&](bool ok, const char* rule) {
      if (!ok) fail(cat(name, ": expected ", rule, " (world size ", group.world, "), got ", ns, " and ", nr, " elements"));
    };
    if (coll == 2) want(nr == ns * group.world, "output elements = input elements x world size");
    if (coll == 3) want(ns == nr * group.world, "input elements = output elements x world size");
    if (coll < 2) want(ns == nr, "output elements = input elements");
    const void* sp = buffer(c, send, name, "input", false);
    void* rp = buffer(c, recv, name, "output", true);
    const cuda::CUstream st = stream < 0 ? cuda::current_stream(group.device) : cuda::stream_of(stream);
    if (stream >= 0 && cuda::stream_device(stream) != group.device) fail(cat(name, ": the stream is not on this rank's device"));
    cuda::nccl_collective(group.comm, cuda::Coll(coll), sp, rp, size_t(coll == 3 ? nr : ns), s.dtype(), cuda::RedOp(op),
                          root, st);
    return 0;
  });
}

}  // namespace

const cr_dist_api* dist_api_table() {
  static const cr_dist_api api = {dist_unavailable, dist_unique_id, dist_init, dist_collective, dist_destroy};
  return &api;
}

}  // namespace cr
